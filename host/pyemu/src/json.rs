//! `json.dumps` exactly as CPython writes it with the default arguments:
//! separators `", "` and `": "`, `ensure_ascii=True`, floats via
//! `float.__repr__` (`NaN`/`Infinity` for non-finite values).

use super::Val;
use super::repr::float_repr;

/// `json.dumps(v)` (insertion order), as τ² renders tool results.
pub fn dumps(v: &Val) -> String {
    let mut out = Vec::new();
    write(&mut out, v, false, None);
    // Only ASCII is ever written (ensure_ascii).
    String::from_utf8(out).unwrap_or_default()
}

/// `json.dumps(v, sort_keys=True)`.
pub fn dumps_sorted(v: &Val) -> String {
    let mut out = Vec::new();
    write(&mut out, v, true, None);
    String::from_utf8(out).unwrap_or_default()
}

/// `json.dumps(v, sort_keys=True)` into `out`, reusing (and filling) the
/// cached dumps of dicts nested `cache_depth` levels deep. Database hashing
/// uses depth 2 (the entities inside each collection), so a changed
/// database re-serialises only the entities that changed.
pub fn write_sorted_cached(out: &mut Vec<u8>, v: &Val, cache_depth: usize) {
    write(out, v, true, Some(cache_depth));
}

/// The cached `json.dumps(d, sort_keys=True)` bytes of a dict.
pub fn sorted_bytes(d: &super::Dict) -> std::sync::Arc<[u8]> {
    d.sorted_dump_cached(|| {
        let mut buf = Vec::new();
        write_dict(&mut buf, d, true, None);
        buf
    })
}

fn write(out: &mut Vec<u8>, v: &Val, sort_keys: bool, cache_depth: Option<usize>) {
    match v {
        Val::None => out.extend_from_slice(b"null"),
        Val::Bool(true) => out.extend_from_slice(b"true"),
        Val::Bool(false) => out.extend_from_slice(b"false"),
        Val::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Val::BigInt(i) => out.extend_from_slice(i.to_str_radix(10).as_bytes()),
        Val::Float(f) => {
            if f.is_nan() {
                out.extend_from_slice(b"NaN");
            } else if f.is_infinite() {
                out.extend_from_slice(if *f > 0.0 { b"Infinity" } else { b"-Infinity" });
            } else {
                out.extend_from_slice(float_repr(*f).as_bytes());
            }
        }
        Val::Str(s) => write_str(out, s),
        Val::List(items) | Val::Tuple(items) => {
            out.push(b'[');
            let inner = cache_depth.map(|d| d.saturating_sub(1));
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                write(out, item, sort_keys, inner);
            }
            out.push(b']');
        }
        Val::Dict(d) => {
            if cache_depth == Some(0) && sort_keys {
                out.extend_from_slice(&sorted_bytes(d));
            } else {
                write_dict(out, d, sort_keys, cache_depth.map(|d| d.saturating_sub(1)));
            }
        }
        // Only DBBench's rows and literals hold these, and they are never
        // dumped; `json.dumps(v, default=str)` is the nearest Python.
        Val::Bytes(_) | Val::Set(_) | Val::AnyDict(_) | Val::Decimal(_) | Val::Object(_) => {
            write_str(out, &super::repr::to_str(v))
        }
    }
}

fn write_dict(out: &mut Vec<u8>, d: &super::Dict, sort_keys: bool, inner: Option<usize>) {
    out.push(b'{');
    let mut entries: Vec<(&str, &Val)> = d.iter().collect();
    if sort_keys {
        // Python sorts str keys by code point, which is UTF-8 byte order.
        entries.sort_by(|a, b| a.0.cmp(b.0));
    }
    for (i, (k, item)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        write_str(out, k);
        out.extend_from_slice(b": ");
        write(out, item, sort_keys, inner);
    }
    out.push(b'}');
}

/// A JSON string literal with `ensure_ascii` escaping: everything outside
/// printable ASCII (`' '..='~'`) is escaped, astral characters as UTF-16
/// surrogate pairs.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            ' '..='~' => out.push(c as u8),
            c => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.extend_from_slice(format!("\\u{:04x}", u).as_bytes());
                }
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_dumps() {
        let v = Val::from_json(
            &serde_json::json!({"b": [1, 2.5, null, true], "a": "é\u{7f}\n😀", "c": 1e16}),
        );
        assert_eq!(
            dumps(&v),
            r#"{"b": [1, 2.5, null, true], "a": "\u00e9\u007f\n\ud83d\ude00", "c": 1e+16}"#
        );
        assert_eq!(
            dumps_sorted(&v),
            r#"{"a": "\u00e9\u007f\n\ud83d\ude00", "b": [1, 2.5, null, true], "c": 1e+16}"#
        );
    }

    #[test]
    fn cached_dump_equals_plain_dump() {
        let v = Val::from_json(
            &serde_json::json!({"x": {"k2": {"z": 1, "a": [1.0]}, "k1": {"q": "w"}}}),
        );
        let mut out = Vec::new();
        write_sorted_cached(&mut out, &v, 2);
        assert_eq!(String::from_utf8(out.clone()).unwrap(), dumps_sorted(&v));
        let mut again = Vec::new();
        write_sorted_cached(&mut again, &v, 2);
        assert_eq!(out, again);
    }
}
