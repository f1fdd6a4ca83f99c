//! Least privilege, checked without AWS: every IAM action a function's role grants in
//! `infra/template.yaml` is one that function needs, and everything it needs is granted.
//!
//! "Needs" is read from the code: the Rust source of the function's crate
//! (`functions/<Binary>/src`) and of the library (`shared/src`) is parsed with `syn`, and
//! every function reachable from the crate's own functions by name (methods and free
//! functions alike; a call through the `Store` or `Notifier` trait reaches every
//! implementation of that name) is searched for AWS SDK operations: `.get_item()`,
//! `.transact_write_items()`, `.send_message_batch()`, `.publish()`, ... and the items of a
//! transaction (`Put::builder()` and its kin, which IAM authorises as `PutItem` and so on).
//! Resolving by name over-approximates (two functions of one name are both reached), never
//! under-approximates, so a missing grant is always found; an extra grant is found unless
//! a same-named function elsewhere uses it. Test code (`#[cfg(test)]`) is left out.
//!
//! Added to what the code calls, from the template itself: writing logs (every function),
//! polling an SQS event source (`ReceiveMessage`, `DeleteMessage`, `GetQueueAttributes`, the
//! actions Lambda's documentation lists for the execution role), and an SQS on-failure
//! destination (`SendMessage`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A function as a call names it: methods (`x.f()`, `Type::f`, `Self::f`, impl and trait
/// functions) and free functions (`f()`, `module::f`) are told apart, so a local helper does
/// not reach a store method of the same name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Callee {
    Method(String),
    Free(String),
}

impl Callee {
    /// The function a path names when called or passed as a value.
    fn of_path(path: &syn::Path) -> Option<Self> {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        match segments.as_slice() {
            [.., owner, f] if owner.starts_with(char::is_uppercase) => Some(Callee::Method(f.clone())),
            [.., f] => Some(Callee::Free(f.clone())),
            [] => None,
        }
    }

    fn name(&self) -> &str {
        match self {
            Callee::Method(n) | Callee::Free(n) => n,
        }
    }
}

/// Records the paths among `args` (functions passed as values: `.map_err(aws)`, `post(h)`).
fn fn_arguments<'a>(args: impl IntoIterator<Item = &'a syn::Expr>, calls: &mut BTreeSet<Callee>) {
    for a in args {
        if let syn::Expr::Path(p) = a {
            calls.extend(Callee::of_path(&p.path));
        }
    }
}

/// SDK fluent operations (the method on the client) and the IAM action each one needs.
const SDK_OPERATIONS: &[(&str, &str)] = &[
    ("get_item", "dynamodb:GetItem"),
    ("put_item", "dynamodb:PutItem"),
    ("update_item", "dynamodb:UpdateItem"),
    ("delete_item", "dynamodb:DeleteItem"),
    ("query", "dynamodb:Query"),
    ("scan", "dynamodb:Scan"),
    ("batch_get_item", "dynamodb:BatchGetItem"),
    ("batch_write_item", "dynamodb:BatchWriteItem"),
    ("create_table", "dynamodb:CreateTable"),
    ("describe_table", "dynamodb:DescribeTable"),
    ("update_time_to_live", "dynamodb:UpdateTimeToLive"),
    // Authorised per item (below); the call itself needs no action of its own.
    ("transact_write_items", ""),
    ("transact_get_items", "dynamodb:GetItem"),
    ("send_message", "sqs:SendMessage"),
    // SendMessageBatch is authorised as sqs:SendMessage.
    ("send_message_batch", "sqs:SendMessage"),
    ("receive_message", "sqs:ReceiveMessage"),
    ("delete_message", "sqs:DeleteMessage"),
    ("delete_message_batch", "sqs:DeleteMessage"),
    ("change_message_visibility", "sqs:ChangeMessageVisibility"),
    ("get_queue_attributes", "sqs:GetQueueAttributes"),
    ("get_queue_url", "sqs:GetQueueUrl"),
    ("create_queue", "sqs:CreateQueue"),
    ("publish", "sns:Publish"),
    ("create_topic", "sns:CreateTopic"),
];

/// The items of a `TransactWriteItems` (`aws_sdk_dynamodb::types::X::builder()`), each
/// authorised as its single-item action.
const TRANSACTION_ITEMS: &[(&str, &str)] = &[
    ("Put", "dynamodb:PutItem"),
    ("Update", "dynamodb:UpdateItem"),
    ("Delete", "dynamodb:DeleteItem"),
    ("ConditionCheck", "dynamodb:ConditionCheckItem"),
];

/// What Lambda itself does with the execution role of a function with an SQS event source.
const SQS_EVENT_SOURCE: &[&str] = &["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"];

/// What the Lambda runtime does for every function: its log stream in its log group.
const LOGS: &[&str] = &["logs:CreateLogStream", "logs:PutLogEvents"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

// ---------------------------------------------------------------- the code

/// One function's body: the names it calls (or names as a value) and the IAM actions of the
/// SDK operations in it. A DynamoDB `Query` is on the index named by an `.index_name(X)` in
/// the same body (every index Query in the store chains it onto `.query()`), else on the
/// table.
#[derive(Default, Debug, Clone)]
struct Body {
    calls: BTreeSet<Callee>,
    actions: BTreeSet<&'static str>,
    /// The arguments of `.index_name(..)`: a constant's name or a string literal.
    indexes: BTreeSet<String>,
}

impl<'ast> Visit<'ast> for Body {
    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        let name = m.method.to_string();
        if name == "index_name"
            && let Some(arg) = m.args.first()
        {
            match arg {
                syn::Expr::Path(p) => self.indexes.insert(p.path.segments.last().unwrap().ident.to_string()),
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(l), .. }) => self.indexes.insert(l.value()),
                _ => panic!("an index_name(..) whose argument is neither a constant nor a literal"),
            };
        }
        if let Some((_, action)) = SDK_OPERATIONS.iter().find(|(op, _)| *op == name)
            && !action.is_empty()
        {
            self.actions.insert(action);
        }
        self.calls.insert(Callee::Method(name));
        fn_arguments(&m.args, &mut self.calls);
        syn::visit::visit_expr_method_call(self, m);
    }

    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*c.func {
            self.calls.extend(Callee::of_path(&p.path));
        }
        fn_arguments(&c.args, &mut self.calls);
        syn::visit::visit_expr_call(self, c);
    }

    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        let segments: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let [.., ty, last] = segments.as_slice()
            && last == "builder"
            && let Some((_, action)) = TRANSACTION_ITEMS.iter().find(|(t, _)| t == ty)
        {
            self.actions.insert(action);
        }
        syn::visit::visit_expr_path(self, p);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // format!-like macros: their arguments are expressions; others are skipped.
        let args = mac.parse_body_with(syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated);
        if let Ok(args) = args {
            for e in &args {
                self.visit_expr(e);
            }
        }
    }
}

/// Every non-test function of a source tree, by name, and its string constants.
#[derive(Default, Clone)]
struct Functions {
    by_name: HashMap<Callee, Vec<Body>>,
    consts: HashMap<String, String>,
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string().contains("test")))
    })
}

impl Functions {
    fn add(&mut self, name: Callee, block: &syn::Block) {
        let mut body = Body::default();
        body.visit_block(block);
        self.by_name.entry(name).or_default().push(body);
    }

    fn items(&mut self, items: &[syn::Item], own: &mut BTreeSet<Callee>) {
        for item in items {
            match item {
                syn::Item::Fn(f) if !is_test(&f.attrs) => {
                    own.insert(Callee::Free(f.sig.ident.to_string()));
                    self.add(Callee::Free(f.sig.ident.to_string()), &f.block);
                }
                syn::Item::Impl(i) if !is_test(&i.attrs) => {
                    for it in &i.items {
                        if let syn::ImplItem::Fn(f) = it
                            && !is_test(&f.attrs)
                        {
                            own.insert(Callee::Method(f.sig.ident.to_string()));
                            self.add(Callee::Method(f.sig.ident.to_string()), &f.block);
                        }
                    }
                }
                syn::Item::Trait(t) => {
                    for it in &t.items {
                        if let syn::TraitItem::Fn(f) = it
                            && let Some(block) = &f.default
                        {
                            self.add(Callee::Method(f.sig.ident.to_string()), block);
                        }
                    }
                }
                syn::Item::Const(c) => {
                    if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(l), .. }) = &*c.expr {
                        self.consts.insert(c.ident.to_string(), l.value());
                    }
                }
                syn::Item::Mod(m) if !is_test(&m.attrs) => {
                    if let Some((_, inner)) = &m.content {
                        self.items(inner, own);
                    }
                }
                _ => {}
            }
        }
    }

    /// Parses every `.rs` file under `dir`; returns the names of the functions defined there.
    fn parse_tree(&mut self, dir: &Path) -> BTreeSet<Callee> {
        let mut own = BTreeSet::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    self.items(&file.items, &mut own);
                }
            }
        }
        own
    }

    /// What a body needs: its IAM actions, DynamoDB ones with their resource
    /// (`dynamodb:GetItem on table`, `dynamodb:Query on index/due`).
    fn needs(&self, body: &Body) -> Vec<String> {
        let mut out = Vec::new();
        for action in &body.actions {
            match *action {
                "dynamodb:Query" if !body.indexes.is_empty() => {
                    for ix in &body.indexes {
                        let name = self.consts.get(ix).unwrap_or(ix);
                        out.push(format!("{action} on index/{name}"));
                    }
                }
                a if a.starts_with("dynamodb:") => out.push(format!("{a} on table")),
                a => out.push(a.to_string()),
            }
        }
        out
    }

    /// The IAM actions of every SDK operation reachable from `roots` (as [`Functions::needs`]
    /// writes them), each with one chain of function names that reaches it (for the failure
    /// message).
    fn actions_from(&self, roots: &BTreeSet<Callee>) -> BTreeMap<String, Vec<String>> {
        let mut seen: HashMap<Callee, Vec<String>> = HashMap::new();
        let mut queue: std::collections::VecDeque<Callee> = roots.iter().cloned().collect();
        for r in roots {
            seen.insert(r.clone(), vec![r.name().to_string()]);
        }
        let mut out = BTreeMap::new();
        while let Some(name) = queue.pop_front() {
            let chain = seen[&name].clone();
            for body in self.by_name.get(&name).into_iter().flatten() {
                for action in self.needs(body) {
                    out.entry(action).or_insert_with(|| chain.clone());
                }
                for call in &body.calls {
                    if self.by_name.contains_key(call) && !seen.contains_key(call) {
                        let mut c = chain.clone();
                        c.push(call.name().to_string());
                        seen.insert(call.clone(), c);
                        queue.push_back(call.clone());
                    }
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------- the template

fn template() -> Value {
    let text = std::fs::read_to_string(root().join("infra/template.yaml")).expect("infra/template.yaml");
    serde_norway::from_str(&text).expect("the template parses")
}

/// The value under a short-form tag (`!GetAtt X.Arn` -> "X.Arn"), or the value itself.
fn untag(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => &t.value,
        other => other,
    }
}

fn strings(v: &Value) -> Vec<String> {
    match untag(v) {
        Value::String(s) => vec![s.clone()],
        Value::Sequence(seq) => seq.iter().filter_map(|x| x.as_str().map(String::from)).collect(),
        _ => Vec::new(),
    }
}

/// A statement's DynamoDB resource as [`Functions::needs`] names it: `!GetAtt Table.Arn` is
/// `table`, `!Sub ${Table.Arn}/index/due` is `index/due`.
fn dynamodb_resource(r: &str) -> String {
    match r.strip_prefix("${Table.Arn}/") {
        Some(index) => index.to_string(),
        None if r == "Table.Arn" => "table".to_string(),
        None => panic!("a DynamoDB statement on {r}, which is neither the table nor one of its indexes"),
    }
}

/// What one function's role grants: action (DynamoDB ones with their resource, as
/// [`Functions::needs`] writes them) -> the statement ids granting it.
fn granted(template: &Value, role: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let policies = template["Resources"][role]["Properties"]["Policies"].as_sequence().expect("the role has Policies");
    for policy in policies {
        for st in policy["PolicyDocument"]["Statement"].as_sequence().expect("statements") {
            assert_eq!(st["Effect"].as_str(), Some("Allow"), "{role}: only Allow statements are expected");
            let sid = st["Sid"].as_str().unwrap_or("(no Sid)").to_string();
            let resources: Vec<String> = match untag(&st["Resource"]) {
                Value::Sequence(seq) => seq.iter().flat_map(strings).collect(),
                other => strings(other),
            };
            for action in strings(&st["Action"]) {
                if action.starts_with("dynamodb:") {
                    for r in &resources {
                        out.entry(format!("{action} on {}", dynamodb_resource(r))).or_default().push(sid.clone());
                    }
                } else {
                    out.entry(action).or_default().push(sid.clone());
                }
            }
        }
    }
    out
}

struct Function {
    logical_id: String,
    binary: String,
    role: String,
    /// Actions Lambda needs for this function whatever its code does, and why.
    platform: BTreeMap<&'static str, &'static str>,
}

fn functions(template: &Value) -> Vec<Function> {
    let resources = template["Resources"].as_mapping().expect("Resources");
    let mut out = Vec::new();
    for (id, res) in resources {
        if res["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let logical_id = id.as_str().unwrap().to_string();
        let binary = res["Metadata"]["BuildProperties"]["Binary"].as_str().expect("BuildProperties.Binary").to_string();
        let role = untag(&res["Properties"]["Role"]).as_str().expect("Role: !GetAtt X.Arn");
        let role = role.strip_suffix(".Arn").expect("Role: !GetAtt X.Arn").to_string();
        let mut platform = BTreeMap::new();
        for a in LOGS {
            platform.insert(*a, "the Lambda runtime writes the function's logs");
        }
        let events = res["Properties"]["Events"].as_mapping().cloned().unwrap_or_default();
        if events.values().any(|e| e["Type"].as_str() == Some("SQS")) {
            for a in SQS_EVENT_SOURCE {
                platform.insert(*a, "the SQS event source mapping polls with the function's role");
            }
        }
        if res["Properties"]["EventInvokeConfig"]["DestinationConfig"]["OnFailure"]["Type"].as_str() == Some("SQS") {
            platform.insert("sqs:SendMessage", "the on-failure destination is an SQS queue");
        }
        out.push(Function { logical_id, binary, role, platform });
    }
    out
}

// ---------------------------------------------------------------- the test

#[test]
fn every_granted_action_is_one_the_function_needs_and_every_need_is_granted() {
    let template = template();
    let fns = functions(&template);
    let binaries: BTreeSet<&str> = fns.iter().map(|f| f.binary.as_str()).collect();
    assert_eq!(
        binaries,
        BTreeSet::from(["admin", "deliver", "ingest", "sweeper"]),
        "the template's functions are the four Lambda crates"
    );
    let mut problems = Vec::new();
    let mut shared = Functions::default();
    shared.parse_tree(&root().join("shared/src"));
    for f in &fns {
        let mut code = shared.clone();
        let roots = code.parse_tree(&root().join("functions").join(&f.binary).join("src"));
        assert!(
            roots.contains(&Callee::Free("main".into())),
            "{}: functions/{}/src has a main",
            f.logical_id,
            f.binary
        );
        let called = code.actions_from(&roots);
        let grants = granted(&template, &f.role);

        let mut needed: BTreeMap<String, String> = BTreeMap::new();
        for (action, chain) in &called {
            needed.insert(action.clone(), format!("the code calls it: {}", chain.join(" -> ")));
        }
        for (action, why) in &f.platform {
            needed.entry(action.to_string()).or_insert_with(|| why.to_string());
        }
        for (action, why) in &needed {
            if !grants.contains_key(action) {
                problems.push(format!("{} ({}): {action} is not granted, but {why}", f.logical_id, f.role));
            }
        }
        for (action, sids) in &grants {
            if !needed.contains_key(action) {
                problems.push(format!(
                    "{} ({}): {action} is granted (statement {}) but nothing calls it",
                    f.logical_id,
                    f.role,
                    sids.join(", ")
                ));
            }
        }
        println!("{}:", f.logical_id);
        for (action, why) in &needed {
            println!("  {action}: {why}");
        }
    }
    assert!(problems.is_empty(), "IAM policies and the code disagree:\n  {}", problems.join("\n  "));
}

/// Every queue a function's environment names (`WEBHOOKS_QUEUE_URL`, `WEBHOOKS_SLOW_QUEUE_URL`:
/// `!Ref X`, its own or the Globals'), its role may send to (`sqs:SendMessage` on
/// `!GetAtt X.Arn`): the check above matches actions, not which queue they are granted on, and
/// a function routes attempts to every queue it is given (ingest sends attempt 1 of a slow
/// endpoint to the slow lane).
#[test]
fn every_queue_a_function_is_given_it_may_send_to() {
    let template = template();
    let globals = &template["Globals"]["Function"]["Environment"]["Variables"];
    let mut problems = Vec::new();
    let mut checked = 0;
    for f in functions(&template) {
        let own = &template["Resources"][f.logical_id.as_str()]["Properties"]["Environment"]["Variables"];
        let mut sendable = BTreeSet::new();
        let policies =
            template["Resources"][f.role.as_str()]["Properties"]["Policies"].as_sequence().expect("Policies");
        for policy in policies {
            for st in policy["PolicyDocument"]["Statement"].as_sequence().expect("statements") {
                if strings(&st["Action"]).iter().any(|a| a == "sqs:SendMessage") {
                    match untag(&st["Resource"]) {
                        Value::Sequence(seq) => sendable.extend(seq.iter().flat_map(strings)),
                        other => sendable.extend(strings(other)),
                    }
                }
            }
        }
        for var in ["WEBHOOKS_QUEUE_URL", "WEBHOOKS_SLOW_QUEUE_URL"] {
            let value = if own.get(var).is_some() { &own[var] } else { &globals[var] };
            let Some(queue) = untag(value).as_str() else { continue };
            checked += 1;
            if !sendable.contains(&format!("{queue}.Arn")) {
                problems
                    .push(format!("{}: {var} is {queue}, but its role may not sqs:SendMessage on it", f.logical_id));
            }
        }
    }
    assert!(checked >= 6, "the functions' queues were found ({checked})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The analysis itself finds calls, through a trait and a transaction, and leaves tests out.
#[test]
fn the_call_analysis_follows_calls_and_transactions_and_skips_tests() {
    // `commit()` (a free function) is not the method `.commit()`; the variable `router` is not
    // the function `router`; `unused` and the test module are not reached.
    let src = r#"
        trait Store { async fn commit(&self); }
        impl Store for Dynamo {
            async fn commit(&self) {
                let put = Put::builder().build();
                self.client.transact_write_items().transact_items(TransactWriteItem::builder().put(put).build()).send().await;
            }
        }
        fn handler(app: &App) { helper(app); }
        fn helper(app: &App) { app.store.commit(); format!("{}", app.sns.publish()); due(app); wrap(r); }
        const DUE_INDEX: &str = "due";
        fn due(app: &App) { app.client.query().index_name(DUE_INDEX).send(); }
        fn unused(c: &Client) { c.delete_item(); }
        fn commit() { c.scan(); }
        fn wrap(router: Router) { router.route(); }
        fn router() { c.create_table(); }
        #[cfg(test)]
        mod tests { fn handler() { c.scan(); } }
    "#;
    let mut code = Functions::default();
    let file = syn::parse_file(src).unwrap();
    code.items(&file.items, &mut BTreeSet::new());
    let found = code.actions_from(&BTreeSet::from([Callee::Free("handler".into())]));
    assert_eq!(
        found.keys().map(String::as_str).collect::<Vec<_>>(),
        ["dynamodb:PutItem on table", "dynamodb:Query on index/due", "sns:Publish"]
    );
    assert_eq!(found["dynamodb:PutItem on table"], ["handler", "helper", "commit"]);
}
