//! Why: models often drop the leading `#` of retail order ids (`W2378156`
//! for `#W2378156`); the environment then answers "not found". An id made
//! of letters and digits under a key that always carries the prefix has
//! exactly one meaning.

use serde_json::{Map, Value};

use crate::tables::ID_PREFIXES;
use crate::text::domain_matches;

/// Adds the missing prefixes; true if anything changed.
pub fn apply(domain: &str, args: &mut Map<String, Value>) -> bool {
    let mut changed = false;
    for (key, value) in args.iter_mut() {
        changed |= fix(domain, key, value);
    }
    changed
}

fn fix(domain: &str, key: &str, value: &mut Value) -> bool {
    match value {
        Value::String(s) => {
            let Some(rule) = ID_PREFIXES
                .iter()
                .find(|r| r.arg == key && domain_matches(r.domain, domain))
            else {
                return false;
            };
            let bare = s.trim();
            if bare.is_empty()
                || bare.starts_with(rule.prefix)
                || !bare.chars().all(|c| c.is_ascii_alphanumeric())
            {
                return false;
            }
            *s = format!("{}{}", rule.prefix, bare);
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |acc, v| fix(domain, key, v) | acc),
        Value::Object(map) => map
            .iter_mut()
            .fold(false, |acc, (k, v)| fix(domain, k, v) | acc),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(domain: &str, v: Value) -> (Value, bool) {
        let mut m = v.as_object().unwrap().clone();
        let c = apply(domain, &mut m);
        (Value::Object(m), c)
    }

    #[test]
    fn adds_the_hash_to_order_ids_only() {
        assert_eq!(
            run("retail", json!({"order_id": "W2378156"})),
            (json!({"order_id": "#W2378156"}), true)
        );
        assert!(!run("retail", json!({"order_id": "#W2378156"})).1);
        assert!(!run("retail", json!({"item_ids": ["1008292230"]})).1);
        assert!(!run("retail", json!({"order_id": "W 1"})).1);
        assert!(!run("airline", json!({"order_id": "W2378156"})).1);
    }
}
