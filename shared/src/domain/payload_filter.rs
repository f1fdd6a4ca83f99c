//! Payload filters: an endpoint's `filter`, a JSON object matched against each event's
//! payload at fan-out. An event the filter rejects makes no delivery for that endpoint (and
//! counts nothing against it).
//!
//! The language (Hookdeck Outpost's operator set):
//! - an object's keys are field names, combined with AND: `{"currency": "EUR", "amount": {"$gte": 100}}`;
//! - a value is a literal (equality, JSON equality: `1` equals `1.0`, arrays and objects
//!   compare whole; numbers compare by value, integers exactly, see [`compare_numbers`]), an operator object (every key starting with `$`), or a nested filter
//!   for a nested field (`{"customer": {"country": "DE"}}`);
//! - operators: `$eq`, `$neq`, `$in` and `$nin` (a list), `$gt`, `$gte`, `$lt`, `$lte`
//!   (numbers with numbers, strings with strings by code point; anything else does not
//!   match), `$exists` (true or false), `$startsWith` (a string); several in one object all
//!   hold;
//! - `$and` and `$or` take a list of filters, `$not` one filter, anywhere a field could be;
//!   under a field's name they take that field's conditions instead
//!   (`{"amount": {"$not": {"$gte": 100}}}`, `{"amount": {"$or": [{"$lt": 10}, {"$gt": 99}]}}`).
//!
//! A missing field (or a nested filter on something that is not an object) matches only
//! `$exists: false`, `$neq` and `$nin`, so `{"$not": F}` and F never both match.
//!
//! Bounds: at most [`MAX_FILTER_BYTES`] of JSON and [`MAX_FILTER_DEPTH`] levels of nesting,
//! so matching costs at most a few thousand comparisons per endpoint and event.

use serde_json::{Map, Value};

/// Most bytes of a filter's JSON: 4,096 (it is stored on the endpoint item, which deliver
/// reads before every attempt: within one 4 KB read unit with the rest in the usual case).
pub const MAX_FILTER_BYTES: usize = 4096;
/// Most levels of nested objects and lists in a filter: 10.
pub const MAX_FILTER_DEPTH: usize = 10;

/// A filter that does not hold: where (a path such as `filter.amount.$gte`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FilterError {
    /// The failing part's path, from `filter`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn bad(path: &str, message: impl Into<String>) -> FilterError {
    FilterError { path: path.to_string(), message: message.into() }
}

/// Checks a filter as a create or PATCH gives it: an object within the bounds, every
/// operator known and given the right kind of operand.
///
/// # Errors
/// [`FilterError`] naming the first part that does not hold.
pub fn check(filter: &Value) -> Result<(), FilterError> {
    let Value::Object(object) = filter else {
        return Err(bad("filter", "must be an object of field names to conditions, or null"));
    };
    let bytes = filter.to_string().len();
    if bytes > MAX_FILTER_BYTES {
        return Err(bad("filter", format!("{bytes} bytes is over the limit of {MAX_FILTER_BYTES}")));
    }
    if depth(filter) > MAX_FILTER_DEPTH {
        return Err(bad("filter", format!("nests deeper than {MAX_FILTER_DEPTH} levels")));
    }
    check_filter("filter", object)
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn is_operator_object(o: &Map<String, Value>) -> bool {
    !o.is_empty() && o.keys().all(|k| k.starts_with('$'))
}

fn check_filter(path: &str, filter: &Map<String, Value>) -> Result<(), FilterError> {
    for (key, value) in filter {
        let at = format!("{path}.{key}");
        match key.as_str() {
            "$and" | "$or" => {
                let Value::Array(items) = value else {
                    return Err(bad(&at, "must be a list of filters"));
                };
                if items.is_empty() {
                    return Err(bad(&at, "must not be empty"));
                }
                for (i, item) in items.iter().enumerate() {
                    let Value::Object(f) = item else {
                        return Err(bad(&format!("{at}[{i}]"), "must be a filter (an object)"));
                    };
                    check_filter(&format!("{at}[{i}]"), f)?;
                }
            }
            "$not" => {
                let Value::Object(f) = value else {
                    return Err(bad(&at, "must be a filter (an object)"));
                };
                check_filter(&at, f)?;
            }
            k if k.starts_with('$') => {
                return Err(bad(&at, "is not an operator here: a field's conditions go under its name"));
            }
            _ => check_condition(&at, value)?,
        }
    }
    Ok(())
}

fn check_condition(path: &str, condition: &Value) -> Result<(), FilterError> {
    match condition {
        Value::Object(o) if is_operator_object(o) => {
            for (op, operand) in o {
                let at = format!("{path}.{op}");
                match op.as_str() {
                    "$eq" | "$neq" => {}
                    "$in" | "$nin" if operand.is_array() => {}
                    "$in" | "$nin" => return Err(bad(&at, "must be a list")),
                    "$gt" | "$gte" | "$lt" | "$lte" if operand.is_number() || operand.is_string() => {}
                    "$gt" | "$gte" | "$lt" | "$lte" => return Err(bad(&at, "must be a number or a string")),
                    "$exists" if operand.is_boolean() => {}
                    "$exists" => return Err(bad(&at, "must be true or false")),
                    "$startsWith" if operand.is_string() => {}
                    "$startsWith" => return Err(bad(&at, "must be a string")),
                    "$not" => check_condition(&at, operand)?,
                    "$and" | "$or" => {
                        let Some(items) = operand.as_array().filter(|i| !i.is_empty()) else {
                            return Err(bad(&at, "must be a non-empty list of conditions"));
                        };
                        for (i, item) in items.iter().enumerate() {
                            check_condition(&format!("{at}[{i}]"), item)?;
                        }
                    }
                    _ => {
                        return Err(bad(
                            &at,
                            "is not an operator ($eq, $neq, $in, $nin, $gt, $gte, $lt, $lte, $exists, $startsWith, $and, $or, $not)",
                        ));
                    }
                }
            }
            Ok(())
        }
        Value::Object(o) if o.keys().any(|k| k.starts_with('$') && !matches!(k.as_str(), "$and" | "$or" | "$not")) => {
            Err(bad(path, "mixes operators with field names"))
        }
        Value::Object(nested) => check_filter(path, nested),
        _ => Ok(()),
    }
}

/// Whether `payload` passes `filter` (a filter [`check`] accepted; anything else it does
/// not know matches nothing).
pub fn matches(filter: &Value, payload: &Value) -> bool {
    match filter {
        Value::Object(f) => matches_filter(f, Some(payload)),
        _ => false,
    }
}

/// `target` is the value the filter's keys are looked up in (`None`: missing).
fn matches_filter(filter: &Map<String, Value>, target: Option<&Value>) -> bool {
    filter.iter().all(|(key, value)| match key.as_str() {
        "$and" => value.as_array().is_some_and(|fs| fs.iter().all(|f| sub(f, target))),
        "$or" => value.as_array().is_some_and(|fs| fs.iter().any(|f| sub(f, target))),
        "$not" => !sub(value, target),
        field => condition(value, target.and_then(|t| t.as_object()).and_then(|o| o.get(field))),
    })
}

fn sub(filter: &Value, target: Option<&Value>) -> bool {
    filter.as_object().is_some_and(|f| matches_filter(f, target))
}

/// Whether `field` (`None`: missing) meets `condition`.
fn condition(condition: &Value, field: Option<&Value>) -> bool {
    match condition {
        Value::Object(o) if is_operator_object(o) => o.iter().all(|(op, operand)| operator(op, operand, field)),
        Value::Object(nested) => field.is_some_and(Value::is_object) && matches_filter(nested, field),
        literal => field.is_some_and(|f| equal(f, literal)),
    }
}

fn operator(op: &str, operand: &Value, field: Option<&Value>) -> bool {
    let listed = || operand.as_array().is_some_and(|items| field.is_some_and(|f| items.iter().any(|i| equal(f, i))));
    match op {
        "$eq" => field.is_some_and(|f| equal(f, operand)),
        "$neq" => !field.is_some_and(|f| equal(f, operand)),
        "$in" => listed(),
        "$nin" => !listed(),
        "$gt" => order(field, operand).is_some_and(std::cmp::Ordering::is_gt),
        "$gte" => order(field, operand).is_some_and(std::cmp::Ordering::is_ge),
        "$lt" => order(field, operand).is_some_and(std::cmp::Ordering::is_lt),
        "$lte" => order(field, operand).is_some_and(std::cmp::Ordering::is_le),
        "$exists" => operand.as_bool() == Some(field.is_some()),
        "$startsWith" => {
            matches!((field, operand), (Some(Value::String(f)), Value::String(p)) if f.starts_with(p.as_str()))
        }
        "$not" => !condition(operand, field),
        "$and" => operand.as_array().is_some_and(|cs| cs.iter().all(|c| condition(c, field))),
        "$or" => operand.as_array().is_some_and(|cs| cs.iter().any(|c| condition(c, field))),
        _ => false,
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`; see [`compare_numbers`]).
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == Some(std::cmp::Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

fn order(field: Option<&Value>, operand: &Value) -> Option<std::cmp::Ordering> {
    match (field?, operand) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => Some(x.as_str().cmp(y.as_str())),
        _ => None,
    }
}

/// An integer of JSON (`i64` or `u64` as serde_json holds it), widened so both fit.
fn integer(n: &serde_json::Number) -> Option<i128> {
    n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from))
}

/// Numbers by their mathematical value: two integers exactly (so `9007199254740993` is not
/// `9007199254740992`, as it would be as `f64`s: 2^53 + 1 has no `f64`), an integer and a
/// float without rounding the integer, two floats as `f64`s. `None` only for a NaN, which
/// JSON cannot carry.
pub fn compare_numbers(x: &serde_json::Number, y: &serde_json::Number) -> Option<std::cmp::Ordering> {
    match (integer(x), integer(y)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        (Some(a), None) => integer_to_float(a, y.as_f64()?),
        (None, Some(b)) => integer_to_float(b, x.as_f64()?).map(std::cmp::Ordering::reverse),
        (None, None) => x.as_f64()?.partial_cmp(&y.as_f64()?),
    }
}

/// `a` against `f` exactly: every integer JSON holds is within ±2^127, and an `f64` there
/// truncates to an `i128` without loss, its fraction then deciding a tie.
fn integer_to_float(a: i128, f: f64) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    const TWO_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    if f.is_nan() {
        return None;
    }
    if f >= TWO_127 {
        return Some(Ordering::Less);
    }
    if f < -TWO_127 {
        return Some(Ordering::Greater);
    }
    // In range: the truncation is exact (an f64 of this size is an integer or has a fraction
    // the cast drops; no rounding).
    let whole = f.trunc() as i128;
    Some(a.cmp(&whole).then_with(|| 0.0f64.partial_cmp(&f.fract()).unwrap_or(Ordering::Equal)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn the_docs_example_routes_as_described() {
        let f = json!({"amount": {"$gte": 100}, "currency": {"$in": ["EUR", "USD"]}});
        assert!(check(&f).is_ok());
        assert!(matches(&f, &json!({"amount": 150, "currency": "EUR"})));
        assert!(matches(&f, &json!({"amount": 100.0, "currency": "USD"})));
        assert!(!matches(&f, &json!({"amount": 99, "currency": "EUR"})));
        assert!(!matches(&f, &json!({"amount": 150, "currency": "GBP"})));
        assert!(!matches(&f, &json!({"currency": "EUR"})), "a missing field fails $gte");
    }

    #[test]
    fn nested_fields_combinators_and_missing_fields() {
        let f = json!({"customer": {"country": "DE", "tier": {"$neq": "free"}},
                       "$or": [{"type": {"$startsWith": "order."}}, {"urgent": true}]});
        assert!(check(&f).is_ok());
        assert!(matches(&f, &json!({"customer": {"country": "DE"}, "type": "order.paid"})));
        assert!(!matches(&f, &json!({"customer": {"country": "DE", "tier": "free"}, "type": "order.paid"})));
        assert!(matches(&f, &json!({"customer": {"country": "DE", "tier": "pro"}, "urgent": true})));
        assert!(!matches(&f, &json!({"customer": "DE", "urgent": true})), "a nested filter needs an object");
        let absent = json!({"coupon": {"$exists": false}});
        assert!(matches(&absent, &json!({})) && !matches(&absent, &json!({"coupon": null})));
        assert!(matches(&json!({"$not": {"status": "void"}}), &json!({"status": "paid"})));
        assert!(matches(&json!({"a": {"$nin": [1, 2]}}), &json!({})));
        let outside = json!({"amount": {"$or": [{"$lt": 10}, {"$gt": 99}]}, "n": {"$not": {"$gte": 5}}});
        assert!(check(&outside).is_ok());
        assert!(matches(&outside, &json!({"amount": 5, "n": 1})));
        assert!(!matches(&outside, &json!({"amount": 50, "n": 1})));
        assert!(!matches(&outside, &json!({"amount": 500, "n": 7})));
    }

    #[test]
    fn bad_filters_are_named_by_path() {
        let cases = [
            (json!([1]), "filter"),
            (json!({"amount": {"$gte": true}}), "filter.amount.$gte"),
            (json!({"amount": {"$between": [1, 2]}}), "filter.amount.$between"),
            (json!({"amount": {"$in": 3}}), "filter.amount.$in"),
            (json!({"$and": [{"a": 1}, 2]}), "filter.$and[1]"),
            (json!({"$or": []}), "filter.$or"),
            (json!({"$gte": 3}), "filter.$gte"),
            (json!({"a": {"$eq": 1, "b": 2}}), "filter.a"),
            (json!({"a": {"$exists": "yes"}}), "filter.a.$exists"),
        ];
        for (f, path) in cases {
            assert_eq!(check(&f).map_err(|e| e.path), Err(path.to_string()), "{f}");
        }
        let mut deep = json!(1);
        for _ in 0..MAX_FILTER_DEPTH + 1 {
            deep = json!({ "a": deep });
        }
        assert!(check(&deep).is_err());
        let big = json!({"a": {"$in": vec!["x".repeat(100); 50]}});
        assert!(check(&big).is_err());
    }

    #[test]
    fn integers_compare_exactly_past_two_to_the_53() {
        let big = |n: u64| json!({ "id": n });
        // 2^53 + 1 and 2^53 are one f64; as integers they differ.
        assert!(!matches(&json!({"id": 9_007_199_254_740_993u64}), &big(9_007_199_254_740_992)));
        assert!(matches(&json!({"id": 9_007_199_254_740_993u64}), &big(9_007_199_254_740_993)));
        assert!(matches(&json!({"id": {"$gt": 9_007_199_254_740_992u64}}), &big(9_007_199_254_740_993)));
        assert!(!matches(&json!({"id": {"$gte": 9_007_199_254_740_993u64}}), &big(9_007_199_254_740_992)));
        assert!(matches(&json!({"id": {"$in": [1, 9_007_199_254_740_993u64]}}), &big(9_007_199_254_740_993)));
        assert!(!matches(&json!({"id": {"$in": [9_007_199_254_740_992u64]}}), &big(9_007_199_254_740_993)));
        assert!(matches(&json!({"id": {"$lt": u64::MAX}}), &json!({"id": i64::MIN})));
        assert!(!matches(&json!({"id": u64::MAX - 1}), &json!({"id": u64::MAX})));
    }

    #[test]
    fn integers_and_floats_compare_by_value() {
        use std::cmp::Ordering::*;
        let n = |v: Value| match v {
            Value::Number(n) => n,
            _ => unreachable!(),
        };
        let cmp = |a: Value, b: Value| compare_numbers(&n(a), &n(b));
        assert_eq!(cmp(json!(1), json!(1.0)), Some(Equal));
        assert_eq!(cmp(json!(1.0), json!(1)), Some(Equal));
        assert_eq!(cmp(json!(2), json!(1.5)), Some(Greater));
        assert_eq!(cmp(json!(1), json!(1.5)), Some(Less));
        assert_eq!(cmp(json!(-1), json!(-1.5)), Some(Greater));
        assert_eq!(cmp(json!(-2), json!(-1.5)), Some(Less));
        // 2^53 + 1 against the f64 2^53: greater, not equal.
        assert_eq!(cmp(json!(9_007_199_254_740_993u64), json!(9_007_199_254_740_992.0)), Some(Greater));
        assert_eq!(cmp(json!(9_007_199_254_740_992u64), json!(9_007_199_254_740_992.0)), Some(Equal));
        assert_eq!(cmp(json!(u64::MAX), json!(1e300)), Some(Less));
        assert_eq!(cmp(json!(i64::MIN), json!(-1e300)), Some(Greater));
        assert_eq!(cmp(json!(0.5), json!(0.25)), Some(Greater));
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i32>().prop_map(|n| json!(n)),
            (-1000.0f64..1000.0).prop_map(|n| json!(n)),
            "[a-c]{0,3}".prop_map(|s| json!(s)),
            any::<bool>().prop_map(|b| json!(b)),
            Just(Value::Null),
        ]
    }

    fn payload() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-d]", scalar(), 0..4).prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    fn leaf() -> impl Strategy<Value = Value> {
        let op = prop_oneof![
            scalar().prop_map(|v| json!({"$eq": v})),
            scalar().prop_map(|v| json!({"$neq": v})),
            prop::collection::vec(scalar(), 0..3).prop_map(|v| json!({"$in": v})),
            prop::collection::vec(scalar(), 0..3).prop_map(|v| json!({"$nin": v})),
            any::<i32>().prop_map(|n| json!({"$gt": n})),
            any::<i32>().prop_map(|n| json!({"$lte": n})),
            "[a-c]{0,2}".prop_map(|s| json!({"$gte": s})),
            any::<bool>().prop_map(|b| json!({"$exists": b})),
            "[a-c]{0,2}".prop_map(|s| json!({"$startsWith": s})),
            scalar(),
        ];
        ("[a-d]", op).prop_map(|(field, cond)| json!({ field: cond }))
    }

    fn filter() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..3).prop_map(|fs| json!({"$and": fs})),
                prop::collection::vec(inner.clone(), 1..3).prop_map(|fs| json!({"$or": fs})),
                inner.prop_map(|f| json!({"$not": f})),
            ]
        })
    }

    proptest! {
        #[test]
        fn generated_filters_check(f in filter()) {
            prop_assert!(check(&f).is_ok(), "{}", f);
        }

        #[test]
        fn not_is_the_negation(f in filter(), p in payload()) {
            prop_assert_eq!(matches(&json!({"$not": f.clone()}), &p), !matches(&f, &p));
        }

        #[test]
        fn and_or_are_all_and_any(f in filter(), g in filter(), p in payload()) {
            let (a, b) = (matches(&f, &p), matches(&g, &p));
            prop_assert_eq!(matches(&json!({"$and": [f.clone(), g.clone()]}), &p), a && b);
            prop_assert_eq!(matches(&json!({"$or": [f, g]}), &p), a || b);
        }

        #[test]
        fn in_and_nin_are_eq_and_its_negation(field in "[a-d]", v in scalar(), p in payload()) {
            let eq = matches(&json!({ field.clone(): {"$eq": v.clone()} }), &p);
            prop_assert_eq!(matches(&json!({ field.clone(): {"$in": [v.clone()]} }), &p), eq);
            prop_assert_eq!(matches(&json!({ field.clone(): {"$nin": [v.clone()]} }), &p), !eq);
            prop_assert_eq!(matches(&json!({ field.clone(): {"$neq": v.clone()} }), &p), !eq);
            prop_assert_eq!(matches(&json!({ field: v }), &p), eq, "a literal is $eq");
        }

        #[test]
        fn gte_is_gt_or_eq_for_numbers(field in "[a-d]", n in any::<i32>(), p in payload()) {
            let gte = matches(&json!({ field.clone(): {"$gte": n} }), &p);
            let gt = matches(&json!({ field.clone(): {"$gt": n} }), &p);
            let number = p.get(&field).is_some_and(Value::is_number);
            let eq = number && matches(&json!({ field: {"$eq": n} }), &p);
            prop_assert_eq!(gte, gt || eq);
        }

        #[test]
        fn a_filter_made_of_a_payloads_own_fields_matches_it(p in payload()) {
            let f = Value::Object(p.as_object().cloned().unwrap_or_default());
            prop_assert!(matches(&f, &p));
        }
    }
}
