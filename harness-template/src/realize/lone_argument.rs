//! Why: a tool with one parameter is often called with that one value
//! under another name (`{"command": "ls"}` for a shell tool's `script`,
//! `{"id": ...}` for a lookup's `user_id`). The meaning is unambiguous, and
//! dropping the unknown key (as [`super::unknown_args`] would) leaves an
//! empty call. The lone argument is renamed to the lone parameter.

use serde_json::{Map, Value};

/// Renames a single undeclared argument to the schema's single declared
/// parameter; true if it did.
pub fn apply(schema: Option<&Value>, args: &mut Map<String, Value>) -> bool {
    let Some(declared) = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    else {
        return false;
    };
    let (Some(param), 1, 1) = (declared.keys().next(), declared.len(), args.len()) else {
        return false;
    };
    if args.contains_key(param) {
        return false;
    }
    let value = std::mem::take(args).into_iter().next().map(|(_, v)| v);
    args.insert(param.clone(), value.unwrap_or(Value::Null));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(schema: Value, args: Value) -> (Value, bool) {
        let mut m = args.as_object().unwrap().clone();
        let changed = apply(Some(&schema), &mut m);
        (Value::Object(m), changed)
    }

    #[test]
    fn renames_only_a_lone_argument_of_a_one_parameter_tool() {
        let one = json!({"properties": {"script": {"type": "string"}}, "required": ["script"]});
        assert_eq!(
            run(one.clone(), json!({"command": "ls -a"})),
            (json!({"script": "ls -a"}), true)
        );
        assert!(!run(one.clone(), json!({"script": "ls"})).1);
        assert!(!run(one.clone(), json!({})).1);
        // Two arguments: which one is meant is not clear.
        assert!(!run(one, json!({"command": "ls", "cwd": "/"})).1);
        let two = json!({"properties": {"a": {}, "b": {}}});
        assert!(!run(two, json!({"c": 1})).1);
        assert!(!run(json!({"properties": {}}), json!({"c": 1})).1);
        let mut m = Map::new();
        m.insert("x".into(), json!(1));
        assert!(!apply(None, &mut m));
    }
}
