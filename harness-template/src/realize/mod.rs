//! Action realization: what happens to each proposed action.
//!
//! For a call, in order: resolve the tool name ([`tool_alias`], else
//! [`unknown_tool`] blocks with the tool list), repair the arguments
//! ([`json_arguments`], [`id_prefix`], [`numeric_strings`],
//! [`text_arguments`], [`lone_argument`], [`unknown_args`]), then run the
//! policy [`gates`]. A gate *blocks* a call the environment would accept
//! although the policy forbids it; for a call the environment will reject
//! anyway it only prepares an *explanation*, which regulation appends to
//! the error (the environment's answer stays visible). For a message
//! without calls, [`rescue_text`] turns a call written as text into a
//! structured call, [`rescue_act`] an action in AgentBench's text protocol
//! (`Act: answer(12)`) into its call, and [`rescue_code`] SQL or shell code
//! written as text into the domain's call that runs it.

pub mod gates;
pub mod id_prefix;
pub mod json_arguments;
pub mod lone_argument;
pub mod numeric_strings;
pub mod rescue_act;
pub mod rescue_code;
pub mod rescue_text;
pub mod text_arguments;
pub mod tool_alias;
pub mod unknown_args;
pub mod unknown_tool;

use serde_json::Value;

use crate::episode::Harness;
use crate::types::{Action, Call, Decision};
use crate::view::{EnvView, Reads};

pub fn realize(h: &mut Harness, view: &mut dyn EnvView, action: Action) -> Decision {
    // Without the contract the harness knows no tools: it cannot name a
    // real one, so it stays neutral.
    if h.tools.is_empty() {
        return Decision::Proceed;
    }
    match action {
        Action::Text(text) => match rescue_text::rescue(&h.domain, &h.tools, &text) {
            rescue_text::Rescue::Calls(calls) => Decision::Realize(calls),
            rescue_text::Rescue::UnknownTool(name) => {
                Decision::Block(unknown_tool::text_feedback(&name, &h.tools))
            }
            rescue_text::Rescue::Nothing => match rescue_act::rescue(&h.domain, &h.tools, &text)
                .or_else(|| rescue_code::rescue(&h.domain, &h.tools, &text))
            {
                Some(call) => Decision::Realize(vec![call]),
                None => Decision::Proceed,
            },
        },
        Action::Call(call) => realize_call(h, view, call),
    }
}

fn realize_call(h: &mut Harness, view: &mut dyn EnvView, proposed: Call) -> Decision {
    let mut call = proposed.clone();
    if !h.tools.knows(&call.name) {
        match tool_alias::resolve(&h.domain, &call.name, &h.tools) {
            Some(real) => call.name = real,
            None => return Decision::Block(unknown_tool::feedback(&call.name, &h.tools)),
        }
    }
    let (mut args, mut changed) = match json_arguments::parse(&call.arguments) {
        Ok(parsed) => parsed,
        Err(e) => return Decision::Block(json_arguments::feedback(&e)),
    };
    changed |= id_prefix::apply(&h.domain, &mut args);
    let schema = h.tools.schema(&call.name);
    changed |= numeric_strings::apply(&h.domain, schema, &mut args);
    changed |= text_arguments::apply(&h.domain, &mut args);
    changed |= lone_argument::apply(schema, &mut args);
    changed |= unknown_args::apply(schema, &mut args);
    if changed {
        call.arguments = Value::Object(args.clone()).to_string();
    }
    let verdict = {
        let mut cx = gates::Cx {
            domain: &h.domain,
            reads: Reads::new(view, &h.tools),
            now: h.now_minutes,
            authenticated: &h.authenticated,
            changed: &h.changed,
        };
        gates::check(&h.domain, &call.name, &args, &mut cx)
    };
    match verdict {
        gates::Verdict::Block(message) => return Decision::Block(message),
        gates::Verdict::Explain(message) => {
            h.pending_explanations.push((call.id.clone(), message));
        }
        gates::Verdict::Pass => {}
    }
    if call != proposed {
        Decision::Execute(call)
    } else {
        Decision::Proceed
    }
}
