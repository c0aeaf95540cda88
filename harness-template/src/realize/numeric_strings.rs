//! Why: models quote numbers (`"2"` for `2`); some tools store the value
//! as given, so a quoted count corrupts the record or fails on arithmetic.
//! A string that parses as a number under a numeric argument means that
//! number.

use serde_json::{Map, Number, Value};

use crate::tables::NUMERIC_ARGS;
use crate::text::domain_matches;

/// Turns numeric strings into numbers; true if anything changed.
pub fn apply(domain: &str, schema: Option<&Value>, args: &mut Map<String, Value>) -> bool {
    let props = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    let mut changed = false;
    for (key, value) in args.iter_mut() {
        let typed = props
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str);
        if let (Some(t @ ("integer" | "number")), Value::String(s)) = (typed, &*value)
            && let Some(n) = number(s, t == "integer")
        {
            *value = n;
            changed = true;
            continue;
        }
        changed |= walk(domain, key, value);
    }
    changed
}

fn listed(domain: &str, key: &str) -> bool {
    NUMERIC_ARGS
        .iter()
        .any(|a| a.arg == key && domain_matches(a.domain, domain))
}

fn walk(domain: &str, key: &str, value: &mut Value) -> bool {
    match value {
        Value::String(s) if listed(domain, key) => match number(s, false) {
            Some(n) => {
                *value = n;
                true
            }
            None => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |acc, v| walk(domain, key, v) | acc),
        Value::Object(map) => map
            .iter_mut()
            .fold(false, |acc, (k, v)| walk(domain, k, v) | acc),
        _ => false,
    }
}

/// `"2"` → 2, `"2.5"` → 2.5 (an integer is kept integral; with
/// `integer_only`, a fractional value is not a match).
fn number(s: &str, integer_only: bool) -> Option<Value> {
    let t = s.trim().trim_start_matches('$').replace(',', "");
    if t.is_empty() {
        return None;
    }
    if let Ok(i) = t.parse::<i64>() {
        return Some(Value::Number(i.into()));
    }
    let f = t.parse::<f64>().ok().filter(|f| f.is_finite())?;
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        return Some(Value::Number((f as i64).into()));
    }
    if integer_only {
        return None;
    }
    Number::from_f64(f).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(domain: &str, schema: Value, v: Value) -> (Value, bool) {
        let mut m = v.as_object().unwrap().clone();
        let c = apply(domain, Some(&schema), &mut m);
        (Value::Object(m), c)
    }

    #[test]
    fn quoted_numbers_become_numbers_under_numeric_keys() {
        let schema = json!({"properties": {"total_baggages": {"type": "integer"}, "zip": {"type": "string"}}});
        assert_eq!(
            run(
                "airline",
                schema.clone(),
                json!({"total_baggages": "2", "zip": "12345"})
            ),
            (json!({"total_baggages": 2, "zip": "12345"}), true)
        );
        assert_eq!(
            run(
                "airline",
                json!({}),
                json!({"payment_methods": [{"payment_id": "x", "amount": "120"}]})
            ),
            (
                json!({"payment_methods": [{"payment_id": "x", "amount": 120}]}),
                true
            )
        );
        assert_eq!(
            run("airline", json!({}), json!({"amount": "12.5"})).0,
            json!({"amount": 12.5})
        );
        assert!(!run("airline", json!({}), json!({"amount": "lots"})).1);
        assert!(!run("retail", json!({}), json!({"item_ids": ["1008292230"]})).1);
        assert!(!run("airline", schema, json!({"total_baggages": 2})).1);
    }
}
