//! Why: small or confused models write a tool call into their message
//! (a fenced JSON block, `<tool_call>` tags, `name({...})`) instead of
//! making it; the environment never sees it and the user gets JSON. When
//! the text names a real tool (or a known alias), the structured call is
//! unambiguous.

use serde_json::{Map, Value};

use crate::tables::{TEXT_CALL_ARGUMENT_KEYS, TEXT_CALL_NAME_KEYS, TEXT_CALL_TAGS, TOOL_ALIASES};
use crate::text::domain_matches;
use crate::types::Call;
use crate::view::Tools;

use super::tool_alias;

/// What the text holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Rescue {
    /// Calls to real tools.
    Calls(Vec<Call>),
    /// A call-shaped object naming a tool that does not exist.
    UnknownTool(String),
    /// Ordinary text.
    Nothing,
}

pub fn rescue(domain: &str, tools: &Tools, text: &str) -> Rescue {
    let mut calls: Vec<Call> = Vec::new();
    let mut unknown: Option<String> = None;
    let push = |name: String, args: Map<String, Value>, calls: &mut Vec<Call>| {
        let arguments = Value::Object(args).to_string();
        if !calls
            .iter()
            .any(|c| c.name == name && c.arguments == arguments)
        {
            calls.push(Call {
                id: format!("rescued_{}", calls.len() + 1),
                name,
                arguments,
            });
        }
    };
    for candidate in json_candidates(text) {
        for object in call_objects(candidate) {
            if let Some((name, args, strict)) = shape(&object) {
                match tool_alias::resolve(domain, &name, tools) {
                    Some(real) => push(real, args, &mut calls),
                    None if strict && unknown.is_none() => unknown = Some(name),
                    None => {}
                }
            }
        }
    }
    if calls.is_empty() {
        for (name, args) in function_style(domain, tools, text) {
            push(name, args, &mut calls);
        }
    }
    if !calls.is_empty() {
        Rescue::Calls(calls)
    } else if let Some(name) = unknown.filter(|_| looks_like_call_text(text)) {
        Rescue::UnknownTool(name)
    } else {
        Rescue::Nothing
    }
}

/// A fenced block, a tag or a bare object: the text is mostly the call.
fn looks_like_call_text(text: &str) -> bool {
    let t = text.trim();
    t.starts_with('{')
        || t.starts_with('[')
        || t.contains("```")
        || TEXT_CALL_TAGS
            .iter()
            .any(|tag| t.contains(&format!("<{tag}>")))
}

/// Every balanced `{...}` / `[...]` at the top level of the text, parsed.
fn json_candidates(text: &str) -> Vec<Value> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if (bytes[i] == b'{' || bytes[i] == b'[')
            && let Some(end) = balanced_end(bytes, i)
            && let Ok(v) = serde_json::from_str::<Value>(&text[i..=end])
        {
            out.push(v);
            i = end + 1;
            continue;
        }
        i += 1;
    }
    out
}

/// Index of the bracket closing the one at `start` (JSON strings skipped).
fn balanced_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut in_str = false;
    let mut escaped = false;
    for (k, &b) in bytes.iter().enumerate().skip(start) {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// Objects of a candidate: the object itself, or each object of an array
/// (`[{...}, {...}]`), or `{"tool_calls": [...]}`.
fn call_objects(v: Value) -> Vec<Map<String, Value>> {
    match v {
        Value::Object(mut m) => {
            if let Some(Value::Array(items)) = m.remove("tool_calls") {
                return items.into_iter().flat_map(call_objects).collect();
            }
            vec![m]
        }
        Value::Array(items) => items
            .into_iter()
            .filter_map(|i| match i {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// (name, arguments, strict) of a call-shaped object. `strict` means it
/// has both a name key and an arguments key (so an unknown name is worth
/// reporting).
fn shape(object: &Map<String, Value>) -> Option<(String, Map<String, Value>, bool)> {
    // OpenAI style: {"type": "function", "function": {"name", "arguments"}}.
    if let Some(Value::Object(inner)) = object.get("function") {
        return shape(inner);
    }
    let name = TEXT_CALL_NAME_KEYS
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))?
        .trim()
        .to_string();
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    let found = TEXT_CALL_ARGUMENT_KEYS.iter().find_map(|k| object.get(*k));
    match found {
        Some(Value::Object(args)) => Some((name, args.clone(), true)),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(args)) => Some((name, args, true)),
            _ if s.trim().is_empty() => Some((name, Map::new(), true)),
            _ => None,
        },
        Some(Value::Null) => Some((name, Map::new(), true)),
        Some(_) => None,
        // {"name": "get_order_details", "order_id": "#W1"}: the other keys.
        None => {
            let args: Map<String, Value> = object
                .iter()
                .filter(|(k, _)| {
                    !TEXT_CALL_NAME_KEYS.contains(&k.as_str()) && *k != "type" && *k != "id"
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Some((name, args, false))
        }
    }
}

/// `tool_name({...})` or `tool_name(key="value", n=2)` for a real tool or a
/// known alias.
fn function_style(domain: &str, tools: &Tools, text: &str) -> Vec<(String, Map<String, Value>)> {
    // Every form below needs a `(`: without one, most messages to the user
    // skip a search per tool and alias.
    if !text.contains('(') {
        return Vec::new();
    }
    let mut names: Vec<(String, String)> =
        tools.names().into_iter().map(|n| (n.clone(), n)).collect();
    for a in TOOL_ALIASES
        .iter()
        .filter(|a| domain_matches(a.domain, domain))
    {
        if tools.knows(a.tool) && !tools.knows(a.alias) {
            names.push((a.alias.to_string(), a.tool.to_string()));
        }
    }
    // Longest names first, so `get_user` does not shadow `get_user_details`.
    names.sort_by_key(|n| std::cmp::Reverse(n.0.len()));
    let mut out = Vec::new();
    let mut taken: Vec<(usize, usize)> = Vec::new();
    for (written, real) in names {
        let pattern = format!("{written}(");
        let mut from = 0;
        while let Some(pos) = text[from..].find(&pattern) {
            let at = from + pos;
            from = at + pattern.len();
            let word_start = at == 0
                || !text[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_');
            if !word_start || taken.iter().any(|(s, e)| at >= *s && at < *e) {
                continue;
            }
            let open = at + written.len();
            let Some(close) = paren_end(text.as_bytes(), open) else {
                continue;
            };
            let inner = text[open + 1..close].trim();
            // `name()` inside prose ("I'll call get_user_details() next")
            // is a mention, not a call; alone it is the call.
            let alone = text[..at].trim().is_empty()
                && text[close + 1..].trim().trim_end_matches(';').is_empty();
            if inner.is_empty() && !alone {
                continue;
            }
            if let Some(args) = parse_inner(inner) {
                taken.push((at, close + 1));
                out.push((real.clone(), args));
            }
        }
    }
    out
}

fn paren_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    for (k, &b) in bytes.iter().enumerate().skip(open) {
        if let Some(q) = quote {
            if b == q && bytes.get(k.wrapping_sub(1)) != Some(&b'\\') {
                quote = None;
            }
            continue;
        }
        match b {
            b'"' | b'\'' => quote = Some(b),
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// `{...}` JSON, empty, or `key=value` pairs with JSON (or single-quoted)
/// values.
fn parse_inner(inner: &str) -> Option<Map<String, Value>> {
    if inner.is_empty() {
        return Some(Map::new());
    }
    if inner.starts_with('{') {
        return match serde_json::from_str::<Value>(inner) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        };
    }
    let mut args = Map::new();
    for part in split_top_level(inner) {
        let (key, value) = part.split_once('=')?;
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let value = value.trim();
        let parsed = if value.len() >= 2 && value.starts_with('\'') && value.ends_with('\'') {
            Value::String(value[1..value.len() - 1].to_string())
        } else {
            match value {
                "True" => Value::Bool(true),
                "False" => Value::Bool(false),
                "None" => Value::Null,
                v => serde_json::from_str::<Value>(&v.replace('\'', "\"")).ok()?,
            }
        };
        args.insert(key.to_string(), parsed);
    }
    Some(args)
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, 0);
    for (i, c) in s.char_indices() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '[' | '{' | '(' => depth += 1,
            ']' | '}' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;
    use serde_json::json;

    fn tools() -> Tools {
        Tools::new(
            [
                "get_order_details",
                "get_user_details",
                "cancel_pending_order",
            ]
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: String::new(),
                parameters: "{}".into(),
                mutates: n.starts_with("cancel"),
            })
            .collect(),
        )
    }

    fn one(text: &str) -> (String, Value) {
        match rescue("retail", &tools(), text) {
            Rescue::Calls(c) if c.len() == 1 => (
                c[0].name.clone(),
                serde_json::from_str(&c[0].arguments).unwrap(),
            ),
            other => panic!("{other:?} for {text}"),
        }
    }

    #[test]
    fn fenced_json_tags_and_function_style() {
        let fenced = "```json\n{\n  \"name\": \"get_order_details\",\n  \"arguments\": {\n    \"order_id\": \"#W1\"\n  }\n}\n```";
        assert_eq!(
            one(fenced),
            ("get_order_details".into(), json!({"order_id": "#W1"}))
        );
        let tagged = "Let me check.\n<tool_call>{\"name\": \"get_order_info\", \"arguments\": \"{\\\"order_id\\\": \\\"#W1\\\"}\"}</tool_call>";
        assert_eq!(
            one(tagged),
            ("get_order_details".into(), json!({"order_id": "#W1"}))
        );
        assert_eq!(
            one("I'll call get_order_details({\"order_id\": \"#W1\"}) now."),
            ("get_order_details".into(), json!({"order_id": "#W1"}))
        );
        assert_eq!(
            one("cancel_order(order_id='#W1', reason=\"ordered by mistake\")"),
            (
                "cancel_pending_order".into(),
                json!({"order_id": "#W1", "reason": "ordered by mistake"})
            )
        );
        assert_eq!(
            one("get_user_details()"),
            ("get_user_details".into(), json!({}))
        );
        assert_eq!(
            one(
                "{\"type\": \"function\", \"function\": {\"name\": \"get_user_details\", \"arguments\": {\"user_id\": \"u1\"}}}"
            ),
            ("get_user_details".into(), json!({"user_id": "u1"}))
        );
        assert_eq!(
            one("{\"name\": \"get_user_details\", \"user_id\": \"u1\"}"),
            ("get_user_details".into(), json!({"user_id": "u1"}))
        );
    }

    #[test]
    fn several_calls_in_one_message() {
        let text = "[{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W1\"}}, {\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W2\"}}]";
        match rescue("retail", &tools(), text) {
            Rescue::Calls(c) => assert_eq!(c.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ordinary_text_and_unknown_tools() {
        for text in [
            "I have finished working on your request. Here are the details: 10.5; #W1. Is there anything else I can help you with?",
            "Your order {\"name\": \"Action Camera\", \"price\": 10} is pending.",
            "Could you give me your user id (e.g. sara_doe_496)?",
            "We can get_order_details later.",
            "Next I will call get_user_details() for you.",
        ] {
            assert_eq!(rescue("retail", &tools(), text), Rescue::Nothing, "{text}");
        }
        assert_eq!(
            rescue(
                "retail",
                &tools(),
                "```json\n{\"name\": \"delete_order\", \"arguments\": {}}\n```"
            ),
            Rescue::UnknownTool("delete_order".into())
        );
    }
}
