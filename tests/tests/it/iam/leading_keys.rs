//! The partitions a role may not write (`dynamodb:LeadingKeys` in a `Deny` of its policy) are
//! ones its function's code never builds a key of, so the Deny cannot refuse a write the
//! function makes (an AccessDenied in production only: LocalStack does not enforce IAM).
//!
//! A partition the template denies is tied to the key builder of `shared/src/store/keys.rs`
//! that makes it ([`BUILDERS`]: the builder's value must match the denied pattern, and no other
//! file of `shared/src` holds the partition's literal prefix, so no key of it is built
//! elsewhere). A function writes a partition only with a key its code built, so if nothing
//! reachable from the function's entry (as `iam.rs` reaches it: by name, over-approximating)
//! names the builder, the function reads and writes nothing there. Both ways: a role is denied
//! exactly the partitions of [`builders`] its function's code never builds a key of (one it
//! only reads, such as the portal's catalog page reading `EVENT_TYPES`, stays allowed: the
//! analysis does not tell reads from writes).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{Callee, Functions, SERVES, functions, root, template, untag};
use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Each partition a role may be denied: its `dynamodb:LeadingKeys` pattern (IAM `StringLike`:
/// `*` any run of characters), the name of its builder in `store::keys`, and the builder's
/// value for one input.
fn builders() -> Vec<(&'static str, &'static str, String)> {
    use webhooks::store::keys;
    vec![
        ("API_KEYS", "API_KEYS_PK", keys::API_KEYS_PK.to_string()),
        ("EVENT_TYPES", "EVENT_TYPES_PK", keys::EVENT_TYPES_PK.to_string()),
        ("EVENT_TYPE#*", "event_type_pk", keys::event_type_pk("order.created")),
    ]
}

/// IAM `StringLike`: `*` any run of characters, `?` any one.
fn like(pattern: &str, value: &str) -> bool {
    let re: String = pattern
        .chars()
        .map(|c| match c {
            '*' => ".*".to_string(),
            '?' => ".".to_string(),
            other => regex::escape(&other.to_string()),
        })
        .collect();
    regex::Regex::new(&format!("^{re}$")).unwrap().is_match(value)
}

/// A role's Deny statements on the table with a `dynamodb:LeadingKeys` condition: their
/// actions and the partitions (patterns) they deny.
fn denied(template: &Value, role: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let mut out = Vec::new();
    let policies = template["Resources"][role]["Properties"]["Policies"].as_sequence().expect("Policies");
    for policy in policies {
        for st in policy["PolicyDocument"]["Statement"].as_sequence().expect("statements") {
            if st["Effect"].as_str() != Some("Deny") {
                continue;
            }
            assert_eq!(untag(&st["Resource"]).as_str(), Some("Table.Arn"), "{role}: a Deny on the table only");
            let cond = &st["Condition"]["ForAnyValue:StringLike"]["dynamodb:LeadingKeys"];
            let keys: Vec<String> = cond
                .as_sequence()
                .expect("ForAnyValue:StringLike dynamodb:LeadingKeys: [..]")
                .iter()
                .map(|k| k.as_str().unwrap().to_string())
                .collect();
            let actions = super::strings(&st["Action"]);
            out.push((actions, keys));
        }
    }
    out
}

#[test]
fn a_role_is_denied_only_partitions_its_code_never_builds_a_key_of() {
    let template = template();
    let builders = builders();
    // The builders are where their partitions' keys come from: each builds a value its pattern
    // matches, and no other file of the library spells the partition's literal prefix.
    for (pattern, name, value) in &builders {
        assert!(like(pattern, value), "store::keys::{name} builds {value}, which {pattern} does not match");
        let prefix = pattern.trim_end_matches('*');
        let mut stack = vec![root().join("shared/src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("store/keys.rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    assert!(
                        !text.contains(&format!("\"{prefix}")),
                        "{} spells the partition prefix {prefix:?}: build it with store::keys::{name}",
                        path.display()
                    );
                }
            }
        }
    }
    let mut shared = Functions::default();
    shared.parse_tree(&root().join("shared/src"), "");
    let mut problems = Vec::new();
    for f in functions(&template) {
        let mut code = shared.clone();
        let roots = code.parse_tree(&root().join("functions").join(&f.binary).join("src"), "bin");
        assert!(roots.iter().any(|(c, _)| *c == Callee::Free("main".into())), "{}: a main", f.logical_id);
        if SERVES.iter().any(|(_, router)| code.main_calls("bin", router)) {
            let (_, own) = SERVES.iter().find(|(serve, _)| *serve == f.serve.as_deref()).expect("a router");
            let others: Vec<&str> = SERVES.iter().map(|(_, r)| *r).filter(|r| r != own).collect();
            code.drop_calls("bin", &others);
        }
        let reached = code.names_from(&roots);
        let never: Vec<&str> =
            builders.iter().filter(|(_, name, _)| !reached.contains_key(*name)).map(|(p, _, _)| *p).collect();
        println!("{} ({}): never builds a key of {never:?}", f.logical_id, f.role);
        for (_, name, _) in &builders {
            if let Some(chain) = reached.get(*name) {
                println!("  reaches {name}: {}", chain.join(" -> "));
            }
        }
        // Where the analysis proves a role never builds a key of a partition, the role is
        // denied writing it.
        let denies: BTreeSet<String> = denied(&template, &f.role).into_iter().flat_map(|(_, keys)| keys).collect();
        for p in &never {
            if !denies.contains(*p) {
                problems.push(format!(
                    "{} ({}): never builds a key of {p}, but may write it (add it to its NotKeysNorCatalog Deny)",
                    f.role, f.logical_id
                ));
            }
        }
        let by_pattern: BTreeMap<&str, &str> = builders.iter().map(|(p, n, _)| (*p, *n)).collect();
        for (actions, keys) in denied(&template, &f.role) {
            for a in &actions {
                assert!(
                    ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"]
                        .contains(&a.as_str()),
                    "{}: a LeadingKeys Deny of {a}; writes only are expected",
                    f.role
                );
            }
            for k in keys {
                match by_pattern.get(k.as_str()) {
                    None => problems.push(format!(
                        "{}: denies partition {k}, which no builder of BUILDERS makes (add its builder there)",
                        f.role
                    )),
                    Some(name) if reached.contains_key(*name) => problems.push(format!(
                        "{} ({}): denies writes to partition {k}, but its code reaches store::keys::{name}: {}",
                        f.role,
                        f.logical_id,
                        reached[*name].join(" -> ")
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    assert!(problems.is_empty(), "LeadingKeys denials and the code disagree:\n  {}", problems.join("\n  "));
}
