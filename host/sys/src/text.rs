//! Text cut for display: always at a character boundary, the cut marked by
//! the caller's own marker (each place's marker is part of what it prints, or
//! of a prompt a response cache is keyed on, so it is kept as it was).

/// The first `n` characters of `text` when it has more than `n`; `None` when
/// it fits.
pub fn head_chars(text: &str, n: usize) -> Option<&str> {
    text.char_indices().nth(n).map(|(at, _)| &text[..at])
}

/// `text` cut to its first `n` characters followed by `marker` when longer,
/// else `text` as it is.
pub fn clip_with(text: &str, n: usize, marker: &str) -> String {
    match head_chars(text, n) {
        Some(head) => format!("{head}{marker}"),
        None => text.to_string(),
    }
}

/// `text` cut to `n` characters, an ellipsis marking the cut.
pub fn clip(text: &str, n: usize) -> String {
    clip_with(text, n, "…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_falls_between_characters_and_is_marked() {
        // Four two-byte characters: a byte-based cut at 3 would split one.
        assert_eq!(head_chars("éééé", 3), Some("ééé"));
        assert_eq!(clip("éééé", 3), "ééé…");
        assert_eq!(clip_with("ab\ncd", 2, " [cut]"), "ab [cut]");
    }

    #[test]
    fn text_that_fits_is_returned_unmarked() {
        assert_eq!(head_chars("abc", 3), None);
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("", 0), "");
        assert_eq!(clip("a", 0), "…");
    }
}
