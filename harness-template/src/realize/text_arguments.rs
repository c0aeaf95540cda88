//! Why: models send a bare number where a tool takes text (`12` for
//! `"12"`); AgentBench's OS judge compares a `match` task's answer as a
//! string, so a right answer sent as a number fails. A number or boolean
//! under an argument listed in `tables::STRING_ARGS` is sent as its text.

use serde_json::{Map, Value};

use crate::tables::STRING_ARGS;
use crate::text::domain_matches;

/// Turns listed non-string scalars into strings; true if anything changed.
pub fn apply(domain: &str, args: &mut Map<String, Value>) -> bool {
    let mut changed = false;
    for (key, value) in args.iter_mut() {
        let listed = STRING_ARGS
            .iter()
            .any(|a| a.arg == key && domain_matches(a.domain, domain));
        if listed && matches!(value, Value::Number(_) | Value::Bool(_)) {
            *value = Value::String(value.to_string());
            changed = true;
        }
    }
    changed
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
    fn listed_scalars_become_text() {
        assert_eq!(
            run("os", json!({"answer": 12})),
            (json!({"answer": "12"}), true)
        );
        assert_eq!(
            run("os", json!({"answer": 2.5})).0,
            json!({"answer": "2.5"})
        );
        assert_eq!(
            run("os", json!({"answer": true})).0,
            json!({"answer": "true"})
        );
        // Text, lists, other keys and other domains are left alone.
        assert!(!run("os", json!({"answer": "12"})).1);
        assert!(!run("os", json!({"answer": [1]})).1);
        assert!(!run("os", json!({"amount": 12})).1);
        assert!(!run("airline", json!({"answer": 12})).1);
    }
}
