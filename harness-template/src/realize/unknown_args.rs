//! Why: τ²'s tools take exactly their declared parameters and reject any
//! other keyword ("got an unexpected keyword argument"), so a call with an
//! extra argument can only fail, and small models add plausible extras (a
//! `reason` on an item exchange) over and over. Dropping what the tool's
//! schema does not declare runs the call the model meant; declared
//! arguments are never touched, and a schema that admits extra keys keeps
//! them.

use serde_json::{Map, Value};

/// Drops arguments the schema does not declare; true if any was dropped.
pub fn apply(schema: Option<&Value>, args: &mut Map<String, Value>) -> bool {
    let Some(schema) = schema else {
        return false;
    };
    let Some(declared) = schema.get("properties").and_then(Value::as_object) else {
        return false;
    };
    if schema.get("additionalProperties").and_then(Value::as_bool) == Some(true) {
        return false;
    }
    let before = args.len();
    args.retain(|key, _| declared.contains_key(key));
    args.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(schema: Option<Value>, args: Value) -> (Value, bool) {
        let mut m = args.as_object().unwrap().clone();
        let changed = apply(schema.as_ref(), &mut m);
        (Value::Object(m), changed)
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}, "item_ids": {"type": "array"}}, "required": ["order_id"]})
    }

    #[test]
    fn drops_only_undeclared_arguments() {
        assert_eq!(
            run(
                Some(schema()),
                json!({"order_id": "#W1", "item_ids": ["1"], "reason": "no longer needed"})
            ),
            (json!({"order_id": "#W1", "item_ids": ["1"]}), true)
        );
        assert!(!run(Some(schema()), json!({"order_id": "#W1"})).1);
        // Missing required arguments are the environment's to report.
        assert!(!run(Some(schema()), json!({})).1);
    }

    #[test]
    fn keeps_everything_without_a_closed_schema() {
        assert!(!run(None, json!({"x": 1})).1);
        assert!(!run(Some(json!({"type": "object"})), json!({"x": 1})).1);
        let open = json!({"properties": {"a": {}}, "additionalProperties": true});
        assert!(!run(Some(open), json!({"a": 1, "b": 2})).1);
        // A tool without parameters takes none.
        assert_eq!(
            run(Some(json!({"properties": {}})), json!({"b": 2})),
            (json!({}), true)
        );
    }
}
