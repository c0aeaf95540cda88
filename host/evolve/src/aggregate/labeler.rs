//! The optional LLM labeler: one schema-constrained call per failure that
//! picks its label from the closed set of [`Label::all`]. The deterministic
//! label of [`crate::aggregate::mechanism`] is always computed; this one is shown
//! beside it, for models strong enough to read an excerpt better than a
//! rule does.

use serde_json::{Value, json};

use crate::aggregate::failure_record::FailureRecord;
use crate::aggregate::mechanism::Label;
use ecdysis_model::{
    ChatMessage, ChatModel, ChatRequest, ModelError, SamplingArgs, response_format_json_schema,
};

const SYSTEM: &str = "You label why an AI agent's episode failed, by where a fix in its runtime harness would live. The harness has four layers: contract (the tool descriptions and the rules in the system prompt), skills (procedures shown to the model), realize (checks, repairs or blocks of each proposed tool call before it runs), regulate (watching the trajectory: loops, stalls, ending the turn early, advice after errors). The fault is: missing (no rule covers the situation), wrong (a rule fired and made things worse), ignored (a rule fired or advised and the model went on regardless). If the environment itself could not run the task, the label is the environment. Answer with one JSON object: {\"label\": \"<one of the labels listed>\"}.";

/// Why a failure got no label from the model.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    /// The model call failed.
    #[error("the labeler's call failed: {0}")]
    Model(#[from] ModelError),
    /// The reply named no label of the closed set.
    #[error("the labeler answered no label of the set: {reply}")]
    Unreadable {
        /// The reply (clipped).
        reply: String,
    },
}

/// The JSON schema of the reply: one label of the closed set.
pub fn reply_schema() -> Value {
    let labels: Vec<String> = Label::all().into_iter().map(Label::text).collect();
    json!({
        "type": "object",
        "properties": {"label": {"type": "string", "enum": labels}},
        "required": ["label"],
        "additionalProperties": false
    })
}

/// The request for one failure: its excerpt (scrubbed of every oracle
/// field, as all evidence is), the closed set, temperature 0.
pub fn request(record: &FailureRecord, structured: bool) -> ChatRequest {
    let labels: Vec<String> = Label::all().into_iter().map(Label::text).collect();
    let user = format!(
        "Labels: {}\n\nThe failed episode, reply by reply:\n{}",
        labels.join("; "),
        record.excerpt()
    );
    let mut req = ChatRequest::new(vec![ChatMessage::system(SYSTEM), ChatMessage::user(user)])
        .with_sampling(SamplingArgs {
            temperature: Some(0.0),
            max_tokens: Some(64),
            ..SamplingArgs::default()
        });
    if structured {
        let (key, value) = response_format_json_schema("failure_label", reply_schema());
        req.extra.insert(key, value);
    }
    req
}

/// The model's label of one failure.
pub async fn llm_label(
    model: &dyn ChatModel,
    record: &FailureRecord,
    structured: bool,
) -> Result<Label, LabelError> {
    let reply = model.chat(&request(record, structured)).await?;
    let text = reply.text();
    parse_reply(text).ok_or_else(|| LabelError::Unreadable {
        reply: crate::aggregate::failure_record::clip(text, 200),
    })
}

/// The label of a reply: `{"label": …}` (the first JSON object in it), or a
/// bare label text.
pub fn parse_reply(text: &str) -> Option<Label> {
    let object = text
        .find('{')
        .and_then(|a| text.rfind('}').map(|b| &text[a..=b]))
        .and_then(|j| serde_json::from_str::<Value>(j).ok());
    match object {
        Some(v) => Label::parse(v.get("label")?.as_str()?),
        None => Label::parse(text.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::mechanism::{Fault, Layer};
    use ecdysis_model::{ChatResponse, ModelFuture};

    struct Fixed(&'static str);

    impl ChatModel for Fixed {
        fn name(&self) -> &str {
            "fixed"
        }

        fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
            assert!(request.messages[1].text().contains("reply by reply"));
            let text = self.0.to_string();
            Box::pin(async move {
                Ok(ChatResponse {
                    content: Some(text),
                    ..ChatResponse::default()
                })
            })
        }
    }

    fn record() -> FailureRecord {
        let mut r = ecdysis_runner::agent::EpisodeRecord::bare("t", 0, 0.0);
        r.domain = "agentbench/dbbench".into();
        FailureRecord::from_episode(&r)
    }

    #[tokio::test]
    async fn a_label_of_the_set_is_read_and_anything_else_refused() {
        let l = llm_label(
            &Fixed(r#"{"label": "realize: rule missing"}"#),
            &record(),
            true,
        )
        .await
        .unwrap();
        assert_eq!(l, Label::rule(Layer::Realize, Fault::Missing));
        let env = llm_label(&Fixed("environment: not the harness"), &record(), false)
            .await
            .unwrap();
        assert_eq!(env, Label::ENVIRONMENT);
        let err = llm_label(
            &Fixed(r#"{"label": "kernel: rule missing"}"#),
            &record(),
            true,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, LabelError::Unreadable { .. }), "{err}");
        assert!(parse_reply("no idea").is_none());
    }

    #[test]
    fn the_schema_lists_the_closed_set_and_the_request_carries_it() {
        let schema = reply_schema();
        let labels = schema["properties"]["label"]["enum"].as_array().unwrap();
        assert_eq!(labels.len(), Label::all().len());
        let req = request(&record(), true);
        assert_eq!(req.extra["response_format"]["type"], "json_schema");
        assert!(
            !request(&record(), false)
                .extra
                .contains_key("response_format")
        );
        // No oracle field reaches the prompt: only the scrubbed excerpt.
        assert!(req.messages[1].text().contains("task t trial 0"));
    }
}
