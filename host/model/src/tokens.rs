//! Token counts without a tokenizer, and the context window an endpoint
//! reports: what request budgets (the evolution roles' prompts, the agent's
//! request cap) are checked against. The estimate errs high (see
//! [`estimate_tokens`]), so a request it admits fits.

use std::time::Duration;

use crate::{ChatMessage, ChatRequest};

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
    #[derive(PartialEq, Clone, Copy)]
    enum Class {
        Letter,
        Digit,
        Space,
        Newline,
        Punct,
        Other,
    }
    fn class(c: char) -> Class {
        match c {
            c if c.is_ascii_alphabetic() => Class::Letter,
            c if c.is_ascii_digit() => Class::Digit,
            ' ' | '\t' => Class::Space,
            '\n' | '\r' => Class::Newline,
            c if c.is_ascii() => Class::Punct,
            _ => Class::Other,
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let mut n = 0usize;
    let mut i = 0usize;
    while i < chars.len() {
        let k = class(chars[i]);
        let mut j = i;
        while j < chars.len() && class(chars[j]) == k {
            j += 1;
        }
        let run = j - i;
        n += match k {
            Class::Letter => run.div_ceil(4),
            Class::Digit => run,
            Class::Punct => run.div_ceil(2),
            Class::Newline => 1,
            Class::Space if run == 1 => {
                usize::from(!chars.get(j).is_some_and(|c| c.is_ascii_alphabetic()))
            }
            Class::Space => run.div_ceil(4),
            Class::Other => chars[i..j].iter().map(|c| c.len_utf8()).sum(),
        };
        i = j;
    }
    n
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
    let calls: usize = request
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls
                .iter()
                .map(|c| {
                    MESSAGE_OVERHEAD + estimate_tokens(&c.name) + estimate_tokens(&c.arguments)
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
                + estimate_tokens(&t.name)
                + estimate_tokens(&t.description)
                + estimate_tokens(&t.parameters.to_string())
        })
        .sum();
    estimate_messages(&request.messages) + calls + tools
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
