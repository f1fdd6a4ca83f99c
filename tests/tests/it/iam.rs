//! Least privilege, checked without AWS: every IAM action a function's role grants in
//! `infra/template.yaml` is one that function needs, and everything it needs is granted.
//!
//! "Needs" is read from the code: the Rust source of the function's crate
//! (`functions/<Binary>/src`) and of the library (`shared/src`) is parsed with `syn`, and
//! every function reachable from the crate's own functions by name (a method call reaches
//! every method of that name, so a call through the `Store` or `Notifier` trait reaches every
//! implementation; a free function call reaches the one of that name in the module its path
//! names, `portal::router` or an unqualified `router` in the same module, else every free
//! function of that name) is searched for AWS SDK operations: `.get_item()`,
//! `.transact_write_items()`, `.send_message_batch()`, `.publish()`, `.get_secret_value()`,
//! ... and the items of a transaction (`Put::builder()` and its kin, which IAM authorises as
//! `PutItem` and so on). Resolving by name over-approximates (two functions of one name are
//! both reached), never under-approximates, so a missing grant is always found; an extra
//! grant is found unless a same-named function elsewhere uses it. Test code (`#[cfg(test)]`)
//! is left out.
//!
//! One binary, two functions: the admin binary serves the admin API, or with
//! `WEBHOOKS_SERVE=portal` in the function's environment the tenant portal alone (its `main`
//! picks the router). Each function's needs are read from its own entry: `main` without the
//! router of the other ([`SERVES`]), so the internet-facing PortalFunction's role is checked
//! against what the portal's routes call, not what the admin API calls.
//!
//! Added to what the code calls, from the template itself: writing logs (every function),
//! polling an SQS event source (`ReceiveMessage`, `DeleteMessage`, `GetQueueAttributes`, the
//! actions Lambda's documentation lists for the execution role), and an SQS on-failure
//! destination (`SendMessage`).
//!
//! Also here, as it reads the repository's files without AWS too: the docs check. Every relative
//! link of the README and `docs/*.md` leads to a file (and heading), and every `make` target and
//! `cargo -p` package they name exists.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

mod leading_keys;
mod routes;

/// A function as a call names it: methods (`x.f()`, `Type::f`, `Self::f`, impl and trait
/// functions) and free functions (`f()`, `module::f`) are told apart, so a local helper does
/// not reach a store method of the same name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Callee {
    Method(String),
    Free(String),
}

impl Callee {
    fn name(&self) -> &str {
        match self {
            Callee::Method(n) | Callee::Free(n) => n,
        }
    }
}

/// A call (or a function named as a value): the callee, and for a free function the module
/// segment its path names (`portal` in `portal::router(..)`; none for a bare `router(..)`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Call {
    callee: Callee,
    scope: Option<String>,
}

impl Call {
    /// The function a path names when called or passed as a value.
    fn of_path(path: &syn::Path) -> Option<Self> {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        match segments.as_slice() {
            [.., owner, f] if owner.starts_with(char::is_uppercase) => {
                Some(Call { callee: Callee::Method(f.clone()), scope: None })
            }
            [.., module, f] => Some(Call { callee: Callee::Free(f.clone()), scope: Some(module.clone()) }),
            [f] => Some(Call { callee: Callee::Free(f.clone()), scope: None }),
            [] => None,
        }
    }

    fn method(name: String) -> Self {
        Call { callee: Callee::Method(name), scope: None }
    }
}

/// The names a pattern binds (`x`, `(a, b)`, `Some(x)`).
#[derive(Default)]
struct Bindings(BTreeSet<String>);

impl<'ast> Visit<'ast> for Bindings {
    fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
        self.0.insert(p.ident.to_string());
        syn::visit::visit_pat_ident(self, p);
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
    ("put_events", "events:PutEvents"),
    ("create_topic", "sns:CreateTopic"),
    ("get_secret_value", "secretsmanager:GetSecretValue"),
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

/// One function's body: the module it is defined in (`ui::portal`; `bin` for the function
/// crate's root), the names it calls (or names as a value) and the IAM actions of the SDK
/// operations in it. A DynamoDB `Query` is on the index named by an `.index_name(X)` in the
/// same body (every index Query in the store chains it onto `.query()`), else on the table.
#[derive(Default, Debug, Clone)]
struct Body {
    module: String,
    /// While visiting: the names parameters, `let`s, closure parameters and match arms bind,
    /// by block, so a local `router` passed along (`run(router)`) is not the function
    /// `router`.
    scopes: Vec<BTreeSet<String>>,
    calls: BTreeSet<Call>,
    actions: BTreeSet<&'static str>,
    /// The arguments of `.index_name(..)`: a constant's name or a string literal.
    indexes: BTreeSet<String>,
    /// The last segment of every path the body names (`keys::API_KEYS_PK`, `event_type_pk`),
    /// and every name a format string reads inline (`"{API_KEYS_PK}"`).
    names: BTreeSet<String>,
}

impl Body {
    fn bind(&mut self, pat: &syn::Pat) {
        let mut names = Bindings::default();
        names.visit_pat(pat);
        if let Some(scope) = self.scopes.last_mut() {
            scope.extend(names.0);
        }
    }

    /// Whether `path` is a name bound in scope (a variable, not a function).
    fn is_local(&self, path: &syn::Path) -> bool {
        path.leading_colon.is_none()
            && path.segments.len() == 1
            && self.scopes.iter().any(|s| s.contains(&path.segments[0].ident.to_string()))
    }

    /// Records the paths among `args` (functions passed as values: `.map_err(aws)`, `post(h)`),
    /// except variables.
    fn fn_arguments<'a>(&mut self, args: impl IntoIterator<Item = &'a syn::Expr>) {
        for a in args {
            if let syn::Expr::Path(p) = a
                && !self.is_local(&p.path)
            {
                self.calls.extend(Call::of_path(&p.path));
            }
        }
    }
}

impl<'ast> Visit<'ast> for Body {
    fn visit_block(&mut self, b: &'ast syn::Block) {
        self.scopes.push(BTreeSet::new());
        syn::visit::visit_block(self, b);
        self.scopes.pop();
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        // The value first: in `let router = router(app)` the call is the function's.
        if let Some(init) = &l.init {
            self.visit_local_init(init);
        }
        self.bind(&l.pat);
    }

    fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
        self.scopes.push(BTreeSet::new());
        for p in &c.inputs {
            self.bind(p);
        }
        self.visit_expr(&c.body);
        self.scopes.pop();
    }

    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        self.scopes.push(BTreeSet::new());
        self.bind(&a.pat);
        if let Some((_, guard)) = &a.guard {
            self.visit_expr(guard);
        }
        self.visit_expr(&a.body);
        self.scopes.pop();
    }

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
        self.calls.insert(Call::method(name));
        self.fn_arguments(&m.args);
        syn::visit::visit_expr_method_call(self, m);
    }

    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*c.func
            && !self.is_local(&p.path)
        {
            self.calls.extend(Call::of_path(&p.path));
        }
        self.fn_arguments(&c.args);
        syn::visit::visit_expr_call(self, c);
    }

    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        let segments: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.names.extend(segments.last().cloned());
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
                if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(l), .. }) = e {
                    let text = l.value();
                    for inline in text.split('{').skip(1) {
                        let name: String = inline.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        self.names.insert(name);
                    }
                }
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
    /// Every module of the tree (`http::ui::portal`).
    modules: BTreeSet<String>,
    /// Each module's `use` items.
    imports: HashMap<String, Vec<Import>>,
}

/// One name a `use` item binds: the path before the name, the name (`None` for a glob `*`),
/// and the name it is bound to.
type Import = (Vec<String>, Option<String>, String);

/// The imports of a `use` tree: (path, name or `None` for `*`, bound name).
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Import>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            out.push((prefix.clone(), Some(name.clone()), name));
        }
        syn::UseTree::Rename(r) => out.push((prefix.clone(), Some(r.ident.to_string()), r.rename.to_string())),
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None, String::new())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix, out);
            }
        }
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string().contains("test")))
    })
}

/// One function definition: its name and which of that name's bodies it is.
type Def = (Callee, usize);

impl Functions {
    fn add(&mut self, name: Callee, module: &str, sig: &syn::Signature, block: &syn::Block) -> Def {
        let mut body = Body { module: module.to_string(), scopes: vec![BTreeSet::new()], ..Body::default() };
        for input in &sig.inputs {
            if let syn::FnArg::Typed(t) = input {
                body.bind(&t.pat);
            }
        }
        body.visit_block(block);
        body.scopes.clear();
        let bodies = self.by_name.entry(name.clone()).or_default();
        bodies.push(body);
        (name, bodies.len() - 1)
    }

    /// Adds the functions among `items`, of `module`, to the code and their definitions to
    /// `own`.
    fn items(&mut self, items: &[syn::Item], module: &str, own: &mut BTreeSet<Def>) {
        for item in items {
            match item {
                syn::Item::Fn(f) if !is_test(&f.attrs) => {
                    own.insert(self.add(Callee::Free(f.sig.ident.to_string()), module, &f.sig, &f.block));
                }
                syn::Item::Impl(i) if !is_test(&i.attrs) => {
                    for it in &i.items {
                        if let syn::ImplItem::Fn(f) = it
                            && !is_test(&f.attrs)
                        {
                            own.insert(self.add(Callee::Method(f.sig.ident.to_string()), module, &f.sig, &f.block));
                        }
                    }
                }
                syn::Item::Trait(t) => {
                    for it in &t.items {
                        if let syn::TraitItem::Fn(f) = it
                            && let Some(block) = &f.default
                        {
                            own.insert(self.add(Callee::Method(f.sig.ident.to_string()), module, &f.sig, block));
                        }
                    }
                }
                syn::Item::Const(c) => {
                    if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(l), .. }) = &*c.expr {
                        self.consts.insert(c.ident.to_string(), l.value());
                    }
                }
                syn::Item::Mod(m) if !is_test(&m.attrs) => {
                    let inner_module = match module {
                        "" => m.ident.to_string(),
                        outer => format!("{outer}::{}", m.ident),
                    };
                    self.modules.insert(inner_module.clone());
                    if let Some((_, inner)) = &m.content {
                        self.items(inner, &inner_module, own);
                    }
                }
                syn::Item::Use(u) if !is_test(&u.attrs) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    self.imports.entry(module.to_string()).or_default().extend(leaves);
                }
                _ => {}
            }
        }
    }

    /// Parses every `.rs` file under `dir`, the crate root's module being `root` (`""` for
    /// the library, whose modules are then `api`, `ui::portal`, ...); returns the functions
    /// defined there.
    fn parse_tree(&mut self, dir: &Path, root: &str) -> BTreeSet<Def> {
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
                    // src/ui/portal.rs is `ui::portal`, src/ui/mod.rs `ui`, src/lib.rs the root.
                    let mut module: Vec<String> =
                        root.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
                    let relative = path.strip_prefix(dir).unwrap().with_extension("");
                    module.extend(relative.iter().map(|c| c.to_string_lossy().into_owned()));
                    if module.last().is_some_and(|m| ["mod", "lib", "main"].contains(&m.as_str())) {
                        module.pop();
                    }
                    self.modules.insert(module.join("::"));
                    self.items(&file.items, &module.join("::"), &mut own);
                }
            }
        }
        own
    }

    /// The definitions a call made in `module` may reach (see the module docs).
    fn targets(&self, call: &Call, module: &str) -> Vec<Def> {
        let Some(bodies) = self.by_name.get(&call.callee) else { return Vec::new() };
        let all: Vec<Def> = (0..bodies.len()).map(|i| (call.callee.clone(), i)).collect();
        if matches!(call.callee, Callee::Method(_)) {
            return all;
        }
        let named: Vec<Def> = all
            .iter()
            .filter(|(_, i)| {
                let defined_in = bodies[*i].module.as_str();
                match call.scope.as_deref() {
                    None => defined_in == module,
                    // A path through `crate`, `super` or `self` is left to the by-name rule.
                    Some("crate" | "super" | "self") => false,
                    Some(scope) => defined_in.rsplit("::").next() == Some(scope),
                }
            })
            .cloned()
            .collect();
        if !named.is_empty() || call.scope.is_some() {
            return if named.is_empty() { all } else { named };
        }
        // A bare name not defined in its module: what the module's `use` items bind it to. An
        // explicit import from another crate (`use axum::routing::get`) is no function of the
        // tree; one from a module of the tree, or a glob import of one, is the definitions of
        // that name there. Anything else (a re-export, an unknown module) keeps the by-name
        // rule.
        let name = call.callee.name();
        let imports = self.imports.get(module).map(Vec::as_slice).unwrap_or_default();
        let in_module =
            |target: &str| -> Vec<Def> { all.iter().filter(|(_, i)| bodies[*i].module == target).cloned().collect() };
        if let Some((path, _, _)) = imports.iter().find(|(_, n, bound)| n.is_some() && bound == name) {
            return match self.module_of(module, path) {
                Some(target) if !in_module(&target).is_empty() => in_module(&target),
                Some(_) => all,
                None => Vec::new(),
            };
        }
        let globbed: Vec<Def> = imports
            .iter()
            .filter(|(_, n, _)| n.is_none())
            .filter_map(|(path, _, _)| self.module_of(module, path))
            .flat_map(|target| in_module(&target))
            .collect();
        if globbed.is_empty() { all } else { globbed }
    }

    /// The module of the tree a `use` path from `module` names (`crate::a::b`, the library's
    /// `webhooks::a::b`, `super::b`, `self::b`, a child `b`), or `None` when it names another crate (its first segment is
    /// none of those). `Some` of a module the tree may not have for `crate`/`super`/`self`.
    fn module_of(&self, module: &str, path: &[String]) -> Option<String> {
        let mut parts: Vec<String> = module.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
        let rest = match path.first().map(String::as_str) {
            // `webhooks::` from a function crate: the library, whose modules are the tree's
            // root ones.
            Some("crate" | "webhooks") => {
                parts.clear();
                &path[1..]
            }
            Some("self") => &path[1..],
            Some("super") => {
                let mut rest = path;
                while rest.first().map(String::as_str) == Some("super") {
                    parts.pop();
                    rest = &rest[1..];
                }
                rest
            }
            Some(first) => {
                let child = if module.is_empty() { first.to_string() } else { format!("{module}::{first}") };
                if !self.modules.contains(&child) {
                    return None;
                }
                path
            }
            None => return None,
        };
        parts.extend(rest.iter().cloned());
        Some(parts.join("::"))
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
    fn actions_from(&self, roots: &BTreeSet<Def>) -> BTreeMap<String, Vec<String>> {
        let mut seen: HashMap<Def, Vec<String>> = HashMap::new();
        let mut queue: std::collections::VecDeque<Def> = roots.iter().cloned().collect();
        for r in roots {
            seen.insert(r.clone(), vec![r.0.name().to_string()]);
        }
        let mut out = BTreeMap::new();
        while let Some(def) = queue.pop_front() {
            let chain = seen[&def].clone();
            let body = &self.by_name[&def.0][def.1];
            for action in self.needs(body) {
                out.entry(action).or_insert_with(|| chain.clone());
            }
            for call in &body.calls {
                for target in self.targets(call, &body.module) {
                    if !seen.contains_key(&target) {
                        let mut c = chain.clone();
                        c.push(target.0.name().to_string());
                        seen.insert(target.clone(), c);
                        queue.push_back(target);
                    }
                }
            }
        }
        out
    }

    /// Every name ([`Body::names`], and every callee) a body reachable from `roots` names, as
    /// [`Functions::actions_from`] reaches them, each with one chain of function names that
    /// reaches it (for the failure message).
    fn names_from(&self, roots: &BTreeSet<Def>) -> BTreeMap<String, Vec<String>> {
        let mut seen: HashMap<Def, Vec<String>> = HashMap::new();
        let mut queue: std::collections::VecDeque<Def> = roots.iter().cloned().collect();
        for r in roots {
            seen.insert(r.clone(), vec![r.0.name().to_string()]);
        }
        let mut out = BTreeMap::new();
        while let Some(def) = queue.pop_front() {
            let chain = seen[&def].clone();
            let body = &self.by_name[&def.0][def.1];
            for name in body.names.iter().cloned().chain(body.calls.iter().map(|c| c.callee.name().to_string())) {
                out.entry(name).or_insert_with(|| chain.clone());
            }
            for call in &body.calls {
                for target in self.targets(call, &body.module) {
                    if !seen.contains_key(&target) {
                        let mut c = chain.clone();
                        c.push(target.0.name().to_string());
                        seen.insert(target.clone(), c);
                        queue.push_back(target);
                    }
                }
            }
        }
        out
    }

    /// Removes from the bodies of `main` in `module` the calls to the free functions `names`.
    fn drop_calls(&mut self, module: &str, names: &[&str]) {
        for body in self.by_name.get_mut(&Callee::Free("main".into())).into_iter().flatten() {
            if body.module == module {
                body.calls.retain(|c| !matches!(&c.callee, Callee::Free(n) if names.contains(&n.as_str())));
            }
        }
    }

    /// Whether a `main` in `module` calls the free function `name`.
    fn main_calls(&self, module: &str, name: &str) -> bool {
        self.by_name
            .get(&Callee::Free("main".into()))
            .into_iter()
            .flatten()
            .any(|b| b.module == module && b.calls.iter().any(|c| c.callee == Callee::Free(name.into())))
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
            // A Deny narrows a grant to some partitions (`dynamodb:LeadingKeys`): checked by
            // `leading_keys`.
            if st["Effect"].as_str() == Some("Deny") {
                continue;
            }
            assert_eq!(st["Effect"].as_str(), Some("Allow"), "{role}: only Allow and Deny statements are expected");
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

/// The router the admin binary's `main` serves for each `WEBHOOKS_SERVE` of the function's
/// environment (functions/admin/src/main.rs, `webhooks::config::SERVE_VAR`): the tenant
/// portal alone, else the admin API.
const SERVES: &[(Option<&str>, &str)] = &[(Some("portal"), "standalone"), (None, "admin_router")];

struct Function {
    logical_id: String,
    binary: String,
    role: String,
    /// Its `WEBHOOKS_SERVE`, if its environment sets one.
    serve: Option<String>,
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
        let serve = res["Properties"]["Environment"]["Variables"]["WEBHOOKS_SERVE"].as_str().map(String::from);
        out.push(Function { logical_id, binary, role, serve, platform });
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
    shared.parse_tree(&root().join("shared/src"), "");
    for f in &fns {
        let mut code = shared.clone();
        let roots = code.parse_tree(&root().join("functions").join(&f.binary).join("src"), "bin");
        assert!(
            roots.iter().any(|(c, _)| *c == Callee::Free("main".into())),
            "{}: functions/{}/src has a main",
            f.logical_id,
            f.binary
        );
        // A binary whose main picks a router by WEBHOOKS_SERVE: this function's entry is main
        // without the other routers.
        if SERVES.iter().any(|(_, router)| code.main_calls("bin", router)) {
            let (_, own) = SERVES
                .iter()
                .find(|(serve, _)| *serve == f.serve.as_deref())
                .unwrap_or_else(|| panic!("{}: WEBHOOKS_SERVE={:?} serves no known router", f.logical_id, f.serve));
            assert!(
                code.main_calls("bin", own),
                "{}: main serves {own} for WEBHOOKS_SERVE={:?}",
                f.logical_id,
                f.serve
            );
            let others: Vec<&str> = SERVES.iter().map(|(_, r)| *r).filter(|r| r != own).collect();
            code.drop_calls("bin", &others);
        }
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
    // `commit()` (a free function) is not the method `.commit()`; the variables `router` (a
    // receiver, an argument) are not the function `router`; `unused` and the test module are
    // not reached.
    let src = r#"
        trait Store { async fn commit(&self); }
        impl EndpointStore for Dynamo {
            async fn commit(&self) {
                let put = Put::builder().build();
                self.client.transact_write_items().transact_items(TransactWriteItem::builder().put(put).build()).send().await;
            }
        }
        fn handler(app: &App) { helper(app); let router = build(); serve(router); }
        fn build() {}
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
    code.items(&file.items, "", &mut BTreeSet::new());
    let found = code.actions_from(&BTreeSet::from([(Callee::Free("handler".into()), 0)]));
    assert_eq!(
        found.keys().map(String::as_str).collect::<Vec<_>>(),
        ["dynamodb:PutItem on table", "dynamodb:Query on index/due", "sns:Publish"]
    );
    assert_eq!(found["dynamodb:PutItem on table"], ["handler", "helper", "commit"]);
}

/// A free function call reaches the function of that name in the module its path names, or in
/// its own module when the path is bare, and every one of the name when no module matches:
/// the portal's `router` is not the admin API's.
#[test]
fn free_functions_resolve_to_the_module_their_path_names() {
    let src = r#"
        mod ui {
            mod portal {
                fn standalone() { router(); }
                fn router() { c.get_item(); }
            }
            fn routes() { portal::router(); api::router(); }
            fn elsewhere() { reexported::router(); }
        }
        mod api {
            fn router() { c.delete_item(); }
            fn get() { c.scan(); }
        }
        mod pages { pub fn create() { c.put_item(); } }
        mod other { fn create() { c.query(); } }
        mod web {
            use axum::routing::get;
            use super::pages::*;
            fn router() { get(create); }
        }
    "#;
    let mut code = Functions::default();
    code.items(&syn::parse_file(src).unwrap().items, "", &mut BTreeSet::new());
    let from = |name: &str| {
        let found = code.actions_from(&BTreeSet::from([(Callee::Free(name.into()), 0)]));
        found.into_keys().collect::<Vec<_>>()
    };
    assert_eq!(from("standalone"), ["dynamodb:GetItem on table"]);
    assert_eq!(from("routes"), ["dynamodb:DeleteItem on table", "dynamodb:GetItem on table"]);
    assert_eq!(
        from("elsewhere"),
        ["dynamodb:DeleteItem on table", "dynamodb:GetItem on table", "dynamodb:PutItem on table"]
    );
    // A name imported from another crate is none of the tree's functions; a glob import of a
    // module of the tree binds the names defined there.
    let web_router = code.by_name[&Callee::Free("router".into())].iter().position(|b| b.module == "web").unwrap();
    let found = code.actions_from(&BTreeSet::from([(Callee::Free("router".into()), web_router)]));
    assert_eq!(found.into_keys().collect::<Vec<_>>(), ["dynamodb:PutItem on table"]);
}

/// Every string under `v`, tags' values included.
fn all_strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Tagged(t) => all_strings(&t.value),
        Value::Sequence(seq) => seq.iter().flat_map(all_strings).collect(),
        Value::Mapping(m) => m.iter().flat_map(|(k, v)| all_strings(k).into_iter().chain(all_strings(v))).collect(),
        _ => Vec::new(),
    }
}

/// Issue #34 input 2: no function's environment holds a secret, since whoever may call
/// `lambda:GetFunctionConfiguration` (AWS's ReadOnlyAccess) reads it: no dynamic reference
/// (`{{resolve:secretsmanager:...}}`, `{{resolve:ssm-secure:...}}`) in the Globals' or any
/// function's variables. The portal token key goes to admin and portal as its secret's ARN
/// (`WEBHOOKS_PORTAL_SECRET_ARN: !Ref PortalTokenKey`), and Secrets Manager is granted on
/// that secret alone, read only.
#[test]
fn no_function_environment_holds_a_secret_and_the_portal_key_is_read_from_its_own_secret_only() {
    let template = template();
    let mut problems = Vec::new();
    let mut environments = vec![("Globals".to_string(), &template["Globals"]["Function"]["Environment"])];
    for f in functions(&template) {
        let env = &template["Resources"][f.logical_id.as_str()]["Properties"]["Environment"];
        environments.push((f.logical_id, env));
    }
    for (who, env) in &environments {
        for text in all_strings(env) {
            if text.contains("{{resolve:") {
                problems.push(format!("{who}: its environment resolves a secret at deploy: {text}"));
            }
            if text == "WEBHOOKS_PORTAL_SECRET" {
                problems.push(format!("{who}: WEBHOOKS_PORTAL_SECRET is no longer read"));
            }
        }
    }
    let mut readers = BTreeSet::new();
    for (who, env) in &environments {
        let value = &env["Variables"]["WEBHOOKS_PORTAL_SECRET_ARN"];
        if value.is_null() {
            continue;
        }
        readers.insert(who.as_str());
        let is_ref = matches!(value, Value::Tagged(t) if t.tag == "Ref" && t.value.as_str() == Some("PortalTokenKey"));
        if !is_ref {
            problems.push(format!("{who}: WEBHOOKS_PORTAL_SECRET_ARN is {value:?}, not !Ref PortalTokenKey"));
        }
    }
    assert_eq!(readers, BTreeSet::from(["AdminFunction", "PortalFunction"]), "the functions given the portal key");
    let resources = template["Resources"].as_mapping().expect("Resources");
    for (id, res) in resources {
        if res["Type"].as_str() != Some("AWS::IAM::Role") {
            continue;
        }
        for policy in res["Properties"]["Policies"].as_sequence().into_iter().flatten() {
            for st in policy["PolicyDocument"]["Statement"].as_sequence().into_iter().flatten() {
                let actions = strings(&st["Action"]);
                if !actions.iter().any(|a| a.starts_with("secretsmanager:")) {
                    continue;
                }
                let on_key = matches!(&st["Resource"], Value::Tagged(t) if t.tag == "Ref" && t.value.as_str() == Some("PortalTokenKey"));
                if actions != ["secretsmanager:GetSecretValue"] || !on_key {
                    problems.push(format!(
                        "{}: {actions:?} on {:?}: only secretsmanager:GetSecretValue on !Ref PortalTokenKey",
                        id.as_str().unwrap_or("?"),
                        st["Resource"]
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------- the docs

/// The README and the pages of `docs/` (with `model/README.md` and `CHANGELOG.md`) lead
/// somewhere: every relative Markdown link `[..](path#anchor)` names a file that exists and,
/// when it has an anchor into a Markdown file (or a bare `#anchor` into its own page), a
/// heading of that file whose GitHub slug is the anchor; every `make <target>` in inline
/// code or a shell code block names a target of the Makefile; every `cargo run|test|build
/// -p <package>` names a workspace package. Hand-parsed, no Markdown crate: fenced blocks by
/// their fences, inline code by its backticks.
#[test]
fn every_doc_link_leads_somewhere_and_every_command_it_names_exists() {
    let root = root();
    let mut pages = vec![root.join("README.md"), root.join("model/README.md"), root.join("CHANGELOG.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 4, "docs/*.md: {docs:?}");
    pages.extend(docs);
    let targets = make_targets(&std::fs::read_to_string(root.join("Makefile")).expect("Makefile"));
    let packages = workspace_packages(&root);
    assert!(targets.contains("test") && packages.contains("webhooks-admin"), "{targets:?} {packages:?}");

    let mut problems = Vec::new();
    let (mut links_seen, mut makes_seen, mut cargos_seen) = (0, 0, 0);
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let name = page.strip_prefix(&root).unwrap_or(page).display().to_string();
        let doc = split_markdown(&text);
        for target in links(&doc.prose) {
            links_seen += 1;
            if let Some(problem) = broken_link(page, &text, &target) {
                problems.push(format!("{name}: link ({target}): {problem}"));
            }
        }
        for command in &doc.code {
            for target in make_invocations(command) {
                makes_seen += 1;
                if !targets.contains(&target) {
                    problems.push(format!("{name}: `make {target}`: no such target in the Makefile"));
                }
            }
            for package in cargo_packages(command) {
                cargos_seen += 1;
                if !packages.contains(&package) {
                    problems.push(format!("{name}: `cargo ... -p {package}`: no such workspace package"));
                }
            }
        }
    }
    // The parsing still finds what the pages hold (it would pass vacuously otherwise).
    assert!(links_seen > 50 && makes_seen > 10 && cargos_seen > 5, "{links_seen} {makes_seen} {cargos_seen}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A page cut in two: the prose (outside code fences, inline code taken out) and the code
/// (each line of a shell code block, each inline code span, its line breaks made spaces).
struct Markdown {
    prose: Vec<String>,
    code: Vec<String>,
}

fn split_markdown(text: &str) -> Markdown {
    let mut outside = String::new();
    let mut code = Vec::new();
    let mut fence: Option<bool> = None; // Some(shell?) inside a fenced block
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = match fence {
                Some(_) => None,
                None => {
                    let lang = trimmed.trim_start_matches(['`', '~']).trim();
                    Some(matches!(lang, "" | "sh" | "bash" | "shell" | "console"))
                }
            };
            continue;
        }
        match fence {
            Some(true) => code.push(line.to_string()),
            Some(false) => {}
            None => {
                outside.push_str(line);
                outside.push('\n');
            }
        }
    }
    let mut prose = Vec::new();
    for (i, part) in outside.split('`').enumerate() {
        if i % 2 == 0 {
            prose.push(part.to_string());
        } else {
            code.push(part.replace('\n', " "));
        }
    }
    Markdown { prose, code }
}

/// The targets of the links in `prose` (`[text](target)`, `![alt](target)`), external ones
/// (`http:`, `https:`, `mailto:`) left out.
fn links(prose: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for part in prose {
        let mut rest = part.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find([')', ' ', '\n']).unwrap_or(rest.len());
            let target = &rest[..end];
            if !target.is_empty() && !["http://", "https://", "mailto:"].iter().any(|s| target.starts_with(s)) {
                out.push(target.to_string());
            }
        }
    }
    out
}

/// Why a relative link of `page` (whose text is `text`) leads nowhere, if it does not.
fn broken_link(page: &Path, text: &str, target: &str) -> Option<String> {
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let (file, file_text) = if path.is_empty() {
        (page.to_path_buf(), text.to_string())
    } else {
        let file = page.parent().expect("a page's folder").join(path);
        if !file.exists() {
            return Some(format!("{} does not exist", file.display()));
        }
        let is_md = file.extension().is_some_and(|x| x == "md");
        (file.clone(), if is_md { std::fs::read_to_string(&file).unwrap_or_default() } else { String::new() })
    };
    if anchor.is_empty() || file.extension().is_none_or(|x| x != "md") {
        return None;
    }
    let slugs = heading_slugs(&file_text);
    (!slugs.contains(anchor)).then(|| format!("no heading of {} has the slug {anchor:?}", file.display()))
}

/// GitHub's anchors for the headings of a Markdown page: the heading's text lowercased,
/// characters other than alphanumerics, spaces, hyphens and underscores dropped, spaces made
/// hyphens; a repeated slug gets `-1`, `-2`, ...
fn heading_slugs(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut slugs = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if in_fence || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        slugs.insert(if *n == 0 { slug } else { format!("{slug}-{n}") });
        *n += 1;
    }
    slugs
}

/// The Makefile's targets (`name:` at the start of a line; not `.PHONY`, not `X := y`).
fn make_targets(makefile: &str) -> BTreeSet<String> {
    let mut targets = BTreeSet::new();
    for line in makefile.lines() {
        let Some((names, after)) = line.split_once(':') else { continue };
        let is_name = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if after.starts_with('=') || names.starts_with(['\t', ' ', '#', '.']) {
            continue;
        }
        if names.split_whitespace().all(is_name) {
            targets.extend(names.split_whitespace().map(str::to_string));
        }
    }
    targets
}

/// The names of the workspace's packages: each member's `[package] name`.
fn workspace_packages(root: &Path) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).expect("workspace members");
    let mut packages = BTreeSet::new();
    for member in members.split(',').map(|m| m.trim().trim_matches('"')).filter(|m| !m.is_empty()) {
        let toml = std::fs::read_to_string(root.join(member).join("Cargo.toml")).expect("a member's Cargo.toml");
        let name = toml
            .lines()
            .find_map(|l| l.trim().strip_prefix("name").map(str::trim).and_then(|r| r.strip_prefix('=')))
            .map(|v| v.trim().trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("{member}: no package name"));
        packages.insert(name);
    }
    packages
}

/// The leading run of characters a make target or a package name can have.
fn name_prefix(token: &str) -> String {
    token
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "_-.".contains(*c))
        .collect::<String>()
        .trim_end_matches('.')
        .to_string()
}

/// The targets `make` is run with in a command line: the first word after each `make`
/// that is not a `VAR=value` or an option.
fn make_invocations(command: &str) -> Vec<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, word) in words.iter().enumerate() {
        if *word != "make" && !word.ends_with("(make") {
            continue;
        }
        if let Some(next) = words[i + 1..].iter().find(|w| !w.contains('=') && !w.starts_with('-')) {
            let target = name_prefix(next);
            if !target.is_empty() && next.starts_with(|c: char| c.is_ascii_alphabetic()) {
                out.push(target);
            }
        }
    }
    out
}

/// The packages `cargo run`, `cargo test` or `cargo build` is given with `-p`/`--package`
/// in a command line (up to the end of that cargo command).
fn cargo_packages(command: &str) -> Vec<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, word) in words.iter().enumerate() {
        if *word != "cargo" || !words.get(i + 1).is_some_and(|w| ["run", "test", "build"].contains(w)) {
            continue;
        }
        let mut rest = words[i + 2..].iter();
        while let Some(w) = rest.next() {
            if *w == "--" || w.starts_with(['#', ';', '|', '&']) {
                break;
            }
            let package = match *w {
                "-p" | "--package" => rest.next().map(|p| name_prefix(p)),
                _ => w.strip_prefix("--package=").map(name_prefix),
            };
            out.extend(package.filter(|p| !p.is_empty()));
        }
    }
    out
}

#[test]
fn the_doc_checks_read_links_slugs_make_targets_and_cargo_packages() {
    let doc = split_markdown(
        "See [a](b.md#c-d) and `make sim SEED=1` and `[x](y)`.\n```sh\ncargo run -q -p webhooks-admin -- -p no\n```\n",
    );
    assert_eq!(links(&doc.prose), ["b.md#c-d"]);
    assert_eq!(doc.code.iter().flat_map(|c| make_invocations(c)).collect::<Vec<_>>(), ["sim"]);
    assert_eq!(doc.code.iter().flat_map(|c| cargo_packages(c)).collect::<Vec<_>>(), ["webhooks-admin"]);
    let slugs = heading_slugs(
        "# Endpoint copies: one hot tenant at 10,000 deliveries a second\n```\n# not one\n```\n## A delivery's life\n## Layout\n## Layout\n",
    );
    assert_eq!(
        slugs,
        BTreeSet::from(
            ["endpoint-copies-one-hot-tenant-at-10000-deliveries-a-second", "a-deliverys-life", "layout", "layout-1"]
                .map(str::to_string)
        )
    );
    assert_eq!(
        make_targets("run:\n\tx\n.PHONY: a\nSEEDS ?= 1\nX := y\nsim bench:\n"),
        BTreeSet::from(["run", "sim", "bench"].map(str::to_string))
    );
}

// ---------------------------------------------------------------- import cycles

/// The `crate::` paths of one file of the library, outside its tests: the modules they name.
#[derive(Default)]
struct CratePaths(BTreeSet<Vec<String>>);

impl CratePaths {
    fn add_use(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.add_use(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.0.insert(prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.0.insert(prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Glob(_) => {
                self.0.insert(prefix.clone());
            }
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.add_use(prefix, t)),
        }
    }
}

impl<'ast> Visit<'ast> for CratePaths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if let syn::UseTree::Path(p) = &u.tree
            && p.ident == "crate"
        {
            self.add_use(&mut Vec::new(), &p.tree);
        }
    }
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.first().is_some_and(|s| s == "crate") {
            self.0.insert(segments[1..].to_vec());
        }
        syn::visit::visit_path(self, path);
    }
}

/// The library's modules, file by file (`store/dynamo` for shared/src/store/dynamo/mod.rs), and
/// the modules each one's code names through `crate::` paths (doc links and tests left out).
fn library_imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = root().join("shared/src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read shared/src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let module_of = |path: &Path| -> String {
        let rel = path.strip_prefix(&src).expect("under src").with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
            parts.pop();
        }
        parts.join("/")
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut imports = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let text = std::fs::read_to_string(file).expect("read a source file");
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut paths = CratePaths::default();
        paths.visit_file(&ast);
        let named: BTreeSet<String> = paths
            .0
            .iter()
            .filter_map(|p| (1..=p.len()).rev().map(|n| p[..n].join("/")).find(|m| modules.contains(m)))
            .filter(|m| *m != module && !m.is_empty())
            .collect();
        imports.insert(module, named);
    }
    imports
}

/// The groups of modules that import one another in a ring (strongly connected components of
/// more than one module), each sorted.
fn import_cycles(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // A module is in a cycle with every module that reaches it and that it reaches.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<String> = imports.get(from).into_iter().flatten().cloned().collect();
        while let Some(m) = todo.pop() {
            if seen.insert(m.clone()) {
                todo.extend(imports.get(&m).into_iter().flatten().cloned());
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = imports.keys().map(|m| (m, reach(m))).collect();
    let mut cycles: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, r) in &reaches {
        let mut ring: Vec<String> =
            r.iter().filter(|o| reaches.get(o).is_some_and(|back| back.contains(*m))).cloned().collect();
        if !ring.is_empty() {
            if !ring.contains(*m) {
                ring.push((*m).clone());
            }
            ring.sort();
            cycles.insert(ring);
        }
    }
    cycles.into_iter().collect()
}

#[test]
fn the_library_has_no_import_cycle() {
    let imports = library_imports();
    assert!(imports.len() > 20 && imports.values().map(BTreeSet::len).sum::<usize>() > 40, "too few imports read");
    assert_eq!(import_cycles(&imports), Vec::<Vec<String>>::new(), "modules that import one another in a ring");
    // The check sees a ring: one edge back from the store to the service errors would close
    // one (with every module on a path between them: the store names the domain's ids, which
    // name the errors).
    let mut broken = imports.clone();
    broken.get_mut("error").expect("error module").insert("store".into());
    broken.get_mut("store").expect("store module").insert("error".into());
    let rings = import_cycles(&broken);
    assert_eq!(rings.len(), 1, "{rings:?}");
    assert!(rings[0].contains(&"error".to_string()) && rings[0].contains(&"store".to_string()), "{rings:?}");
}

/// The library's layers, lowest first, by a module's first path segment (shared/src/lib.rs
/// draws them): a module may name its own layer and those below, never one above.
const LAYERS: [(&str, &[&str]); 6] = [
    ("base", &["config", "clock", "error", "error_text"]),
    ("domain", &["domain"]),
    ("adapters", &["store", "queue", "notify", "sender", "metrics", "bootstrap", "token_keys"]),
    ("app", &["app"]),
    ("service", &["service"]),
    ("http", &["http"]),
];

fn layer_of(module: &str) -> Option<usize> {
    let top = module.split('/').next().unwrap_or_default();
    LAYERS.iter().position(|(_, tops)| tops.contains(&top))
}

/// Every arrow from a module to one in a higher layer, as `from -> to`.
fn upward_arrows(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut up = Vec::new();
    for (from, tos) in imports {
        for to in tos {
            if let (Some(a), Some(b)) = (layer_of(from), layer_of(to))
                && b > a
            {
                up.push(format!("{from} ({}) -> {to} ({})", LAYERS[a].0, LAYERS[b].0));
            }
        }
    }
    up
}

#[test]
fn the_library_imports_only_downward() {
    let imports = library_imports();
    let unplaced: Vec<&String> = imports.keys().filter(|m| !m.is_empty() && layer_of(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules in no layer (add them to LAYERS): {unplaced:?}");
    assert_eq!(upward_arrows(&imports), Vec::<String>::new(), "imports up a layer");
    // The check sees the arrows the layout removed: the errors naming the store (base ->
    // adapters), an entity naming the store (domain -> adapters), the app naming the portal's
    // pages (app -> http).
    for (from, to) in [("error", "store"), ("domain/model", "store"), ("app", "http/ui")] {
        let mut broken = imports.clone();
        broken.get_mut(from).unwrap_or_else(|| panic!("module {from}")).insert(to.into());
        assert_eq!(upward_arrows(&broken).len(), 1, "{from} -> {to} not seen");
    }
}
