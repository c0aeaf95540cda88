//! What a harness puts in front of the model: the bytes of text each hook
//! answer adds to the model's input, counted once, when the harness adds
//! it. An episode's total is held to [`super::Limits::max_added_bytes`], so
//! a harness (a coder's candidate, a tenant's upload) cannot multiply the
//! operator's token bill however it answers within each hook's own caps.
//!
//! What counts, per hook (UTF-8 bytes):
//! - `contract`: how much longer the system prompt became, plus, for each
//!   rewritten tool description, how much longer it became (a shorter one
//!   counts zero: it costs nothing);
//! - `skills`: every guidance block's title and text;
//! - `realize`: a rewritten call's arguments (`execute`), the feedback of a
//!   `block`, the arguments of calls realized from text;
//! - `regulate`: an `annotate` note, an `inject` message, a forced call's
//!   arguments (`stop` ends the episode: nothing is sent).
//!
//! The Python and JavaScript runtimes count the same way (conformance
//! vectors cover it).

use super::bindings::{
    ActionDecision, ContractInput, ContractOutput, Guidance, Regulation, ToolCall,
};

/// Bytes the contract answer adds to every request.
pub fn contract(input: &ContractInput, out: &ContractOutput) -> u64 {
    let prompt = out
        .system_prompt
        .len()
        .saturating_sub(input.system_prompt.len());
    let tools: usize = out
        .tool_descriptions
        .iter()
        .map(|d| {
            let before = input
                .tools
                .iter()
                .find(|t| t.name == d.name)
                .map_or(0, |t| t.description.len());
            d.description.len().saturating_sub(before)
        })
        .sum();
    (prompt + tools) as u64
}

/// Bytes of the guidance blocks.
pub fn skills(out: &[Guidance]) -> u64 {
    out.iter()
        .map(|g| g.title.len() + g.text.len())
        .sum::<usize>() as u64
}

fn call(c: &ToolCall) -> u64 {
    c.arguments.len() as u64
}

/// Bytes a realization answer adds.
pub fn decision(d: &ActionDecision) -> u64 {
    match d {
        ActionDecision::Proceed => 0,
        ActionDecision::Execute(c) => call(c),
        ActionDecision::Block(text) => text.len() as u64,
        ActionDecision::Realize(calls) => calls.iter().map(call).sum(),
    }
}

/// Bytes a regulation answer adds.
pub fn regulation(r: &Regulation) -> u64 {
    match r {
        Regulation::Continue | Regulation::Stop(_) => 0,
        Regulation::Annotate(note) | Regulation::Inject(note) => note.len() as u64,
        Regulation::ForceCall(c) => call(c),
    }
}

/// A rough token count for `bytes` of text (about four bytes a token in
/// English and JSON), shown next to byte counts.
pub fn estimated_tokens(bytes: u64) -> u64 {
    bytes.div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::bindings::{ToolDescription, ToolSpec};

    fn tool(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: "{}".into(),
            mutates: false,
        }
    }

    #[test]
    fn contract_counts_what_grew() {
        let input = ContractInput {
            domain: "tau2/retail".into(),
            system_prompt: "policy".into(),
            tools: vec![tool("a", "four"), tool("b", "long description")],
        };
        let out = ContractOutput {
            system_prompt: "policy + rules".into(),
            tool_descriptions: vec![
                ToolDescription {
                    name: "a".into(),
                    description: "four + hint".into(),
                },
                ToolDescription {
                    name: "b".into(),
                    description: "short".into(),
                },
            ],
        };
        // 8 more prompt bytes, 7 more for `a`, none for the shorter `b`.
        assert_eq!(contract(&input, &out), 15);
        let same = ContractOutput {
            system_prompt: "policy".into(),
            tool_descriptions: vec![],
        };
        assert_eq!(contract(&input, &same), 0);
    }

    #[test]
    fn decisions_and_regulations_count_the_text_they_send() {
        let c = ToolCall {
            id: "1".into(),
            name: "t".into(),
            arguments: "{\"x\":1}".into(),
        };
        assert_eq!(decision(&ActionDecision::Proceed), 0);
        assert_eq!(decision(&ActionDecision::Execute(c.clone())), 7);
        assert_eq!(decision(&ActionDecision::Block("no".into())), 2);
        assert_eq!(
            decision(&ActionDecision::Realize(vec![c.clone(), c.clone()])),
            14
        );
        assert_eq!(regulation(&Regulation::Continue), 0);
        assert_eq!(regulation(&Regulation::Stop("done".into())), 0);
        assert_eq!(regulation(&Regulation::Annotate("abc".into())), 3);
        assert_eq!(regulation(&Regulation::Inject("abcd".into())), 4);
        assert_eq!(regulation(&Regulation::ForceCall(c)), 7);
        assert_eq!(
            skills(&[Guidance {
                title: "t".into(),
                text: "xyz".into()
            }]),
            4
        );
        assert_eq!(estimated_tokens(9), 3);
    }
}
