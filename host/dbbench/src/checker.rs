//! The DBBench answer checker, ported rule for rule from the original's
//! result processor (`DBResultProcessor.compare_results` and its helpers).
//!
//! Both sides go through the same cleaning: a list-looking string is
//! `eval`ed (falling back to a quote-aware comma split), each value is
//! `str()`ed, stripped of whitespace and of `'`/`"`, then normalised
//! (a trailing `%` dropped, thousands commas removed, `none`/`null`/`nan`/
//! `inf`/empty mapped to `"0"`). INSERT/UPDATE compare the cleaned lists
//! for equality; SELECT-class answers compare one value by float tolerance
//! (0.01) or text, several values as a float multiset (same tolerance) or
//! else as a set. Any error inside the comparison is a mismatch, as the
//! original's `except` makes it. Agreement with the original is tested on
//! recorded vectors (`tests/dbbench/checker_vectors.jsonl`).

use serde_json::Value;

use ecdysis_pyemu::pyval::{eval_literal, py_float, strip, strip_quotes};
use ecdysis_pyemu::{Val, repr};

/// Float tolerance of `_float_equal`.
const TOLERANCE: f64 = 1e-2;

/// A value the checker receives: what the agent committed (a JSON value),
/// a label, or the table hash the environment computed.
#[derive(Clone, Debug)]
pub enum Input<'a> {
    /// A JSON value, as `json.loads` would give it.
    Json(&'a Value),
    /// A plain Python string.
    Text(&'a str),
}

impl Input<'_> {
    fn to_py(&self) -> Val {
        match self {
            Input::Json(v) => Val::from_json(v),
            Input::Text(t) => Val::str(t),
        }
    }
}

/// `compare_results(answer, ground_truth, query_type)`.
pub fn compare(answer: Input<'_>, ground_truth: Input<'_>, query_type: &str) -> bool {
    let a = clean_answer(&answer.to_py());
    let g = clean_answer(&ground_truth.to_py());
    if matches!(query_type, "INSERT" | "DELETE" | "UPDATE") {
        return a == g;
    }
    // `len(None)` raises inside the original's `try`: a mismatch.
    let (Some(a), Some(g)) = (a, g) else {
        return false;
    };
    if a.len() == 1 && g.len() == 1 {
        let (x, y) = (&a[0], &g[0]);
        if x == "0" && y == "0" {
            return true;
        }
        if let (Some(fx), Some(fy)) = (py_float(x), py_float(y)) {
            return float_equal(fx, fy);
        }
        return x == y;
    }
    let floats = |v: &[String]| v.iter().map(|s| py_float(s)).collect::<Option<Vec<f64>>>();
    if let (Some(fa), Some(fg)) = (floats(&a), floats(&g)) {
        if fa.len() != fg.len() {
            return false;
        }
        // Greedy matching in order, as the original does.
        let mut matched = vec![false; fg.len()];
        for x in &fa {
            match (0..fg.len()).find(|&i| !matched[i] && float_equal(*x, fg[i])) {
                Some(i) => matched[i] = true,
                None => return false,
            }
        }
        return matched.iter().all(|m| *m);
    }
    let set = |v: Vec<String>| v.into_iter().collect::<std::collections::BTreeSet<_>>();
    set(a) == set(g)
}

fn float_equal(a: f64, b: f64) -> bool {
    // NaN (inf - inf) compares false, as in Python.
    (a - b).abs() <= TOLERANCE
}

/// `_normalize_special_values` of a string.
pub fn normalize(value: &str) -> String {
    let s = strip(value);
    if let Some(rest) = s.strip_suffix('%') {
        return strip(rest).to_string();
    }
    let s = if s.contains(',') && !s.starts_with('[') && !s.ends_with(']') {
        s.replace(',', "")
    } else {
        s.to_string()
    };
    match s.to_lowercase().as_str() {
        "none" | "null" | "undefined" | "nan" | "inf" | "infinity" | "-inf" | "-infinity" | "" => {
            "0".into()
        }
        _ => s,
    }
}

/// `str(x).strip().strip("'\"")`.
fn cleaned_str(v: &Val) -> String {
    strip_quotes(strip(&repr::to_str(v))).to_string()
}

/// One item of an evaluated list: a one-tuple stands for its value.
fn item_value(item: &Val) -> &Val {
    match item {
        Val::Tuple(t) if t.len() == 1 => &t[0],
        other => other,
    }
}

/// `_clean_mysql_result`: a client-printed result (`[(v,), ...]`).
fn clean_mysql_result(answer: &Val) -> Option<Vec<String>> {
    let Val::Str(s) = answer else {
        return None;
    };
    if !(s.starts_with('[') && s.ends_with(']')) {
        return None;
    }
    if let Ok(Val::List(items)) = eval_literal(s)
        && items.iter().all(|i| matches!(i, Val::Tuple(_)))
    {
        // Only one-tuples count; wider rows are dropped.
        return Some(
            items
                .iter()
                .filter_map(|i| match i {
                    Val::Tuple(t) if t.len() == 1 => Some(cleaned_str(&t[0])),
                    _ => None,
                })
                .collect(),
        );
    }
    // The single-tuple text fallback: "[(293.0,)]".
    let inner = s.trim_matches(['[', ']']);
    if inner.matches('(').count() == 1 && inner.starts_with('(') && inner.ends_with(",)") {
        let value = &inner[1..inner.len() - 2];
        return Some(vec![strip_quotes(strip(value)).to_string()]);
    }
    None
}

/// `_clean_answer`: `None` where the original returns `None` (a
/// bracketed string that evaluates to something other than a list).
pub fn clean_answer(answer: &Val) -> Option<Vec<String>> {
    if matches!(answer, Val::None) {
        return Some(vec!["0".into()]);
    }
    if let Some(values) = clean_mysql_result(answer) {
        return Some(values.iter().map(|v| normalize(v)).collect());
    }
    match answer {
        Val::Str(s) => {
            let s = strip(s);
            if s.starts_with('[') && s.ends_with(']') {
                match eval_literal(s) {
                    Ok(Val::List(items)) => Some(
                        items
                            .iter()
                            .map(|i| normalize(&cleaned_str(item_value(i))))
                            .collect(),
                    ),
                    Ok(_) => None,
                    Err(_) => Some(manual_split(&s[1..s.len() - 1])),
                }
            } else {
                Some(vec![normalize(strip_quotes(s))])
            }
        }
        Val::List(items) | Val::Tuple(items) => Some(
            items
                .iter()
                .map(|i| normalize(&cleaned_str(item_value(i))))
                .collect(),
        ),
        other => Some(vec![normalize(&cleaned_str(other))]),
    }
}

/// The original's fallback when `eval` fails: split on commas outside
/// quotes (either quote character toggles, and quotes are dropped).
fn manual_split(inner: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut in_quotes = false;
    for c in inner.chars() {
        match c {
            '"' | '\'' => in_quotes = !in_quotes,
            ',' if !in_quotes => {
                if !current.is_empty() {
                    items.push(normalize(strip_quotes(strip(&current))));
                    current.clear();
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        items.push(normalize(strip_quotes(strip(&current))));
    }
    items
}

/// The table hash out of the client-printed hash query result, as
/// `calculate_tables_hash_async` extracts it:
/// `result.strip("[]()").split(",")[0].strip().strip("'")`.
pub fn extract_hash(printed: &str) -> String {
    let cleaned = printed.trim_matches(['[', ']', '(', ')']);
    let first = cleaned.split(',').next().unwrap_or("");
    strip(first).trim_matches('\'').to_string()
}

/// Several tables' hashes joined as the original does (sorted, `_`).
pub fn combine_hashes(mut hashes: Vec<String>) -> String {
    hashes.sort();
    hashes.join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_extraction_follows_the_original() {
        assert_eq!(extract_hash("[('03b2ed',)]"), "03b2ed");
        assert_eq!(extract_hash("[(None,)]"), "None");
        assert_eq!(
            extract_hash("1146 (42S02): Table 'x.y' doesn't exist"),
            "1146 (42S02): Table 'x.y' doesn't exist"
        );
    }

    #[test]
    fn core_rules() {
        let j = |v: serde_json::Value| v;
        let c = |a: serde_json::Value, g: serde_json::Value| {
            compare(Input::Json(&j(a)), Input::Json(&j(g)), "other")
        };
        assert!(c(serde_json::json!(["1"]), serde_json::json!(["1.0"])));
        assert!(c(serde_json::json!(["12%"]), serde_json::json!(["12"])));
        assert!(c(serde_json::json!(["1,234"]), serde_json::json!(["1234"])));
        assert!(c(serde_json::json!(null), serde_json::json!(["None"])));
        assert!(!c(
            serde_json::json!(["3.151"]),
            serde_json::json!(["3.14"])
        ));
        assert!(c(
            serde_json::json!(["a", "a", "b"]),
            serde_json::json!(["b", "a"])
        ));
        assert!(!c(
            serde_json::json!(["1", "1", "2"]),
            serde_json::json!(["1", "2", "2"])
        ));
    }
}

#[cfg(test)]
mod vector_tests {
    use super::*;

    /// Every verdict the original `result_processor.py` recorded
    /// (`tests/dbbench/gen_checker_vectors.py`) is reproduced.
    #[test]
    fn agrees_with_the_original_on_every_recorded_vector() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/dbbench/checker_vectors.jsonl");
        let text = std::fs::read_to_string(&path).expect("checker vectors");
        let mut n = 0;
        let mut bad = Vec::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).expect("vector line");
            let kind = v["type"].as_str().expect("type");
            let got = compare(
                Input::Json(&v["answer"]),
                Input::Json(&v["ground_truth"]),
                kind,
            );
            let clean = clean_answer(&Val::from_json(&v["answer"]));
            let want_clean: Option<Vec<String>> = serde_json::from_value(v["clean"].clone()).ok();
            if got != v["result"].as_bool().expect("result") || clean != want_clean {
                bad.push(format!("{line}\n   got {got}, clean {clean:?}"));
            }
            n += 1;
        }
        assert!(n > 1000, "only {n} vectors");
        assert!(
            bad.is_empty(),
            "{} of {n} disagree:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
}
