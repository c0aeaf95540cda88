//! The sandbox contains every hostile guest with the right typed error, the
//! host survives, and a good guest on the same engine works right afterwards
//! (the positive control: a deny-everything host would otherwise pass).

use ecdysis_testkit::{self as support, measure};

use std::time::Duration;

use ecdysis_runner::agent::{HarnessSession, HookOutcome};
use ecdysis_sandbox::doctor;
use ecdysis_sandbox::sandbox::{
    ActionDecision, AgentAction, Allocation, ContractInput, EpisodeInfo, FailurePolicy, LayerSet,
    Limits, LoadedHarness, Sandbox, SandboxError, StaticEnv, StepKind, StepReport, TaskView,
    ToolCall, Violation, WasiProfile, virtual_wasi,
};

fn info() -> EpisodeInfo {
    EpisodeInfo {
        domain: "tau2/retail".into(),
        max_steps: 200,
        max_errors: 10,
    }
}

fn env() -> StaticEnv {
    StaticEnv::default()
        .with_tool(
            "get_order_details",
            false,
            r##"{"order_id": "#W1", "status": "pending"}"##,
        )
        .with_tool("get_user_details", false, "{}")
        .with_tool("cancel_pending_order", true, "")
}

fn proposed_call() -> AgentAction {
    AgentAction::Call(ToolCall {
        id: "call_7".into(),
        name: "get_order_details".into(),
        arguments: r##"{"order_id":"#W1"}"##.into(),
    })
}

/// Tight limits so the hostile guests hit them quickly in debug builds.
fn test_limits() -> Limits {
    Limits {
        fuel_per_hook: 50_000_000,
        deadline: Duration::from_secs(20),
        memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

fn load(sandbox: &Sandbox, feature: Option<&str>) -> LoadedHarness {
    sandbox
        .load_bytes(&support::guest("guests/hostile", feature))
        .expect("hostile guest compiles and links")
}

/// The well-behaved build of the hostile crate, on the same engine, must
/// still execute a call after an attack.
fn positive_control(sandbox: &Sandbox) {
    let good = load(sandbox, None);
    let mut ep = good
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .expect("good guest starts");
    let h = ep.realize(&proposed_call()).expect("good guest answers");
    match h.value {
        ActionDecision::Execute(call) => assert_eq!(call.name, "get_order_details"),
        other => panic!("positive control answered {other:?}"),
    }
    assert!(h.fuel > 0, "fuel is metered");
    // The read path of the env view works for an honest harness.
    let h = ep
        .realize(&AgentAction::Text("#W1".into()))
        .expect("reads the view");
    assert_eq!(h.env_view_calls, 1);
    assert_eq!(
        h.value,
        ActionDecision::Block(r##"{"order_id": "#W1", "status": "pending"}"##.into())
    );
}

fn attack(feature: &str, limits: Limits) -> SandboxError {
    attack_on(&Sandbox::new(limits).expect("engine"), feature)
}

fn attack_on(sandbox: &Sandbox, feature: &str) -> SandboxError {
    let hostile = load(sandbox, Some(feature));
    let mut ep = hostile
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .expect("constructor is harmless");
    let err = ep
        .realize(&proposed_call())
        .expect_err("the attack must be stopped");
    // The instance is poisoned after a failure.
    assert!(matches!(
        ep.realize(&proposed_call()),
        Err(SandboxError::Poisoned)
    ));
    drop(ep);
    positive_control(sandbox);
    err
}

#[test]
fn infinite_loop_runs_out_of_fuel() {
    let err = attack("infinite-loop", test_limits());
    assert!(
        matches!(
            err,
            SandboxError::OutOfFuel {
                hook: "realize",
                ..
            }
        ),
        "{err}"
    );
}

/// Limits under which only the deadline can stop a loop.
fn unbounded_fuel(deadline_ms: u64) -> Limits {
    Limits {
        fuel_per_hook: u64::MAX / 2,
        deadline: Duration::from_millis(deadline_ms),
        ..test_limits()
    }
}

fn assert_realize_deadline(err: &SandboxError, deadline: u64) {
    assert!(
        matches!(
            err,
            SandboxError::Deadline { hook: "realize", deadline_ms } if *deadline_ms == deadline
        ),
        "{err}"
    );
}

#[test]
fn infinite_loop_with_unbounded_fuel_hits_the_deadline() {
    let err = attack("infinite-loop", unbounded_fuel(100));
    assert_realize_deadline(&err, 100);
}

#[test]
fn a_long_deadline_fires_at_most_the_tickers_watch_period_late() {
    // A deadline of two seconds or more (the default) does not wake the
    // epoch ticker when the call starts (hooks take microseconds); the
    // ticker notices the running call within its watch period (50 ms) and
    // the deadline fires then. A pooled sandbox whose ticker has been
    // watching (calls came just before) is the runner's case.
    let sandbox = Sandbox::pooled(unbounded_fuel(2_000), 2).expect("engine");
    positive_control(&sandbox);
    let hostile = load(&sandbox, Some("infinite-loop"));
    let mut ep = hostile
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .expect("constructor is harmless");
    // Only the hook call is timed: loading and instantiating the guest
    // take seconds on a loaded machine and are not what the deadline bounds.
    let started = std::time::Instant::now();
    let err = ep.realize(&proposed_call()).expect_err("stopped");
    let took = started.elapsed();
    assert_realize_deadline(&err, 2_000);
    assert!(took >= Duration::from_millis(2_000), "{took:?}");
    // The watch period plus scheduling slack; the unbounded loop would
    // never end.
    assert!(took < Duration::from_millis(2_000 + 50 + 2_950), "{took:?}");
    drop(ep);
    positive_control(&sandbox);
}

#[test]
fn a_long_deadline_fires_after_the_ticker_slept_until_woken() {
    // After two seconds with no guest call the ticker stops watching and
    // sleeps until a call wakes it: the first call after the quiet spell
    // must wake it even with a long deadline, or the loop would run on.
    let sandbox = Sandbox::pooled(unbounded_fuel(2_000), 2).expect("engine");
    let hostile = load(&sandbox, Some("infinite-loop"));
    let mut ep = hostile
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .expect("constructor is harmless");
    std::thread::sleep(Duration::from_millis(2_500));
    let started = std::time::Instant::now();
    let err = ep.realize(&proposed_call()).expect_err("stopped");
    let took = started.elapsed();
    assert_realize_deadline(&err, 2_000);
    assert!(took >= Duration::from_millis(2_000), "{took:?}");
    // Not woken, the loop would never end: any finite bound shows it was;
    // this one leaves the waking threads room on a loaded machine.
    assert!(took < Duration::from_millis(2_000 + 3_000), "{took:?}");
    drop(ep);
    positive_control(&sandbox);
}

#[test]
fn memory_bomb_hits_the_memory_limit() {
    let err = attack("memory-bomb", test_limits());
    assert!(matches!(err, SandboxError::MemoryLimit { .. }), "{err}");
}

#[test]
fn deep_recursion_overflows_the_stack() {
    let err = attack("deep-recursion", test_limits());
    assert!(matches!(err, SandboxError::StackOverflow { .. }), "{err}");
}

#[test]
fn panic_is_a_trap_with_the_panic_message() {
    let err = attack("panic", test_limits());
    match err {
        SandboxError::Trap { hook, message } => {
            assert_eq!(hook, "realize");
            assert!(
                message.contains("hostile guest panicked on purpose"),
                "panic message reaches the error: {message}"
            );
        }
        other => panic!("expected a trap, got {other}"),
    }
}

#[test]
fn huge_output_is_a_contract_violation() {
    let err = attack("huge-output", test_limits());
    assert!(
        matches!(
            err,
            SandboxError::Contract {
                violation: Violation::OutputTooLarge { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn unknown_tool_is_a_contract_violation() {
    let err = attack("unknown-tool", test_limits());
    match err {
        SandboxError::Contract {
            violation: Violation::UnknownTool { tool },
            ..
        } => assert_eq!(tool, "drop_all_tables"),
        other => panic!("{other}"),
    }
}

#[test]
fn non_json_arguments_are_a_contract_violation() {
    let err = attack("bad-json-args", test_limits());
    assert!(
        matches!(
            err,
            SandboxError::Contract {
                violation: Violation::ArgumentsNotObject { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn mutating_tool_through_env_view_is_refused() {
    let err = attack("mutating-env-view", test_limits());
    match err {
        SandboxError::Contract {
            violation: Violation::MutatingViaEnvView { tool },
            ..
        } => assert_eq!(tool, "cancel_pending_order"),
        other => panic!("{other}"),
    }
}

#[test]
fn env_view_flood_hits_the_quota() {
    let limits = Limits {
        env_view_calls_per_hook: 50,
        ..test_limits()
    };
    let err = attack("env-view-flood", limits);
    assert!(
        matches!(
            err,
            SandboxError::Contract {
                violation: Violation::EnvViewQuota { quota: 50 },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_guest_importing_a_clock_is_refused_under_the_minimal_profile() {
    let minimal = Limits {
        wasi: WasiProfile::Minimal,
        ..test_limits()
    };
    let sandbox = Sandbox::new(minimal.clone()).unwrap();
    let bytes = support::guest("guests/hostile", Some("wants-clock"));
    let err = match sandbox.load_bytes(&bytes) {
        Err(e) => e,
        Ok(_) => panic!("a clock import must not link under the minimal profile"),
    };
    match &err {
        SandboxError::Link(msg) => assert!(
            msg.contains("wasi:clocks") && msg.contains("`minimal` WASI profile"),
            "{msg}"
        ),
        other => panic!("expected a link error, got {other}"),
    }
    positive_control(&sandbox);
    // Linked under the default profile, it cannot be narrowed to minimal
    // afterwards either (a tenant's limits).
    let virtual_sandbox = Sandbox::new(test_limits()).unwrap();
    let linked = virtual_sandbox
        .load_bytes(&bytes)
        .expect("links under virtual");
    assert!(matches!(
        linked.with_limits(minimal),
        Err(SandboxError::Link(_))
    ));
}

#[test]
fn a_guest_reading_the_clock_sees_the_frozen_virtual_time() {
    let sandbox = Sandbox::new(test_limits()).unwrap();
    let harness = sandbox
        .load_bytes(&support::guest("guests/hostile", Some("wants-clock")))
        .expect("the virtual profile grants a clock");
    let read = || {
        let mut ep = harness
            .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
            .unwrap();
        match ep.realize(&proposed_call()).unwrap().value {
            ActionDecision::Block(now) => now,
            other => panic!("expected the clock's reading, got {other:?}"),
        }
    };
    let first = read();
    // `SystemTime`'s Debug form on WASI: seconds and nanoseconds since 1970.
    assert!(
        first.contains(&format!("tv_sec: {}", virtual_wasi::VIRTUAL_EPOCH_SECONDS)),
        "{first}"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(read(), first, "the clock does not move between episodes");
    positive_control(&sandbox);
}

#[test]
fn the_same_inputs_burn_the_same_fuel() {
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let harness = sandbox
        .load_bytes(&support::guest("harness-template", None))
        .unwrap();
    let fuel = |_: u8| {
        let mut ep = harness
            .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
            .unwrap();
        let a = ep.realize(&proposed_call()).unwrap().fuel;
        let b = ep.realize(&AgentAction::Text("hello".into())).unwrap().fuel;
        (ep.constructor_fuel(), a, b)
    };
    let first = fuel(0);
    assert!(first.1 > 0 && first.2 > 0);
    assert_eq!(first, fuel(1));
}

#[test]
fn the_template_and_direct_pass_the_doctor() {
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    for crate_rel in ["harness-template", "guests/direct"] {
        let harness = sandbox
            .load_bytes(&support::guest(crate_rel, None))
            .unwrap();
        let report = doctor::check(&harness);
        assert!(report.passed(), "{crate_rel}: {report:?}");
        assert_eq!(report.probes.len(), 7);
        assert!(report.probes.iter().all(|p| p.fuel > 0));
    }
    // The template rescues a text-written call (it learned the tool names in
    // `contract`, which the doctor now runs first in every probe episode).
    let template = sandbox
        .load_bytes(&support::guest("harness-template", None))
        .unwrap();
    let report = doctor::check(&template);
    let fenced = report
        .probes
        .iter()
        .find(|p| p.input == "a call written as fenced JSON text")
        .expect("the fenced-JSON probe exists");
    let answer = fenced.answer.as_deref().unwrap_or_default();
    assert!(
        answer.contains("Realize") && answer.contains("get_order_details"),
        "{answer}"
    );
}

/// Both places a hook can run: on the blocking pool, and inline on an
/// async worker thread. Inline, the panicking guest writes its panic
/// message to stderr with `blocking-write-and-flush` from a Tokio worker,
/// which wasmtime-wasi's own sync bindings would turn into a host panic
/// ("cannot start a runtime from within a runtime"); the sandbox's
/// non-blocking WASI I/O must capture it and trap instead.
#[test]
fn failure_policy_decides_between_neutral_and_ending() {
    use ecdysis_runner::agent::{CallPlace, HarnessSession, HookOutcome};
    const GUESTS: &str = "ECDYSIS_TEST_GUESTS";
    // The guests are built in the parent and handed to the child as files:
    // a build in the child (cargo, rustc) would be a waited-for descendant,
    // whose memory counts in the child's peak RSS.
    let built = (!measure::is_child()).then(|| {
        let dir = tempfile::tempdir().unwrap();
        for (file, feature) in [("panic.wasm", Some("panic")), ("good.wasm", None)] {
            std::fs::write(
                dir.path().join(file),
                support::guest("guests/hostile", feature),
            )
            .unwrap();
        }
        dir
    });
    let dir_text = built
        .as_ref()
        .map(|d| d.path().to_string_lossy().into_owned())
        .unwrap_or_default();
    // In a child process, so its time and memory are its own and bounded.
    if measure::ran_bounded_in_child(
        module_path!(),
        "failure_policy_decides_between_neutral_and_ending",
        &[(GUESTS, &dir_text)],
        Duration::from_secs(60),
        512.0,
    ) {
        return;
    }
    let guests = std::path::PathBuf::from(std::env::var(GUESTS).expect("set by the parent"));
    let sandbox = Sandbox::new(test_limits()).unwrap();
    let read = |file: &str| std::fs::read(guests.join(file)).unwrap();
    let hostile = sandbox.load_bytes(&read("panic.wasm")).unwrap();
    let good = sandbox.load_bytes(&read("good.wasm")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for place in [CallPlace::BlockingPool, CallPlace::Inline] {
        let run = |harness: &ecdysis_sandbox::sandbox::LoadedHarness, policy: FailurePolicy| {
            let harness = harness.clone();
            // Spawned, so the hooks run on a runtime worker thread as the
            // runner's episodes do.
            runtime
                .block_on(runtime.spawn(async move {
                    let (mut session, started) = HarnessSession::start(
                        &harness,
                        info(),
                        doctor::sample_tools(),
                        Box::new(env()),
                        policy,
                        LayerSet::ALL,
                        place,
                    )
                    .await;
                    assert!(matches!(started, HookOutcome::Use(())));
                    let outcome = session.realize(1, proposed_call()).await;
                    (outcome, session.into_records())
                }))
                .expect("the episode task does not panic")
        };
        let (outcome, records) = run(&hostile, FailurePolicy::FailOpen);
        assert!(
            matches!(outcome, HookOutcome::Use(ActionDecision::Proceed)),
            "{place:?}: {outcome:?}"
        );
        let last = records.last().expect("the failed call is recorded");
        let failure = last.error.as_ref().expect("with its error");
        assert_eq!(
            (failure.kind.as_str(), failure.policy),
            ("trap", FailurePolicy::FailOpen),
            "{place:?}"
        );
        assert!(
            failure
                .message
                .contains("hostile guest panicked on purpose"),
            "{place:?}: the panic message written to stderr is kept: {}",
            failure.message
        );
        assert_eq!(last.decision, serde_json::json!("Proceed"));
        let (outcome, records) = run(&hostile, FailurePolicy::FailClosed);
        assert!(matches!(outcome, HookOutcome::End(_)), "{outcome:?}");
        assert_eq!(records.last().unwrap().decision, serde_json::Value::Null);
        // Positive control, on the same runtime and place right after.
        let (outcome, records) = run(&good, FailurePolicy::FailClosed);
        assert!(
            matches!(outcome, HookOutcome::Use(ActionDecision::Execute(_))),
            "{place:?}: the good guest rewrites the call: {outcome:?}"
        );
        assert!(records.iter().all(|r| r.error.is_none()), "{records:?}");
    }
    positive_control(&sandbox);
}

#[test]
fn per_harness_limits_apply_on_a_shared_engine() {
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let good = load(&sandbox, None);
    let starved = good
        .with_limits(Limits {
            fuel_per_hook: 10,
            ..Limits::default()
        })
        .unwrap();
    let err = starved
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .err()
        .expect("10 units of fuel cannot run a constructor");
    assert!(
        matches!(err, SandboxError::OutOfFuel { budget: 10, .. }),
        "{err}"
    );
    positive_control(&sandbox);
}

#[test]
fn a_pooled_engine_contains_a_memory_bomb_and_recycles_its_slot() {
    // One slot: the positive control inside `attack_on` can only start if
    // the bombed episode's slot was reset and returned to the pool.
    let sandbox =
        Sandbox::with_allocation(test_limits(), Allocation::Pooled { episodes: 1 }).unwrap();
    let err = attack_on(&sandbox, "memory-bomb");
    assert!(matches!(err, SandboxError::MemoryLimit { .. }), "{err}");
    let err = attack_on(&sandbox, "infinite-loop");
    assert!(matches!(err, SandboxError::OutOfFuel { .. }), "{err}");
}

#[test]
fn a_full_pool_is_a_capacity_error_not_a_harness_error() {
    let sandbox =
        Sandbox::with_allocation(Limits::default(), Allocation::Pooled { episodes: 1 }).unwrap();
    let good = load(&sandbox, None);
    let start = || good.start_episode(&info(), &doctor::sample_tools(), Box::new(env()));
    let first = start().expect("the one slot is free");
    let err = start().err().expect("a second live episode does not fit");
    assert!(matches!(err, SandboxError::PoolExhausted { .. }), "{err}");
    assert_eq!(err.kind(), "pool_exhausted");

    // The agent loop turns it into "could not start", not a harness failure
    // (the runner requeues the episode instead of scoring it).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_, outcome) = rt.block_on(HarnessSession::start(
        &good,
        info(),
        doctor::sample_tools(),
        Box::new(env()),
        FailurePolicy::FailClosed,
        LayerSet::ALL,
        ecdysis_runner::agent::CallPlace::BlockingPool,
    ));
    assert!(
        matches!(outcome, HookOutcome::Unavailable(ref m) if !m.is_empty()),
        "{outcome:?}"
    );

    drop(first);
    let mut again = start().expect("the slot is free again after the drop");
    assert!(again.realize(&proposed_call()).is_ok());
}

#[test]
fn a_pooled_harness_cannot_raise_its_memory_above_the_slot() {
    let sandbox =
        Sandbox::with_allocation(test_limits(), Allocation::Pooled { episodes: 2 }).unwrap();
    let good = load(&sandbox, None);
    let raised = good
        .with_limits(Limits {
            memory_bytes: 1 << 30,
            ..test_limits()
        })
        .unwrap();
    assert_eq!(raised.limits().memory_bytes, test_limits().memory_bytes);
    let lowered = good
        .with_limits(Limits {
            memory_bytes: 8 << 20,
            ..test_limits()
        })
        .unwrap();
    assert_eq!(lowered.limits().memory_bytes, 8 << 20);
}

#[test]
fn limits_no_hook_can_run_under_are_refused_by_the_library() {
    let zero_fuel = Limits {
        fuel_per_hook: 0,
        ..Limits::default()
    };
    match Sandbox::new(zero_fuel.clone()) {
        Err(SandboxError::Limits(e)) => assert_eq!(e.field, "fuel_per_hook"),
        Err(e) => panic!("expected a limits error, got {e}"),
        Ok(_) => panic!("fuel 0 was accepted"),
    }
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let good = load(&sandbox, None);
    for (limits, field) in [
        (zero_fuel, "fuel_per_hook"),
        (
            Limits {
                deadline: std::time::Duration::ZERO,
                ..Limits::default()
            },
            "deadline",
        ),
        (
            Limits {
                memory_bytes: 5 << 30,
                ..Limits::default()
            },
            "memory_bytes",
        ),
    ] {
        match good.with_limits(limits) {
            Err(SandboxError::Limits(e)) => assert_eq!(e.field, field),
            Err(e) => panic!("expected a limits error for {field}, got {e}"),
            Ok(_) => panic!("{field} was accepted"),
        }
    }
    // Positive control: the defaults work on the same engine.
    positive_control(&sandbox);
}

/// A read-only environment whose every answer takes `delay` of host time:
/// what a guest can make the host do on its behalf, outside wasm.
struct SlowEnv {
    delay: Duration,
}

impl ecdysis_sandbox::sandbox::ReadOnlyEnv for SlowEnv {
    fn tool_mutates(&self, name: &str) -> Option<bool> {
        (name == "get_order_details").then_some(false)
    }

    fn call_read_only(
        &mut self,
        _name: &str,
        _arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> ecdysis_sandbox::sandbox::ViewOutput {
        std::thread::sleep(self.delay);
        ecdysis_sandbox::sandbox::ViewOutput {
            content: "{}".into(),
            error: false,
        }
    }
}

#[test]
fn host_work_a_guest_triggers_counts_against_its_deadline() {
    // 64 env-view calls of 40 ms each would keep the host busy 2.6 s; the
    // deadline (300 ms) is checked when each host call starts and returns,
    // so the hook ends as a deadline error at most one call late.
    let limits = Limits {
        deadline: Duration::from_millis(300),
        env_view_calls_per_hook: 64,
        ..test_limits()
    };
    let sandbox = Sandbox::new(limits).unwrap();
    let hostile = load(&sandbox, Some("env-view-flood"));
    let mut ep = hostile
        .start_episode(
            &info(),
            &doctor::sample_tools(),
            Box::new(SlowEnv {
                delay: Duration::from_millis(40),
            }),
        )
        .unwrap();
    let started = std::time::Instant::now();
    let err = ep.realize(&proposed_call()).expect_err("past the deadline");
    let took = started.elapsed();
    assert!(
        matches!(
            err,
            SandboxError::Deadline {
                deadline_ms: 300,
                ..
            }
        ),
        "{err}"
    );
    // Generous for a loaded machine, and still far below the unbounded
    // cost.
    assert!(took < Duration::from_millis(300 + 40 + 1000), "{took:?}");
    positive_control(&sandbox);
}

#[test]
fn a_rewritten_call_too_large_to_run_is_a_contract_violation() {
    // The call a harness writes runs after the hook returned, outside its
    // deadline: its arguments are capped like an env-view call's.
    let sandbox = Sandbox::new(test_limits()).unwrap();
    let err = attack_on(&sandbox, "huge-args");
    match err {
        SandboxError::Contract {
            violation: Violation::ArgumentsTooLarge { bytes, cap, .. },
            ..
        } => assert!(bytes > cap && cap == ecdysis_sandbox::sandbox::MAX_TOOL_ARGUMENT_BYTES),
        other => panic!("{other}"),
    }
    positive_control(&sandbox);
}

// ---------------------------------------------------------------------------
// The episode's budget on text a harness adds to the model's input.

fn contract_input() -> ContractInput {
    ContractInput {
        domain: "tau2/retail".into(),
        system_prompt: "You are a customer service agent. Follow the policy.".into(),
        tools: doctor::sample_tools(),
    }
}

fn task_view() -> TaskView {
    TaskView {
        domain: "tau2/retail".into(),
        first_user_message: "I want to cancel order #W1.".into(),
    }
}

fn step(n: u32) -> StepReport {
    StepReport {
        step: n,
        steps_left: 200 - n,
        errors_left: 10,
        kind: StepKind::AgentMessage,
        text: Some("Let me check.".into()),
        outcomes: vec![],
    }
}

/// Call the hook an inflating build misuses until the episode's budget
/// stops it: the error must be the typed violation on that hook, within
/// the calls the budget allows, and what was added before it must stay
/// within the budget.
fn inflation_is_stopped(feature: &str, hook: &str) {
    let limits = test_limits();
    let budget = limits.max_added_bytes;
    let sandbox = Sandbox::new(limits).unwrap();
    let guest = load(&sandbox, Some(feature));
    let mut ep = guest
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .expect("constructor is harmless");
    let mut added = 0u64;
    let mut calls = 0u32;
    let err = loop {
        calls += 1;
        assert!(calls <= 64, "{feature}: never stopped after {added} bytes");
        let r = match hook {
            "contract" => ep.contract(&contract_input()).map(|h| h.added_bytes),
            "skills" => ep.skills(&task_view()).map(|h| h.added_bytes),
            "realize" => ep.realize(&proposed_call()).map(|h| h.added_bytes),
            _ => ep.regulate(&step(calls)).map(|h| h.added_bytes),
        };
        match r {
            Ok(n) => {
                added += n;
                assert_eq!(ep.added_bytes(), added);
                assert!(added <= budget, "{feature}: {added} bytes got through");
            }
            Err(e) => break e,
        }
    };
    match err {
        SandboxError::Contract {
            hook: h,
            violation: Violation::AddedTextOverBudget { added, limit },
        } => {
            assert_eq!(h, hook, "{feature}");
            assert!(
                added > limit && limit == budget,
                "{feature}: {added} vs {limit}"
            );
        }
        other => panic!("{feature}: {other}"),
    }
    // Poisoned, like every violation; the good guest on the engine is not.
    assert!(matches!(
        ep.realize(&proposed_call()),
        Err(SandboxError::Poisoned)
    ));
    drop(ep);
    positive_control(&sandbox);
}

#[test]
fn a_harness_that_inflates_the_models_input_is_stopped_at_the_episode_budget() {
    for (feature, hook) in [
        ("inflate-prompt", "contract"),
        ("inflate-guidance", "skills"),
        ("inflate-block", "realize"),
        ("inflate-inject", "regulate"),
        ("inflate-annotate", "regulate"),
    ] {
        inflation_is_stopped(feature, hook);
    }
}

#[test]
fn a_well_behaved_harness_adds_nothing_and_a_larger_budget_lets_more_through() {
    // The positive control's answers are neutral or echo the call: nothing
    // added, however long the episode.
    let sandbox = Sandbox::new(test_limits()).unwrap();
    let good = load(&sandbox, None);
    let mut ep = good
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .unwrap();
    for n in 0..50 {
        ep.regulate(&step(n)).unwrap();
        ep.contract(&contract_input()).unwrap();
    }
    assert_eq!(ep.added_bytes(), 0);
    // Under a budget raised past what it adds, the inflating prompt runs.
    let roomy = Sandbox::new(Limits {
        max_added_bytes: 1 << 20,
        ..test_limits()
    })
    .unwrap();
    let inflating = load(&roomy, Some("inflate-prompt"));
    let mut ep = inflating
        .start_episode(&info(), &doctor::sample_tools(), Box::new(env()))
        .unwrap();
    let h = ep
        .contract(&contract_input())
        .expect("within the raised budget");
    assert_eq!(h.added_bytes, 200 << 10);
}
