//! Small text and JSON helpers shared by the rules.

use serde_json::Value;

use crate::tables;

/// The short name of a domain: `tau2/retail` → `retail`.
pub fn short_domain(domain: &str) -> &str {
    domain.rsplit('/').next().unwrap_or(domain)
}

/// Whether a table entry's domain (`"*"` or a short name) covers `domain`
/// (a short name).
pub fn domain_matches(entry: &str, domain: &str) -> bool {
    entry == "*" || entry == domain
}

/// A message template of [`tables::MESSAGES`] by key (empty if missing).
pub fn message(key: &str) -> &'static str {
    tables::MESSAGES
        .iter()
        .find(|m| m.key == key)
        .map(|m| m.text)
        .unwrap_or("")
}

/// Replace every `{name}` in `template` by its value; unknown placeholders
/// stay as written.
pub fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// [`message`] then [`fill`].
pub fn say(key: &str, values: &[(&str, String)]) -> String {
    fill(message(key), values)
}

/// [`say`] with the domain's own template (`key:domain`) when there is one.
pub fn say_in(domain: &str, key: &str, values: &[(&str, String)]) -> String {
    let own = message(&format!("{key}:{domain}"));
    fill(if own.is_empty() { message(key) } else { own }, values)
}

/// Lower-case words (letters, digits, `'`), for retrieval.
pub fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// A tool name reduced to lower-case letters and digits, so `GetOrderDetails`,
/// `get-order-details` and `get_order_details` compare equal.
pub fn squash_name(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// A dollar amount as the policy writes it: `$120` or `$120.5`.
pub fn dollars(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("${}", x.round() as i64)
    } else {
        format!("${:.2}", x)
    }
}

/// A JSON value as a number (numbers only).
pub fn num(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

/// A JSON value as a string slice.
pub fn str_of(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

/// The string ids of a JSON array argument (non-strings skipped).
pub fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Items joined for a message: `a, b and c`.
pub fn join_list(items: &[String]) -> String {
    match items.len() {
        0 => String::new(),
        1 => items[0].clone(),
        n => format!("{} and {}", items[..n - 1].join(", "), items[n - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_known_placeholders_only() {
        assert_eq!(
            fill(
                "{a} and {b} and {c}",
                &[("a", "1".into()), ("b", "2".into())]
            ),
            "1 and 2 and {c}"
        );
    }

    #[test]
    fn every_message_key_is_unique() {
        let mut keys: Vec<&str> = tables::MESSAGES.iter().map(|m| m.key).collect();
        keys.sort();
        let n = keys.len();
        keys.dedup();
        assert_eq!(n, keys.len());
    }

    /// Every `say("key"` / `message("key"` in the sources names a template
    /// of `tables::MESSAGES`, so an edited table cannot silently empty a
    /// message.
    #[test]
    fn every_message_used_exists() {
        fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut sources = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut sources,
        );
        let mut used = 0;
        for src in &sources {
            for pattern in ["say(", "message("] {
                for (at, _) in src.match_indices(pattern) {
                    let word_start = src[..at]
                        .chars()
                        .next_back()
                        .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                    if !word_start {
                        continue;
                    }
                    // The key may sit on the next line after rustfmt.
                    let Some(rest) = src[at + pattern.len()..].trim_start().strip_prefix('"')
                    else {
                        continue;
                    };
                    let key = &rest[..rest.find('"').unwrap()];
                    if key == "key" || !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                        continue;
                    }
                    used += 1;
                    assert!(
                        !message(key).is_empty(),
                        "message {key:?} is used but not in MESSAGES"
                    );
                }
            }
        }
        assert!(used > 20, "found {used} uses");
    }

    #[test]
    fn helpers() {
        assert_eq!(short_domain("tau2/retail"), "retail");
        assert_eq!(squash_name("Get-Order_Details"), "getorderdetails");
        assert_eq!(dollars(120.0), "$120");
        assert_eq!(dollars(12.5), "$12.50");
        assert_eq!(
            join_list(&["a".into(), "b".into(), "c".into()]),
            "a, b and c"
        );
        assert_eq!(
            words("I'd like to EXCHANGE #W1!"),
            vec!["i'd", "like", "to", "exchange", "w1"]
        );
    }
}
