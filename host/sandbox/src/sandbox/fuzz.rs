//! Property test of the answer checks: arbitrary WIT values (random
//! variants, ids, tool names, arguments that are invalid JSON, arrays,
//! deeply nested or huge, oversized texts and lists) must each get a typed
//! verdict, never a panic, and every value the checks accept must really
//! be safe for the agent loop to act on. `ECDYSIS_FUZZ_CASES` raises the
//! case count for the documented long run (1,000,000).

use super::bindings::{
    ActionDecision, AgentAction, ContractOutput, Guidance, Regulation, ToolCall, ToolDescription,
};
use super::contract::{
    MAX_LIST_ITEMS, ToolNames, check_contract, check_decision, check_regulation, check_skills,
};

/// The case generator: seeded (the cases must be reproducible from the
/// seed printed on failure).
struct Gen(ecdysis_sys::rng::SplitMix64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n.max(1))
    }

    /// `n` bytes of filler, sliced from one buffer made once.
    fn filler(&mut self, n: usize) -> String {
        static BIG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        BIG.get_or_init(|| "y".repeat(1 << 20))[..n.min(1 << 20)].to_string()
    }

    fn text(&mut self) -> String {
        match self.below(200) {
            0..=39 => String::new(),
            40..=79 => "x".repeat(self.below(64) as usize),
            80..=119 => "é🦀\u{0}\u{7f}".repeat(self.below(16) as usize),
            // Over the output cap (256 KiB) about half the time.
            120 => {
                let n = 200_000 + self.below(200_000) as usize;
                self.filler(n)
            }
            _ => format!("note {}", self.next()),
        }
    }

    fn arguments(&mut self) -> String {
        match self.below(10) {
            0 => "{}".into(),
            1 => r##"{"order_id":"#W1","n":1.5e300}"##.into(),
            2 => "[1,2,3]".into(),
            3 => "42".into(),
            4 => "{\"unterminated\": ".into(),
            5 => "[".repeat(self.below(20_000) as usize),
            6 => {
                let depth = self.below(5_000) as usize;
                format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
            }
            // Around the argument cap (64 KiB).
            7 => {
                let n = 60_000 + self.below(10_000) as usize;
                format!("{{\"pad\":\"{}\"}}", self.filler(n))
            }
            8 => "\u{feff}{}".into(),
            _ => format!("{{\"k{}\": null}}", self.next()),
        }
    }

    fn call(&mut self) -> ToolCall {
        let name = match self.below(5) {
            0 => "get_order_details".into(),
            1 => "cancel_pending_order".into(),
            2 => String::new(),
            3 => "drop_all_tables".into(),
            _ => self.text(),
        };
        ToolCall {
            id: if self.below(8) == 0 {
                String::new()
            } else {
                format!("c{}", self.next())
            },
            name,
            arguments: self.arguments(),
        }
    }

    fn calls(&mut self) -> Vec<ToolCall> {
        match self.below(4) {
            0 => vec![],
            // Over the item cap: cheap, valid calls (the cap alone must
            // refuse them).
            1 => {
                let n = MAX_LIST_ITEMS + 1 + self.below(1000) as usize;
                vec![
                    ToolCall {
                        id: "c".into(),
                        name: "get_order_details".into(),
                        arguments: "{}".into(),
                    };
                    n
                ]
            }
            _ => (0..1 + self.below(4)).map(|_| self.call()).collect(),
        }
    }
}

fn assert_safe_call(c: &ToolCall, tools: &ToolNames) {
    assert!(!c.id.is_empty());
    assert!(tools.contains(&c.name), "{}", c.name);
    assert!(c.arguments.len() <= super::MAX_TOOL_ARGUMENT_BYTES);
    assert!(matches!(
        serde_json::from_str::<serde_json::Value>(&c.arguments),
        Ok(serde_json::Value::Object(_))
    ));
}

/// One random answer of each hook, checked; accepted answers must hold
/// what the agent loop relies on.
fn one_case(g: &mut Gen, tools: &ToolNames, cap: usize) {
    let action = if g.below(2) == 0 {
        AgentAction::Call(g.call())
    } else {
        AgentAction::Text(g.text())
    };
    let decision = match g.below(4) {
        0 => ActionDecision::Proceed,
        1 => ActionDecision::Block(g.text()),
        2 => ActionDecision::Execute(g.call()),
        _ => ActionDecision::Realize(g.calls()),
    };
    if check_decision(&action, &decision, tools, cap).is_ok() {
        match (&decision, &action) {
            (ActionDecision::Block(t), _) => assert!(t.len() <= cap),
            (ActionDecision::Execute(c), AgentAction::Call(_)) => assert_safe_call(c, tools),
            (ActionDecision::Realize(cs), AgentAction::Text(_)) => {
                assert!(!cs.is_empty() && cs.len() <= MAX_LIST_ITEMS);
                cs.iter().for_each(|c| assert_safe_call(c, tools));
            }
            (ActionDecision::Proceed, _) => {}
            (d, a) => panic!("accepted {d:?} for {a:?}"),
        }
    }
    let regulation = match g.below(5) {
        0 => Regulation::Continue,
        1 => Regulation::Annotate(g.text()),
        2 => Regulation::Inject(g.text()),
        3 => Regulation::Stop(g.text()),
        _ => Regulation::ForceCall(g.call()),
    };
    if check_regulation(&regulation, tools, cap).is_ok()
        && let Regulation::ForceCall(c) = &regulation
    {
        assert_safe_call(c, tools);
    }
    let n = if g.below(10) == 0 {
        MAX_LIST_ITEMS + 1
    } else {
        g.below(4) as usize
    };
    let contract = ContractOutput {
        system_prompt: g.text(),
        tool_descriptions: (0..n)
            .map(|_| ToolDescription {
                name: g.call().name,
                description: g.text(),
            })
            .collect(),
    };
    if check_contract(&contract, tools, cap).is_ok() {
        assert!(contract.tool_descriptions.len() <= MAX_LIST_ITEMS);
        assert!(
            contract
                .tool_descriptions
                .iter()
                .all(|d| tools.contains(&d.name))
        );
    }
    let skills: Vec<Guidance> = (0..n)
        .map(|_| Guidance {
            title: g.text(),
            text: g.text(),
        })
        .collect();
    if check_skills(&skills, cap).is_ok() {
        assert!(skills.len() <= MAX_LIST_ITEMS);
        assert!(
            skills
                .iter()
                .map(|s| s.title.len() + s.text.len())
                .sum::<usize>()
                <= cap
        );
    }
}

#[test]
fn arbitrary_answers_get_a_typed_verdict_and_accepted_ones_are_safe() {
    let cases: u64 = std::env::var("ECDYSIS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let seed: u64 = std::env::var("ECDYSIS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let tools = ToolNames::new(["get_order_details", "cancel_pending_order"]);
    let cap = 256 << 10;
    for case in 0..cases {
        let mut g = Gen(ecdysis_sys::rng::SplitMix64::new(
            seed ^ case.wrapping_mul(0x2545_F491_4F6C_DD1D),
        ));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            one_case(&mut g, &tools, cap)
        }));
        assert!(
            outcome.is_ok(),
            "case {case} (ECDYSIS_FUZZ_SEED={seed}) panicked or was accepted unsafely"
        );
    }
}
