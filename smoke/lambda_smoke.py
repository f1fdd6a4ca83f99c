#!/usr/bin/env python3
"""Smoke test of the built Lambda binaries (target/lambda/<name>/bootstrap).

Each function's real `bootstrap` runs as Lambda runs it: a process that long-polls a Lambda
Runtime API (a small one in this file, the same HTTP protocol as Lambda's
/2018-06-01/runtime/...), with the environment the SAM template gives that function, against
an AWS emulator (moto, or LocalStack / real AWS through AWS_ENDPOINT_URL). It sends each
function its real trigger event and checks the response and the effect in DynamoDB and SQS:

  admin    API Gateway v2 (HTTP API, IAM auth) POST /v1/endpoints, GET routes
  ingest   API Gateway v2 POST /v1/events, and an EventBridge custom event
  deliver  an SQS batch built from the messages ingest really sent (plus a malformed one)
  sweeper  an EventBridge scheduled event, after an attempt message was "lost"

The table is created from the template's own AWS::DynamoDB::Table and checked against the
key and index names in shared/src, every WEBHOOKS_* variable of the template is checked
against shared/src/config.rs, and every alarm and dashboard chart against the metrics the code
emits (namespace Webhooks, dimension Stack) or AWS publishes (AWS/Lambda, AWS/SQS, for a
resource of the template); deliver's metric line must carry the stack's name. So the template,
the code and the binaries are proven together.

Needs boto3 and PyYAML (both in the moto venv). Prints 'N passed, N failed' at the end.
"""

import argparse
import base64
import hashlib
import hmac
import http.server
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import uuid

import boto3
import yaml

ACCOUNT = "123456789012"
PASSED = []
FAILED = []


def check(name, ok, detail=""):
    (PASSED if ok else FAILED).append(name)
    print(f"  {'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""))
    return ok


# ---------------------------------------------------------------- the template


class CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation short-form tags (!Ref, !GetAtt, !Sub, ...) as {'Fn': value}."""


def _cfn_tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    return {name: value}


CfnLoader.add_multi_constructor("!", _cfn_tag)


def load_template(path):
    with open(path) as f:
        return yaml.load(f, Loader=CfnLoader)


def function_env(template, logical_id, refs):
    """The function's environment: Globals plus its own, with Refs resolved through `refs`
    (resources and pseudo parameters such as AWS::StackName) or the parameters' defaults."""
    params = template.get("Parameters", {})
    env = dict(template["Globals"]["Function"].get("Environment", {}).get("Variables", {}))
    props = template["Resources"][logical_id]["Properties"]
    env.update(props.get("Environment", {}).get("Variables", {}))
    out = {}
    for k, v in env.items():
        # A setting by StaticEgressIps: its default, disabled.
        v = _resolve(v, False)
        if isinstance(v, dict) and "Ref" in v:
            ref = v["Ref"]
            if ref in refs:
                v = refs[ref]
            elif ref in params:
                v = params[ref]["Default"]
            else:
                raise SystemExit(f"{logical_id}: {k} refers to {ref}, which the smoke test cannot resolve")
        elif isinstance(v, dict):
            raise SystemExit(f"{logical_id}: {k} is {v}, which the smoke test cannot resolve")
        out[k] = str(v)
    return out


def check_template_against_code(template, root):
    """The table and the environment the template declares are the ones the code uses."""
    keys = open(os.path.join(root, "shared/src/store/keys.rs")).read()
    consts = dict(re.findall(r'pub const (\w+): &str = "([^"]*)";', keys))
    boot = open(os.path.join(root, "shared/src/bootstrap.rs")).read()

    def array(name):
        m = re.search(name + r": \[&str; \d+\] = \[(.*?)\];", boot, re.S)
        return sorted(re.findall(r'"([^"]+)"', m.group(1))) if m else None

    summary = array("SUMMARY_ATTRIBUTES")
    table = template["Resources"]["Table"]["Properties"]
    check("template: table keys are pk/sk",
          [k["AttributeName"] for k in table["KeySchema"]] == [consts["PK"], consts["SK"]])
    check("template: TTL attribute", table["TimeToLiveSpecification"]["AttributeName"] == consts["TTL"])
    check("template: on-demand and PITR", table["BillingMode"] == "PAY_PER_REQUEST"
          and table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True)
    # The three GSIs of docs/storage.md: `due` and `by_endpoint` keys only (no non-key
    # attributes), `by_status` with the summary.
    want = {
        consts["DUE_INDEX"]: ([consts["DUE_PK"], consts["DUE_AT"]], []),
        consts["ENDPOINT_INDEX"]: ([consts["EP_PK"], consts["EP_SK"]], []),
        consts["STATUS_INDEX"]: ([consts["STATUS_KEY"], consts["STATUS_SK"]], summary),
    }
    got = {
        g["IndexName"]: ([k["AttributeName"] for k in g["KeySchema"]],
                         sorted(g["Projection"].get("NonKeyAttributes", [])))
        for g in table["GlobalSecondaryIndexes"]
    }
    check("template: GSIs, keys and INCLUDE projections match shared/src", got == want,
          f"template {got} != code {want}")
    types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    check("template: due_at is a number", types.get(consts["DUE_AT"]) == "N")
    keys_only = [g for g in table["GlobalSecondaryIndexes"]
                 if g["IndexName"] in (consts["DUE_INDEX"], consts["ENDPOINT_INDEX"])]
    check("template: due and by_endpoint project keys only",
          len(keys_only) == 2 and all(g["Projection"]["ProjectionType"] == "KEYS_ONLY" for g in keys_only))
    docs = open(os.path.join(root, "docs/storage.md")).read()
    check("template: every GSI is on the storage page (docs/storage.md)",
          all(f"`{name}`" in docs for name in got), f"{sorted(got)}")

    config = open(os.path.join(root, "shared/src/config.rs")).read()
    known = set(re.findall(r'"(WEBHOOKS_[A-Z0-9_]+)"', config))
    names = set()
    for lid, res in template["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function":
            names |= set(function_env(template, lid, {"Table": "t", "Queue": "q", "SlowQueue": "sq", "PortalTokenKey": "k",
                                                      "NotificationTopic": "n", "OperationalEventBus": "o",
                                                      "AWS::StackName": "s"}))
    unknown = sorted(n for n in names if n.startswith("WEBHOOKS_") and n not in known)
    check("template: every WEBHOOKS_* variable is read by shared/src/config.rs", not unknown,
          f"unknown: {unknown}")

    # Every request API Gateway takes reaches a router, which answers in the API's error shape:
    # the admin function has the $default route (an HttpApi event without Path and Method), and
    # every route but ingest's POST /v1/events takes ANY method.
    routes = []
    for lid, res in template["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        for ev in (res["Properties"].get("Events") or {}).values():
            if ev.get("Type") == "HttpApi":
                props = ev.get("Properties") or {}
                routes.append((lid, props.get("Method"), props.get("Path")))
    check("template: the admin function takes the $default route",
          ("AdminFunction", None, None) in routes, f"{routes}")
    single = [r for r in routes if r[1] not in (None, "ANY") and r != ("IngestFunction", "POST", "/v1/events")]
    check("template: every other route takes ANY method (405 comes from the router)", not single, f"{single}")
    # Ingest's function URL (IngestFunctionUrl=enabled): the same function, IAM auth; the
    # producers' policy grants it only under the same condition.
    url = template["Resources"].get("IngestUrl") or {}
    props = url.get("Properties") or {}
    check("template: ingest's function URL targets ingest with IAM auth, only when enabled",
          url.get("Type") == "AWS::Lambda::Url" and url.get("Condition") == "WithIngestFunctionUrl"
          and props.get("TargetFunctionArn") == {"Fn::GetAtt": "IngestFunction.Arn"}
          and props.get("AuthType") == "AWS_IAM", f"{url}")
    statements = template["Resources"]["ProducerPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    url_grants = [st["Fn::If"] for st in statements if isinstance(st, dict) and "Fn::If" in st]
    check("template: producers may invoke the function URL only when it is enabled",
          any(g[0] == "WithIngestFunctionUrl" and "lambda:InvokeFunctionUrl" in g[1]["Action"] for g in url_grants),
          f"{url_grants}")

    # Issue #39: producers with an API key post to ingest on an API of their own, without an
    # authorizer (ingest then requires a key: no `authorizer.iam` in the request), and to
    # nothing else there.
    keyed = [(lid, ev["Properties"]) for lid, res in template["Resources"].items()
             if res["Type"] == "AWS::Serverless::Function"
             for ev in (res["Properties"].get("Events") or {}).values()
             if ev.get("Type") == "HttpApi" and (ev.get("Properties") or {}).get("ApiId") == {"Ref": "ApiKeyApi"}]
    api = template["Resources"].get("ApiKeyApi", {}).get("Properties", {})
    check("template: the API-key API routes only POST /v1/events, to ingest, with no authorizer",
          [(lid, p.get("Method"), p.get("Path"), p.get("Auth")) for lid, p in keyed]
          == [("IngestFunction", "POST", "/v1/events", None)] and "Auth" not in api
          and "ThrottlingRateLimit" in api.get("DefaultRouteSettings", {}), f"{keyed} {api}")

    check_secure_defaults(template)
    check_static_egress(template)
    check_alarms_and_dashboard(template, emitted_metrics(root))


def _resolve(value, enabled):
    """`value` with every `Fn::If` on WithStaticEgress decided (`enabled`) and NoValue dropped."""
    if isinstance(value, dict):
        if "Fn::If" in value and value["Fn::If"][0] == "WithStaticEgress":
            return _resolve(value["Fn::If"][1 if enabled else 2], enabled)
        return {k: _resolve(v, enabled) for k, v in value.items() if _resolve(v, enabled) != {"Ref": "AWS::NoValue"}}
    if isinstance(value, list):
        return [_resolve(v, enabled) for v in value]
    return value


def check_static_egress(template):
    """Issue #38: StaticEgressIps, both ways. Disabled (the default), the stack has no network
    resource and no function in a VPC; enabled, every function that POSTs to receivers runs in
    private subnets of two zones whose default route is their zone's NAT gateway, each with an
    Elastic IP, and the IPs are an output and on the portal's endpoint page."""
    res = template["Resources"]
    params = template["Parameters"]
    check("template: StaticEgressIps defaults to disabled",
          params.get("StaticEgressIps", {}).get("Default") == "disabled"
          and template["Conditions"].get("WithStaticEgress") == {"Fn::Equals": [{"Ref": "StaticEgressIps"}, "enabled"]})
    network = [lid for lid, r in res.items() if r["Type"].startswith("AWS::EC2::")]
    check("template: every network resource exists only with StaticEgressIps=enabled",
          network and all(res[lid].get("Condition") == "WithStaticEgress" for lid in network),
          f"{[lid for lid in network if res[lid].get('Condition') != 'WithStaticEgress']}")
    functions = {lid: r for lid, r in res.items() if r["Type"] == "AWS::Serverless::Function"}
    # deliver; ingest ("mode": "sync"); the admin binary, as the portal (test events) and as the
    # admin API (send-example). Only the sweeper never POSTs to a receiver.
    posting = {lid for lid, r in functions.items()
               if r["Metadata"]["BuildProperties"]["Binary"] in ("deliver", "ingest", "admin")}
    check("template: deliver, ingest, the portal and the admin API are the functions that POST to receivers",
          len(posting) == 4, f"{sorted(posting)}")
    for enabled in (False, True):
        setting = "enabled" if enabled else "disabled"
        in_vpc = {lid for lid, r in functions.items() if "VpcConfig" in _resolve(r["Properties"], enabled)}
        check(f"template ({setting}): the functions in the egress VPC",
              in_vpc == (posting if enabled else set()), f"{sorted(in_vpc)}")
        for lid in posting:
            role = _arn_of(functions[lid]["Properties"]["Role"])
            managed = _resolve(res[role]["Properties"], enabled).get("ManagedPolicyArns", [])
            vpc_access = {"Ref": "EgressNetworkInterfacesPolicy"} in managed
            check(f"template ({setting}): {role} may manage {lid}'s network interfaces only in the VPC",
                  vpc_access == enabled, f"{managed}")
    subnets = set()
    for lid in posting:
        cfg = _resolve(functions[lid]["Properties"], True)["VpcConfig"]
        subnets |= {x["Ref"] for x in cfg["SubnetIds"]}
    zones, ips = set(), set()
    for subnet in sorted(subnets):
        table = [r["Properties"]["RouteTableId"]["Ref"] for r in res.values()
                 if r["Type"] == "AWS::EC2::SubnetRouteTableAssociation" and r["Properties"]["SubnetId"] == {"Ref": subnet}]
        routes = [r["Properties"] for r in res.values() if r["Type"] == "AWS::EC2::Route"
                  and table and r["Properties"]["RouteTableId"] == {"Ref": table[0]}
                  and r["Properties"]["DestinationCidrBlock"] == "0.0.0.0/0"]
        nat = routes[0].get("NatGatewayId", {}).get("Ref") if len(routes) == 1 else None
        eip = res[nat]["Properties"]["AllocationId"]["Fn::GetAtt"].split(".")[0] if nat else None
        check(f"template (enabled): {subnet} leaves through a NAT gateway with an Elastic IP",
              nat is not None and res.get(eip, {}).get("Type") == "AWS::EC2::EIP", f"{routes}")
        zones.add(str(res[subnet]["Properties"]["AvailabilityZone"]))
        ips.add(eip)
    check("template (enabled): two zones, one address each", len(zones) == 2 and len(ips) == 2, f"{zones} {ips}")
    out = template["Outputs"].get("EgressIps", {})
    named = {x["Ref"] for x in out.get("Value", {}).get("Fn::Join", [None, []])[1]}
    check("template: the EgressIps output names every NAT address, only when enabled",
          out.get("Condition") == "WithStaticEgress" and named == ips, f"{out}")
    portal = [lid for lid in posting
              if functions[lid]["Properties"].get("Environment", {}).get("Variables", {}).get("WEBHOOKS_SERVE") == "portal"]
    shown = functions[portal[0]]["Properties"]["Environment"]["Variables"].get("WEBHOOKS_EGRESS_IPS") if portal else None
    check("template: the portal shows the addresses (WEBHOOKS_EGRESS_IPS)",
          _resolve(shown, False) == "" and {x["Ref"] for x in _resolve(shown, True)["Fn::Join"][1]} == ips, f"{shown}")


def _arn_of(value):
    """`!GetAtt X.Arn` -> 'X'; anything else -> None."""
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        att = value["Fn::GetAtt"]
        att = att if isinstance(att, str) else ".".join(att)
        return att[:-4] if att.endswith(".Arn") else None
    return None


def _as_list(value):
    return value if isinstance(value, list) else [value]


def check_secure_defaults(template):
    """Issue #34: who may make a webhook, who may send to the queues, under which key."""
    res = template["Resources"]
    params = template["Parameters"]

    # 1. The stack's own bus: the default rule reads it, producers may put events on it only,
    # and another bus is read only for an explicit list of sources.
    check("template: the stack creates its own event bus",
          res.get("EventBus", {}).get("Type") == "AWS::Events::EventBus")
    check("template: the default rule reads the stack's own bus",
          res["IngestEventRule"]["Properties"]["EventBusName"] == {"Ref": "EventBus"})
    puts = [st for st in res["ProducerPolicy"]["Properties"]["PolicyDocument"]["Statement"]
            if isinstance(st, dict) and "events:PutEvents" in _as_list(st.get("Action", []))]
    check("template: producers may put events on the stack's bus only",
          len(puts) == 1 and puts[0]["Resource"] == {"Fn::GetAtt": "EventBus.Arn"}, f"{puts}")
    outputs = template["Outputs"]
    check("template: outputs EventBusName and EventBusArn",
          outputs.get("EventBusName", {}).get("Value") == {"Ref": "EventBus"}
          and outputs.get("EventBusArn", {}).get("Value") == {"Fn::GetAtt": "EventBus.Arn"})
    external = res.get("ExternalEventRule", {})
    check("template: another bus is read only when named, for the listed sources only",
          external.get("Condition") == "WithExternalBus"
          and external["Properties"]["EventPattern"] == {"source": {"Ref": "ExternalEventSources"}}
          and params["ExternalEventSources"].get("Default") == ""
          and "ExternalBusNeedsSources" in template.get("Rules", {}), f"{external}")
    check("template: the default bus is no longer the default",
          "EventBusName" not in params and params["ExternalEventBusName"]["Default"] == "")

    # 3. Who may send to each attempt queue: exactly the roles granted sqs:SendMessage on it
    # (an explicit Deny for every other principal with an ARN), TLS only; nobody sends to the
    # dead-letter queues (SQS's redrive is not a SendMessage).
    senders = {}
    for lid, r in res.items():
        if r["Type"] != "AWS::IAM::Role":
            continue
        for pol in r["Properties"].get("Policies", []):
            for st in pol["PolicyDocument"]["Statement"]:
                if "sqs:SendMessage" in _as_list(st.get("Action", [])):
                    for q in _as_list(st["Resource"]):
                        senders.setdefault(_arn_of(q), set()).add(lid)
    policies = {}
    for lid, r in res.items():
        if r["Type"] != "AWS::SQS::QueuePolicy":
            continue
        for q in r["Properties"]["Queues"]:
            policies[q["Ref"]] = r["Properties"]["PolicyDocument"]["Statement"]
    queues = [lid for lid, r in res.items() if r["Type"] == "AWS::SQS::Queue"]
    for q in queues:
        statements = policies.get(q, [])
        denies = [st for st in statements if st.get("Effect") == "Deny" and st.get("Action") == "sqs:SendMessage"
                  and q in [_arn_of(x) for x in _as_list(st["Resource"])]]
        allowed = set()
        for st in denies:
            cond = st.get("Condition", {})
            allowed |= {_arn_of(a) for a in _as_list(cond.get("ArnNotEquals", {}).get("aws:PrincipalArn", []))}
        bounded = len(denies) == 1 and denies[0].get("Principal") == "*" \
            and denies[0]["Condition"].get("Null") == {"aws:PrincipalArn": "false"}
        check(f"template: {q} takes SendMessage only from the roles granted it",
              bounded and allowed - {None} == senders.get(q, set()),
              f"policy allows {sorted(a for a in allowed if a)}, roles granted {sorted(senders.get(q, set()))}")
        tls = [st for st in statements if st.get("Effect") == "Deny"
               and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"]
        check(f"template: {q} refuses requests without TLS", len(tls) == 1)

    # 2. Only the roles granted secretsmanager:GetSecretValue on the portal token key may read
    # it, whatever other principals' IAM policies grant.
    readers = set()
    for lid, r in res.items():
        if r["Type"] == "AWS::IAM::Role":
            for pol in r["Properties"].get("Policies", []):
                for st in pol["PolicyDocument"]["Statement"]:
                    if "secretsmanager:GetSecretValue" in _as_list(st.get("Action", [])):
                        readers.add(lid)
    sp = res.get("PortalTokenKeyPolicy", {}).get("Properties", {})
    deny = [st for st in sp.get("ResourcePolicy", {}).get("Statement", [])
            if st.get("Effect") == "Deny" and st.get("Action") == "secretsmanager:GetSecretValue"]
    allowed = {_arn_of(a) for st in deny
               for a in _as_list(st.get("Condition", {}).get("ArnNotEquals", {}).get("aws:PrincipalArn", []))}
    check("template: only the roles granted it may read the portal token key",
          sp.get("SecretId") == {"Ref": "PortalTokenKey"} and len(deny) == 1 and allowed == readers,
          f"policy allows {sorted(a for a in allowed if a)}, roles granted {sorted(readers)}")

    # 8. A customer-managed key, when given, encrypts the table, every queue and the topic, and
    # every function's role may use it.
    check("template: KmsKeyArn defaults to empty (each service's own encryption)",
          params.get("KmsKeyArn", {}).get("Default") == "")
    sse = res["Table"]["Properties"]["SSESpecification"]
    check("template: the table takes the key",
          sse.get("Fn::If", [None])[0] == "WithKmsKey"
          and sse["Fn::If"][1].get("KMSMasterKeyId") == {"Ref": "KmsKeyArn"}, f"{sse}")
    with_key = {"Fn::If": ["WithKmsKey", {"Ref": "KmsKeyArn"}, {"Ref": "AWS::NoValue"}]}
    for lid, r in res.items():
        if r["Type"] in ("AWS::SQS::Queue", "AWS::SNS::Topic", "AWS::SecretsManager::Secret"):
            attr = "KmsKeyId" if r["Type"] == "AWS::SecretsManager::Secret" else "KmsMasterKeyId"
            check(f"template: {lid} takes the key", r["Properties"].get(attr) == with_key, f"{r['Properties']}")
    roles = {_arn_of(r["Properties"]["Role"]) for r in res.values() if r["Type"] == "AWS::Serverless::Function"}
    kms = res.get("KmsKeyUsePolicy", {})
    # Attached from each role (so the role, and its function, is created after the policy).
    with_policy = {"Fn::If": ["WithKmsKey", {"Ref": "KmsKeyUsePolicy"}, {"Ref": "AWS::NoValue"}]}
    attached = {lid for lid in roles if with_policy in res[lid]["Properties"].get("ManagedPolicyArns", [])}
    check("template: every function's role may use the key", kms.get("Condition") == "WithKmsKey"
          and "Roles" not in kms.get("Properties", {}) and attached == roles,
          f"roles {sorted(roles)}, attached {sorted(attached)}")
    direct = [st for st in kms.get("Properties", {}).get("PolicyDocument", {}).get("Statement", [])
              if "kms:ViaService" not in str(st.get("Condition", {}))]
    check("template: the key is used only through the services that encrypt with it (kms:ViaService)",
          not direct, f"{direct}")


# Metrics AWS publishes that the template may alarm on or chart, per namespace (AWS/Lambda:
# https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html; AWS/SQS:
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html),
# and the dimension each is selected by, with the resource type that dimension must name.
AWS_METRICS = {
    "AWS/Lambda": ({"Errors", "Throttles", "Invocations", "Duration", "ConcurrentExecutions"},
                   "FunctionName", "AWS::Serverless::Function"),
    "AWS/SQS": ({"ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible",
                 "ApproximateNumberOfMessagesDelayed", "ApproximateAgeOfOldestMessage",
                 "NumberOfMessagesSent", "NumberOfMessagesReceived", "NumberOfMessagesDeleted"},
                "QueueName", "AWS::SQS::Queue"),
}


def emitted_metrics(root):
    """Names of the EMF metrics the code emits: every ("Name", value, "Count"|"Milliseconds"|"Seconds")
    tuple in shared/src (the form metrics::emit takes)."""
    emitted = set()
    for dirpath, _, files in os.walk(os.path.join(root, "shared/src")):
        for f in files:
            if f.endswith(".rs"):
                emitted |= set(re.findall(r'\("([A-Z][A-Za-z]+)",\s*[^,]+,\s*"(?:Count|Milliseconds|Seconds)"\)',
                                          open(os.path.join(dirpath, f)).read()))
    return emitted


def metric_problem(template, emitted, namespace, name, dims):
    """Why a metric (namespace, name, dimensions as [(name, value)] with CloudFormation
    references as {'Ref': ..} / {'Fn::GetAtt': ..} or, from the dashboard, 'ref:X') is not
    one the code emits or AWS publishes; None when it is."""
    resources = template["Resources"]
    if namespace == "Webhooks":
        if name not in emitted:
            return f"Webhooks/{name} is not emitted by shared/src (emits {sorted(emitted)})"
        if dims != [("Stack", "ref:AWS::StackName")]:
            return f"Webhooks/{name} must be selected by Stack = the stack's name (the only dimension emitted), not {dims}"
        return None
    if namespace not in AWS_METRICS:
        return f"namespace {namespace} is neither Webhooks nor one of {sorted(AWS_METRICS)}"
    names, dim, rtype = AWS_METRICS[namespace]
    if name not in names:
        return f"{namespace}/{name} is not a metric AWS publishes there"
    if len(dims) != 1 or dims[0][0] != dim:
        return f"{namespace}/{name} must be selected by {dim} alone, not {dims}"
    target = dims[0][1]
    target = target[4:] if isinstance(target, str) and target.startswith("ref:") else None
    if target is None or resources.get(target, {}).get("Type") != rtype:
        return f"{namespace}/{name}: {dim} must name a {rtype} of the template, not {dims[0][1]}"
    return None


def ref_name(value):
    """'ref:X' for {'Ref': 'X'} and {'Fn::GetAtt': 'X.QueueName'}; the value otherwise."""
    if isinstance(value, dict) and "Ref" in value:
        return "ref:" + value["Ref"]
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        att = value["Fn::GetAtt"]
        return "ref:" + (att.split(".")[0] if isinstance(att, str) else att[0])
    return value


def check_alarms_and_dashboard(template, emitted):
    """Every alarm watches a metric the code emits (with the Stack dimension it is emitted
    with) or one AWS publishes for a resource of this template, says what to do, and notifies
    the topic; the oldest-message bound is the longest delay plus the visibility timeout; the
    dashboard charts only such metrics and has the figures ops need."""
    resources = template["Resources"]
    alarms = {lid: r["Properties"] for lid, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    check("template: alarms exist", len(alarms) >= 12, f"{len(alarms)}: {sorted(alarms)}")
    for lid, p in sorted(alarms.items()):
        if "Metrics" in p:
            check(f"alarm {lid}: a single metric (metric math is not checked here)", False)
            continue
        dims = [(d["Name"], ref_name(d["Value"])) for d in p.get("Dimensions", [])]
        problem = metric_problem(template, emitted, p["Namespace"], p["MetricName"], dims)
        check(f"alarm {lid}: {p['Namespace']}/{p['MetricName']} is emitted by the code or published by AWS",
              problem is None, problem or "")
        check(f"alarm {lid}: notifies the NotificationTopic and says what to do first",
              {"Ref": "NotificationTopic"} in p.get("AlarmActions", [])
              and "First" in p.get("AlarmDescription", ""), str(p.get("AlarmActions")))
    want = {("AWS/Lambda", "Errors", "DeliverFunction"), ("AWS/Lambda", "Throttles", "DeliverFunction"),
            ("AWS/Lambda", "Errors", "IngestFunction"), ("AWS/Lambda", "Throttles", "IngestFunction"),
            ("AWS/Lambda", "Invocations", "SweeperFunction"), ("AWS/SQS", "ApproximateAgeOfOldestMessage", "Queue"),
            ("Webhooks", "Exhausted", None), ("Webhooks", "EndpointsPaused", None),
            ("Webhooks", "EndpointsDisabled", None)}
    have = {(p["Namespace"], p["MetricName"],
             next((ref_name(d["Value"])[4:] for d in p.get("Dimensions", []) if d["Name"] != "Stack"), None))
            for p in alarms.values() if "MetricName" in p}
    check("template: the alarms ops need are there", want <= have, f"missing {sorted(want - have, key=str)}")
    silent = [lid for lid, p in alarms.items()
              if p.get("MetricName") == "Invocations" and p.get("TreatMissingData") == "breaching"
              and p.get("ComparisonOperator") == "LessThanThreshold" and p.get("EvaluationPeriods") == 3]
    check("template: the sweeper not running for 3 periods alarms (missing data breaches)", len(silent) == 1, str(silent))
    delay = int(template["Globals"]["Function"]["Environment"]["Variables"]["WEBHOOKS_SQS_MAX_DELAY_SECONDS"])
    visibility = int(resources["Queue"]["Properties"]["VisibilityTimeout"])
    age = alarms.get("OldestMessageAgeAlarm", {})
    check("template: the oldest-message bound is the longest delay plus the visibility timeout",
          age.get("Threshold") == delay + visibility, f"{age.get('Threshold')} != {delay} + {visibility}")

    dashboards = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    if not check("template: one CloudWatch dashboard", len(dashboards) == 1):
        return
    body = dashboards[0]["DashboardBody"]
    body = body.get("Fn::Sub", body) if isinstance(body, dict) else body
    # ${X} and ${X.Attr} become the marker 'ref:X' (what ref_name gives an alarm's dimension).
    text = re.sub(r"\$\{([A-Za-z0-9:]+)(?:\.[A-Za-z]+)?\}", lambda m: "ref:" + m.group(1), body)
    try:
        widgets = json.loads(text)["widgets"]
    except (ValueError, KeyError) as e:
        check("dashboard: the body is JSON with widgets", False, repr(e))
        return
    charted, problems = set(), []
    for w in widgets:
        for row in w.get("properties", {}).get("metrics", []):
            parts = [x for x in row if not isinstance(x, dict)]
            namespace, name, rest = parts[0], parts[1], parts[2:]
            dims = list(zip(rest[0::2], rest[1::2]))
            problem = metric_problem(template, emitted, namespace, name, dims)
            if problem:
                problems.append(problem)
            charted.add((namespace, name, dims[0][1][4:] if dims and dims[0][0] != "Stack" else None))
    check("dashboard: every metric is emitted by the code or published by AWS", not problems, "; ".join(problems))
    functions = [lid for lid, r in resources.items() if r["Type"] == "AWS::Serverless::Function"]
    need = {("Webhooks", m, None) for m in ("Delivered", "FailedAttempts", "Exhausted", "SweepEnqueued")}
    need |= {("AWS/SQS", m, "Queue") for m in ("ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage")}
    need |= {("AWS/Lambda", m, f) for m in ("Errors", "Duration") for f in functions}
    check("dashboard: delivered, failed, exhausted, queue depth and age, sweeper, Lambda errors and duration per function",
          need <= charted, f"missing {sorted(need - charted, key=str)}")


def create_table_from_template(ddb, template, name):
    p = template["Resources"]["Table"]["Properties"]
    ddb.create_table(
        TableName=name,
        BillingMode=p["BillingMode"],
        AttributeDefinitions=p["AttributeDefinitions"],
        KeySchema=p["KeySchema"],
        GlobalSecondaryIndexes=p["GlobalSecondaryIndexes"],
    )
    ddb.get_waiter("table_exists").wait(TableName=name)
    ddb.update_time_to_live(TableName=name, TimeToLiveSpecification={
        "AttributeName": p["TimeToLiveSpecification"]["AttributeName"], "Enabled": True})


# ---------------------------------------------------------------- a Lambda Runtime API


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a long poll cut off when the function stops


class RuntimeApi:
    """The Lambda Runtime API (2018-06-01) for one function instance: /next hands out one
    queued invocation at a time, /response and /error complete it, /init/error records a
    failed cold start."""

    PREFIX = "/2018-06-01/runtime"

    def __init__(self, function_name, timeout_s=60):
        self.function_name = function_name
        self.timeout_s = timeout_s
        self.pending = queue.Queue()
        self.results = {}
        self.done = threading.Condition()
        self.init_error = None
        self.polls = 0
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status, body=b"", headers=None):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_GET(self):
                if self.path != f"{api.PREFIX}/invocation/next":
                    return self._reply(404, b'{"errorMessage":"not found"}')
                api.polls += 1
                while True:
                    try:
                        request_id, event = api.pending.get(timeout=0.5)
                        break
                    except queue.Empty:
                        if api.closed:
                            return self._reply(500, b"{}")
                deadline = int((time.time() + api.timeout_s) * 1000)
                self._reply(200, event, {
                    "Content-Type": "application/json",
                    "Lambda-Runtime-Aws-Request-Id": request_id,
                    "Lambda-Runtime-Deadline-Ms": str(deadline),
                    "Lambda-Runtime-Invoked-Function-Arn":
                        f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{api.function_name}",
                    "Lambda-Runtime-Trace-Id":
                        f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0",
                })

            def do_POST(self):
                body = self._body()
                m = re.fullmatch(api.PREFIX + r"/invocation/([^/]+)/(response|error)", self.path)
                if m:
                    with api.done:
                        api.results[m.group(1)] = (m.group(2), body,
                                                   self.headers.get("Lambda-Runtime-Function-Error-Type"))
                        api.done.notify_all()
                    return self._reply(202, b'{"status":"OK"}')
                if self.path == f"{api.PREFIX}/init/error":
                    with api.done:
                        api.init_error = body
                        api.done.notify_all()
                    return self._reply(202, b'{"status":"OK"}')
                return self._reply(404, b'{"errorMessage":"not found"}')

        self.closed = False
        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def invoke(self, event, process, wait_s=60):
        """Queues `event`, waits for the function's answer: ('response'|'error', json, type)."""
        request_id = str(uuid.uuid4())
        self.pending.put((request_id, json.dumps(event).encode()))
        end = time.time() + wait_s
        with self.done:
            while request_id not in self.results:
                if self.init_error is not None:
                    raise RuntimeError(f"{self.function_name}: init error {self.init_error!r}")
                if process.poll() is not None:
                    raise RuntimeError(f"{self.function_name}: process exited with {process.returncode}")
                if time.time() > end:
                    raise RuntimeError(f"{self.function_name}: no answer in {wait_s} s")
                self.done.wait(0.2)
            kind, body, error_type = self.results.pop(request_id)
        return kind, json.loads(body or b"null"), error_type

    def close(self):
        self.closed = True
        self.server.shutdown()
        self.server.server_close()


class Function:
    """A built bootstrap binary running against its own RuntimeApi."""

    def __init__(self, name, binary, env, logdir):
        self.name = name
        self.api = RuntimeApi(f"webhooks-{name}")
        full = {
            "PATH": "/usr/bin:/bin",
            "AWS_LAMBDA_RUNTIME_API": self.api.address,
            "AWS_LAMBDA_FUNCTION_NAME": f"webhooks-{name}",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/webhooks-{name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "smoke",
            "AWS_EXECUTION_ENV": "AWS_Lambda_provided.al2023",
            "LAMBDA_TASK_ROOT": os.path.dirname(binary),
            "_HANDLER": "bootstrap",
            "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
            "AWS_DEFAULT_REGION": os.environ.get("AWS_REGION", "us-east-1"),
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        for k in ("AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
            if os.environ.get(k):
                full[k] = os.environ[k]
        full.update(env)
        self.log_path = os.path.join(logdir, f"lambda-{name}.log")
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen([binary], env=full, stdout=self.log, stderr=subprocess.STDOUT,
                                        cwd=os.path.dirname(binary))

    def invoke(self, event, wait_s=60):
        return self.api.invoke(event, self.process, wait_s)

    def log_text(self):
        if not self.log.closed:
            self.log.flush()
        return open(self.log_path, encoding="utf-8", errors="replace").read()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.api.close()
        self.log.close()


# ---------------------------------------------------------------- trigger events


def http_event(method, path, body=None, query="", route_key=None,
               domain="abc123.execute-api.us-east-1.amazonaws.com"):
    """An API Gateway HTTP API (payload 2.0) request, as signed by IAM (SigV4), to `domain`
    (its first label is the API's id)."""
    now = time.time()
    domain_prefix = domain.split(".", 1)[0]
    event = {
        "version": "2.0",
        "routeKey": route_key or f"{method} {path}",
        "rawPath": path,
        "rawQueryString": query,
        "headers": {
            "accept": "application/json",
            "host": domain,
            "user-agent": "lambda-smoke",
            "x-amz-date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)),
            "x-forwarded-proto": "https",
        },
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": domain_prefix,
            "authorizer": {"iam": {
                "accessKey": "AKIAIOSFODNN7EXAMPLE",
                "accountId": ACCOUNT,
                "callerId": "AIDACKCEVSQ6C2EXAMPLE",
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": f"arn:aws:iam::{ACCOUNT}:user/ops",
                "userId": "AIDACKCEVSQ6C2EXAMPLE",
            }},
            "domainName": domain,
            "domainPrefix": domain_prefix,
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                     "sourceIp": "192.0.2.10", "userAgent": "lambda-smoke"},
            "requestId": uuid.uuid4().hex[:16],
            "routeKey": route_key or f"{method} {path}",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if query:
        event["queryStringParameters"] = dict(p.split("=", 1) for p in query.split("&"))
    if body is not None:
        raw = json.dumps(body)
        event["headers"]["content-type"] = "application/json"
        event["headers"]["content-length"] = str(len(raw))
        event["body"] = raw
    return event


def function_url_event(method, path, body=None):
    """A Lambda function URL request (IAM auth): payload 2.0 as the HTTP API's, with routeKey
    $default and the URL's own domain (Lambda developer guide, "Invoking Lambda function URLs")."""
    return http_event(method, path, body, route_key="$default",
                      domain="a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6.lambda-url.us-east-1.on.aws")


def http_answer(kind, response):
    """(status, json body) of a lambda_http response to an HTTP API event."""
    if kind != "response":
        return None, response
    body = response.get("body") or ""
    if response.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = body
    return response.get("statusCode"), parsed


def eventbridge_event(detail_type, source, detail, event_id=None):
    return {
        "version": "0",
        "id": event_id or str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": ACCOUNT,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    }


def scheduled_event():
    e = eventbridge_event("Scheduled Event", "aws.events", {})
    e["resources"] = [f"arn:aws:events:us-east-1:{ACCOUNT}:rule/webhooks-SweeperFunctionTick"]
    return e


def sqs_event(messages, queue_arn):
    records = []
    for m in messages:
        records.append({
            "messageId": m["MessageId"],
            "receiptHandle": m.get("ReceiptHandle", "handle"),
            "body": m["Body"],
            "attributes": {
                "ApproximateReceiveCount": m.get("Attributes", {}).get("ApproximateReceiveCount", "1"),
                "SentTimestamp": m.get("Attributes", {}).get("SentTimestamp", str(int(time.time() * 1000))),
                "SenderId": "AIDACKCEVSQ6C2EXAMPLE",
                "ApproximateFirstReceiveTimestamp": str(int(time.time() * 1000)),
            },
            "messageAttributes": {},
            "md5OfBody": hashlib.md5(m["Body"].encode()).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": "us-east-1",
        })
    return {"Records": records}


# ---------------------------------------------------------------- a receiver


class Receiver:
    """Records every POST and answers 204."""

    def __init__(self):
        self.requests = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                rec.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "body": body})
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def signature_ok(secret, req):
    key = base64.b64decode(secret.removeprefix("whsec_"))
    h = req["headers"]
    signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + req["body"]
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return expected in h.get("webhook-signature", "").split(" ")


# ---------------------------------------------------------------- the run


def receive_all(sqs, url, want, wait_s=20):
    """Receives until `want` messages are in hand (or the wait runs out)."""
    got, end = [], time.time() + wait_s
    while len(got) < want and time.time() < end:
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                  AttributeNames=["All"])
        got.extend(out.get("Messages", []))
    return got


def emulate_esm(deliver, sqs, url, arn, messages, extra=()):
    """What the SQS event source mapping does: one batch to deliver, then delete every message
    not reported in batchItemFailures."""
    kind, resp, _ = deliver.invoke(sqs_event(list(messages) + list(extra), arn))
    failures = {f["itemIdentifier"] for f in (resp or {}).get("batchItemFailures", [])} if kind == "response" else None
    if failures is not None:
        done = [m for m in messages if m["MessageId"] not in failures]
        for i in range(0, len(done), 10):
            sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(done[i:i + 10])])
    return kind, resp, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--template", default=None)
    ap.add_argument("--bin-dir", default=None, help="directory with <name>/bootstrap (target/lambda)")
    ap.add_argument("--logdir", default=None)
    args = ap.parse_args()
    root = args.root
    template_path = args.template or os.path.join(root, "infra/template.yaml")
    bin_dir = args.bin_dir or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target")), "lambda")
    logdir = args.logdir or os.path.join(root, ".local")
    os.makedirs(logdir, exist_ok=True)
    if not os.environ.get("AWS_ENDPOINT_URL"):
        raise SystemExit("set AWS_ENDPOINT_URL (moto, LocalStack) first; scripts/lambda-smoke.sh does")

    template = load_template(template_path)
    print("== template against the code")
    check_template_against_code(template, root)

    suffix = uuid.uuid4().hex[:8]
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    ddb = boto3.client("dynamodb", region_name=region)
    sqs = boto3.client("sqs", region_name=region)
    sns = boto3.client("sns", region_name=region)
    table = f"webhooks-smoke-{suffix}"
    print(f"== resources on {os.environ['AWS_ENDPOINT_URL']}: table {table}")
    create_table_from_template(ddb, template, table)
    q = template["Resources"]["Queue"]["Properties"]
    dlq_url = sqs.create_queue(QueueName=f"webhooks-smoke-dlq-{suffix}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(QueueName=f"webhooks-smoke-{suffix}", Attributes={
        "VisibilityTimeout": str(q["VisibilityTimeout"]),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
    })["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    # The slow lane's queue (shared/src/lane.rs): ingest's and deliver's WEBHOOKS_SLOW_QUEUE_URL refer to it.
    slow_queue_url = sqs.create_queue(QueueName=f"webhooks-smoke-slow-{suffix}", Attributes={
        "VisibilityTimeout": str(template["Resources"]["SlowQueue"]["Properties"]["VisibilityTimeout"]),
    })["QueueUrl"]
    topic_arn = sns.create_topic(Name=f"webhooks-smoke-{suffix}")["TopicArn"]
    # The portal token key: admin and portal read it from Secrets Manager by its ARN.
    secrets = boto3.client("secretsmanager", region_name=region)
    portal_key_arn = secrets.create_secret(Name=f"webhooks-smoke-portal-{suffix}",
                                           SecretString="smoke-test-portal-token-key-0123456789abcdef")["ARN"]
    stack_name = f"webhooks-smoke-{suffix}"
    # The operational events' bus: the notify jobs put endpoint.disabled and friends on it.
    operational_bus = f"webhooks-smoke-operational-{suffix}"
    boto3.client("events", region_name=region).create_event_bus(Name=operational_bus)
    refs = {"Table": table, "Queue": queue_url, "SlowQueue": slow_queue_url, "NotificationTopic": topic_arn,
            "PortalTokenKey": portal_key_arn, "OperationalEventBus": operational_bus, "AWS::StackName": stack_name}

    def env_of(logical_id, **overrides):
        env = function_env(template, logical_id, refs)
        env.update(overrides)
        return env

    # Test-only overrides, on top of the template's environment: admin may register and
    # deliver may reach the loopback receiver over plain http (on Lambda both are refused:
    # WEBHOOKS_REQUIRE_HTTPS is on by default there and private destinations are never
    # allowed), and "overdue" comes after 1 s instead of 300 s so the sweeper's re-drive of a
    # lost message shows within the test.
    loopback = {"WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS": "true", "WEBHOOKS_REQUIRE_HTTPS": "false"}
    functions = {}
    receiver = Receiver()
    try:
        for name, lid, extra in [
            ("admin", "AdminFunction", loopback),
            ("ingest", "IngestFunction", {"WEBHOOKS_REDRIVE_AFTER_SECONDS": "1"}),
            ("deliver", "DeliverFunction", loopback),
            ("sweeper", "SweeperFunction", {"WEBHOOKS_REDRIVE_AFTER_SECONDS": "1"}),
            ("portal", "PortalFunction", {}),
        ]:
            # The portal function is the admin binary serving the portal's routes only.
            binary = os.path.join(bin_dir, "admin" if name == "portal" else name, "bootstrap")
            if not os.access(binary, os.X_OK):
                raise SystemExit(f"no built binary {binary}: run cargo lambda build --release first")
            functions[name] = Function(name, binary, env_of(lid, **extra), logdir)
        run(functions, ddb, sqs, table, queue_url, queue_arn, dlq_url, receiver, stack_name)
    except Exception as e:  # a crash of the harness or a binary is a failure, with the logs
        check("smoke run completed", False, repr(e))
    finally:
        for f in functions.values():
            f.stop()
        receiver.close()
        if FAILED:
            for f in functions.values():
                print(f"---- {f.log_path} (last 40 lines)")
                print("\n".join(f.log_text().splitlines()[-40:]))
    print(f"lambda smoke: {len(PASSED)} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


def get_item(ddb, table, pk, sk):
    return ddb.get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True).get("Item")


def run(fns, ddb, sqs, table, queue_url, queue_arn, dlq_url, receiver, stack_name):
    admin, ingest, deliver, sweeper = fns["admin"], fns["ingest"], fns["deliver"], fns["sweeper"]

    print("== admin: API Gateway v2 POST /v1/endpoints")
    kind, resp, _ = admin.invoke(http_event("POST", "/v1/endpoints", {
        "tenant_id": "acme", "url": receiver.url, "event_types": ["order.paid"],
        "retry_policy": {"schedule_seconds": [1, 2], "max_attempts": 3}}))
    status, body = http_answer(kind, resp)
    check("admin answers 201 with an id and a secret", status == 201 and body.get("id", "").startswith("ep_")
          and body.get("secret", "").startswith("whsec_"), f"{kind} {resp}")
    if status != 201:
        return
    ep, secret = body["id"], body["secret"]
    check("endpoint item under its tenant in DynamoDB", get_item(ddb, table, "TENANT#acme", f"ENDPOINT#{ep}") is not None)
    check("endpoint pointer item in DynamoDB", get_item(ddb, table, f"ENDPOINT#{ep}", "ENDPOINT") is not None)

    kind, resp, _ = admin.invoke(http_event("GET", f"/v1/endpoints/{ep}", route_key="ANY /v1/endpoints/{proxy+}"))
    status, body = http_answer(kind, resp)
    check("admin GET /v1/endpoints/{id} answers 200 without the secret",
          status == 200 and body.get("id") == ep and "secret" not in body, f"{kind} {resp}")
    kind, resp, _ = admin.invoke(http_event("POST", "/v1/endpoints", {"tenant_id": "acme"}))
    status, body = http_answer(kind, resp)
    check("admin answers 422 naming the missing field", status == 422 and "url" in json.dumps(body), f"{kind} {resp}")

    print("== ingest: API Gateway v2 POST /v1/events")
    kind, resp, _ = ingest.invoke(http_event("POST", "/v1/events", {
        "tenant_id": "acme", "event_type": "order.paid", "payload": {"order": "o_1", "amount": 1200}}))
    status, body = http_answer(kind, resp)
    ok = check("ingest answers 202 with one delivery",
               status == 202 and isinstance(body, dict) and len(body.get("deliveries", [])) == 1, f"{kind} {resp}")
    # The rest goes on without it (EventBridge feeds deliver then), so one failure shows alone.
    dlv_http = body["deliveries"][0]["id"] if ok else None
    if dlv_http:
        item = get_item(ddb, table, f"DELIVERY#{dlv_http}", "DELIVERY")
        check("delivery item written, scheduled", item is not None and item["status"]["S"] == "scheduled", str(item))

    print("== ingest: function URL POST /v1/events (IngestFunctionUrl=enabled)")
    kind, resp, _ = ingest.invoke(function_url_event("POST", "/v1/events", {
        "tenant_id": "acme", "event_type": "order.paid", "payload": {"order": "o_url"}}))
    status, body = http_answer(kind, resp)
    ok = check("ingest answers a function URL request 202 with one delivery",
               status == 202 and isinstance(body, dict) and len(body.get("deliveries", [])) == 1, f"{kind} {resp}")
    dlv_url = body["deliveries"][0]["id"] if ok else None
    kind, resp, _ = ingest.invoke(function_url_event("GET", "/v1/events"))
    status, body = http_answer(kind, resp)
    check("ingest answers a function URL GET of /v1/events 405 in the error shape",
          status == 405 and isinstance(body, dict) and body.get("error", {}).get("code") == "method_not_allowed",
          f"{kind} {resp}")

    print("== ingest: POST /v1/events on the API-key API (no authorizer)")
    kind, resp, _ = admin.invoke(http_event("POST", "/v1/api-keys", {"tenant_ids": ["acme"]},
                                            route_key="$default"))
    status, made = http_answer(kind, resp)
    check("admin POST /v1/api-keys answers 201 with the key", status == 201 and "key" in (made or {}), f"{kind} {resp}")
    kind, resp, _ = admin.invoke(http_event("POST", "/v1/api-keys", {"all_tenants": True}, route_key="$default"))
    status, every = http_answer(kind, resp)

    def keyed(body, key=None):
        event = http_event("POST", "/v1/events", body, domain="k3y4p1.execute-api.us-east-1.amazonaws.com")
        del event["requestContext"]["authorizer"]
        if key:
            event["headers"]["authorization"] = f"Bearer {key}"
        return http_answer(*ingest.invoke(event)[:2])

    nobody = {"tenant_id": "nobody", "event_type": "order.paid", "payload": {}}
    status, body = keyed(nobody)
    check("ingest refuses a request without IAM or a key: 401 api_key_required",
          status == 401 and body.get("error", {}).get("code") == "api_key_required", f"{status} {body}")
    if made and "key" in made:
        status, body = keyed(nobody, made["key"])
        check("ingest refuses a key for another tenant: 403 tenant_not_allowed",
              status == 403 and body.get("error", {}).get("code") == "tenant_not_allowed", f"{status} {body}")
    if every and "key" in every:
        status, body = keyed(nobody, every["key"])
        check("ingest takes an event with a valid key", status == 202, f"{status} {body}")

    print("== ingest: EventBridge custom event")
    eb_id = str(uuid.uuid4())
    kind, resp, _ = ingest.invoke(eventbridge_event("order.paid", "com.example.shop",
                                                    {"tenant_id": "acme", "order": "o_2"}, eb_id))
    check("ingest answers the EventBridge event with its id and one delivery",
          kind == "response" and resp.get("event_id") == eb_id and len(resp.get("deliveries", [])) == 1,
          f"{kind} {resp}")
    dlv_eb = resp["deliveries"][0]["id"] if kind == "response" and resp.get("deliveries") else None
    item = get_item(ddb, table, f"DELIVERY#{dlv_eb}", "DELIVERY") if dlv_eb else None
    check("EventBridge delivery item written, scheduled", item is not None and item["status"]["S"] == "scheduled",
          str(item))
    # The event item's key (docs/storage.md): partition EVENT_ID#{event_id}, sort key
    # TENANT#{tenant_id}, found by the event id alone.
    item = get_item(ddb, table, f"EVENT_ID#{eb_id}", "TENANT#acme")
    # The payload is stored zstd-compressed (binary `payload_z`, a zstd frame: magic 28 b5 2f fd);
    # its bytes come back through deliver below (the body posted) and the re-driven attempt (read back).
    frame = (item or {}).get("payload_z", {}).get("B", b"")
    check("EventBridge event's payload item written, the payload zstd-compressed", item is not None
          and bytes(frame[:4]) == b"\x28\xb5\x2f\xfd" and "payload" not in item, str(item))
    kind, resp, err = ingest.invoke(eventbridge_event("order.paid", "com.example.shop", {"order": "o_x"}))
    check("an EventBridge event without a tenant is an invocation error (goes to the on-failure queue)",
          kind == "error", f"{kind} {resp}")
    kind, resp, _ = ingest.invoke(eventbridge_event("order.paid", "com.example.shop",
                                                    {"tenant_id": "acme", "order": "o_2"}, eb_id))
    check("the same EventBridge event again answers the same delivery (idempotent)",
          kind == "response" and [d["id"] for d in resp.get("deliveries", [])] == [dlv_eb], f"{kind} {resp}")

    print("== deliver: SQS batch (the messages ingest sent, plus a malformed one)")
    created = [d for d in (dlv_http, dlv_url, dlv_eb) if d]
    msgs = receive_all(sqs, queue_url, len(created) + 1, wait_s=3)
    bodies = [json.loads(m["Body"]) for m in msgs]
    check("ingest enqueued attempt 1 of each delivery, once",
          created and sorted(b.get("delivery_id") for b in bodies) == sorted(created), str(bodies))
    bad = {"MessageId": "malformed-1", "ReceiptHandle": "x", "Body": "this is not an attempt message"}
    kind, resp, failures = emulate_esm(deliver, sqs, queue_url, queue_arn, msgs, extra=[bad])
    check("deliver answers with batchItemFailures naming only the malformed message",
          kind == "response" and failures == {"malformed-1"}, f"{kind} {resp}")
    posts = [r for r in receiver.requests]
    check("the receiver got each attempt", len(posts) == len(created), str(len(posts)))
    check("every attempt carries webhook-id/timestamp/attempt and a valid signature",
          posts and all(signature_ok(secret, r) and r["headers"].get("webhook-attempt") == "1" for r in posts),
          str([r["headers"] for r in posts]))
    check("the EventBridge event's id is the webhook-id", any(r["headers"].get("webhook-id") == eb_id for r in posts))
    eb_posts = [r for r in posts if r["headers"].get("webhook-id") == eb_id]
    check("the EventBridge event's detail is the body posted",
          eb_posts and json.loads(eb_posts[0]["body"]).get("order") == "o_2", str(eb_posts))
    for d in created:
        item = get_item(ddb, table, f"DELIVERY#{d}", "DELIVERY")
        check(f"delivery {d[:12]}... is delivered in DynamoDB", item is not None and item["status"]["S"] == "delivered",
              str(item and item.get("status")))
    emf = []
    for line in deliver.log_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "_aws" in doc:
            emf.append(doc)
    delivered = [d for d in emf if d["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Webhooks" and "Delivered" in d]
    check("deliver printed an EMF line (namespace Webhooks, metric Delivered)", bool(delivered), str(emf))
    check("deliver's EMF line carries the Stack dimension with the stack's name (WEBHOOKS_STACK_NAME)",
          bool(delivered) and all(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Stack"]]
                                  and d.get("Stack") == stack_name for d in delivered), str(delivered[:1]))
    attempt_lines = [json.loads(line) for line in deliver.log_text().splitlines()
                     if line.startswith("{") and '"attempt made"' in line]
    check("deliver's 'attempt made' log line has the fields the Logs Insights queries of docs/operations.md group on",
          bool(attempt_lines) and all(
              all(k in a.get("fields", {}) for k in ("tenant_id", "endpoint_id", "status", "duration_ms"))
              for a in attempt_lines), str(attempt_lines[:1]))

    print("== sweeper: EventBridge scheduled event re-drives a lost attempt message")
    kind, resp, _ = ingest.invoke(eventbridge_event("order.paid", "com.example.shop",
                                                    {"tenant_id": "acme", "order": "o_3"}))
    dlv_lost = resp["deliveries"][0]["id"] if kind == "response" and resp.get("deliveries") else None
    lost = receive_all(sqs, queue_url, 1)
    for m in lost:  # the message is lost
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    check("attempt message of a third event taken off the queue (lost)",
          dlv_lost is not None and len(lost) == 1, f"{kind} {resp}")
    time.sleep(2.5)
    kind, resp, _ = sweeper.invoke(scheduled_event())
    check("sweeper answers its report with one message enqueued",
          kind == "response" and resp.get("enqueued") == 1 and resp.get("examined", 0) >= 1, f"{kind} {resp}")
    redriven = receive_all(sqs, queue_url, 1)
    check("the re-driven attempt message is on the queue",
          [json.loads(m["Body"]).get("delivery_id") for m in redriven] == [dlv_lost], str(redriven))
    kind, resp, failures = emulate_esm(deliver, sqs, queue_url, queue_arn, redriven)
    check("deliver delivers the re-driven attempt", kind == "response" and failures == set(), f"{kind} {resp}")
    kind, resp, _ = sweeper.invoke(scheduled_event())
    check("a second sweeper tick finds nothing to do", kind == "response" and resp.get("enqueued") == 0, f"{kind} {resp}")

    print("== admin: API Gateway v2 GET deliveries")
    kind, resp, _ = admin.invoke(http_event("GET", f"/v1/deliveries/{dlv_lost}", route_key="ANY /v1/deliveries/{proxy+}"))
    status, body = http_answer(kind, resp)
    check("GET /v1/deliveries/{id}: delivered, one attempt recorded",
          status == 200 and body.get("status") == "delivered" and body.get("attempt_count") == 1
          and len(body.get("attempts", [])) == 1, f"{kind} {resp}")
    kind, resp, _ = admin.invoke(http_event("GET", "/v1/deliveries", query=f"endpoint_id={ep}",
                                            route_key="ANY /v1/deliveries"))
    status, body = http_answer(kind, resp)
    check("GET /v1/deliveries?endpoint_id= lists every delivery (by_endpoint index)",
          status == 200 and sorted(d["id"] for d in body.get("data", [])) == sorted(created + [dlv_lost]),
          f"{kind} {resp}")
    kind, resp, _ = admin.invoke(http_event("GET", "/v1/deliveries", query="status=exhausted",
                                            route_key="ANY /v1/deliveries"))
    status, body = http_answer(kind, resp)
    check("GET /v1/deliveries?status=exhausted answers 200, empty (by_status index)",
          status == 200 and body.get("data") == [], f"{kind} {resp}")
    # The `aws lambda invoke` payload of docs/deploy.md for operators without a SigV4 HTTP client.
    kind, resp, _ = admin.invoke({"version": "2.0", "rawPath": "/v1/deliveries", "rawQueryString": "status=exhausted",
                                  "requestContext": {"http": {"method": "GET"}}})
    status, body = http_answer(kind, resp)
    check("docs/deploy.md's minimal 'aws lambda invoke' request to admin answers 200",
          status == 200 and body.get("data") == [], f"{kind} {resp}")
    kind, resp, _ = admin.invoke(http_event("POST", f"/v1/deliveries/{dlv_lost}/replay",
                                            route_key="ANY /v1/deliveries/{proxy+}"))
    status, body = http_answer(kind, resp)
    check("replay of a delivered delivery answers 409", status == 409, f"{kind} {resp}")
    # What API Gateway's $default route and the ANY routes send the admin function.
    for method, path, route_key, want in [
        ("GET", "/v1/events", "$default", (405, "method_not_allowed")),
        ("GET", "/v1/nope", "$default", (404, "not_found")),
        ("POST", "/v1/deliveries", "ANY /v1/deliveries", (405, "method_not_allowed")),
    ]:
        kind, resp, _ = admin.invoke(http_event(method, path, route_key=route_key))
        status, body = http_answer(kind, resp)
        got = (status, (body.get("error") or {}).get("code") if isinstance(body, dict) else None)
        check(f"{method} {path} ({route_key}) answers {want[0]} {want[1]} in the error shape", got == want,
              f"{kind} {resp}")

    run_portal(admin, fns["portal"])

    n = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
    check("nothing in the dead-letter queue", n["Attributes"]["ApproximateNumberOfMessages"] == "0")
    for f in fns.values():
        check(f"{f.name}: still running after its invocations (no panic, no exit)", f.process.poll() is None)


def run_portal(admin, portal):
    """Admin mints a tenant portal URL; the portal function (another process, the same key from
    the template's secret) accepts its token, sets the session cookie and shows the tenant's
    page; it serves nothing else, and refuses a tampered token."""
    print("== admin and portal: a tenant portal session (the portal's routes take no IAM: the token)")
    kind, resp, _ = admin.invoke(http_event("POST", "/v1/tenants/acme/portal-sessions", {},
                                            route_key="ANY /v1/tenants/{tenant_id}/portal-sessions"))
    status, body = http_answer(kind, resp)
    url = body.get("url", "") if isinstance(body, dict) else ""
    check("admin answers 201 with a portal URL on the API's host",
          status == 201 and url.startswith("https://abc123.execute-api.us-east-1.amazonaws.com/portal?token="),
          f"{kind} {resp}")
    token = url.split("token=", 1)[-1]

    def portal_get(path, query="", cookies=None):
        event = http_event("GET", path, query=query, route_key="ANY /portal" if path == "/portal" else "ANY /portal/{proxy+}")
        event["requestContext"].pop("authorizer", None)  # no IAM on the portal's routes
        if cookies:
            event["cookies"] = cookies
        kind, resp, _ = portal.invoke(event)
        if kind != "response":
            return None, {}, [], str(resp)
        text = resp.get("body") or ""
        if resp.get("isBase64Encoded"):
            text = base64.b64decode(text).decode(errors="replace")
        headers = {k.lower(): v for k, v in (resp.get("headers") or {}).items()}
        set_cookies = list(resp.get("cookies") or []) + ([headers["set-cookie"]] if "set-cookie" in headers else [])
        return resp.get("statusCode"), headers, set_cookies, text

    status, headers, set_cookies, _ = portal_get("/portal", query=f"token={token}")
    session = [c.split(";", 1)[0] for c in set_cookies if c.startswith("webhooks_portal=")]
    check("portal: the token opens a session (303, an HttpOnly, SameSite=Lax, Secure cookie; Lax: docs/security.md)",
          status == 303 and session and all(a in set_cookies[0] for a in ("HttpOnly", "SameSite=Lax", "Secure")),
          f"{status} {headers} {set_cookies}")
    status, _, _, text = portal_get("/portal", cookies=session)
    check("portal: the session shows the tenant's page", status == 200 and "Your webhook endpoints" in text,
          f"{status} {text[:300]}")
    status, _, _, text = portal_get("/portal", query=f"token={token[:-2]}xx")
    check("portal: a tampered token gets the 401 page", status == 401 and "not valid" in text, f"{status} {text[:300]}")
    event = http_event("GET", "/v1/endpoints", query="tenant_id=acme", route_key="ANY /portal/{proxy+}")
    kind, resp, _ = portal.invoke(event)
    check("portal: serves no admin route", kind == "response" and resp.get("statusCode") == 404, f"{kind} {resp}")


if __name__ == "__main__":
    sys.exit(main())
