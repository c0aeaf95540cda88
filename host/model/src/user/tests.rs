use std::sync::{Arc, Mutex};

use super::scripted::first_person;
use super::*;
use crate::types::{ChatMessage, ChatModel, ChatRequest, ChatResponse, ModelFuture};

fn script() -> UserScript {
    UserScript {
        task_id: "0".into(),
        reason_for_call:
            "You received your order #W2378156 and wish to exchange the mechanical keyboard.".into(),
        known_info: Some("You are Yusuf Rossi in zip code 19122.".into()),
        unknown_info: Some("You do not remember your email address.".into()),
        task_instructions: "You are detail-oriented.".into(),
        device_actions: Vec::new(),
    }
}

fn opened(user: &ScriptedUser) -> Vec<Utterance> {
    vec![
        Utterance::agent("Hi! How can I help you today?"),
        Utterance::user(user.opening()),
    ]
}

#[test]
fn stop_tokens_are_detected() {
    assert_eq!(detect_stop("done ###STOP###"), Some(UserStop::Stop));
    assert_eq!(detect_stop("###TRANSFER###"), Some(UserStop::Transfer));
    assert_eq!(
        detect_stop("I can't say. ###OUT-OF-SCOPE###"),
        Some(UserStop::OutOfScope)
    );
    assert_eq!(detect_stop("### STOP ###"), None);
    assert_eq!(UserTurn::from_text("hello").stop, None);
}

#[test]
fn second_person_becomes_first_person() {
    assert_eq!(
        first_person("You are Yusuf Rossi in zip code 19122."),
        "I am Yusuf Rossi in zip code 19122."
    );
    assert_eq!(
        first_person("Your user id is emma_kim_9957. You were told that you'd get a refund."),
        "My user id is emma_kim_9957. I was told that I'd get a refund."
    );
    assert_eq!(
        first_person("The agent told you that your order is late, and you want it."),
        "The agent told me that my order is late, and I want it."
    );
}

#[tokio::test]
async fn scripted_user_opens_with_reason_and_identity() {
    let mut user = ScriptedUser::new(script());
    let conversation = vec![Utterance::agent("Hi! How can I help you today?")];
    let turn = user.respond(&conversation).await.unwrap();
    assert_eq!(turn.stop, None);
    assert_eq!(
        turn.text,
        "Hi. I received my order #W2378156 and wish to exchange the mechanical keyboard. \
         I am Yusuf Rossi in zip code 19122."
    );
    assert_eq!(user.name(), "scripted");
}

#[test]
fn scripted_user_answers_by_its_rules() {
    let user = ScriptedUser::new(script());
    let ask = |agent: &str| {
        let mut c = opened(&user);
        c.push(Utterance::agent(agent));
        user.reply(&c)
    };
    assert_eq!(
        ask("I will cancel it. Do you confirm (yes/no)?").text,
        CONFIRM_LINE
    );
    assert_eq!(
        ask("Could you please provide your email address?").text,
        "I do not remember my email address."
    );
    assert_eq!(
        ask("Can you tell me your user id?").text,
        "I am Yusuf Rossi in zip code 19122."
    );
    assert_eq!(ask("What color do you prefer?").text, NEUTRAL_QUESTION_LINE);
    assert_eq!(ask("The order has been found.").text, NEUTRAL_LINE);
    let done = ask("Your exchange is done. Is there anything else I can help you with?");
    assert_eq!(done.stop, Some(UserStop::Stop));
    assert!(done.text.contains(STOP_TOKEN));
    let transfer = ask("I am transferring you to a human agent now.");
    assert_eq!(transfer.stop, Some(UserStop::Transfer));
    for agent in ["Do you confirm?", "The order has been found."] {
        assert_eq!(ask(agent).stop, None, "{agent}");
    }
}

#[test]
fn scripted_user_gives_up_without_progress() {
    let user = ScriptedUser::new(script()).with_max_idle_turns(3);
    let mut c = opened(&user);
    for k in 0..3 {
        c.push(Utterance::agent(format!("Working on it, step {k}.")));
        let turn = user.reply(&c);
        if k < 2 {
            assert_eq!(turn.stop, None, "turn {k}");
        } else {
            assert_eq!(turn.stop, Some(UserStop::Stop), "turn {k}");
        }
        c.push(Utterance::user(turn.text));
    }
    // A repeated confirmation question is no progress either (the first
    // time it is).
    let mut c = opened(&user);
    for k in 0..4 {
        c.push(Utterance::agent("Shall I proceed?"));
        let turn = user.reply(&c);
        assert_eq!(turn.stop.is_some(), k == 3, "turn {k}");
        c.push(Utterance::user(turn.text));
    }
    // Progress resets the streak.
    let mut c = opened(&user);
    for agent in ["Hmm.", "Hmm hmm.", "Shall I proceed?", "Ok.", "Ok ok."] {
        c.push(Utterance::agent(agent));
        let turn = user.reply(&c);
        assert_eq!(turn.stop, None, "{agent}");
        c.push(Utterance::user(turn.text));
    }
}

/// A model that answers from a script and records what it was asked.
struct ScriptedModel {
    replies: Mutex<Vec<String>>,
    seen: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    fn new(replies: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.iter().rev().map(|s| s.to_string()).collect()),
            seen: Mutex::new(Vec::new()),
        })
    }
}

impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        "scripted-model"
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
        self.seen.lock().unwrap().push(request.clone());
        let text = self.replies.lock().unwrap().pop().unwrap_or_default();
        Box::pin(async move {
            Ok(ChatResponse {
                content: Some(text),
                ..ChatResponse::default()
            })
        })
    }
}

#[tokio::test]
async fn llm_user_flips_roles_and_detects_stop() {
    let model = ScriptedModel::new(&["Yes, please. Thanks! ###STOP###", "   "]);
    let scenario = "Instructions:\n\tYou want to cancel order #W1.";
    let mut user = LlmUser::new(model.clone(), scenario);
    assert_eq!(user.name(), "scripted-model");
    let conversation = vec![
        Utterance::agent("Hi! How can I help you today?"),
        Utterance::user("I want to cancel order #W1."),
        Utterance::agent("Done. Anything else?"),
    ];
    let turn = user.respond(&conversation).await.unwrap();
    assert_eq!(turn.stop, Some(UserStop::Stop));
    assert_eq!(turn.text, "Yes, please. Thanks! ###STOP###");
    let seen = model.seen.lock().unwrap().clone();
    let messages = &seen[0].messages;
    assert_eq!(messages.len(), 4);
    let ChatMessage::System { content } = &messages[0] else {
        panic!("system prompt first")
    };
    assert!(content.starts_with(USER_GUIDELINES.trim_end()));
    assert!(content.ends_with(&format!("<scenario>\n{scenario}\n</scenario>")));
    assert_eq!(
        messages[1],
        ChatMessage::user("Hi! How can I help you today?")
    );
    assert_eq!(
        messages[2],
        ChatMessage::assistant("I want to cancel order #W1.")
    );
    assert_eq!(messages[3], ChatMessage::user("Done. Anything else?"));
    // An empty reply is an error, not a silent turn.
    let err = user.respond(&conversation).await.unwrap_err();
    assert!(matches!(err, UserSimError::EmptyReply));
}

#[test]
fn guidelines_state_the_rules() {
    for needle in [
        STOP_TOKEN,
        TRANSFER_TOKEN,
        OUT_OF_SCOPE_TOKEN,
        "one message",
    ] {
        assert!(USER_GUIDELINES.contains(needle), "{needle}");
    }
    let prompt = "guidelines...\n<scenario>\nInstructions: X\n</scenario>";
    assert_eq!(scenario_from_prompt(prompt), "Instructions: X");
    assert_eq!(scenario_from_prompt("just text"), "just text");
}

/// A model that answers with one device call, then with text.
struct DeviceModel {
    seen: Mutex<Vec<ChatRequest>>,
}

impl ChatModel for DeviceModel {
    fn name(&self) -> &str {
        "device-model"
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a> {
        let first = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(request.clone());
            seen.len() == 1
        };
        Box::pin(async move {
            Ok(if first {
                ChatResponse {
                    tool_calls: vec![ToolCall::new("u1", "toggle_airplane_mode", "{}")],
                    ..ChatResponse::default()
                }
            } else {
                ChatResponse {
                    content: Some("Airplane mode is off now.".into()),
                    ..ChatResponse::default()
                }
            })
        })
    }
}

#[tokio::test]
async fn an_llm_user_with_device_tools_calls_them_and_reads_their_results() {
    let model = Arc::new(DeviceModel {
        seen: Mutex::new(Vec::new()),
    });
    let tool = crate::FunctionTool::new(
        "toggle_airplane_mode",
        "Toggles airplane mode.",
        serde_json::json!({"type": "object", "properties": {}}),
    );
    let mut user = LlmUser::new(model.clone(), "Instructions: X").with_device_tools(vec![tool]);
    let mut conversation = vec![Utterance::agent("Please turn off airplane mode.")];
    let turn = user.respond(&conversation).await.unwrap();
    assert_eq!(turn.calls.len(), 1, "{turn:?}");
    assert_eq!(turn.calls[0].name, "toggle_airplane_mode");
    conversation.push(Utterance::device_calls(turn.calls.clone()));
    conversation.push(Utterance::device("u1", "Airplane Mode is now OFF."));
    let turn = user.respond(&conversation).await.unwrap();
    assert!(turn.calls.is_empty());
    assert_eq!(turn.text, "Airplane mode is off now.");
    let seen = model.seen.lock().unwrap().clone();
    // The tools are offered, the device guidelines are in the prompt, and
    // the call and its result come back as the model's call and a tool
    // message answering it.
    assert_eq!(seen[0].tools.len(), 1);
    let ChatMessage::System { content } = &seen[1].messages[0] else {
        panic!("system prompt first")
    };
    assert!(content.contains(DEVICE_GUIDELINES.trim_end()));
    assert!(content.ends_with("<scenario>\nInstructions: X\n</scenario>"));
    assert_eq!(
        seen[1].messages[2],
        ChatMessage::assistant_with_tool_calls(None, turn_calls())
    );
    assert_eq!(
        seen[1].messages[3],
        ChatMessage::tool("u1", "Airplane Mode is now OFF.")
    );
    // Without tools the user is as before: no tools offered.
    let plain = LlmUser::new(model.clone(), "Instructions: X").with_device_tools(vec![]);
    assert!(!plain.system_prompt().contains(DEVICE_GUIDELINES.trim_end()));
}

fn turn_calls() -> Vec<ToolCall> {
    vec![ToolCall::new("u1", "toggle_airplane_mode", "{}")]
}
