//! Why: some models send the arguments object double-encoded as a JSON
//! string, or an empty string for "no arguments"; both mean one obvious
//! object, while anything else that is not an object cannot run.

use serde_json::{Map, Value};

use crate::text::say;

/// The arguments as an object, and whether they had to be repaired.
pub fn parse(text: &str) -> Result<(Map<String, Value>, bool), String> {
    if text.trim().is_empty() {
        return Ok((Map::new(), true));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok((map, false)),
        Ok(Value::String(inner)) => match serde_json::from_str::<Value>(&inner) {
            Ok(Value::Object(map)) => Ok((map, true)),
            _ => Err("a JSON string, not an object".to_string()),
        },
        Ok(Value::Null) => Ok((Map::new(), true)),
        Ok(other) => Err(format!("a JSON {}", kind(&other))),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        _ => "value",
    }
}

pub fn feedback(error: &str) -> String {
    say("bad_arguments", &[("error", error.to_string())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repairs_only_unambiguous_encodings() {
        assert!(!parse(r#"{"a":1}"#).unwrap().1);
        let (m, changed) = parse(r#""{\"a\":1}""#).unwrap();
        assert!(changed && m["a"] == 1);
        assert!(parse("").unwrap().1);
        assert!(parse("[1]").is_err());
        assert!(parse("{oops").is_err());
    }
}
