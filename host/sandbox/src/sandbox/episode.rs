//! One episode's harness instance: a store, an instance and its `episode`
//! resource, with fuel and a deadline re-armed before every hook call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceAny;
use wasmtime::{Store, Trap};

use super::added;
use super::bindings::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guidance, Harness,
    Regulation, StepReport, TaskView, ToolSpec,
};
use super::contract::{self, ToolNames};
use super::engine::{EPOCH_TICK, LoadedHarness};
use super::env_view::ReadOnlyEnv;
use super::error::{SandboxError, Violation};
use super::host_state::{HookScratch, HostDeadline, HostState, LogLine, ViolationTrap};
use super::limits::Limits;
use super::recorder::{self, HookRecorder, RecordedHook};

/// A hook's answer with what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Hooked<T> {
    /// The hook's answer, checked against the contract.
    pub value: T,
    /// Fuel the call burned (deterministic for the same guest and inputs).
    pub fuel: u64,
    /// Wall time of the call.
    pub elapsed: Duration,
    /// Env-view calls the hook made.
    pub env_view_calls: u32,
    /// Lines the harness logged during the call (up to the log quota).
    pub logs: Vec<LogLine>,
    /// Bytes of text the answer puts in front of the model (see
    /// [`super::added`]); zero for a neutral answer.
    pub added_bytes: u64,
}

/// A live harness instance for one episode. Dropped at the episode's end; a
/// failed call poisons it (a trapped instance may hold broken state).
pub struct HarnessEpisode {
    sandbox: super::engine::Sandbox,
    store: Store<HostState>,
    bindings: Harness,
    episode: Option<ResourceAny>,
    tools: ToolNames,
    limits: Limits,
    poisoned: bool,
    constructor_fuel: u64,
    /// Fuel the last call burnt, whether it answered or failed.
    last_fuel: u64,
    recorder: Option<Arc<dyn HookRecorder>>,
    /// Bytes of text the episode's answers have added so far.
    added_bytes: u64,
}

impl LoadedHarness {
    /// Instantiate the harness for one episode and run its constructor.
    /// `tools` are the episode's tools (calls a harness creates are checked
    /// against them); `env` is its read-only view of the environment.
    pub fn start_episode(
        &self,
        info: &EpisodeInfo,
        tools: &[ToolSpec],
        env: Box<dyn ReadOnlyEnv>,
    ) -> Result<HarnessEpisode, SandboxError> {
        self.start_episode_metered(info, tools, env)
            .map_err(|(e, _)| e)
    }

    /// [`LoadedHarness::start_episode`], with the fuel a failed start burnt
    /// (the whole allowance when it ran out), so a caller can charge it.
    pub fn start_episode_metered(
        &self,
        info: &EpisodeInfo,
        tools: &[ToolSpec],
        env: Box<dyn ReadOnlyEnv>,
    ) -> Result<HarnessEpisode, (SandboxError, u64)> {
        let limits = self.limits.clone();
        let mut state = HostState::new(&limits, env);
        state.virt = super::virtual_wasi::VirtualWasi::new(super::virtual_wasi::episode_seed(
            &info.domain,
            info.max_steps,
            info.max_errors,
        ));
        if self.recorder.is_some() {
            state.view_log = Some(Vec::new());
        }
        let mut store = Store::new(self.sandbox.engine(), state);
        store.limiter(|s| &mut s.limiter);
        arm(&mut store, &limits).map_err(|e| (e, 0))?;
        let bindings = {
            let _running = self.sandbox.ticker().running(limits.deadline);
            self.pre.instantiate(&mut store).map_err(|e| {
                let fuel = burnt(&store, &limits);
                (classify(&mut store, "instantiate", &limits, e), fuel)
            })?
        };
        let mut ep = HarnessEpisode {
            sandbox: self.sandbox.clone(),
            store,
            bindings,
            episode: None,
            tools: ToolNames::new(tools.iter().map(|t| t.name.as_str())),
            limits,
            poisoned: false,
            constructor_fuel: 0,
            last_fuel: 0,
            recorder: self.recorder.clone(),
            added_bytes: 0,
        };
        let hooked = ep.call("constructor", |store, b, _| {
            b.ecdysis_harness_hooks()
                .episode()
                .call_constructor(store, info)
        });
        ep.tape(
            "constructor",
            || recorder::episode_info(info),
            &hooked,
            |_| serde_json::Value::Null,
        );
        let hooked = hooked.map_err(|e| (e, ep.last_fuel))?;
        ep.constructor_fuel = hooked.fuel;
        ep.episode = Some(hooked.value);
        Ok(ep)
    }
}

impl LoadedHarness {
    /// Instantiate without constructing an episode: what the bench reports
    /// as the bare cost of `InstancePre::instantiate`. Dropping the returned
    /// instance is the teardown, which the bench times separately.
    pub fn instantiate_only(&self) -> Result<BareInstance, SandboxError> {
        let limits = &self.limits;
        let mut store = Store::new(
            self.sandbox.engine(),
            HostState::new(limits, Box::new(super::env_view::StaticEnv::default())),
        );
        store.limiter(|s| &mut s.limiter);
        arm(&mut store, limits)?;
        let _running = self.sandbox.ticker().running(limits.deadline);
        match self.pre.instantiate(&mut store) {
            Ok(_) => Ok(BareInstance { _store: store }),
            Err(e) => Err(classify(&mut store, "instantiate", limits, e)),
        }
    }
}

/// An instantiated harness with no episode constructed (bench only).
pub struct BareInstance {
    _store: Store<HostState>,
}

/// Fuel burnt since the store was last armed.
fn burnt(store: &Store<HostState>, limits: &Limits) -> u64 {
    limits
        .fuel_per_hook
        .saturating_sub(store.get_fuel().unwrap_or(0))
}

fn arm(store: &mut Store<HostState>, limits: &Limits) -> Result<(), SandboxError> {
    store
        .set_fuel(limits.fuel_per_hook)
        .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
    let ticks = (limits.deadline.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64;
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    Ok(())
}

/// Map a wasmtime error from a hook to the sandbox's typed error.
fn classify(
    store: &mut Store<HostState>,
    hook: &'static str,
    limits: &Limits,
    err: wasmtime::Error,
) -> SandboxError {
    if let Some(violation) = store.data_mut().scratch.violation.take() {
        return SandboxError::Contract { hook, violation };
    }
    if let Some(full) = err.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return SandboxError::PoolExhausted {
            detail: full.to_string(),
        };
    }
    if let Some(ViolationTrap(violation)) = err.downcast_ref::<ViolationTrap>() {
        return SandboxError::Contract {
            hook,
            violation: violation.clone(),
        };
    }
    if store.data().limiter.hit {
        return SandboxError::MemoryLimit {
            hook,
            limit_bytes: limits.memory_bytes,
        };
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => SandboxError::OutOfFuel {
            hook,
            budget: limits.fuel_per_hook,
        },
        Some(Trap::Interrupt) => SandboxError::Deadline {
            hook,
            deadline_ms: limits.deadline.as_millis() as u64,
        },
        _ if err.downcast_ref::<HostDeadline>().is_some() => SandboxError::Deadline {
            hook,
            deadline_ms: limits.deadline.as_millis() as u64,
        },
        Some(Trap::StackOverflow) => SandboxError::StackOverflow { hook },
        _ => {
            let stderr = store.data().stderr_text();
            let mut message = format!("{err:#}");
            if !stderr.is_empty() {
                message = format!("{stderr}\n{message}");
            }
            SandboxError::Trap { hook, message }
        }
    }
}

impl HarnessEpisode {
    /// Fuel the constructor burned.
    pub fn constructor_fuel(&self) -> u64 {
        self.constructor_fuel
    }

    /// Fuel the last hook call burnt, also when it failed: all of
    /// `fuel_per_hook` when it ran out, what it had burnt when it trapped,
    /// hit its deadline or broke the contract.
    pub fn last_call_fuel(&self) -> u64 {
        self.last_fuel
    }

    /// Bytes of text the episode's hook answers have added to the model's
    /// input so far (what [`Limits::max_added_bytes`] bounds).
    pub fn added_bytes(&self) -> u64 {
        self.added_bytes
    }

    fn call<T>(
        &mut self,
        hook: &'static str,
        f: impl FnOnce(&mut Store<HostState>, &Harness, Option<ResourceAny>) -> wasmtime::Result<T>,
    ) -> Result<Hooked<T>, SandboxError> {
        self.last_fuel = 0;
        if self.poisoned {
            return Err(SandboxError::Poisoned);
        }
        self.store.data_mut().scratch = HookScratch {
            started: Some(Instant::now()),
            ..HookScratch::default()
        };
        if let Some(log) = self.store.data_mut().view_log.as_mut() {
            log.clear();
        }
        arm(&mut self.store, &self.limits)?;
        let start = Instant::now();
        let result = {
            let _running = self.sandbox.ticker().running(self.limits.deadline);
            f(&mut self.store, &self.bindings, self.episode)
        };
        let elapsed = start.elapsed();
        let fuel = burnt(&self.store, &self.limits);
        self.last_fuel = fuel;
        match result {
            Ok(value) => {
                let scratch = std::mem::take(&mut self.store.data_mut().scratch);
                Ok(Hooked {
                    value,
                    fuel,
                    elapsed,
                    env_view_calls: scratch.env_view_calls,
                    logs: scratch.logs,
                    added_bytes: 0,
                })
            }
            Err(e) => {
                self.poisoned = true;
                Err(classify(&mut self.store, hook, &self.limits, e))
            }
        }
    }

    /// Report a finished hook call to the recorder, if one is attached.
    fn tape<T>(
        &mut self,
        hook: &'static str,
        input: impl FnOnce() -> serde_json::Value,
        result: &Result<Hooked<T>, SandboxError>,
        answer: impl FnOnce(&T) -> serde_json::Value,
    ) {
        let Some(recorder) = self.recorder.clone() else {
            return;
        };
        let view_calls = self
            .store
            .data_mut()
            .view_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        recorder.record(RecordedHook {
            hook,
            input: input(),
            view_calls,
            output: recorder::outcome(result, |h| answer(&h.value)),
        });
    }

    /// The answer checked against the contract, and its added text counted
    /// against the episode's budget.
    fn checked<T>(
        &mut self,
        hook: &'static str,
        mut hooked: Hooked<T>,
        check: impl FnOnce(&T, &ToolNames, usize) -> Result<(), Violation>,
        added: impl FnOnce(&T) -> u64,
    ) -> Result<Hooked<T>, SandboxError> {
        let checked =
            check(&hooked.value, &self.tools, self.limits.max_output_bytes).and_then(|()| {
                hooked.added_bytes = added(&hooked.value);
                self.added_bytes += hooked.added_bytes;
                if self.added_bytes > self.limits.max_added_bytes {
                    Err(Violation::AddedTextOverBudget {
                        added: self.added_bytes,
                        limit: self.limits.max_added_bytes,
                    })
                } else {
                    Ok(())
                }
            });
        match checked {
            Ok(()) => Ok(hooked),
            Err(violation) => {
                // A contract breach is a failed call like a trap: the
                // instance is not trusted again this episode.
                self.poisoned = true;
                Err(SandboxError::Contract { hook, violation })
            }
        }
    }

    /// Environment contract: system prompt and tool descriptions.
    pub fn contract(
        &mut self,
        input: &ContractInput,
    ) -> Result<Hooked<ContractOutput>, SandboxError> {
        let r = self
            .call("contract", |s, b, ep| {
                b.ecdysis_harness_hooks().episode().call_contract(
                    s,
                    ep.expect("episode constructed"),
                    input,
                )
            })
            .and_then(|h| {
                self.checked("contract", h, contract::check_contract, |out| {
                    added::contract(input, out)
                })
            });
        self.tape(
            "contract",
            || recorder::contract_input(input),
            &r,
            recorder::contract_output,
        );
        r
    }

    /// Procedural skills: guidance blocks for the episode.
    pub fn skills(&mut self, view: &TaskView) -> Result<Hooked<Vec<Guidance>>, SandboxError> {
        let r = self
            .call("skills", |s, b, ep| {
                b.ecdysis_harness_hooks().episode().call_skills(
                    s,
                    ep.expect("episode constructed"),
                    view,
                )
            })
            .and_then(|h| {
                self.checked(
                    "skills",
                    h,
                    |v, _, cap| contract::check_skills(v, cap),
                    |g| added::skills(g),
                )
            });
        self.tape(
            "skills",
            || recorder::task_view(view),
            &r,
            |g| recorder::guidance(g),
        );
        r
    }

    /// Action realization: decide what happens to a proposed action.
    pub fn realize(
        &mut self,
        action: &AgentAction,
    ) -> Result<Hooked<ActionDecision>, SandboxError> {
        let r = self
            .call("realize", |s, b, ep| {
                b.ecdysis_harness_hooks().episode().call_realize(
                    s,
                    ep.expect("episode constructed"),
                    action,
                )
            })
            .and_then(|h| {
                self.checked(
                    "realize",
                    h,
                    |d, tools, cap| contract::check_decision(action, d, tools, cap),
                    added::decision,
                )
            });
        self.tape(
            "realize",
            || recorder::agent_action(action),
            &r,
            recorder::action_decision,
        );
        r
    }

    /// Trajectory regulation after a step.
    pub fn regulate(&mut self, report: &StepReport) -> Result<Hooked<Regulation>, SandboxError> {
        let r = self
            .call("regulate", |s, b, ep| {
                b.ecdysis_harness_hooks().episode().call_regulate(
                    s,
                    ep.expect("episode constructed"),
                    report,
                )
            })
            .and_then(|h| {
                self.checked("regulate", h, contract::check_regulation, added::regulation)
            });
        self.tape(
            "regulate",
            || recorder::step_report(report),
            &r,
            recorder::regulation,
        );
        r
    }
}

impl Drop for HarnessEpisode {
    fn drop(&mut self) {
        // Let the guest run its destructor under the usual limits; a failure
        // here changes nothing for the episode, which is over.
        if let (false, Some(ep)) = (self.poisoned, self.episode.take())
            && arm(&mut self.store, &self.limits).is_ok()
        {
            let _running = self.sandbox.ticker().running(self.limits.deadline);
            let _ = ep.resource_drop(&mut self.store);
        }
    }
}
