//! A harness written in Python (`guests/python/hostile`, built with
//! componentize-py) in the sandbox: the virtual WASI answers it the same
//! frozen, seeded, empty and refusing way on every run, and every attack of
//! the Rust hostile guests, rewritten in Python, ends in a typed error
//! within bounds, with the good path working right after.
//!
//! One component for every attack: the episode's domain picks it. Compiling
//! CPython takes minutes, so the tests share one sandbox and one compiled
//! component and narrow the limits per attack.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ecdysis_sandbox::doctor;
use ecdysis_sandbox::sandbox::{
    ContractInput, EpisodeInfo, Limits, LoadedHarness, Sandbox, SandboxError, StaticEnv, Violation,
    virtual_wasi,
};
use ecdysis_testkit as support;

/// Limits a CPython harness lives within (the docs' limits page has the
/// measured need), tight enough that the attacks stop fast.
fn python_limits() -> Limits {
    Limits {
        fuel_per_hook: 2_000_000_000,
        deadline: Duration::from_secs(10),
        memory_bytes: 128 << 20,
        ..Limits::default()
    }
}

fn hostile() -> Option<&'static LoadedHarness> {
    static LOADED: OnceLock<Option<LoadedHarness>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            if !support::python_guests_available() {
                return None;
            }
            let bytes = support::guest("guests/python/hostile", None);
            let sandbox = Sandbox::new(python_limits()).expect("engine");
            // Through the store's caches (see `support::load`); it panics
            // if the guest does not link under the virtual profile.
            Some(support::load(&sandbox, &bytes))
        })
        .as_ref()
}

fn info(domain: &str) -> EpisodeInfo {
    EpisodeInfo {
        domain: domain.into(),
        max_steps: 30,
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

fn contract_input() -> ContractInput {
    ContractInput {
        domain: "tau2/retail".into(),
        system_prompt: "Follow the policy.".into(),
        tools: doctor::sample_tools(),
    }
}

/// The probe the well-behaved path reports in its contract answer.
fn probe(harness: &LoadedHarness) -> serde_json::Value {
    let mut ep = harness
        .start_episode(
            &info("tau2/retail"),
            &doctor::sample_tools(),
            Box::new(env()),
        )
        .expect("the good path starts");
    let out = ep
        .contract(&contract_input())
        .expect("the good path answers")
        .value;
    let json = out
        .system_prompt
        .strip_prefix("Follow the policy.\n")
        .expect("the prompt is kept");
    serde_json::from_str(json).expect("the probe is JSON")
}

#[test]
fn a_python_harness_sees_frozen_time_seeded_randomness_and_no_outside_world() {
    let Some(harness) = hostile() else { return };
    let started = Instant::now();
    let seen = probe(harness);
    // Well under the hour it asked to sleep, and the hour shows on the clock.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(seen["slept_s"], 3600.0, "{seen}");
    assert_eq!(
        seen["time"].as_f64(),
        Some(virtual_wasi::VIRTUAL_EPOCH_SECONDS as f64),
        "{seen}"
    );
    assert_eq!(seen["environ"], serde_json::json!([]), "{seen}");
    for refused in [
        "open_etc_passwd",
        "listdir_root",
        "write_tmp",
        "connect",
        "resolve",
    ] {
        assert_eq!(seen[refused][0], "refused", "{refused}: {seen}");
    }
    assert!(!std::path::Path::new("/tmp/ecdysis-py-escape").exists());
    // Seeded: the same episode info gives the same draws, another does not.
    assert_eq!(probe(harness), seen);
    let mut other = harness
        .start_episode(
            &info("tau2/airline"),
            &doctor::sample_tools(),
            Box::new(env()),
        )
        .unwrap();
    let other = other
        .contract(&contract_input())
        .unwrap()
        .value
        .system_prompt;
    assert!(
        !other.contains(seen["urandom"].as_str().unwrap()),
        "{other}"
    );
}

/// Runs `attack`'s contract hook under `limits`, checks the error and the
/// bounds, then the good path on the same harness.
fn attack(attack: &str, limits: Limits, max: Duration) -> SandboxError {
    let harness = hostile()
        .expect("checked by the caller")
        .with_limits(limits)
        .unwrap();
    let started = Instant::now();
    let err = match harness.start_episode(
        &info(&format!("hostile/{attack}")),
        &doctor::sample_tools(),
        Box::new(env()),
    ) {
        Err(e) => e,
        Ok(mut ep) => match ep.contract(&contract_input()) {
            Err(e) => e,
            Ok(h) => panic!(
                "{attack} was not stopped: {:?}",
                h.value.system_prompt.len()
            ),
        },
    };
    assert!(
        started.elapsed() < max,
        "{attack} took {:?}",
        started.elapsed()
    );
    assert_eq!(
        probe(hostile().unwrap())["slept_s"],
        3600.0,
        "positive control after {attack}"
    );
    err
}

/// The realize-hook attacks: a call to a tool that does not exist and
/// arguments that are not a JSON object, each a contract violation.
#[test]
fn python_calls_against_the_contract_are_violations() {
    let Some(harness) = hostile() else { return };
    for attack in ["unknown-tool", "bad-json-args", "huge-args"] {
        let mut ep = harness
            .start_episode(
                &info(&format!("hostile/{attack}")),
                &doctor::sample_tools(),
                Box::new(env()),
            )
            .unwrap();
        let call =
            ecdysis_sandbox::sandbox::AgentAction::Call(ecdysis_sandbox::sandbox::ToolCall {
                id: "c1".into(),
                name: "get_order_details".into(),
                arguments: r##"{"order_id":"#W1"}"##.into(),
            });
        match (attack, ep.realize(&call)) {
            (
                "unknown-tool",
                Err(SandboxError::Contract {
                    violation: Violation::UnknownTool { .. },
                    ..
                }),
            )
            | (
                "bad-json-args",
                Err(SandboxError::Contract {
                    violation: Violation::ArgumentsNotObject { .. },
                    ..
                }),
            )
            | (
                "huge-args",
                Err(SandboxError::Contract {
                    violation: Violation::ArgumentsTooLarge { .. },
                    ..
                }),
            ) => {}
            (_, other) => panic!("{attack}: expected its contract violation, got {other:?}"),
        }
    }
    assert_eq!(probe(harness)["slept_s"], 3600.0, "positive control");
}

#[test]
fn python_attacks_end_in_typed_errors_within_bounds() {
    if hostile().is_none() {
        return;
    }
    let fuel = |n| Limits {
        fuel_per_hook: n,
        ..python_limits()
    };
    let e = attack("infinite-loop", fuel(200_000_000), Duration::from_secs(60));
    assert!(
        matches!(
            e,
            SandboxError::OutOfFuel {
                hook: "contract",
                ..
            }
        ),
        "{e}"
    );
    // Busy-waiting on the frozen clock never ends: fuel stops it too.
    let e = attack("clock-wait", fuel(200_000_000), Duration::from_secs(60));
    assert!(matches!(e, SandboxError::OutOfFuel { .. }), "{e}");
    let unbounded = Limits {
        fuel_per_hook: u64::MAX / 2,
        deadline: Duration::from_millis(500),
        ..python_limits()
    };
    let e = attack("infinite-loop", unbounded, Duration::from_secs(30));
    assert!(matches!(e, SandboxError::Deadline { .. }), "{e}");
    let e = attack("memory-bomb", python_limits(), Duration::from_secs(60));
    // CPython turns a failed allocation into MemoryError, which the harness
    // does not catch: a trap naming it, or the host's memory limit.
    assert!(
        matches!(e, SandboxError::MemoryLimit { .. })
            || matches!(&e, SandboxError::Trap { message, .. } if message.contains("MemoryError")),
        "{e}"
    );
    // CPython keeps its frames in linear memory: unbounded recursion ends at
    // the memory limit, the wasm stack cap or a RecursionError trap.
    let e = attack("deep-recursion", python_limits(), Duration::from_secs(60));
    assert!(
        matches!(
            e,
            SandboxError::MemoryLimit { .. }
                | SandboxError::StackOverflow { .. }
                | SandboxError::Trap { .. }
        ),
        "{e}"
    );
    let e = attack("raise", python_limits(), Duration::from_secs(30));
    match &e {
        SandboxError::Trap { message, .. } => {
            assert!(message.contains("a hostile harness raised"), "{message}")
        }
        other => panic!("expected a trap naming the exception, got {other}"),
    }
    let e = attack(
        "constructor-raise",
        python_limits(),
        Duration::from_secs(30),
    );
    assert!(
        matches!(
            e,
            SandboxError::Trap {
                hook: "constructor",
                ..
            }
        ),
        "{e}"
    );
    let e = attack("huge-output", python_limits(), Duration::from_secs(30));
    assert!(matches!(e, SandboxError::Contract { .. }), "{e}");
    // A gigabyte of randomness needs a gigabyte of memory first.
    let e = attack("random-flood", python_limits(), Duration::from_secs(30));
    assert!(matches!(e, SandboxError::MemoryLimit { .. }), "{e}");
    let e = attack("env-view-flood", python_limits(), Duration::from_secs(60));
    assert!(matches!(e, SandboxError::Contract { .. }), "{e}");
    let e = attack(
        "mutating-env-view",
        python_limits(),
        Duration::from_secs(30),
    );
    assert!(matches!(e, SandboxError::Contract { .. }), "{e}");
    // More text than an episode may add to the model's input.
    let e = attack("inflate-prompt", python_limits(), Duration::from_secs(30));
    assert!(
        matches!(
            e,
            SandboxError::Contract {
                violation: Violation::AddedTextOverBudget { .. },
                ..
            }
        ),
        "{e}"
    );
}

/// 1.2 MB of env-view arguments are refused unread, as the Rust guest's
/// `calc-bomb` is: the harness sees the refusal and goes on.
#[test]
fn python_env_view_arguments_over_the_cap_are_refused_unread() {
    let Some(harness) = hostile() else { return };
    let started = Instant::now();
    let mut ep = harness
        .start_episode(
            &info("hostile/calc-bomb"),
            &doctor::sample_tools(),
            Box::new(env()),
        )
        .unwrap();
    let prompt = ep.contract(&contract_input()).unwrap().value.system_prompt;
    assert!(
        prompt.contains("over the env view's cap of 65536"),
        "{prompt}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(probe(harness)["slept_s"], 3600.0, "positive control");
}
