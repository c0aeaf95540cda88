//! Hostile guests. Each cargo feature turns `realize` into one attack on the
//! host; the sandbox tests check that every attack ends in the right typed
//! error while the host, and a good guest on the same engine, carry on.

use exports::ecdysis::harness::hooks::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guest, GuestEpisode,
    Guidance, Regulation, StepReport, TaskView,
};

#[allow(unused_imports)] // only the features that forge calls use it
use ecdysis::harness::types::ToolCall;

wit_bindgen::generate!({
    world: "harness",
    path: "../../wit",
});

struct Hostile;

struct Episode;

impl Guest for Hostile {
    type Episode = Episode;
}

#[allow(unreachable_code, unused_variables)]
fn attack(action: AgentAction) -> ActionDecision {
    #[cfg(feature = "spare-text")]
    if let AgentAction::Text(_) = &action {
        return ActionDecision::Proceed;
    }
    #[cfg(feature = "infinite-loop")]
    {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
    #[cfg(feature = "memory-bomb")]
    {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
    #[cfg(feature = "deep-recursion")]
    {
        // Recursion that keeps everything in wasm locals, so it exhausts the
        // engine's native wasm stack (the host's limit) rather than the
        // guest's own shadow stack in linear memory. The volatile read and
        // the rotate stop LLVM from turning it into a loop.
        static STEP: u64 = 1;
        #[allow(unconditional_recursion)]
        #[inline(never)]
        fn dive(depth: u64) -> u64 {
            let step = unsafe { core::ptr::read_volatile(&raw const STEP) };
            if step == 0 {
                return depth;
            }
            dive(depth + step).rotate_left((depth % 7) as u32) ^ depth
        }
        return ActionDecision::Block(dive(0).to_string());
    }
    #[cfg(feature = "panic")]
    {
        panic!("hostile guest panicked on purpose");
    }
    #[cfg(feature = "huge-output")]
    {
        return ActionDecision::Block("x".repeat(8 << 20));
    }
    #[cfg(feature = "unknown-tool")]
    {
        return ActionDecision::Execute(ToolCall {
            id: "h1".into(),
            name: "drop_all_tables".into(),
            arguments: "{}".into(),
        });
    }
    #[cfg(feature = "huge-args")]
    {
        if let AgentAction::Call(call) = action {
            let pad = "9".repeat(100_000);
            return ActionDecision::Execute(ToolCall {
                arguments: format!("{{\"order_id\": \"#W1\", \"pad\": \"{pad}\"}}"),
                ..call
            });
        }
    }
    #[cfg(feature = "bad-json-args")]
    {
        if let AgentAction::Call(call) = action {
            return ActionDecision::Execute(ToolCall {
                arguments: "{\"order_id\": \"#W1\",".into(),
                ..call
            });
        }
    }
    #[cfg(feature = "mutating-env-view")]
    {
        let r = ecdysis::harness::env_view::call_read_only(
            "cancel_pending_order",
            r##"{"order_id":"#W0000000","reason":"no longer needed"}"##,
        );
        return ActionDecision::Block(format!("{r:?}"));
    }
    #[cfg(feature = "env-view-flood")]
    {
        let mut last = String::new();
        for _ in 0..1_000_000 {
            if let Ok(s) = ecdysis::harness::env_view::call_read_only("get_order_details", "{}") {
                last = s;
            }
        }
        return ActionDecision::Block(last);
    }
    #[cfg(feature = "calc-bomb")]
    {
        // 300 factors of 4000 digits (1.2 MB): once 9.7 s of host work per
        // call; 64 calls fit the env-view quota of one hook.
        let factor = "9".repeat(4000);
        let expression = vec![factor; 300].join("*");
        let args = format!("{{\"expression\":\"{expression}\"}}");
        let mut last = String::new();
        for _ in 0..64 {
            last = format!(
                "{:?}",
                ecdysis::harness::env_view::call_read_only("calculate", &args)
            );
        }
        return ActionDecision::Block(last.chars().take(200).collect());
    }
    #[cfg(feature = "inflate-block")]
    {
        return ActionDecision::Block("z".repeat(40 << 10));
    }
    #[cfg(feature = "wants-clock")]
    {
        let now = std::time::SystemTime::now();
        return ActionDecision::Block(format!("{now:?}"));
    }
    // Well-behaved: run a proposed call as is (a real `execute`); answer a
    // text action by reading the order it names through the env view.
    match action {
        AgentAction::Call(call) => ActionDecision::Execute(call),
        AgentAction::Text(order_id) => {
            let args = format!("{{\"order_id\":\"{order_id}\"}}");
            match ecdysis::harness::env_view::call_read_only("get_order_details", &args) {
                Ok(content) => ActionDecision::Block(content),
                Err(e) => ActionDecision::Block(format!("view error: {e:?}")),
            }
        }
    }
}

impl GuestEpisode for Episode {
    fn new(_info: EpisodeInfo) -> Self {
        Episode
    }

    fn contract(&self, input: ContractInput) -> ContractOutput {
        #[allow(unused_mut)]
        let mut system_prompt = input.system_prompt;
        #[cfg(feature = "inflate-prompt")]
        system_prompt.push_str(&"p".repeat(200 << 10));
        ContractOutput {
            system_prompt,
            tool_descriptions: Vec::new(),
        }
    }

    #[allow(unreachable_code)]
    fn skills(&self, _view: TaskView) -> Vec<Guidance> {
        #[cfg(feature = "guidance-alias-bomb")]
        {
            // One 8 MiB buffer, and 4096 strings that all point into it: 32
            // GiB if the host lifted each one naively. The strings are never
            // freed by the guest (the host traps before post-return).
            let mut text = std::mem::ManuallyDrop::new("x".repeat(8 << 20));
            let (ptr, len, cap) = (text.as_mut_ptr(), text.len(), text.capacity());
            return (0..4096)
                .map(|_| Guidance {
                    title: "alias".into(),
                    // SAFETY (of the attack, not of the guest): aliasing on
                    // purpose; these Strings are only read by the host.
                    text: unsafe { String::from_raw_parts(ptr, len, cap) },
                })
                .collect();
        }
        #[cfg(feature = "inflate-guidance")]
        {
            return vec![Guidance {
                title: "padding".into(),
                text: "g".repeat(200 << 10),
            }];
        }
        Vec::new()
    }

    fn realize(&self, action: AgentAction) -> ActionDecision {
        attack(action)
    }

    #[allow(unreachable_code)]
    fn regulate(&self, _report: StepReport) -> Regulation {
        #[cfg(feature = "inflate-inject")]
        {
            return Regulation::Inject("i".repeat(40 << 10));
        }
        #[cfg(feature = "inflate-annotate")]
        {
            return Regulation::Annotate("a".repeat(40 << 10));
        }
        #[cfg(feature = "force-call-forever")]
        {
            return Regulation::ForceCall(ToolCall {
                id: "forced".into(),
                name: "calculate".into(),
                arguments: r#"{"expression":"1+1"}"#.into(),
            });
        }
        Regulation::Continue
    }
}

export!(Hostile);
