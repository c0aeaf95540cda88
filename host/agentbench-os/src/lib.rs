//! AgentBench's OS interaction (`agentbench/os`): questions answered and
//! chores done with a real shell, each episode in its own sandboxed machine
//! ([`machine`]), scored as upstream scores them: its checker scripts run
//! in the same machine after the episode.
//!
//! The protocol is upstream's function-calling one (the generation our
//! DBBench follows): the system prompt, then the task in a user message,
//! then up to 8 agent turns with three tools, `bash_action(script)`,
//! `finish_action(thought)` and `answer_action(answer)`; the first answer
//! or finish ends the episode (finish submits its thought as the answer).
//! A turn without a tool call gets upstream's fixed reply and counts as a
//! turn. What the shell printed comes back as upstream words it, cut at
//! 800 characters.
//!
//! Deviations, each for the host's sake or for lack of Docker (the docs'
//! OS-interaction guide lists them with what they change): a command that
//! runs past its timeout is interrupted and reported as a tool error, where
//! upstream ends the sample as a task error; the calls of a response after
//! the first are left out of the conversation (upstream leaves them
//! unanswered); the machine is the host's Debian userland, not an Ubuntu
//! image ([`dependence`] measures which reference answers that changes).
//!
//! It implements `ecdysis-env`'s contract and depends on no other
//! benchmark and on no layer above the environment.

pub mod bench;
pub mod dependence;
pub mod machine;
pub mod task;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub use machine::{Machine, MachineError, MachineLimits};
pub use task::{Judge, Language, Script, Task};

use ecdysis_env::{
    Domain, EnvError, Environment, Evaluation, FinalState, Oracle, Protocol, TaskOracle,
    Termination, ToolCall, ToolOutput, ToolSpec, Trajectory, VisibleTask,
};
use ecdysis_pyemu::{Val, repr};

/// The domain's name.
pub const NAME: &str = "agentbench/os";

/// The tool that runs a command in the shell.
pub const BASH: &str = "bash_action";
/// The tool that ends the episode with the agent's thought as its answer.
pub const FINISH: &str = "finish_action";
/// The tool that ends the episode with an answer.
pub const ANSWER: &str = "answer_action";

/// Upstream's cap on agent turns (`round_limit`).
pub const MAX_ROUNDS: u32 = 8;

/// What upstream says to a turn without a tool call.
pub const NO_CALL_REPLY: &str = "No executable tool calls found. Please call a tool instead";

/// What upstream answers an unknown tool.
pub const INVALID_FUNCTION: &str = "Invalid function call. Please call a tool instead";

/// The opening of the task's user message (the description follows).
pub const TASK_PREFIX: &str = "Now, I will start a new problem in a new OS. My problem is:\n\n";

/// Upstream's system prompt (function-calling version), verbatim.
pub const SYSTEM_PROMPT: &str = "You are an assistant that will act like a person. I will play the role of a Linux (Ubuntu) operating system.
Your goal is to implement the operations required by me or answer the questions proposed by me.
For each of your turns, you should first think about what you should do, and then call exactly one of the provided tools according to the situation.
If you think the output is too long, I will truncate it. The truncated output is not complete. You have to deal with the truncating problem by yourself.
Attention, your bash code should not contain any input operation. Once again, you should use one tool in each turn, and should not respond without function calling.
Note that if you think the task has been finished, or there is some message missing to completely complete the task, you should respond with calling the function \"finish_action\", as no additional information will be provided.
Also, note that if you have gotten the answer to the question, you should call the \"answer_action\" tool instead of simply writing your answer in your response.
Your answers should be exact and precise (for example, a single number), do not answer with full sentences or phrases.
Always use a tool provided instead of simply responding with content.";

/// Upstream's three tools, in its order.
pub fn tool_specs() -> Vec<ToolSpec> {
    let one = |name: &str, description: &str| {
        json!({
            "type": "object",
            "properties": {name: {"type": "string", "description": description}},
            "required": [name],
            "additionalProperties": false,
        })
    };
    vec![
        // A command can change the machine: the harness's read-only view
        // refuses it (and the two that end the episode).
        ToolSpec::new(
            BASH,
            "Execute bash code to perform an operation in the Linux environment.",
            one("script", "The bash script to be executed."),
            true,
        ),
        ToolSpec::new(
            FINISH,
            "Indicate that the task has been finished or need some additional information to be finished.",
            one(
                "thought",
                "The thought or reason indicating the task is finished.",
            ),
            true,
        ),
        ToolSpec::new(
            ANSWER,
            "Provide the answer to the question.",
            one("answer", "The answer to the question."),
            true,
        ),
    ]
}

/// How to open the domain.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The data folder (default: see [`task::locate`]).
    pub data: Option<PathBuf>,
    /// Each machine's limits.
    pub limits: MachineLimits,
}

struct Shared {
    tasks: Vec<Arc<Task>>,
    splits: BTreeMap<String, Vec<String>>,
    specs: Vec<ToolSpec>,
    options: Options,
}

/// The loaded domain. Cloning is cheap.
#[derive(Clone)]
pub struct OsDomain {
    shared: Arc<Shared>,
}

impl OsDomain {
    /// Loads tasks and splits: `std-001` … `std-007` (the groups), `std`
    /// (all 144), `dev`, and the seeded `train`/`test` halves of `std`.
    pub fn load(options: Options) -> Result<Self, EnvError> {
        let dir = task::locate(options.data.as_deref())?;
        let tasks: Vec<Arc<Task>> = task::load(&dir)?.into_iter().map(Arc::new).collect();
        let mut splits: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in &tasks {
            splits
                .entry(t.group.clone())
                .or_default()
                .push(t.id.clone());
            if t.group != "dev" {
                splits.entry("std".into()).or_default().push(t.id.clone());
            }
        }
        let owned: Vec<Task> = tasks.iter().map(|t| (**t).clone()).collect();
        let (train, test) = task::split_standard(&owned, task::SPLIT_SEED);
        splits.insert("train".into(), train);
        splits.insert("test".into(), test);
        Ok(OsDomain {
            shared: Arc::new(Shared {
                tasks,
                splits,
                specs: tool_specs(),
                options,
            }),
        })
    }

    /// Every task.
    pub fn all_tasks(&self) -> &[Arc<Task>] {
        &self.shared.tasks
    }

    fn find(&self, id: &str) -> Result<&Arc<Task>, EnvError> {
        self.shared
            .tasks
            .iter()
            .find(|t| t.id == id)
            .ok_or_else(|| EnvError::UnknownTask {
                domain: NAME.into(),
                task: id.into(),
            })
    }

    fn task_of<'a>(&self, oracle: &'a Oracle) -> Result<&'a Task, EnvError> {
        oracle.task_for::<Task>(NAME)
    }

    fn view(&self, t: &Task) -> VisibleTask {
        VisibleTask {
            id: t.id.clone(),
            domain: NAME.into(),
            policy: Arc::from(SYSTEM_PROMPT),
            first_user_message: Some(format!("{TASK_PREFIX}{}", t.description)),
            agent_greeting: "",
        }
    }

    /// A machine set up for `t`: its init scripts run (each must exit 0)
    /// and its start script typed into the shell. `Ok(Err(why))` when the
    /// task's own set-up failed (upstream: the sample ends before the
    /// agent acts, scored 0).
    pub fn machine_for(&self, t: &Task) -> Result<Result<Machine, SetupFailed>, MachineError> {
        self.machine_prepared(t, None)
    }

    /// [`Self::machine_for`], with `prepare` run as root before the task's
    /// init scripts (a variant of the system, see [`dependence`]).
    pub fn machine_prepared(
        &self,
        t: &Task,
        prepare: Option<&Script>,
    ) -> Result<Result<Machine, SetupFailed>, MachineError> {
        let mut m = Machine::start(self.shared.options.limits)?;
        if let Some(p) = prepare {
            let run = m.run_script("prepare", p, &[])?;
            if run.status != 0 {
                return Ok(Err(SetupFailed::Prepare {
                    status: run.status,
                    output: run.stdout.trim().to_string(),
                }));
            }
        }
        for (i, script) in t.init.iter().enumerate() {
            let seeded = seeded_init(t, script);
            let run = match m.run_script("init", &seeded, &[]) {
                Err(error @ MachineError::ScriptTimeout { .. }) => {
                    return Ok(Err(SetupFailed::InitTimeout {
                        script: i + 1,
                        task: t.id.clone(),
                        error,
                    }));
                }
                other => other?,
            };
            if run.status != 0 {
                return Ok(Err(SetupFailed::InitExit {
                    script: i + 1,
                    task: t.id.clone(),
                    status: run.status,
                }));
            }
        }
        if let Some(start) = &t.start {
            m.shell(&start.code)?;
        }
        Ok(Ok(m))
    }

    /// Runs a task's reference solution as a testbed agent would, on one
    /// machine: the example typed into the shell, then the answer the
    /// check will compare with (what the example prints when the check
    /// runs it) or a finish, then the judge. Returns the verdict and the
    /// answer given; `Ok(None)` when the task's own set-up fails here.
    pub fn replay_reference(&self, t: &Task) -> Result<Option<(bool, Value)>, EnvError> {
        let Ok(mut m) = self.machine_for(t)? else {
            return Ok(None);
        };
        let calls = testbed_steps(t);
        let mut printed = String::new();
        for c in &calls {
            if c.name == BASH
                && let Some(Value::String(script)) = c.arguments.get("script")
            {
                printed = m.shell(script)?.output;
            }
        }
        let last = calls
            .last()
            .map(|c| c.arguments.clone())
            .unwrap_or(Value::Null);
        let answer = match (last.get("answer"), &t.example) {
            // What the check will compare with: the example as the check
            // runs it (its own process and environment), which is not
            // always what the shell showed (the login shell's PATH, say).
            (Some(a), Some(example)) if a == FROM_LAST_OUTPUT && compares_with_example(t) => {
                Value::String(
                    m.run_script("example", example, &[])?
                        .stdout
                        .trim()
                        .to_string(),
                )
            }
            (Some(a), _) if a == FROM_LAST_OUTPUT => Value::String(printed.trim().to_string()),
            (Some(a), _) => a.clone(),
            (None, _) => last.get("thought").cloned().unwrap_or(Value::Null),
        };
        let ok = self.judge(t, &mut m, Some(&answer))?;
        Ok(Some((ok, answer)))
    }

    /// Judges an answer on a machine after its episode, as upstream does.
    /// `answer` is the answer value (`None`: no answer).
    pub fn judge(
        &self,
        t: &Task,
        machine: &mut Machine,
        answer: Option<&Value>,
    ) -> Result<bool, MachineError> {
        let Some(answer) = answer else {
            return Ok(false);
        };
        match &t.judge {
            Judge::Match {
                answer: expected,
                strip,
            } => Ok(match answer {
                Value::String(s) if *strip => s.trim() == expected,
                Value::String(s) => s == expected,
                // Upstream compares the JSON value itself with a string.
                _ => false,
            }),
            Judge::Check { steps, example } => {
                let mut params = vec![repr::to_str(&Val::from_json(answer))];
                for step in steps {
                    let Some(script) = step.as_ref().or(example.as_ref()) else {
                        return Ok(false);
                    };
                    // A check that does not finish in time did not pass
                    // (upstream: a task error, also scored 0).
                    let run = match machine.run_script("check", script, &params) {
                        Err(MachineError::ScriptTimeout { .. }) => return Ok(false),
                        other => other?,
                    };
                    if run.status != 0 {
                        return Ok(false);
                    }
                    params.push(run.stdout);
                }
                Ok(true)
            }
        }
    }
}

/// The value an episode committed: the first argument of its first
/// `answer_action` or `finish_action` (upstream: `list(args.values())[0]`;
/// a finish without arguments commits `None`). `None` without a commit.
pub fn committed(calls: &[ToolCall]) -> Option<Value> {
    let c = calls
        .iter()
        .find(|c| c.name == ANSWER || c.name == FINISH)?;
    Some(
        c.arguments
            .as_object()
            .and_then(|m| m.values().next().cloned())
            .unwrap_or(Value::Null),
    )
}

/// `script` with bash's `$RANDOM` seeded from the task id: the random data
/// an init script makes (stock logs, log files with random errors, random
/// trees) is the same on every machine of the task, so runs are
/// reproducible. Upstream's is random per container; any draw is as valid,
/// since the checks read the machine the data is on. Python scripts and
/// `/dev/urandom` stay unseeded.
fn seeded_init(t: &Task, script: &Script) -> Script {
    match script.language {
        Language::Bash => {
            let hash = blake3::hash(t.id.as_bytes());
            let seed = u32::from_le_bytes([
                hash.as_bytes()[0],
                hash.as_bytes()[1],
                hash.as_bytes()[2],
                hash.as_bytes()[3],
            ]);
            Script {
                language: Language::Bash,
                code: format!("RANDOM={seed}\n{}", script.code),
            }
        }
        Language::Python => script.clone(),
    }
}

/// A bash command that runs `script` (a Python reference solution through
/// `python3`).
fn as_command(script: &Script) -> String {
    match script.language {
        Language::Bash => script.code.clone(),
        Language::Python => format!(
            "python3 - <<'ECDYSIS_PY_EOF'\n{}\nECDYSIS_PY_EOF",
            script.code
        ),
    }
}

/// **Testbed only.** What a `sim:` agent does on a task: run the reference
/// solution, then answer with what it printed (the argument
/// [`FROM_LAST_OUTPUT`] stands for it; a check that only reads the machine
/// ignores it), or give a match task's answer; finish where there is no
/// reference solution.
pub(crate) fn testbed_steps(t: &Task) -> Vec<ToolCall> {
    let mut calls = Vec::new();
    if let Some(example) = &t.example {
        calls.push(ToolCall::agent(
            BASH,
            json!({"script": as_command(example)}),
        ));
    }
    calls.push(match (&t.judge, &t.example) {
        (Judge::Match { answer, .. }, _) => ToolCall::agent(ANSWER, json!({"answer": answer})),
        (Judge::Check { .. }, Some(_)) => {
            ToolCall::agent(ANSWER, json!({"answer": FROM_LAST_OUTPUT}))
        }
        (Judge::Check { .. }, None) => ToolCall::agent(FINISH, json!({"thought": "done"})),
    });
    calls
}

/// Whether a check compares the answer with the reference solution's
/// output (its first step is the example).
fn compares_with_example(t: &Task) -> bool {
    matches!(&t.judge, Judge::Check { steps, .. } if steps.first().is_some_and(Option::is_none))
}

/// The gold plan's placeholder for what the last command printed, and how
/// a printed text is read back from an [`observation`]: the contract's, so
/// that the testbed agent needs no benchmark.
pub use ecdysis_env::{FROM_LAST_OUTPUT, printed_in};

/// The agent's reading of a command's output, as upstream words it.
pub fn observation(output: &str) -> String {
    let text = machine::truncate(output);
    if text.is_empty() {
        ecdysis_env::EMPTY_OBSERVATION.to_string()
    } else {
        format!("{}{text}", ecdysis_env::OBSERVATION_PREFIX)
    }
}

/// Why an episode has no machine: its task's own set-up failed (upstream:
/// the sample ends before the agent acts, scored 0), or the machine did
/// not start. Each names the script or step that failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupFailed {
    /// The system variant's preparation script exited non-zero.
    #[error("the system variant's preparation exited with {status}: {output}")]
    Prepare {
        /// Its exit status.
        status: i32,
        /// What it printed (trimmed).
        output: String,
    },
    /// An init script of the task did not finish in time.
    #[error("init script {script} of {task}: {error}")]
    InitTimeout {
        /// Which init script (from 1).
        script: usize,
        /// The task.
        task: String,
        /// The timeout.
        error: MachineError,
    },
    /// An init script of the task exited non-zero.
    #[error("init script {script} of {task} exited with {status}")]
    InitExit {
        /// Which init script (from 1).
        script: usize,
        /// The task.
        task: String,
        /// Its exit status.
        status: i32,
    },
    /// The machine itself did not start (an episode opened without its
    /// task).
    #[error(transparent)]
    Start(MachineError),
}

/// The machine an episode left behind, for [`Domain::evaluate_final`].
struct Leftover(Result<Machine, SetupFailed>);

impl Domain for OsDomain {
    fn name(&self) -> &str {
        NAME
    }

    fn policy(&self) -> &str {
        SYSTEM_PROMPT
    }

    fn system_prompt(&self) -> String {
        SYSTEM_PROMPT.into()
    }

    fn tools(&self) -> &[ToolSpec] {
        &self.shared.specs
    }

    fn splits(&self) -> Vec<String> {
        self.shared.splits.keys().cloned().collect()
    }

    fn tasks(&self, split: Option<&str>) -> Result<Vec<VisibleTask>, EnvError> {
        let s = &self.shared;
        ecdysis_env::tasks_in_split(
            NAME,
            &s.tasks,
            &s.splits,
            split,
            |t| &t.id,
            |t| self.view(t),
        )
    }

    fn task(&self, id: &str) -> Result<(VisibleTask, Oracle), EnvError> {
        let t = self.find(id)?;
        Ok((
            self.view(t),
            Oracle::new(NAME, t.id.clone(), Arc::from(""), t.clone()),
        ))
    }

    fn protocol(&self) -> Protocol {
        Protocol {
            user_simulator: false,
            no_call_reply: Some(NO_CALL_REPLY.into()),
            final_tools: vec![ANSWER.into(), FINISH.into()],
            max_agent_turns: Some(MAX_ROUNDS),
            tool_errors_capped: false,
            first_call_only: true,
        }
    }

    fn new_env(&self) -> Box<dyn Environment> {
        Box::new(OsEnv {
            specs: self.shared.specs.clone(),
            machine: Mutex::new(
                Machine::start(self.shared.options.limits).map_err(SetupFailed::Start),
            ),
            log: Vec::new(),
        })
    }

    fn new_env_for(&self, task: &VisibleTask) -> Result<Box<dyn Environment>, EnvError> {
        let t = self.find(&task.id)?;
        Ok(Box::new(OsEnv {
            specs: self.shared.specs.clone(),
            machine: Mutex::new(self.machine_for(t)?),
            log: Vec::new(),
        }))
    }

    fn evaluate(&self, oracle: &Oracle, run: &Trajectory) -> Result<Evaluation, EnvError> {
        self.evaluate_final(oracle, run, None)
    }

    fn evaluate_final(
        &self,
        oracle: &Oracle,
        run: &Trajectory,
        final_state: Option<FinalState>,
    ) -> Result<Evaluation, EnvError> {
        let t = self.task_of(oracle)?;
        let answer = committed(&run.tool_calls);
        let premature = answer.is_none() || !run.termination.is_stop();
        let mut ev = Evaluation {
            reward: 0.0,
            success: false,
            premature,
            db_match: false,
            final_db_hash: String::new(),
            db_diff: Vec::new(),
            gold_db_hash: String::new(),
            communicate_ok: true,
            communicate_checks: Vec::new(),
            action_ok: answer.is_some(),
            action_checks: Vec::new(),
            reward_basis: vec![
                match t.judge {
                    Judge::Match { .. } => "MATCH",
                    Judge::Check { .. } => "CHECK",
                }
                .into(),
            ],
            env_assertion_ok: true,
            env_assertion_checks: Vec::new(),
        };
        if premature {
            return Ok(ev);
        }
        // The machine the episode left, or (replaying) a fresh one that
        // runs the episode's commands again.
        let machine = match final_state.and_then(|s| s.downcast::<Leftover>()) {
            Some(Leftover(m)) => m,
            None => match self.machine_for(t)? {
                Ok(mut m) => {
                    for c in run.tool_calls.iter().take_while(|c| c.name == BASH) {
                        if let Some(Value::String(script)) =
                            c.arguments.as_object().and_then(|a| a.values().next())
                        {
                            m.shell(script)?;
                        }
                    }
                    Ok(m)
                }
                Err(why) => Err(why),
            },
        };
        let Ok(mut machine) = machine else {
            return Ok(ev);
        };
        // A machine the episode broke (its supervisor killed from inside,
        // say) fails this episode's checks, not the run.
        let ok = match self.judge(t, &mut machine, answer.as_ref()) {
            Ok(ok) => ok,
            Err(e) => {
                tracing::warn!(task = %t.id, error = %e, "the checks could not run: scored 0");
                false
            }
        };
        ev.db_match = ok;
        if ok {
            ev.reward = 1.0;
            ev.success = true;
        }
        Ok(ev)
    }

    fn gold_trajectory(&self, oracle: &Oracle) -> Result<Trajectory, EnvError> {
        let t = self.task_of(oracle)?;
        let mut calls = testbed_steps(t);
        // The answer a check reads is what the reference prints on the
        // task's machine.
        if calls
            .last()
            .is_some_and(|c| c.arguments["answer"] == FROM_LAST_OUTPUT)
        {
            // As the check runs it (its own process, the exec environment),
            // not as the shell shows it: the two differ where the login
            // shell's settings or the terminal matter.
            let printed = match (self.machine_for(t)?, &t.example) {
                (Ok(mut m), Some(example)) if compares_with_example(t) => {
                    m.run_script("example", example, &[])?.stdout
                }
                (Ok(mut m), Some(example)) => m.shell(&as_command(example))?.output,
                _ => String::new(),
            };
            if let Some(last) = calls.last_mut() {
                last.arguments = json!({"answer": printed.trim()});
            }
        }
        Ok(Trajectory {
            tool_calls: calls,
            assistant_texts: Vec::new(),
            termination: Termination::AgentStop,
        })
    }
}

/// One episode: its machine (or why its set-up failed) and the commands
/// it ran, in order.
pub struct OsEnv {
    specs: Vec<ToolSpec>,
    machine: Mutex<Result<Machine, SetupFailed>>,
    log: Vec<String>,
}

fn output(content: impl Into<String>, error: bool) -> ToolOutput {
    ToolOutput {
        content: content.into(),
        error,
    }
}

impl Environment for OsEnv {
    fn domain(&self) -> &str {
        NAME
    }

    fn tools(&self) -> &[ToolSpec] {
        &self.specs
    }

    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutput {
        let first = match arguments {
            Value::Object(m) => m.values().next(),
            _ => None,
        };
        match name {
            BASH => {
                let Some(first) = first else {
                    return output("Error: list index out of range", true);
                };
                // Upstream runs nothing for a script that is not a string.
                let Value::String(script) = first else {
                    return output(observation(""), false);
                };
                self.log.push(script.clone());
                let mut guard = self.machine.lock().unwrap_or_else(|p| p.into_inner());
                let machine = match &mut *guard {
                    Ok(m) => m,
                    Err(why) => {
                        return output(
                            format!("Error: the task's machine could not be set up: {why}"),
                            true,
                        );
                    }
                };
                match machine.shell(script) {
                    Ok(run) if run.limit.is_some() => output(
                        format!(
                            "Error: the command hit {}; every process of the machine was stopped and a new shell started (files are kept). {}",
                            run.limit.as_deref().unwrap_or_default(),
                            observation(&run.output)
                        ),
                        true,
                    ),
                    Ok(run) if run.timed_out => output(
                        format!(
                            "Error: the command did not finish within {} s and was interrupted. {}",
                            machine.limits().command_timeout.as_secs(),
                            observation(&run.output)
                        ),
                        true,
                    ),
                    Ok(run) => output(observation(&run.output), false),
                    Err(e) => output(format!("Error: {e}"), true),
                }
            }
            ANSWER | FINISH => output("", false),
            _ => output(INVALID_FUNCTION, true),
        }
    }

    fn state_hash(&self) -> String {
        // The machine's state is not hashed; the commands that made it are.
        let mut h = blake3::Hasher::new();
        for c in &self.log {
            h.update(c.as_bytes());
            h.update(&[0]);
        }
        h.finalize().to_hex().to_string()
    }

    fn into_final_state(self: Box<Self>) -> Option<FinalState> {
        let machine = self.machine.into_inner().unwrap_or_else(|p| p.into_inner());
        Some(FinalState::new(Leftover(machine)))
    }
}

/// No user in the loop: the oracle only answers for the testbed agents.
impl TaskOracle for Task {
    fn gold_steps(&self) -> (Vec<ToolCall>, Vec<String>) {
        (testbed_steps(self), Vec::new())
    }
}

impl From<MachineError> for EnvError {
    fn from(e: MachineError) -> EnvError {
        EnvError::benchmark(e)
    }
}
