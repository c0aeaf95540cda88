//! HTML escaping and the few markup helpers the pages share.
//!
//! Everything a report shows comes from files a model, a harness or a coding
//! agent wrote, so every piece of data goes through [`esc`] before it
//! reaches the page: a trajectory that contains `<script>` renders as text
//! and never runs. The report's own markup is written as literals.

use std::fmt;

/// At most `n` characters of `s`, with an ellipsis when cut.
pub use ecdysis_sys::text::clip;

/// Text escaped for HTML element content and quoted attribute values.
pub struct Esc<'a>(pub &'a str);

/// Escape `s` for use inside an element or a double-quoted attribute.
pub fn esc(s: &str) -> Esc<'_> {
    Esc(s)
}

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut start = 0;
        for (i, c) in self.0.char_indices() {
            let rep = match c {
                '&' => "&amp;",
                '<' => "&lt;",
                '>' => "&gt;",
                '"' => "&quot;",
                '\'' => "&#39;",
                _ => continue,
            };
            f.write_str(&self.0[start..i])?;
            f.write_str(rep)?;
            start = i + c.len_utf8();
        }
        f.write_str(&self.0[start..])
    }
}

/// A string safe to use as an element id or a URL fragment: letters,
/// digits, `-` and `_` kept, anything else hex-encoded (so distinct inputs
/// stay distinct ids).
pub fn slug(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

/// JSON text pretty-printed when it parses (tool arguments and results are
/// JSON), else as it is.
pub fn pretty_json(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| text.to_string())
        }
        _ => text.to_string(),
    }
}

/// A number with a fixed count of decimals, or an em dash.
pub fn num(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "—".into(),
    }
}

/// A percentage of `part / whole`, or an em dash when `whole` is zero.
pub fn pct(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.0}%", part / whole * 100.0)
    } else {
        "—".into()
    }
}

/// Seconds as `1.2 s`, `3 min 05 s` or `2 h 03 min`.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "—".into();
    }
    if secs < 60.0 {
        format!("{secs:.1} s")
    } else if secs < 3600.0 {
        format!("{} min {:02} s", (secs / 60.0) as u64, secs as u64 % 60)
    } else {
        format!(
            "{} h {:02} min",
            (secs / 3600.0) as u64,
            (secs as u64 % 3600) / 60
        )
    }
}

/// The first `n` characters of a component hash, as `<code>`, with the full
/// hash on hover.
pub fn hash(h: &str) -> String {
    format!(
        "<code class=\"hash\" title=\"{}\">{}</code>",
        esc(h),
        esc(clip_plain(h, 12))
    )
}

fn clip_plain(s: &str, n: usize) -> &str {
    ecdysis_sys::text::head_chars(s, n).unwrap_or(s)
}

/// A diff rendered line by line: additions, removals and hunk headers
/// coloured, everything escaped.
pub fn diff(text: &str) -> String {
    let mut out = String::from("<pre class=\"diff\">");
    for line in text.lines() {
        let class = if line.starts_with("+++") || line.starts_with("---") {
            "df"
        } else if line.starts_with('+') {
            "da"
        } else if line.starts_with('-') {
            "dr"
        } else if line.starts_with("@@") {
            "dh"
        } else {
            "dc"
        };
        // Block spans, one per line: no newline between them, or the <pre>
        // would show each line twice as tall.
        out += &format!("<span class=\"{class}\">{}</span>", esc(line));
    }
    out += "</pre>";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_every_markup_character() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\"").to_string(),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(esc("plain ünïcode").to_string(), "plain ünïcode");
        assert_eq!(esc("").to_string(), "");
    }

    #[test]
    fn slugs_are_safe_and_distinct() {
        assert_eq!(slug("12"), "12");
        assert_eq!(slug("a b"), "a_20b");
        assert_ne!(slug("a b"), slug("a_b"));
        assert!(
            slug("\"><script>")
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn diffs_are_escaped_and_classified() {
        let d = diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+<b>new</b>\n same");
        assert!(d.contains("<span class=\"da\">+&lt;b&gt;new&lt;/b&gt;</span>"));
        assert!(d.contains("<span class=\"dr\">-old</span>"));
        assert!(d.contains("<span class=\"dh\">@@ -1 +1 @@</span>"));
        assert!(!d.contains("<b>"));
    }
}
