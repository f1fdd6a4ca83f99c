//! Who may call each route of `openapi.yaml` on the deployed stack, derived from
//! `infra/template.yaml` and compared with the route table of `docs/security.md`
//! ("Routes and who may call them").
//!
//! For every operation (method and path) of `openapi.yaml`, and for each of the template's two
//! HTTP APIs (`HttpApi`, IAM-authorised; `ApiKeyApi`, no authorizer), the route that takes the
//! request is found as API Gateway selects it (a route of the request's method before one of
//! `ANY`; a path without `{proxy+}` before a greedy one; the `$default` route, one with no
//! `Path`, last), with the function behind it. A request on an IAM-authorised route is granted
//! by a policy when one of its `Allow` statements for `execute-api:Invoke` has a resource ARN
//! that matches the request's ARN `arn:aws:execute-api:{region}:{account}:{api id}/$default/
//! {METHOD}/{path}` (the path with its parameters filled in) and no `Deny` does. ARNs match as
//! IAM matches them: `*` is any run of characters, `/` included, and `?` any one character
//! (IAM user guide, "IAM JSON policy elements: Resource"; API Gateway developer guide, "Control
//! access for invoking an API": the resource is the stage, the verb and the request's path).
//! So `.../*/*/v1/events/*` (an operator's `GET /v1/events/{id}`) must not be what grants
//! producers' `POST /v1/events`, and the check would show it if it did.
//!
//! The policies checked are the template's `AWS::IAM::ManagedPolicy` resources with
//! `execute-api:Invoke` statements (`ProducerPolicy`, `AdminPolicy`), with both branches of an
//! `!If` (a grant present under some parameter is a grant).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{root, template, untag};
use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";
/// The API ids the check gives the template's two HTTP APIs (`${HttpApi}`, `${ApiKeyApi}`).
const APIS: &[(&str, &str)] = &[("HttpApi", "httpapi0001"), ("ApiKeyApi", "keyapi00001")];
/// A value for every path parameter: a plain id, so the ARN has one segment per parameter.
const PARAMETER: &str = "p1";
const METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options"];

/// An IAM resource pattern as IAM matches it: `*` any run of characters (`/` included), `?`
/// any one character, everything else literally; the whole ARN.
fn arn_matches(pattern: &str, arn: &str) -> bool {
    let mut re = String::from("^");
    for c in pattern.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            other => re.push_str(&regex::escape(&other.to_string())),
        }
    }
    re.push('$');
    regex::Regex::new(&re).unwrap().is_match(arn)
}

/// A `!Sub` string of the template with the pseudo parameters and the APIs' ids filled in.
fn substitute(s: &str) -> String {
    let mut out =
        s.replace("${AWS::Partition}", "aws").replace("${AWS::Region}", REGION).replace("${AWS::AccountId}", ACCOUNT);
    for (api, id) in APIS {
        out = out.replace(&format!("${{{api}}}"), id);
    }
    assert!(!out.contains("${"), "an execute-api resource with a reference the check does not know: {s}");
    out
}

/// The values of a policy element: a string, a list, `!Sub`, and both branches of `!If`
/// (`AWS::NoValue` left out).
fn values(v: &Value) -> Vec<Value> {
    match v {
        Value::Tagged(t) if t.tag == "If" => {
            let branches = t.value.as_sequence().expect("!If [condition, then, else]");
            branches[1..].iter().flat_map(values).collect()
        }
        Value::Tagged(t) if t.tag == "Ref" && t.value.as_str() == Some("AWS::NoValue") => Vec::new(),
        Value::Sequence(seq) => seq.iter().flat_map(values).collect(),
        other => vec![other.clone()],
    }
}

/// Each managed policy with `execute-api:Invoke` statements: its name and its
/// `(allow, resource pattern)` pairs.
fn invoke_policies(template: &Value) -> BTreeMap<String, Vec<(bool, String)>> {
    let mut out = BTreeMap::new();
    for (id, res) in template["Resources"].as_mapping().expect("Resources") {
        if res["Type"].as_str() != Some("AWS::IAM::ManagedPolicy") {
            continue;
        }
        let mut grants = Vec::new();
        for st in values(&res["Properties"]["PolicyDocument"]["Statement"]) {
            let actions: Vec<String> =
                values(&st["Action"]).iter().filter_map(|a| a.as_str().map(String::from)).collect();
            if !actions.iter().any(|a| a == "execute-api:Invoke" || a == "execute-api:*" || a == "*") {
                continue;
            }
            let allow = match st["Effect"].as_str() {
                Some("Allow") => true,
                Some("Deny") => false,
                other => panic!("{id:?}: a statement with Effect {other:?}"),
            };
            for r in values(&st["Resource"]) {
                let text = untag(&r).as_str().expect("a Resource string or !Sub string");
                grants.push((allow, substitute(text)));
            }
        }
        if !grants.is_empty() {
            out.insert(id.as_str().unwrap().to_string(), grants);
        }
    }
    out
}

/// A route of one of the template's HTTP APIs: `None` path for the `$default` route.
#[derive(Debug, Clone)]
struct Route {
    function: String,
    api: String,
    method: String,
    path: Option<String>,
    iam: bool,
}

/// Every `HttpApi` event of the template's functions.
fn template_routes(template: &Value) -> Vec<Route> {
    let resources = template["Resources"].as_mapping().expect("Resources");
    let mut out = Vec::new();
    for (id, res) in resources {
        if res["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let Some(events) = res["Properties"]["Events"].as_mapping() else { continue };
        for event in events.values() {
            if event["Type"].as_str() != Some("HttpApi") {
                continue;
            }
            let p = &event["Properties"];
            let api = untag(&p["ApiId"]).as_str().expect("ApiId: !Ref X").to_string();
            let api_res = &template["Resources"][api.as_str()];
            assert_eq!(api_res["Type"].as_str(), Some("AWS::Serverless::HttpApi"), "{api} is an HTTP API");
            let default_iam = api_res["Properties"]["Auth"]["DefaultAuthorizer"].as_str() == Some("AWS_IAM");
            let iam = match p["Auth"]["Authorizer"].as_str() {
                None => default_iam,
                Some("NONE") => false,
                Some("AWS_IAM") => true,
                Some(other) => panic!("{id:?}: an authorizer the check does not know: {other}"),
            };
            out.push(Route {
                function: id.as_str().unwrap().to_string(),
                api,
                method: p["Method"].as_str().unwrap_or("ANY").to_uppercase(),
                path: p["Path"].as_str().map(String::from),
                iam,
            });
        }
    }
    out
}

/// Whether a route's path template (`/v1/endpoints/{proxy+}`, `/v1/events/{id}`) takes
/// `path` (a request path, parameters filled in).
fn path_matches(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    let p: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for (i, seg) in t.iter().enumerate() {
        if seg.starts_with('{') && seg.ends_with("+}") {
            return p.len() > i;
        }
        match p.get(i) {
            None => return false,
            Some(actual) if seg.starts_with('{') => {
                if actual.is_empty() {
                    return false;
                }
            }
            Some(actual) if actual != seg => return false,
            Some(_) => {}
        }
    }
    t.len() == p.len()
}

/// The route of `api` that takes `method path`, as API Gateway selects it.
fn select<'a>(routes: &'a [Route], api: &str, method: &str, path: &str) -> Option<&'a Route> {
    let rank = |r: &Route| -> Option<(u8, u8)> {
        let method_rank = if r.method == method {
            0
        } else if r.method == "ANY" {
            1
        } else {
            return None;
        };
        match &r.path {
            None => Some((2, method_rank)),
            Some(t) if path_matches(t, path) => Some((u8::from(t.contains("+}")), method_rank)),
            Some(_) => None,
        }
    };
    routes
        .iter()
        .filter(|r| r.api == api)
        .filter_map(|r| rank(r).map(|k| (k, r)))
        .min_by_key(|(k, _)| *k)
        .map(|(_, r)| r)
}

/// The request path of an OpenAPI path, each parameter given [`PARAMETER`].
fn request_path(openapi_path: &str) -> String {
    regex::Regex::new(r"\{[^}]+\}").unwrap().replace_all(openapi_path, PARAMETER).into_owned()
}

/// Which policies grant `method path` on the API `api_id`.
fn granting(policies: &BTreeMap<String, Vec<(bool, String)>>, api_id: &str, method: &str, path: &str) -> Vec<String> {
    let arn = format!("arn:aws:execute-api:{REGION}:{ACCOUNT}:{api_id}/$default/{method}{path}");
    policies
        .iter()
        .filter(|(_, grants)| {
            grants.iter().any(|(allow, p)| *allow && arn_matches(p, &arn))
                && !grants.iter().any(|(allow, p)| !*allow && arn_matches(p, &arn))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Every operation of `openapi.yaml`: (METHOD, path).
fn openapi_routes() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(root().join("openapi.yaml")).expect("openapi.yaml");
    let doc: Value = serde_norway::from_str(&text).expect("openapi.yaml parses");
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_mapping().expect("paths") {
        for (key, _) in item.as_mapping().expect("a path item") {
            let key = key.as_str().unwrap();
            if METHODS.contains(&key) {
                out.insert((key.to_uppercase(), path.as_str().unwrap().to_string()));
            }
        }
    }
    out
}

/// What the deployed stack does with `method path`: the functions that serve it and who may
/// call it, in the words of the docs table ("served by", "who may call it").
fn derive(template: &Value, method: &str, path: &str) -> (String, String) {
    let routes = template_routes(template);
    let policies = invoke_policies(template);
    let request = request_path(path);
    let mut served = Vec::new();
    let mut callers = Vec::new();
    for (api, api_id) in APIS {
        let Some(route) = select(&routes, api, method, &request) else { continue };
        let key = match &route.path {
            Some(p) => format!("{} {p}", route.method),
            None => "$default".to_string(),
        };
        served.push(format!("{} ({api} `{key}`)", route.function));
        if !route.iam {
            let who = match (*api, route.function.as_str()) {
                ("ApiKeyApi", _) => "API key path",
                (_, "PortalFunction") => "portal",
                _ => "anyone (no authorizer)",
            };
            callers.push(who.to_string());
            continue;
        }
        let granted = granting(&policies, api_id, method, &request);
        if granted.is_empty() {
            callers.push("none".to_string());
        }
        callers.extend(granted);
    }
    if served.is_empty() {
        served.push("none".to_string());
        callers.push("none".to_string());
    }
    (served.join(", "), callers.join(", "))
}

/// The rows of the route table in `docs/security.md`: (METHOD, path) -> (served by, who may
/// call it), backticks dropped.
fn docs_table() -> BTreeMap<(String, String), (String, String)> {
    let text = std::fs::read_to_string(root().join("docs/security.md")).expect("docs/security.md");
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Routes and who may call them"))
        .expect("docs/security.md has a section \"Routes and who may call them\"");
    let mut out = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<String> = line.trim().trim_matches('|').split('|').map(|c| c.trim().replace('`', "")).collect();
        if cells.first().is_none_or(|c| c == "method" || c.starts_with("---")) {
            continue;
        }
        assert_eq!(cells.len(), 4, "docs/security.md route table: a row of 4 cells: {line}");
        let prior = out.insert((cells[0].clone(), cells[1].clone()), (cells[2].clone(), cells[3].clone()));
        assert!(prior.is_none(), "docs/security.md route table: {} {} twice", cells[0], cells[1]);
    }
    out
}

#[test]
fn execute_api_arns_match_as_iam_matches_them() {
    let api = "arn:aws:execute-api:us-east-1:123456789012:a1";
    // `*` runs across `/`: an operator's `events/*` takes every path under it, not the bare
    // collection a producer posts to.
    assert!(arn_matches(&format!("{api}/*/*/v1/events/*"), &format!("{api}/$default/POST/v1/events/e1/expunge")));
    assert!(!arn_matches(&format!("{api}/*/*/v1/events/*"), &format!("{api}/$default/POST/v1/events")));
    assert!(arn_matches(&format!("{api}/*/*/v1/endpoints"), &format!("{api}/$default/GET/x/y/v1/endpoints")));
    assert!(arn_matches(&format!("{api}/*/POST/v1/events"), &format!("{api}/$default/POST/v1/events")));
    assert!(!arn_matches(&format!("{api}/*/POST/v1/events"), &format!("{api}/$default/POST/v1/events/e1")));
    assert!(!arn_matches(&format!("{api}/*/POST/v1/events"), &format!("{api}/$default/GET/v1/events")));
    assert!(arn_matches(&format!("{api}/?default/GET/v1/x"), &format!("{api}/$default/GET/v1/x")));
    // Route selection: a one-segment parameter does not take a deeper path; `{proxy+}` does;
    // the `$default` route takes the rest.
    assert!(path_matches("/v1/events/{id}", "/v1/events/e1"));
    assert!(!path_matches("/v1/events/{id}", "/v1/events/e1/expunge"));
    assert!(!path_matches("/v1/events/{id}", "/v1/events"));
    assert!(path_matches("/v1/jobs/{proxy+}", "/v1/jobs/j1/x"));
    assert!(!path_matches("/v1/jobs/{proxy+}", "/v1/jobs"));
}

/// The route table of docs/security.md is what the template does: for every operation of
/// openapi.yaml, the function the deployed HTTP APIs route it to, and which of the template's
/// policies grant it (or that it is the API-key route, or the portal's). A route added to
/// openapi.yaml without a row, a row without a route, and a route no policy grants (or one
/// the wrong policy grants) all fail here.
#[test]
fn every_route_of_the_api_is_granted_as_the_security_page_says() {
    let template = template();
    let routes = openapi_routes();
    let derived: Vec<(&String, &String, String, String)> = routes
        .iter()
        .map(|(method, path)| {
            let (served, callers) = derive(&template, method, path);
            println!("| `{method}` | `{path}` | {served} | {callers} |");
            (method, path, served, callers)
        })
        .collect();
    let table = docs_table();
    let mut problems = Vec::new();
    for (method, path, served, callers) in derived {
        match table.get(&(method.clone(), path.clone())) {
            None => problems.push(format!(
                "{method} {path}: no row in docs/security.md's route table (derived: served by {served}; may call it: {callers})"
            )),
            Some((doc_served, doc_callers)) => {
                let derived_served = served.replace('`', "");
                if *doc_served != derived_served {
                    problems.push(format!(
                        "{method} {path}: served by {derived_served} per the template, {doc_served} per docs/security.md"
                    ));
                }
                if *doc_callers != callers {
                    problems.push(format!(
                        "{method} {path}: may be called by {callers} per the template, {doc_callers} per docs/security.md"
                    ));
                }
                if callers.split(", ").any(|c| c == "none") {
                    problems.push(format!(
                        "{method} {path}: the template serves it with IAM auth but no policy of the stack grants it"
                    ));
                }
            }
        }
    }
    for (method, path) in table.keys() {
        if !routes.contains(&(method.clone(), path.clone())) {
            problems.push(format!("docs/security.md's route table has {method} {path}, which openapi.yaml has not"));
        }
    }
    // Every route the template declares with IAM auth on a path serves some operation of
    // openapi.yaml (a route is not served that the API document does not describe).
    for r in template_routes(&template) {
        if let (Some(t), true) = (&r.path, r.iam)
            && !routes.iter().any(|(m, p)| (r.method == "ANY" || r.method == *m) && path_matches(t, &request_path(p)))
        {
            problems.push(format!("{}: the route {} {t} serves no operation of openapi.yaml", r.function, r.method));
        }
    }
    assert!(problems.is_empty(), "routes, policies and docs/security.md disagree:\n  {}", problems.join("\n  "));
}
