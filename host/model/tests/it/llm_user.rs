//! The LLM user simulator over real HTTP against the mock server.

use std::sync::Arc;

use ecdysis_model::mock::{MockReply, MockServer};
use ecdysis_model::{
    EndpointLimiter, HttpChatModel, LlmUser, ModelConfig, UserSimulator, UserStop, Utterance,
};
use serde_json::Value;

#[tokio::test]
async fn llm_user_over_http_against_the_mock_server() {
    let server = MockServer::start().await.unwrap();
    server.push(MockReply::text("Please transfer me. ###TRANSFER###"));
    let mut config = ModelConfig::new("user-model", server.base_url());
    config.api_key_env = None;
    let model = HttpChatModel::new(config, &EndpointLimiter::new()).unwrap();
    let mut user = LlmUser::new(Arc::new(model), "You want a human agent.");
    let conversation = vec![Utterance::agent("How can I help?")];
    let turn = user.respond(&conversation).await.unwrap();
    assert_eq!(turn.stop, Some(UserStop::Transfer));
    let body = server.requests()[0].json().unwrap();
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user"]);
    assert_eq!(
        body["messages"][1]["content"],
        Value::from("How can I help?")
    );
}
