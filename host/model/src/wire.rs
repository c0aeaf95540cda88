//! The OpenAI `/chat/completions` wire format: building the body, reading a
//! completion leniently, and turning error replies into typed errors. Pure
//! functions, so every server dialect can be unit-tested without a socket.

use serde_json::{Map, Value};

use crate::error::ModelError;
use crate::types::{ChatRequest, ChatResponse, ToolCall, Usage, tool_call_from_wire};

/// How much of an unparseable body goes into an error, for the log.
const EXCERPT_CHARS: usize = 500;

/// The exact JSON body sent for `request` to `model`. Extra args are merged
/// last (role config first, then the request's own), so an operator can set
/// any field a particular server needs (e.g. `chat_template_kwargs`).
pub(crate) fn build_body(
    model: &str,
    request: &ChatRequest,
    config_extra: &Map<String, Value>,
) -> Result<Value, serde_json::Error> {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_owned()));
    body.insert("messages".into(), serde_json::to_value(&request.messages)?);
    if !request.tools.is_empty() {
        body.insert("tools".into(), serde_json::to_value(&request.tools)?);
    }
    if let Some(choice) = &request.tool_choice {
        body.insert("tool_choice".into(), serde_json::to_value(choice)?);
    }
    if let Value::Object(sampling) = serde_json::to_value(&request.sampling)? {
        body.extend(sampling);
    }
    for (key, value) in config_extra.iter().chain(request.extra.iter()) {
        body.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(body))
}

/// Reads a 2xx body as a chat completion.
pub(crate) fn parse_response(endpoint: &str, body: &[u8]) -> Result<ChatResponse, ModelError> {
    let malformed = |message: String| ModelError::MalformedResponse {
        endpoint: endpoint.to_owned(),
        message,
        body_excerpt: excerpt(body),
    };
    let value: Value =
        serde_json::from_slice(body).map_err(|e| malformed(format!("invalid JSON: {e}")))?;
    // Some proxies answer 200 with an error object; treat it like the status
    // it names (or a 502) so it is retried or surfaced like any other.
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        let status = error
            .get("code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| (400..600).contains(c))
            .unwrap_or(502);
        return Err(classify_status(
            endpoint,
            status,
            error_message(&value),
            None,
        ));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| malformed("no `choices[0]` in the reply".into()))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| malformed("no `choices[0].message` object".into()))?;

    let mut tool_calls: Vec<ToolCall> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .filter_map(|(i, call)| tool_call_from_wire(call, i))
                .collect()
        })
        .unwrap_or_default();
    // The deprecated single `function_call` form, still emitted by a few servers.
    if tool_calls.is_empty()
        && let Some(call) = message.get("function_call").filter(|c| c.is_object())
    {
        let wrapped = serde_json::json!({ "function": call });
        tool_calls.extend(tool_call_from_wire(&wrapped, 0));
    }

    Ok(ChatResponse {
        content: content_text(message.get("content")),
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage: value.get("usage").and_then(parse_usage),
        model: value
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        reasoning: ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|k| message.get(*k).and_then(Value::as_str))
            .map(str::to_owned),
        cached: false,
        attempts: 0,
        testbed: None,
    })
}

/// `content` may be a string, null, or (newer APIs) an array of parts.
fn content_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect(),
        ),
        _ => None,
    }
}

/// The token counts of an OpenAI-style `usage` object (cached prompt tokens
/// from `prompt_tokens_details.cached_tokens` or DeepSeek's
/// `prompt_cache_hit_tokens`); `None` when `usage` is not an object.
pub fn parse_usage(usage: &Value) -> Option<Usage> {
    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    if !usage.is_object() {
        return None;
    }
    Some(Usage {
        prompt_tokens: count("/prompt_tokens").unwrap_or(0),
        completion_tokens: count("/completion_tokens").unwrap_or(0),
        cached_prompt_tokens: count("/prompt_tokens_details/cached_tokens")
            .or_else(|| count("/prompt_cache_hit_tokens"))
            .unwrap_or(0),
    })
}

/// The endpoint's own message from an error body: OpenAI's
/// `{"error":{"message"}}`, `{"error":"..."}`, FastAPI's `{"detail"}`,
/// `{"message"}`, or the raw text.
pub fn error_message_from_body(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => error_message(&value),
        Err(_) => excerpt(body),
    }
}

fn error_message(value: &Value) -> String {
    let found = [
        "/error/message",
        "/error",
        "/detail",
        "/message",
        "/detail/0/msg",
    ]
    .iter()
    .find_map(|p| value.pointer(p).and_then(Value::as_str));
    match found {
        Some(text) => text.to_owned(),
        None => truncate(&value.to_string()),
    }
}

/// Maps a non-2xx status (and the endpoint's message) to a typed error.
pub fn classify_status(
    endpoint: &str,
    status: u16,
    message: String,
    retry_after_secs: Option<f64>,
) -> ModelError {
    let endpoint = endpoint.to_owned();
    // Context overflow is reported as 400, 413, 422 or even 500 depending on
    // the server; whatever the status, retrying the same prompt cannot help.
    if status != 429 && mentions_context_length(&message) {
        return ModelError::ContextLength { endpoint, message };
    }
    match status {
        429 => ModelError::RateLimited {
            endpoint,
            message,
            retry_after_secs,
        },
        401 | 403 => ModelError::Unauthorized {
            endpoint,
            status,
            message,
        },
        404 => ModelError::NotFound { endpoint, message },
        408 | 500..=599 => ModelError::Unavailable {
            endpoint,
            status,
            message,
        },
        400..=499 => ModelError::BadRequest {
            endpoint,
            status,
            message,
        },
        _ => ModelError::MalformedResponse {
            endpoint,
            message: format!("unexpected HTTP status {status}"),
            body_excerpt: message,
        },
    }
}

/// Phrases vLLM, OpenAI, llama.cpp, DeepSeek and others use for "prompt too
/// long".
fn mentions_context_length(message: &str) -> bool {
    let lower = message.to_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "context size",
        "maximum context",
        "exceed_context",
        "prompt is too long",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

fn excerpt(body: &[u8]) -> String {
    truncate(&String::from_utf8_lossy(body))
}

fn truncate(text: &str) -> String {
    ecdysis_sys::text::clip(text, EXCERPT_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorClass;
    use crate::types::{ChatMessage, FunctionTool, SamplingArgs, ToolChoice};
    use serde_json::json;

    #[test]
    fn body_has_every_field_and_extras_override() {
        let request = ChatRequest::new(vec![ChatMessage::user("hi")])
            .with_tools(vec![FunctionTool::new("f", "d", json!({"type": "object"}))])
            .with_tool_choice(ToolChoice::Required)
            .with_sampling(SamplingArgs {
                temperature: Some(0.5),
                top_p: Some(0.9),
                seed: Some(7),
                max_tokens: Some(64),
                stop: vec!["###".into()],
            })
            .with_extra("top_k", json!(20));
        let mut config_extra = Map::new();
        config_extra.insert("top_k".into(), json!(5));
        config_extra.insert("temperature".into(), json!(0.1));
        let body = build_body("m", &request, &config_extra).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(
            body["messages"][0],
            json!({"role": "user", "content": "hi"})
        );
        assert_eq!(body["tools"][0]["function"]["name"], "f");
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["top_p"], 0.9);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["stop"], json!(["###"]));
        // Config extra overrides sampling; request extra overrides config.
        assert_eq!(body["temperature"], 0.1);
        assert_eq!(body["top_k"], 20);
        assert!(
            build_body("m", &ChatRequest::default(), &Map::new())
                .unwrap()
                .get("tools")
                .is_none()
        );
    }

    #[test]
    fn parses_tool_calls_usage_and_dialects() {
        let body = json!({
            "model": "served",
            "choices": [{
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "reasoning_content": "thinking",
                    "tool_calls": [
                        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{bad"}},
                        {"function": {"name": "g", "arguments": {"k": 1}}}
                    ]
                }
            }],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "prompt_cache_hit_tokens": 4}
        });
        let r = parse_response("e", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.text(), "ab");
        assert_eq!(r.reasoning.as_deref(), Some("thinking"));
        assert_eq!(r.tool_calls[0], ToolCall::new("x", "f", "{bad"));
        assert_eq!(r.tool_calls[1], ToolCall::new("call_1", "g", "{\"k\":1}"));
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.model.as_deref(), Some("served"));
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 3,
                cached_prompt_tokens: 4
            })
        );
    }

    #[test]
    fn legacy_function_call_and_null_content() {
        let body = json!({"choices": [{"message": {"content": null,
            "function_call": {"name": "f", "arguments": "{}"}}}]});
        let r = parse_response("e", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.tool_calls, vec![ToolCall::new("call_0", "f", "{}")]);
        assert_eq!(r.usage, None);
    }

    #[test]
    fn malformed_replies_are_typed() {
        for body in [
            &b"<html>oops"[..],
            b"{}",
            b"{\"choices\": []}",
            b"{\"choices\": [{}]}",
        ] {
            let err = parse_response("e", body).unwrap_err();
            assert!(
                matches!(err, ModelError::MalformedResponse { .. }),
                "{err:?}"
            );
        }
        let err = parse_response("e", br#"{"error": {"message": "overloaded"}}"#).unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        assert_eq!(err.message(), "overloaded");
    }

    #[test]
    fn status_classification() {
        let msg = |b: &str| error_message_from_body(b.as_bytes());
        assert_eq!(msg(r#"{"error": {"message": "nope"}}"#), "nope");
        assert_eq!(msg(r#"{"error": "flat"}"#), "flat");
        assert_eq!(msg(r#"{"detail": "fastapi"}"#), "fastapi");
        assert_eq!(msg("plain text"), "plain text");

        let class = |s, m: &str| classify_status("e", s, m.into(), None).class();
        assert_eq!(class(401, "x"), ErrorClass::Request);
        assert_eq!(class(404, "x"), ErrorClass::Request);
        assert_eq!(class(400, "x"), ErrorClass::Request);
        assert_eq!(class(503, "x"), ErrorClass::Infrastructure);
        assert_eq!(
            class(400, "This model's maximum context length is 8192 tokens"),
            ErrorClass::Model
        );
        assert_eq!(
            class(500, "the request exceeds the available context size"),
            ErrorClass::Model
        );
        assert!(classify_status("e", 429, "slow".into(), Some(2.0)).is_retryable());
        assert!(classify_status("e", 408, "slow".into(), None).is_retryable());
        assert!(!classify_status("e", 422, "bad".into(), None).is_retryable());
    }
}
