//! Token counts without a tokenizer, and the context window an endpoint
//! reports: what request budgets (the evolution roles' prompts, the agent's
//! request cap) are checked against. The estimate errs high (see
//! [`estimate_tokens`]), so a request it admits fits.

use std::sync::Arc;
use std::time::Duration;

use crate::{ChatMessage, ChatRequest, FunctionTool};

/// Tokens a chat template adds around one message (role markers, separators).
pub const MESSAGE_OVERHEAD: usize = 8;

/// Tokens a request adds besides its messages (the reply's opening marker,
/// a default system line some templates insert).
pub const REQUEST_OVERHEAD: usize = 32;

/// Tokens of one text, estimated without a tokenizer, erring high:
/// ASCII letters one token per four (rounded up) per run, every digit one,
/// punctuation one per two (rounded up) per run, a newline run one, a
/// space run of two or more one per four, a single space nothing before a
/// letter (BPE merges it into the word) and one otherwise, any other
/// character one per UTF-8 byte.
pub fn estimate_tokens(text: &str) -> usize {
    // Runs are found over bytes, not chars: in UTF-8 an ASCII character is
    // one byte below 0x80 and every byte of any other character is 0x80 or
    // above, so byte runs are exactly the character runs, and a run of
    // other characters counts its bytes, which is its length here.
    let bytes = text.as_bytes();
    let mut n = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let k = class(bytes[i]);
        let start = i;
        i += 1;
        while i < bytes.len() && class(bytes[i]) == k {
            i += 1;
        }
        let run = i - start;
        n += match k {
            Class::Letter => run.div_ceil(4),
            Class::Digit | Class::Other => run,
            Class::Punct => run.div_ceil(2),
            Class::Newline => 1,
            Class::Space if run == 1 => {
                usize::from(!bytes.get(i).is_some_and(u8::is_ascii_alphabetic))
            }
            Class::Space => run.div_ceil(4),
        };
    }
    n
}

/// The character classes of [`estimate_tokens`], by byte.
#[derive(PartialEq, Clone, Copy)]
enum Class {
    Letter,
    Digit,
    Space,
    Newline,
    Punct,
    /// A byte of a non-ASCII character.
    Other,
}

fn class(b: u8) -> Class {
    match b {
        b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
        b'0'..=b'9' => Class::Digit,
        b' ' | b'\t' => Class::Space,
        b'\n' | b'\r' => Class::Newline,
        0..=0x7f => Class::Punct,
        _ => Class::Other,
    }
}

/// Estimated prompt tokens of a request's messages.
pub fn estimate_messages(messages: &[ChatMessage]) -> usize {
    REQUEST_OVERHEAD
        + messages
            .iter()
            .map(|m| MESSAGE_OVERHEAD + estimate_tokens(m.text()))
            .sum::<usize>()
}

/// Estimated prompt tokens of a whole request: its messages (tool calls'
/// arguments included) and the tool schemas it offers, which a chat
/// template renders into the prompt too.
pub fn estimate_request(request: &ChatRequest) -> usize {
    #[cfg(test)]
    probe::REQUESTS.with(|n| n.set(n.get() + 1));
    REQUEST_OVERHEAD
        + request.messages.iter().map(message_tokens).sum::<usize>()
        + tools_tokens(&request.tools)
}

/// One message's share of [`estimate_request`]: its text and, for an
/// assistant turn, its tool calls.
fn message_tokens(message: &ChatMessage) -> usize {
    #[cfg(test)]
    probe::MESSAGES.with(|n| n.set(n.get() + 1));
    let calls = match message {
        ChatMessage::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .map(|c| MESSAGE_OVERHEAD + estimate_tokens(&c.name) + estimate_tokens(&c.arguments))
            .sum(),
        _ => 0,
    };
    MESSAGE_OVERHEAD + estimate_tokens(message.text()) + calls
}

/// The tool schemas' share of [`estimate_request`].
fn tools_tokens(tools: &[FunctionTool]) -> usize {
    tools
        .iter()
        .map(|t| {
            MESSAGE_OVERHEAD
                + estimate_tokens(&t.name)
                + estimate_tokens(&t.description)
                + estimate_tokens(&t.parameters.to_string())
        })
        .sum()
}

/// A conversation that grows by appending, with its estimate kept per
/// message: [`Conversation::estimate`] equals [`estimate_request`] of these
/// messages and tools but estimates only the messages added (or changed)
/// since it last ran, where the whole conversation would make an episode's
/// estimates quadratic in its length. Messages change only through its
/// methods, so no count can go stale; nothing is estimated until asked.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    messages: Vec<ChatMessage>,
    /// The estimates of `messages[..counts.len()]`, in order.
    counts: Vec<usize>,
    /// The sum of `counts`.
    counted: usize,
    /// The tool set last estimated (held, so its address cannot be reused by
    /// another set) and its estimate.
    tools: Option<(Arc<[FunctionTool]>, usize)>,
}

impl Conversation {
    /// An empty conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a message.
    pub fn push(&mut self, message: ChatMessage) {
        self.messages.push(message);
    }

    /// The last message, to change in place; its estimate is redone at the
    /// next [`Conversation::estimate`].
    pub fn last_mut(&mut self) -> Option<&mut ChatMessage> {
        let last = self.messages.len().checked_sub(1)?;
        if self.counts.len() > last {
            self.counted -= self.counts.pop().unwrap_or(0);
        }
        self.messages.last_mut()
    }

    /// The messages, in order.
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// The messages moved out, to send in a request without copying the
    /// whole conversation on every turn; [`Conversation::give_back`] puts
    /// them back. Until then the conversation is empty.
    pub fn lend(&mut self) -> Vec<ChatMessage> {
        std::mem::take(&mut self.messages)
    }

    /// Puts back the messages [`Conversation::lend`] moved out (a request's
    /// own, unchanged). Estimates of messages that are not there any more
    /// are dropped.
    pub fn give_back(&mut self, messages: Vec<ChatMessage>) {
        debug_assert!(self.messages.is_empty(), "give_back without lend");
        self.messages = messages;
        if self.counts.len() > self.messages.len() {
            self.counts.truncate(self.messages.len());
            self.counted = self.counts.iter().sum();
        }
    }

    /// [`estimate_request`] of a request carrying these messages and
    /// `tools`; the tool set is estimated again only when it is another
    /// one.
    pub fn estimate(&mut self, tools: &Arc<[FunctionTool]>) -> usize {
        for message in &self.messages[self.counts.len()..] {
            let n = message_tokens(message);
            self.counts.push(n);
            self.counted += n;
        }
        let tools_estimate = match &self.tools {
            Some((held, n)) if Arc::ptr_eq(held, tools) => *n,
            _ => {
                let n = tools_tokens(tools);
                self.tools = Some((tools.clone(), n));
                n
            }
        };
        REQUEST_OVERHEAD + self.counted + tools_estimate
    }
}

impl From<Vec<ChatMessage>> for Conversation {
    fn from(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }
}

/// How many estimates this thread has made, for tests that check a path
/// makes none, or each only once.
#[cfg(test)]
pub(crate) mod probe {
    use std::cell::Cell;

    thread_local! {
        pub(crate) static REQUESTS: Cell<usize> = const { Cell::new(0) };
        pub(crate) static MESSAGES: Cell<usize> = const { Cell::new(0) };
    }

    /// Whole requests estimated on this thread so far.
    pub(crate) fn requests() -> usize {
        REQUESTS.with(Cell::get)
    }

    /// Single messages estimated on this thread so far (a whole request
    /// counts each of its messages).
    pub(crate) fn messages() -> usize {
        MESSAGES.with(Cell::get)
    }
}

/// The context window an OpenAI-compatible endpoint reports, if it does:
/// llama.cpp's server on `GET /props` (`default_generation_settings.n_ctx`)
/// or `GET /slots`, vLLM on `GET /v1/models` (`max_model_len`). `None` when
/// the endpoint says nothing within a few seconds.
pub async fn endpoint_context(
    base_url: &str,
    model: Option<&str>,
    api_key: Option<&str>,
) -> Option<(usize, String)> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    let base = base_url.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let get = |url: String| {
        let mut req = client.get(url);
        if let Some(k) = api_key {
            req = req.bearer_auth(k);
        }
        req
    };
    let json = |r: reqwest::Response| async move {
        if r.status().is_success() {
            r.json::<serde_json::Value>().await.ok()
        } else {
            None
        }
    };
    let as_ctx = |v: &serde_json::Value| v.as_u64().filter(|n| *n > 0).map(|n| n as usize);
    let url = format!("{root}/props");
    if let Ok(r) = get(url.clone()).send().await
        && let Some(v) = json(r).await
        && let Some(n) = as_ctx(&v["default_generation_settings"]["n_ctx"]).or(as_ctx(&v["n_ctx"]))
    {
        return Some((n, url));
    }
    let url = format!("{root}/slots");
    if let Ok(r) = get(url.clone()).send().await
        && let Some(v) = json(r).await
        && let Some(n) = as_ctx(&v[0]["n_ctx"])
    {
        return Some((n, url));
    }
    let url = format!("{base}/models");
    if let Ok(r) = get(url.clone()).send().await
        && let Some(v) = json(r).await
        && let Some(models) = v["data"].as_array()
    {
        let pick = models
            .iter()
            .find(|m| model.is_some_and(|name| m["id"] == name))
            .or(models.first());
        if let Some(n) = pick.and_then(|m| as_ctx(&m["max_model_len"])) {
            return Some((n, url));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::ToolCall;

    /// The estimate as it was first written, over a `Vec<char>`: the
    /// reference the byte-wise one must match.
    fn reference_tokens(text: &str) -> usize {
        #[derive(PartialEq, Clone, Copy)]
        enum C {
            Letter,
            Digit,
            Space,
            Newline,
            Punct,
            Other,
        }
        fn class(c: char) -> C {
            match c {
                c if c.is_ascii_alphabetic() => C::Letter,
                c if c.is_ascii_digit() => C::Digit,
                ' ' | '\t' => C::Space,
                '\n' | '\r' => C::Newline,
                c if c.is_ascii() => C::Punct,
                _ => C::Other,
            }
        }
        let chars: Vec<char> = text.chars().collect();
        let (mut n, mut i) = (0, 0);
        while i < chars.len() {
            let k = class(chars[i]);
            let mut j = i;
            while j < chars.len() && class(chars[j]) == k {
                j += 1;
            }
            let run = j - i;
            n += match k {
                C::Letter => run.div_ceil(4),
                C::Digit => run,
                C::Punct => run.div_ceil(2),
                C::Newline => 1,
                C::Space if run == 1 => {
                    usize::from(!chars.get(j).is_some_and(|c| c.is_ascii_alphabetic()))
                }
                C::Space => run.div_ceil(4),
                C::Other => chars[i..j].iter().map(|c| c.len_utf8()).sum(),
            };
            i = j;
        }
        n
    }

    /// The whole-request estimate as it was first written.
    fn reference_request(request: &ChatRequest) -> usize {
        let messages: usize = request
            .messages
            .iter()
            .map(|m| MESSAGE_OVERHEAD + reference_tokens(m.text()))
            .sum();
        let calls: usize = request
            .messages
            .iter()
            .map(|m| match m {
                ChatMessage::Assistant { tool_calls, .. } => tool_calls
                    .iter()
                    .map(|c| {
                        MESSAGE_OVERHEAD
                            + reference_tokens(&c.name)
                            + reference_tokens(&c.arguments)
                    })
                    .sum(),
                _ => 0,
            })
            .sum();
        let tools: usize = request
            .tools
            .iter()
            .map(|t| {
                MESSAGE_OVERHEAD
                    + reference_tokens(&t.name)
                    + reference_tokens(&t.description)
                    + reference_tokens(&t.parameters.to_string())
            })
            .sum();
        REQUEST_OVERHEAD + messages + calls + tools
    }

    /// A deterministic text of `len` pieces drawn from every class, runs of
    /// each length, and characters of two to four UTF-8 bytes.
    fn mixed_text(seed: u64, len: usize) -> String {
        const PIECES: &[&str] = &[
            "a", "Z", "word", "7", "42", " ", "  ", "\t", "\n", "\r\n", ".", "{\"", "\":", "-",
            "é", "τ²", "€", "😀", "e\u{301}", "日本", "\u{a0}", "~", "_", "\u{7f}",
        ];
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut out = String::new();
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.push_str(PIECES[(state % PIECES.len() as u64) as usize]);
        }
        out
    }

    fn tools(names: &[&str]) -> Arc<[FunctionTool]> {
        names
            .iter()
            .map(|n| {
                FunctionTool::new(
                    *n,
                    format!("Does {n} — for the résumé."),
                    json!({"type": "object", "properties": {"id": {"type": "string"}}}),
                )
            })
            .collect::<Vec<_>>()
            .into()
    }

    #[test]
    fn the_bytewise_estimate_equals_the_charwise_one() {
        let fixed = [
            "",
            "hello",
            "a 1",
            " x",
            "x ",
            " ",
            "    x",
            "a\n\n\nb",
            "\r\n\r\n",
            "829.43",
            "{\"a\": [1, 2]}",
            "τ² — naïve café 😀 日本語",
            " é",
            " \u{301}a",
            "a\tb \tc",
        ];
        for text in fixed {
            assert_eq!(estimate_tokens(text), reference_tokens(text), "{text:?}");
        }
        for seed in 0..500 {
            let text = mixed_text(seed, (seed as usize * 7) % 300);
            assert_eq!(estimate_tokens(&text), reference_tokens(&text), "{text:?}");
        }
        let long = mixed_text(1, 200_000);
        assert_eq!(estimate_tokens(&long), reference_tokens(&long));
    }

    #[test]
    fn a_growing_conversation_is_estimated_as_the_whole_request() {
        let mut conversation = Conversation::new();
        let mut set = tools(&["find_user", "cancel_order"]);
        let check = |conversation: &mut Conversation, set: &Arc<[FunctionTool]>| {
            let request =
                ChatRequest::new(conversation.messages().to_vec()).with_tools(set.clone());
            let whole = estimate_request(&request);
            assert_eq!(whole, reference_request(&request));
            assert_eq!(conversation.estimate(set), whole);
        };
        check(&mut conversation, &set);
        conversation.push(ChatMessage::system(mixed_text(0, 2000)));
        check(&mut conversation, &set);
        for seed in 1..60u64 {
            match seed % 4 {
                0 => conversation.push(ChatMessage::user(mixed_text(seed, 40))),
                1 => conversation.push(ChatMessage::assistant_with_tool_calls(
                    (seed % 8 == 1).then(|| mixed_text(seed, 10)),
                    vec![
                        ToolCall::new(format!("c{seed}"), "find_user", mixed_text(seed, 20)),
                        ToolCall::new(format!("d{seed}"), "cancel_order", "{\"id\": \"ü\"}"),
                    ],
                )),
                2 => {
                    conversation.push(ChatMessage::tool(format!("c{seed}"), mixed_text(seed, 300)))
                }
                _ => conversation.push(ChatMessage::assistant(mixed_text(seed, 60))),
            }
            if seed % 5 == 0 {
                // Grown in place, as a harness note appended to a result.
                match conversation.last_mut() {
                    Some(ChatMessage::User { content } | ChatMessage::Tool { content, .. }) => {
                        content.push_str("\n\n[note] ☃ 12 more");
                    }
                    Some(ChatMessage::Assistant { content, .. }) => *content = None,
                    _ => {}
                }
            }
            if seed == 30 {
                set = tools(&["find_user", "cancel_order", "transfer_to_human_agents"]);
            }
            // Sometimes twice between pushes, sometimes not at all.
            if seed % 3 != 0 {
                check(&mut conversation, &set);
            }
            if seed % 7 == 0 {
                check(&mut conversation, &set);
            }
        }
        check(&mut conversation, &set);
    }

    #[test]
    fn each_message_is_estimated_once_unless_changed() {
        let set = tools(&["find_user"]);
        let mut conversation =
            Conversation::from(vec![ChatMessage::system("policy"), ChatMessage::user("hi")]);
        let before = probe::messages();
        conversation.estimate(&set);
        assert_eq!(probe::messages() - before, 2);
        conversation.estimate(&set);
        assert_eq!(
            probe::messages() - before,
            2,
            "nothing new, nothing counted"
        );
        conversation.push(ChatMessage::assistant("hello"));
        conversation.push(ChatMessage::tool("c1", "{}"));
        conversation.estimate(&set);
        assert_eq!(probe::messages() - before, 4);
        if let Some(ChatMessage::Tool { content, .. }) = conversation.last_mut() {
            content.push_str(" note");
        }
        conversation.estimate(&set);
        assert_eq!(
            probe::messages() - before,
            5,
            "the changed last message again"
        );
    }

    /// Prints how much cheaper the episode's estimates are now: a growing
    /// conversation estimated whole with the char-wise estimate at every step
    /// (as before) against kept per-message counts with the byte-wise one.
    /// `cargo test -p ecdysis-model --lib bench_growing_conversation_estimate -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark: prints a ratio"]
    fn bench_growing_conversation_estimate() {
        let set = tools(&["find_user", "get_order", "cancel_order", "update_address"]);
        let mut messages = vec![ChatMessage::system(mixed_text(0, 3000))];
        for seed in 1..240u64 {
            messages.push(match seed % 3 {
                0 => ChatMessage::user(mixed_text(seed, 60)),
                1 => ChatMessage::assistant_with_tool_calls(
                    None,
                    vec![ToolCall::new(
                        format!("c{seed}"),
                        "get_order",
                        mixed_text(seed, 15),
                    )],
                ),
                _ => ChatMessage::tool(format!("c{seed}"), mixed_text(seed, 400)),
            });
        }
        // The requests are built outside the timings (an episode builds
        // them to send anyway); the kept counts' timing includes copying
        // each message into the conversation.
        let requests: Vec<ChatRequest> = (1..=messages.len())
            .map(|step| ChatRequest::new(messages[..step].to_vec()).with_tools(set.clone()))
            .collect();
        let rounds = 3;
        let (mut old_sum, mut whole_sum, mut new_sum) = (0usize, 0usize, 0usize);
        let start = Instant::now();
        for _ in 0..rounds {
            old_sum += requests.iter().map(reference_request).sum::<usize>();
        }
        let old = start.elapsed();
        let start = Instant::now();
        for _ in 0..rounds {
            whole_sum += requests.iter().map(estimate_request).sum::<usize>();
        }
        let whole = start.elapsed();
        let start = Instant::now();
        for _ in 0..rounds {
            let mut conversation = Conversation::new();
            for message in &messages {
                conversation.push(message.clone());
                new_sum += conversation.estimate(&set);
            }
        }
        let new = start.elapsed();
        assert_eq!(old_sum, whole_sum);
        assert_eq!(old_sum, new_sum);
        let ratio = |a: std::time::Duration, b: std::time::Duration| {
            a.as_secs_f64() / b.as_secs_f64().max(1e-9)
        };
        println!(
            "{} steps x {rounds}: char-wise whole request {old:?}, byte-wise whole request {whole:?}, kept counts {new:?}",
            messages.len()
        );
        println!(
            "ratio char-wise whole / byte-wise whole: {:.1}x; char-wise whole / kept counts: {:.1}x",
            ratio(old, whole),
            ratio(old, new)
        );
    }
}
