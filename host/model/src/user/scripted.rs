//! [`ScriptedUser`]: a deterministic, offline user driven by a task's
//! structured instructions.

use crate::types::ToolCall;
use crate::user::{
    STOP_TOKEN, Speaker, TRANSFER_TOKEN, UserFuture, UserSimulator, UserTurn, Utterance,
};

pub use ecdysis_env::UserScript;

/// The answer to a confirmation question.
pub const CONFIRM_LINE: &str = "Yes, please go ahead.";
/// The answer to a question the script cannot answer.
pub const NEUTRAL_QUESTION_LINE: &str =
    "I'm not sure about that. Could you please help me with my request?";
/// The answer to a statement that asks nothing.
pub const NEUTRAL_LINE: &str = "Okay.";

/// A deterministic user for offline runs. Its rules, applied to the agent's
/// last message (case-insensitive), first match wins:
///
/// 1. No user message yet: open with the reason for the call and the known
///    identity facts, turned into the first person ("I received my order…
///    I am Yusuf Rossi in zip code 19122.").
/// 2. In a dual-control domain, the device's answer to the user's own call
///    came in: report it to the agent ([`device_report`]); and when the
///    agent's message names the next of the script's device actions (its
///    tool name as a whole word, `toggle_roaming`, or in words, "toggle
///    roaming", when the message names no tool in snake case), carry it out
///    on the device with the task's arguments, in the script's order.
/// 3. The agent says it is transferring ("transferring", "transfer you",
///    "transferred", "human agent"): `###TRANSFER###`.
/// 4. The agent signals completion ("anything else", "goodbye", "have a
///    great/nice day"): a thank-you with `###STOP###`.
/// 5. The agent asks for identity ("user id", "email", "zip", "name",
///    "identify", "verify", "authenticate", in a question or a request):
///    the unknown-info line if it concerns what is asked (e.g. a forgotten
///    email), else the known info.
/// 6. The agent asks for confirmation ("confirm", "proceed", "yes/no",
///    "would you like", "shall i", "should i", "do you want", "go ahead"):
///    [`CONFIRM_LINE`].
/// 7. Anything else: [`NEUTRAL_QUESTION_LINE`] for a question,
///    [`NEUTRAL_LINE`] otherwise.
///
/// Neutral answers, and answers to an agent message identical to an earlier
/// one, make no progress; after `max_idle_turns` of them in a row (default
/// 4), or when `max_turns` user messages have been sent (default 30), the
/// user gives up with `###STOP###`.
#[derive(Debug, Clone)]
pub struct ScriptedUser {
    script: UserScript,
    max_idle_turns: usize,
    max_turns: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Transfer,
    Done,
    Identity,
    Confirm,
    NeutralQuestion,
    Neutral,
}

impl ScriptedUser {
    /// A user following `script`, giving up after 4 idle turns or 30 messages.
    pub fn new(script: UserScript) -> Self {
        Self {
            script,
            max_idle_turns: 4,
            max_turns: 30,
        }
    }

    /// Give up after this many turns without progress (at least 1).
    pub fn with_max_idle_turns(mut self, turns: usize) -> Self {
        self.max_idle_turns = turns.max(1);
        self
    }

    /// Give up after this many user messages (at least 1).
    pub fn with_max_turns(mut self, turns: usize) -> Self {
        self.max_turns = turns.max(1);
        self
    }

    /// The structured instructions the user follows.
    pub fn script(&self) -> &UserScript {
        &self.script
    }

    /// The opening message.
    pub fn opening(&self) -> String {
        let mut text = format!("Hi. {}", first_person(self.script.reason_for_call.trim()));
        if let Some(known) = self.script.known_info.as_deref().map(str::trim)
            && !known.is_empty()
        {
            text.push(' ');
            text.push_str(&first_person(&known.replace('\n', " ")));
        }
        text
    }

    /// The next message for `conversation` (deterministic, synchronous).
    pub fn reply(&self, conversation: &[Utterance]) -> UserTurn {
        if !conversation.iter().any(Utterance::is_user_message) {
            return UserTurn::from_text(self.opening());
        }
        let user_turns = conversation
            .iter()
            .filter(|u| u.speaker == Speaker::User)
            .count();
        if user_turns >= self.max_turns {
            return UserTurn::from_text(format!("I have to go now, thanks. {STOP_TOKEN}"));
        }
        if let Some(last) = conversation.last().filter(|u| u.speaker == Speaker::Device) {
            return UserTurn::from_text(device_report(&last.text));
        }
        let Some(last) = conversation.last().filter(|u| u.speaker == Speaker::Agent) else {
            // Nothing new from the agent: wait politely.
            return UserTurn::from_text(NEUTRAL_LINE);
        };
        if let Some(call) = self.requested_device_action(conversation, &last.text) {
            return UserTurn::device(vec![call]);
        }
        let reply = classify(&last.text);
        match reply {
            Reply::Transfer => return UserTurn::from_text(TRANSFER_TOKEN),
            Reply::Done => {
                return UserTurn::from_text(format!("No, that's all. Thank you! {STOP_TOKEN}"));
            }
            _ => {}
        }
        if self.idle_streak(conversation) >= self.max_idle_turns {
            return UserTurn::from_text(format!(
                "I don't think we are getting anywhere. Thanks anyway. {STOP_TOKEN}"
            ));
        }
        let text = match reply {
            Reply::Identity => self.identity_answer(&last.text),
            Reply::Confirm => CONFIRM_LINE.to_owned(),
            Reply::NeutralQuestion => NEUTRAL_QUESTION_LINE.to_owned(),
            _ => NEUTRAL_LINE.to_owned(),
        };
        UserTurn::from_text(text)
    }

    /// Consecutive agent messages, ending with the last, that got (or will
    /// get) a no-progress answer.
    fn idle_streak(&self, conversation: &[Utterance]) -> usize {
        let first_user = conversation
            .iter()
            .position(|u| u.speaker == Speaker::User)
            .unwrap_or(conversation.len());
        let agent: Vec<&str> = conversation[first_user..]
            .iter()
            .filter(|u| u.speaker == Speaker::Agent)
            .map(|u| u.text.as_str())
            .collect();
        let idle = |k: usize| {
            let text = agent[k];
            (matches!(classify(text), Reply::Neutral | Reply::NeutralQuestion)
                && !self.names_a_device_action(text))
                || agent[..k].contains(&text)
        };
        (0..agent.len()).rev().take_while(|k| idle(*k)).count()
    }

    /// The script's next device action not yet carried out (its calls are
    /// matched by name, in order, against the user's earlier device calls),
    /// as a call, if `agent_text` names it.
    fn requested_device_action(
        &self,
        conversation: &[Utterance],
        agent_text: &str,
    ) -> Option<ToolCall> {
        let made: Vec<&ToolCall> = conversation.iter().flat_map(|u| &u.calls).collect();
        let mut next = 0;
        for call in &made {
            if self
                .script
                .device_actions
                .get(next)
                .is_some_and(|a| a.name == call.name)
            {
                next += 1;
            }
        }
        let action = self.script.device_actions.get(next)?;
        names_action(&agent_text.to_lowercase(), &action.name).then(|| {
            ToolCall::new(
                format!("device_{}", made.len()),
                action.name.clone(),
                action.arguments.to_string(),
            )
        })
    }

    fn names_a_device_action(&self, agent_text: &str) -> bool {
        let t = agent_text.to_lowercase();
        self.script
            .device_actions
            .iter()
            .any(|a| names_action(&t, &a.name))
    }

    fn identity_answer(&self, question: &str) -> String {
        let q = question.to_lowercase();
        if let Some(unknown) = self.script.unknown_info.as_deref() {
            let u = unknown.to_lowercase();
            let concerns = ["email", "zip", "user id", "address", "name"]
                .iter()
                .any(|k| q.contains(k) && u.contains(k));
            if concerns {
                return first_person(unknown.trim());
            }
        }
        match self.script.known_info.as_deref().map(str::trim) {
            Some(known) if !known.is_empty() => first_person(&known.replace('\n', " ")),
            _ => NEUTRAL_QUESTION_LINE.to_owned(),
        }
    }
}

impl UserSimulator for ScriptedUser {
    fn name(&self) -> &str {
        "scripted"
    }

    fn respond<'a>(&'a mut self, conversation: &'a [Utterance]) -> UserFuture<'a> {
        let turn = crate::sim::cpu::metered(|| self.reply(conversation));
        Box::pin(async move { Ok(turn) })
    }
}

/// Whether lower-cased `text` names tool `name`: as written, as a whole
/// word (`toggle_data` is not named by `toggle_data_saver_mode`), or, when
/// the text names no tool in snake case at all, with its underscores as
/// spaces ("toggle roaming").
fn names_action(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let whole = |needle: &str| {
        text.match_indices(needle).any(|(at, _)| {
            !text[..at].ends_with(word) && !text[at + needle.len()..].starts_with(word)
        })
    };
    if text.split(|c: char| !word(c)).any(|w| w.contains('_')) {
        return whole(name);
    }
    whole(&name.replace('_', " "))
}

/// What the scripted user tells the agent after acting on the device: the
/// device's answer, on one line, cut at 400 characters.
pub fn device_report(result: &str) -> String {
    let flat: String = result.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = flat.chars().take(400).collect();
    format!("I did that. My phone shows: {cut}")
}

fn classify(agent_text: &str) -> Reply {
    let t = agent_text.to_lowercase();
    let any = |keys: &[&str]| keys.iter().any(|k| t.contains(k));
    if any(&["transferring", "transfer you", "transferred", "human agent"]) {
        Reply::Transfer
    } else if any(&[
        "anything else",
        "goodbye",
        "have a great day",
        "have a nice day",
    ]) {
        Reply::Done
    } else if any(&[
        "user id",
        "email",
        "zip",
        "name",
        "identify",
        "verify",
        "authenticate",
    ]) && (t.contains('?') || any(&["provide", "please", "could you", "can you"]))
    {
        Reply::Identity
    } else if any(&[
        "confirm",
        "proceed",
        "yes/no",
        "would you like",
        "shall i",
        "should i",
        "do you want",
        "go ahead",
    ]) {
        Reply::Confirm
    } else if t.contains('?') {
        Reply::NeutralQuestion
    } else {
        Reply::Neutral
    }
}

/// Turns τ²'s second-person instructions into the user's first person:
/// you→I/me, your→my, yours→mine, yourself→myself, you're/you've/you'll/
/// you'd→I'm/I've/I'll/I'd, and are/were after a new "I"→am/was. "you" is
/// "I" at the start of a sentence or clause, else "me".
pub(crate) fn first_person(text: &str) -> String {
    const CLAUSE: &[&str] = &[
        "and", "but", "if", "because", "that", "so", "when", "as", "since", "then", "or", "though",
        "although", "unless", "while", "where", "which", "who", "whether", "also",
    ];
    let mut out = String::with_capacity(text.len() + 8);
    let mut prev_word: Option<String> = None;
    let mut sentence_start = true;
    let mut made_subject = false;
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if !(c.is_alphanumeric() || c == '\'') {
            out.push(c);
            if matches!(c, '.' | '!' | '?' | '\n' | ';' | ':') {
                sentence_start = true;
            }
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(i, d)) = chars.peek() {
            if d.is_alphanumeric() || d == '\'' {
                end = i + d.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        let word = &text[start..end];
        let lower = word.to_lowercase();
        let capital = word.chars().next().is_some_and(char::is_uppercase);
        let subject = sentence_start || prev_word.as_deref().is_some_and(|p| CLAUSE.contains(&p));
        let replacement = match lower.as_str() {
            "you" if subject => Some("I"),
            "you" => Some("me"),
            "you're" => Some("I'm"),
            "you've" => Some("I've"),
            "you'll" => Some("I'll"),
            "you'd" => Some("I'd"),
            "your" => Some("my"),
            "yours" => Some("mine"),
            "yourself" => Some("myself"),
            "are" if made_subject => Some("am"),
            "were" if made_subject => Some("was"),
            _ => None,
        };
        made_subject = matches!(replacement, Some("I"));
        match replacement {
            Some(r) if capital && !r.starts_with('I') => {
                let mut cs = r.chars();
                if let Some(f) = cs.next() {
                    out.extend(f.to_uppercase());
                    out.push_str(cs.as_str());
                }
            }
            Some(r) => out.push_str(r),
            None => out.push_str(word),
        }
        prev_word = Some(lower);
        sentence_start = false;
    }
    out
}
