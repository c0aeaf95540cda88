//! Fix cues: how a simulated agent recognises that feedback *states the fix*
//! for one of its systematic quirks.
//!
//! A cue is a keyword conjunction over one text (case-insensitive). The
//! rules are deliberately specific so that ordinary τ² text (tool
//! descriptions, environment errors such as `Error: Tool 'x' not found.`)
//! does not contain them; only feedback written to fix the quirk does:
//!
//! | quirk | cue (all lower-cased) |
//! |---|---|
//! | `text_call` | "structured" with "call"/"tool", or "function calling" / "tool calling" / "function-calling" / "tool-calling" / "tool_calls" |
//! | `drop_hash` | a `#` together with "prefix", "leading", "start(s) with", "begin(s) with", "beginning", "include the", "including the" or "keep the" |
//! | `numbers_as_strings` | a word "number(s)"/"numeric"/"integer(s)"/"float" together with "string(s)"/"quote(s|d)"/"quotes" |
//! | `tool_alias` | the correct tool name together with the alias used, "instead", "did you mean", "correct name" or "exact name"; or "exact"/"valid"/"available" with "tool name(s)"/"function name(s)" |
//! | `repeat_failing_call` | a word "repeat(ing)"/"retry(ing)"/"identical"/"again" together with "not"/"don't"/"never"/"avoid"/"stop" |
//! | `skip_precondition` | the skipped read tool's name, "look up", "lookup", "looking up", "retrieve" or "fetch" together with "before", "first" or "prior to" |
//!
//! Where cues are looked for: the description of the tool the step calls,
//! every tool/user/system message of the conversation after the first, and
//! the paragraphs of the first system message that are not in the domain's
//! base prompt (given with `SimAgent::with_base_prompt`; without it the
//! first system message is skipped: τ² policies already contain generic
//! procedure text such as the `#` of order ids). The agent's own messages
//! never count.

use crate::sim::profile::Quirk;

/// A text lower-cased, with its words (alphanumerics, `_`, `'`) split out.
pub(crate) struct Scan {
    lower: String,
    words: Vec<String>,
}

impl Scan {
    pub(crate) fn new(text: &str) -> Self {
        let lower = text.to_lowercase();
        let words = lower
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '\''))
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect();
        Self { lower, words }
    }

    fn has(&self, phrase: &str) -> bool {
        self.lower.contains(phrase)
    }

    fn any(&self, phrases: &[&str]) -> bool {
        phrases.iter().any(|p| self.has(p))
    }

    fn word(&self, words: &[&str]) -> bool {
        self.words.iter().any(|w| words.contains(&w.as_str()))
    }
}

/// What a cue may refer to besides fixed words.
pub(crate) struct CueContext<'a> {
    /// Correct tool name of the step.
    pub gold_name: &'a str,
    /// The alias the agent would use, if any.
    pub alias: Option<&'a str>,
    /// The read tool a skipped precondition would have called.
    pub skipped_read: Option<&'a str>,
}

/// Whether `text` states the fix for `quirk`. Always false for
/// model-specific quirks.
pub(crate) fn states_fix(quirk: Quirk, text: &Scan, cx: &CueContext<'_>) -> bool {
    match quirk {
        Quirk::TextCall => {
            (text.has("structured") && (text.has("call") || text.has("tool")))
                || text.any(&[
                    "function calling",
                    "function-calling",
                    "tool calling",
                    "tool-calling",
                    "tool_calls",
                ])
        }
        Quirk::DropHash => {
            text.has("#")
                && text.any(&[
                    "prefix",
                    "leading",
                    "start with",
                    "starts with",
                    "begin with",
                    "begins with",
                    "beginning",
                    "include the",
                    "including the",
                    "keep the",
                ])
        }
        Quirk::NumbersAsStrings => {
            text.word(&[
                "number", "numbers", "numeric", "integer", "integers", "float",
            ]) && text.word(&["string", "strings", "quote", "quotes", "quoted"])
        }
        Quirk::ToolAlias => {
            let named = !cx.gold_name.is_empty()
                && text.has(&cx.gold_name.to_lowercase())
                && (cx.alias.is_some_and(|a| text.has(&a.to_lowercase()))
                    || text.any(&["instead", "did you mean", "correct name", "exact name"]));
            let generic = text.word(&["exact", "valid", "available"])
                && text.any(&["tool name", "function name"]);
            named || generic
        }
        Quirk::RepeatFailingCall => {
            text.word(&[
                "repeat",
                "repeating",
                "retry",
                "retrying",
                "identical",
                "again",
            ]) && text.word(&["not", "don't", "never", "avoid", "stop"])
        }
        Quirk::SkipPrecondition => {
            let lookup = cx
                .skipped_read
                .is_some_and(|name| text.has(&name.to_lowercase()))
                || text.any(&["look up", "lookup", "looking up", "retrieve", "fetch"]);
            lookup && (text.word(&["before", "first"]) || text.has("prior to"))
        }
        Quirk::WrongVariant | Quirk::EarlyStop | Quirk::Miscount => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> CueContext<'static> {
        CueContext {
            gold_name: "get_order_details",
            alias: Some("get_order_info"),
            skipped_read: Some("get_order_details"),
        }
    }

    fn fixes(quirk: Quirk, text: &str) -> bool {
        states_fix(quirk, &Scan::new(text), &cx())
    }

    #[test]
    fn cues_match_fix_statements() {
        assert!(fixes(
            Quirk::TextCall,
            "Do not write JSON in the message; use a structured tool call."
        ));
        assert!(fixes(
            Quirk::DropHash,
            "Order ids start with '#', e.g. '#W0000000'."
        ));
        assert!(fixes(
            Quirk::NumbersAsStrings,
            "`amount` must be a number, not a string."
        ));
        assert!(fixes(
            Quirk::ToolAlias,
            "There is no tool get_order_info; use get_order_details instead."
        ));
        assert!(fixes(
            Quirk::ToolAlias,
            "Use the exact tool names from the tool list."
        ));
        assert!(fixes(
            Quirk::RepeatFailingCall,
            "Do not repeat a call that just failed."
        ));
        assert!(fixes(
            Quirk::SkipPrecondition,
            "Call get_order_details before cancelling."
        ));
        assert!(fixes(
            Quirk::SkipPrecondition,
            "Always look up the order first."
        ));
    }

    #[test]
    fn ordinary_text_is_no_cue() {
        let ordinary = [
            "Error: Tool 'get_order_info' not found.",
            "Error: Order not found",
            "Cancel a pending order. If the order is already processed or delivered, it cannot be cancelled. The agent needs to explain the cancellation detail and ask for explicit user confirmation (yes/no) to proceed.",
            "Find user id by first name, last name, and zip code. If the user is not found, the function will return an error message. By default, find user id by email, and only call this function if the user is not found by email or cannot remember email.",
            "I received my order #W2378156 and want to exchange the keyboard.",
            "Hi, my first name is Yusuf and I want to return an item.",
            "Transfer the user to a human agent, with a summary of the user's issue. Only transfer if the user explicitly asks for a human agent.",
        ];
        for text in ordinary {
            for quirk in Quirk::ALL {
                assert!(!fixes(quirk, text), "{quirk} cue in {text:?}");
            }
        }
    }

    #[test]
    fn model_specific_quirks_have_no_cue() {
        for quirk in [Quirk::WrongVariant, Quirk::EarlyStop, Quirk::Miscount] {
            assert!(!fixes(
                quirk,
                "Use the right item variant, the exact amount, and finish every step before stopping."
            ));
        }
    }
}
