//! The worker pool: long-lived worker processes of this binary, one
//! request in flight per worker, each under a memory and a CPU-time limit,
//! with a wall-clock watchdog in the parent.
//!
//! Why a pool of long-lived workers rather than one process per episode:
//! a fresh worker pays for a wasmtime engine, the domain's data (τ² retail
//! parses its whole database) and the harness before its first episode,
//! a large share of an episode's own time: per-episode
//! processes would spend the service's overhead budget on start-up alone.
//! Why one request at a time per worker: a crash then costs exactly the
//! episode in flight, never a neighbour's (and never another tenant's).
//!
//! Each worker is served by one OS thread of the pool doing blocking I/O on
//! the worker's pipes (simple, and a stalled worker cannot block the async
//! runtime); the async side queues requests and awaits a oneshot (a slot
//! prefers a request for a task its worker has run: see `pick`). A watchdog thread kills workers past their wall-clock deadline
//! or whose request was cancelled.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::protocol::{Reply, Request};
use ecdysis_sys::rlimit::{self, Exit};

/// Largest reply line a worker may send (a whole episode record).
const MAX_REPLY_BYTES: u64 = 256 << 20;

/// How long a fresh worker may take to say it is ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Bytes of a worker's stderr kept for the message when it dies.
const STDERR_TAIL: usize = 64 << 10;

/// The limits of every worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLimits {
    /// Private writable memory (heap and anonymous mappings,
    /// `RLIMIT_DATA`), in bytes.
    pub memory_bytes: u64,
    /// CPU time one request (an episode) may use (`RLIMIT_CPU`, moved
    /// forward before each request).
    pub cpu_per_request: Duration,
    /// Wall-clock time one request may take before the parent kills the
    /// worker (a stall that burns no CPU).
    pub wall_per_request: Duration,
    /// Requests a worker serves before it is replaced by a fresh one (a
    /// slow leak cannot accumulate); 0: never.
    pub requests_per_worker: u64,
}

impl Default for WorkerLimits {
    fn default() -> Self {
        WorkerLimits {
            memory_bytes: 4 << 30,
            cpu_per_request: Duration::from_secs(300),
            wall_per_request: Duration::from_secs(3600),
            requests_per_worker: 1000,
        }
    }
}

/// How to start workers.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The binary (this one) and the arguments that make it a worker.
    pub program: PathBuf,
    /// Its arguments (the worker subcommand).
    pub args: Vec<String>,
    /// Extra environment of the workers (they inherit the rest, unless
    /// `clear_env`).
    pub env: Vec<(String, String)>,
    /// Start workers with `env` only: nothing of this process's
    /// environment is inherited (the service's workers get an allow-list).
    pub clear_env: bool,
    /// Workers (requests in flight) at most.
    pub workers: usize,
    /// Memory, CPU and wall-clock limits per worker and request.
    pub limits: WorkerLimits,
}

/// The hidden subcommand that makes the binary a worker.
pub const WORKER_SUBCOMMAND: &str = "episode-worker";

impl PoolConfig {
    /// Workers of the running binary (`ecdysis-host episode-worker`).
    pub fn this_binary(workers: usize, limits: WorkerLimits) -> std::io::Result<PoolConfig> {
        Ok(PoolConfig {
            program: std::env::current_exe()?,
            args: vec![WORKER_SUBCOMMAND.into()],
            env: Vec::new(),
            clear_env: false,
            workers,
            limits,
        })
    }
}

/// Why a worker died under a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeathCause {
    /// It exited or was killed by a signal on its own (crash, panic, a
    /// kernel limit).
    Crashed,
    /// The watchdog killed it at the wall-clock limit.
    WallClock,
    /// The request was cancelled; the watchdog killed it.
    Cancelled,
    /// Its reply line was longer than the cap.
    ReplyTooLarge,
    /// Its reply was not a protocol message.
    BadReply(String),
    /// No worker could be started (or it never became ready).
    Spawn(SpawnError),
}

/// Why no worker process could serve a request (see [`DeathCause::Spawn`]).
/// The I/O error is kept as its text, so that a [`DeathCause`] stays
/// comparable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The program could not be started.
    #[error("{}: {error}", program.display())]
    Exec {
        /// The worker program.
        program: PathBuf,
        /// The I/O error.
        error: String,
    },
    /// A standard stream of the child was not piped (`stdin`, `stdout`
    /// or `stderr`).
    #[error("no {0} pipe")]
    NoPipe(&'static str),
    /// The worker did not answer `ready` within the start-up timeout.
    #[error("it did not become ready in time")]
    NotReadyInTime,
    /// Its first line was not `ready` (the start of that line).
    #[error("it said `{0}` instead of ready")]
    NotReady(String),
    /// It exited before its `ready` line.
    #[error("it exited before becoming ready")]
    ExitedBeforeReady,
    /// Two fresh workers in a row died before taking the request.
    #[error("workers die before taking a request")]
    DieBeforeRequest,
    /// The pool has stopped.
    #[error("the worker pool is stopped")]
    Stopped,
}

/// A worker that died while serving a request.
#[derive(Debug, Clone)]
pub struct Death {
    /// What ended the worker.
    pub cause: DeathCause,
    /// What `wait4` said (`None` when no process was started).
    pub exit: Option<Exit>,
    /// The end of its stderr.
    pub stderr_tail: String,
    /// How long the request ran.
    pub elapsed: Duration,
    /// The limits it ran under.
    pub limits: WorkerLimits,
}

impl Death {
    /// Whether the worker's setting, not the request, is to blame: it
    /// could not be started at all.
    pub fn is_infrastructure(&self) -> bool {
        matches!(self.cause, DeathCause::Spawn(_))
    }

    /// One line for the episode's `end_detail`.
    pub fn describe(&self) -> String {
        let limits = &self.limits;
        let mut out = match &self.cause {
            DeathCause::WallClock => format!(
                "worker process killed at the wall-clock limit ({} s per episode)",
                limits.wall_per_request.as_secs()
            ),
            DeathCause::Cancelled => "worker process stopped: the request was cancelled".into(),
            DeathCause::ReplyTooLarge => {
                format!("worker reply longer than {MAX_REPLY_BYTES} bytes; worker killed")
            }
            DeathCause::BadReply(e) => format!("worker sent an unreadable reply ({e}); killed"),
            DeathCause::Spawn(e) => format!("no worker process could be started: {e}"),
            DeathCause::Crashed => match self.exit {
                Some(Exit {
                    signal: Some(s), ..
                }) if s == libc::SIGXCPU => format!(
                    "worker process killed by SIGXCPU at its CPU limit ({} s per episode)",
                    limits.cpu_per_request.as_secs()
                ),
                Some(Exit {
                    signal: Some(s), ..
                }) => format!(
                    "worker process killed by {} (memory limit {} MiB: a failed allocation aborts)",
                    rlimit::signal_name(s),
                    limits.memory_bytes >> 20
                ),
                Some(Exit {
                    code: Some(101), ..
                }) => "worker process panicked".into(),
                Some(Exit { code: Some(c), .. }) => {
                    format!("worker process exited with status {c}")
                }
                _ => "worker process ended without a reply".into(),
            },
        };
        if let Some(exit) = &self.exit
            && exit.peak_rss_kib > 0
        {
            out += &format!("; peak RSS {} MiB", exit.peak_rss_kib / 1024);
        }
        if let Some(line) = self.stderr_summary() {
            let line: String = line.chars().take(300).collect();
            out += &format!("; stderr: {line}");
        }
        out
    }

    /// The most telling line of the worker's last words: a panic's message
    /// (the line after `panicked at`), else the last non-empty line.
    fn stderr_summary(&self) -> Option<String> {
        let lines: Vec<&str> = self.stderr_tail.lines().collect();
        if let Some(i) = lines.iter().rposition(|l| l.contains(" panicked at ")) {
            let message = lines.get(i + 1).copied().unwrap_or_default();
            return Some(format!("{} {}", lines[i].trim(), message.trim()));
        }
        lines
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
    }
}

/// What became of a request.
#[derive(Debug)]
pub enum Outcome {
    /// The worker answered.
    Reply(Reply),
    /// The worker died (or never started) before answering.
    Died(Box<Death>),
}

struct Job {
    request: Request,
    cancel: Option<Arc<AtomicBool>>,
    reply: tokio::sync::oneshot::Sender<Outcome>,
    /// The request's [`Request::task_key`].
    task: Option<String>,
    /// Times a later request was served before this one (see [`pick`]).
    passed_over: usize,
}

/// The requests waiting for a worker. A slot takes the oldest, unless one
/// waiting is for a task its worker process has already run (see
/// [`pick`]); hence a queue the slots search rather than a channel.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    ready: std::sync::Condvar,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    /// No more requests: slots leave once the queue is empty.
    closed: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `job`; false if the pool is stopped.
    fn push(&self, job: Job) -> bool {
        let mut q = self.lock();
        if q.closed {
            return false;
        }
        q.jobs.push_back(job);
        drop(q);
        self.ready.notify_one();
        true
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// The next job for a slot whose worker has run the tasks in `seen`;
    /// `None` once the pool is closed and nothing is left.
    fn next(&self, seen: &TaskMemory) -> Option<Job> {
        let mut q = self.lock();
        loop {
            if let Some(i) = pick(&q.jobs, seen) {
                for passed in q.jobs.iter_mut().take(i) {
                    passed.passed_over += 1;
                }
                return q.jobs.remove(i);
            }
            if q.closed {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// How many later requests may be served before a waiting one; then it is
/// next whatever the slot has run (no request waits for ever).
const MAX_PASSED_OVER: usize = 8;

/// How far into the queue a slot looks for a task its worker has run.
const LOOK_AHEAD: usize = 64;

/// Which waiting request a slot takes: the first (within [`LOOK_AHEAD`])
/// for a task its worker process has already run, else the oldest; the
/// oldest in any case once it has been passed over [`MAX_PASSED_OVER`]
/// times. Why: a worker process keeps what it worked out per task (τ²'s
/// gold replay and its database hash), so the trials of a task served by
/// one process cost that once instead of once per process; results do not
/// change (episodes are seeded, and the cache holds what a replay would
/// compute).
fn pick(jobs: &VecDeque<Job>, seen: &TaskMemory) -> Option<usize> {
    let first = jobs.front()?;
    if first.passed_over >= MAX_PASSED_OVER || seen.is_empty() {
        return Some(0);
    }
    Some(
        jobs.iter()
            .take(LOOK_AHEAD)
            .position(|j| j.task.as_deref().is_some_and(|k| seen.contains(k)))
            .unwrap_or(0),
    )
}

/// The tasks one worker process has run (`domain/task`), forgotten when the
/// process is replaced; bounded, since a long-lived service sees many.
#[derive(Default)]
struct TaskMemory {
    tasks: std::collections::HashSet<String>,
}

impl TaskMemory {
    const MAX: usize = 4096;

    fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    fn contains(&self, key: &str) -> bool {
        self.tasks.contains(key)
    }

    fn remember(&mut self, key: String) {
        if self.tasks.len() >= Self::MAX {
            self.tasks.clear();
        }
        self.tasks.insert(key);
    }

    fn forget(&mut self) {
        self.tasks.clear();
    }
}

/// What the watchdog knows about one slot's request in flight.
#[derive(Default)]
struct SlotWatch {
    pid: Option<i32>,
    deadline: Option<Instant>,
    cancel: Option<Arc<AtomicBool>>,
    killed: Option<DeathCause>,
}

struct Shared {
    slots: Mutex<Vec<SlotWatch>>,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SlotWatch>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A pool of worker processes.
pub struct WorkerPool {
    queue: Arc<Queue>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    shared: Arc<Shared>,
    limits: WorkerLimits,
    workers: usize,
}

impl WorkerPool {
    /// Start the pool's threads; worker processes start on first use.
    pub fn start(config: PoolConfig) -> Arc<WorkerPool> {
        let workers = config.workers.max(1);
        let queue = Arc::new(Queue::default());
        let shared = Arc::new(Shared {
            slots: Mutex::new((0..workers).map(|_| SlotWatch::default()).collect()),
            stop: AtomicBool::new(false),
        });
        let config = Arc::new(config);
        let mut threads = Vec::new();
        for index in 0..workers {
            let (queue, shared, config) = (queue.clone(), shared.clone(), config.clone());
            if let Ok(t) = std::thread::Builder::new()
                .name(format!("ecdysis-worker-{index}"))
                .spawn(move || slot_main(index, &queue, &shared, &config))
            {
                threads.push(t);
            }
        }
        let watchdog_shared = shared.clone();
        if let Ok(t) = std::thread::Builder::new()
            .name("ecdysis-watchdog".into())
            .spawn(move || watchdog(&watchdog_shared))
        {
            threads.push(t);
        }
        Arc::new(WorkerPool {
            queue,
            threads: Mutex::new(threads),
            shared,
            limits: config.limits.clone(),
            workers,
        })
    }

    /// The limits its workers run under.
    pub fn limits(&self) -> &WorkerLimits {
        &self.limits
    }

    /// Workers at most.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Serve `request` on a free worker; `cancel` set to true stops it (the
    /// worker is killed).
    pub async fn request(&self, request: Request, cancel: Option<Arc<AtomicBool>>) -> Outcome {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self.queue.push(Job {
            task: request.task_key(),
            request,
            cancel,
            reply: tx,
            passed_over: 0,
        });
        let stopped = || {
            Outcome::Died(Box::new(Death {
                cause: DeathCause::Spawn(SpawnError::Stopped),
                exit: None,
                stderr_tail: String::new(),
                elapsed: Duration::ZERO,
                limits: self.limits.clone(),
            }))
        };
        if !sent {
            return stopped();
        }
        rx.await.unwrap_or_else(|_| stopped())
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.queue.close();
        self.shared.stop.store(true, Ordering::SeqCst);
        // Requests still in flight end now: their workers are killed.
        for slot in self.shared.lock().iter() {
            if let Some(pid) = slot.pid {
                rlimit::kill(pid);
            }
        }
        for t in self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = t.join();
        }
    }
}

fn watchdog(shared: &Shared) {
    while !shared.stop.load(Ordering::SeqCst) {
        {
            let mut slots = shared.lock();
            let now = Instant::now();
            for slot in slots.iter_mut() {
                let (Some(pid), None) = (slot.pid, &slot.killed) else {
                    continue;
                };
                let cause = if slot
                    .cancel
                    .as_ref()
                    .is_some_and(|c| c.load(Ordering::SeqCst))
                {
                    Some(DeathCause::Cancelled)
                } else if slot.deadline.is_some_and(|d| now >= d) {
                    Some(DeathCause::WallClock)
                } else {
                    None
                };
                if let Some(cause) = cause {
                    rlimit::kill(pid);
                    slot.killed = Some(cause);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running worker process.
struct Live {
    pid: i32,
    // Kept so the handle lives as long as the process; reaped by wait4.
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    served: u64,
}

impl Live {
    fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned()
    }

    /// Close its stdin (it exits at end of input) and reap it.
    fn shut_down(self) {
        let pid = self.pid;
        drop(self.stdin);
        rlimit::reap(pid, Duration::from_secs(2));
    }
}

fn slot_main(index: usize, queue: &Queue, shared: &Shared, config: &PoolConfig) {
    let mut live: Option<Live> = None;
    let mut seen = TaskMemory::default();
    while let Some(job) = queue.next(&seen) {
        let outcome = serve(index, &mut live, &job, shared, config);
        let _ = job.reply.send(outcome);
        let worn_out = live.as_ref().is_some_and(|l| {
            config.limits.requests_per_worker > 0 && l.served >= config.limits.requests_per_worker
        });
        if worn_out && let Some(l) = live.take() {
            l.shut_down();
        }
        match (&live, job.task) {
            // The process that ran it lives on with what it worked out.
            (Some(_), Some(key)) => seen.remember(key),
            (Some(_), None) => {}
            (None, _) => seen.forget(),
        }
    }
    if let Some(l) = live {
        l.shut_down();
    }
}

fn spawn(config: &PoolConfig) -> Result<Live, SpawnError> {
    let mut cmd = Command::new(&config.program);
    if config.clear_env {
        cmd.env_clear();
    }
    cmd.args(&config.args)
        .envs(config.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let memory = config.limits.memory_bytes;
    // SAFETY: the closure only calls async-signal-safe functions
    // (setrlimit, prctl).
    unsafe {
        cmd.pre_exec(move || rlimit::apply_in_child(memory, STARTUP_TIMEOUT));
    }
    let mut child = cmd.spawn().map_err(|e| SpawnError::Exec {
        program: config.program.clone(),
        error: e.to_string(),
    })?;
    let pid = child.id() as i32;
    let stdin = child.stdin.take().ok_or(SpawnError::NoPipe("stdin"))?;
    let stdout = BufReader::new(child.stdout.take().ok_or(SpawnError::NoPipe("stdout"))?);
    let stderr_pipe = child.stderr.take().ok_or(SpawnError::NoPipe("stderr"))?;
    let stderr = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
    let sink = stderr.clone();
    let _ = std::thread::Builder::new()
        .name("ecdysis-worker-stderr".into())
        .spawn(move || {
            let mut reader = BufReader::new(stderr_pipe);
            let mut line = Vec::new();
            while let Ok(n) = reader.read_until(b'\n', &mut line) {
                if n == 0 {
                    break;
                }
                tracing::debug!(target: "ecdysis::worker", pid, "{}", String::from_utf8_lossy(&line).trim_end());
                let mut tail = sink.lock().unwrap_or_else(|p| p.into_inner());
                for &b in &line {
                    if tail.len() == STDERR_TAIL {
                        tail.pop_front();
                    }
                    tail.push_back(b);
                }
                line.clear();
            }
        });
    Ok(Live {
        pid,
        _child: child,
        stdin,
        stdout,
        stderr,
        served: 0,
    })
}

/// Read one reply line (bounded).
fn read_reply(stdout: &mut BufReader<ChildStdout>) -> Result<Option<Vec<u8>>, DeathCause> {
    let mut buf = Vec::new();
    let n = stdout
        .by_ref()
        .take(MAX_REPLY_BYTES)
        .read_until(b'\n', &mut buf)
        .map_err(|_| DeathCause::Crashed)?;
    if n == 0 {
        return Ok(None);
    }
    if !buf.ends_with(b"\n") {
        return if n as u64 >= MAX_REPLY_BYTES {
            Err(DeathCause::ReplyTooLarge)
        } else {
            Ok(None)
        };
    }
    Ok(Some(buf))
}

/// Arm the watchdog for a request on `pid`.
fn arm(shared: &Shared, index: usize, pid: i32, wall: Duration, cancel: Option<Arc<AtomicBool>>) {
    let mut slots = shared.lock();
    slots[index] = SlotWatch {
        pid: Some(pid),
        deadline: Some(Instant::now() + wall),
        cancel,
        killed: None,
    };
}

/// Disarm it, learning whether it killed the worker.
fn disarm(shared: &Shared, index: usize) -> Option<DeathCause> {
    let mut slots = shared.lock();
    std::mem::take(&mut slots[index]).killed
}

fn serve(
    index: usize,
    live: &mut Option<Live>,
    job: &Job,
    shared: &Shared,
    config: &PoolConfig,
) -> Outcome {
    let started = Instant::now();
    let died = |cause: DeathCause, exit: Option<Exit>, stderr_tail: String| {
        Outcome::Died(Box::new(Death {
            cause,
            exit,
            stderr_tail,
            elapsed: started.elapsed(),
            limits: config.limits.clone(),
        }))
    };
    if job
        .cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::SeqCst))
    {
        return died(DeathCause::Cancelled, None, String::new());
    }
    let mut line = serde_json::to_vec(&job.request).expect("request serializes");
    line.push(b'\n');
    // A worker that died while idle (or on the way to its first request)
    // has not started this request: one fresh worker is tried.
    for attempt in 0..2 {
        if live.is_none() {
            match start_ready(index, shared, config) {
                Ok(l) => *live = Some(l),
                Err(death) => return Outcome::Died(death),
            }
        }
        let worker = live.as_mut().expect("started above");
        if worker
            .stdin
            .write_all(&line)
            .and_then(|_| worker.stdin.flush())
            .is_ok()
        {
            break;
        }
        let dead = live.take().expect("present");
        rlimit::reap(dead.pid, Duration::from_millis(200));
        if attempt == 1 {
            return died(
                DeathCause::Spawn(SpawnError::DieBeforeRequest),
                None,
                dead.stderr_tail(),
            );
        }
    }
    let worker = live.as_mut().expect("present");
    arm(
        shared,
        index,
        worker.pid,
        config.limits.wall_per_request,
        job.cancel.clone(),
    );
    let read = read_reply(&mut worker.stdout);
    let killed = disarm(shared, index);
    let reply = match read {
        Ok(Some(bytes)) if killed.is_none() => match serde_json::from_slice::<Reply>(&bytes) {
            Ok(reply) => Ok(reply),
            Err(e) => Err(DeathCause::BadReply(e.to_string())),
        },
        Ok(_) => Err(killed.unwrap_or(DeathCause::Crashed)),
        Err(cause) => Err(killed.unwrap_or(cause)),
    };
    match reply {
        Ok(reply) => {
            worker.served += 1;
            Outcome::Reply(reply)
        }
        Err(cause) => {
            let dead = live.take().expect("present");
            if matches!(cause, DeathCause::ReplyTooLarge | DeathCause::BadReply(_)) {
                // Alive and misbehaving; a crashed one is already dying
                // and keeps its own exit status.
                rlimit::kill(dead.pid);
            }
            let exit = rlimit::reap(dead.pid, Duration::from_secs(2));
            // Let the stderr thread drain what the worker wrote last.
            std::thread::sleep(Duration::from_millis(20));
            died(cause, Some(exit), dead.stderr_tail())
        }
    }
}

/// Start a worker and wait for its `ready` line.
fn start_ready(index: usize, shared: &Shared, config: &PoolConfig) -> Result<Live, Box<Death>> {
    let started = Instant::now();
    let death = |cause: DeathCause, exit: Option<Exit>, stderr_tail: String| {
        Box::new(Death {
            cause,
            exit,
            stderr_tail,
            elapsed: started.elapsed(),
            limits: config.limits.clone(),
        })
    };
    let mut worker = spawn(config).map_err(|e| death(DeathCause::Spawn(e), None, String::new()))?;
    arm(shared, index, worker.pid, STARTUP_TIMEOUT, None);
    let read = read_reply(&mut worker.stdout);
    let killed = disarm(shared, index);
    match read {
        Ok(Some(bytes))
            if matches!(
                serde_json::from_slice::<Reply>(&bytes),
                Ok(Reply::Ready { .. })
            ) =>
        {
            Ok(worker)
        }
        other => {
            rlimit::kill(worker.pid);
            let exit = rlimit::reap(worker.pid, Duration::from_secs(2));
            std::thread::sleep(Duration::from_millis(20));
            let why = match (killed, other) {
                (Some(_), _) => SpawnError::NotReadyInTime,
                (None, Ok(Some(bytes))) => SpawnError::NotReady(
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                        .trim()
                        .to_string(),
                ),
                _ => SpawnError::ExitedBeforeReady,
            };
            Err(death(
                DeathCause::Spawn(why),
                Some(exit),
                worker.stderr_tail(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queued check request standing for a request of `task` (`pick`
    /// reads only the job's task key).
    fn job(task: Option<&str>) -> Job {
        let (reply, _) = tokio::sync::oneshot::channel();
        Job {
            request: Request::Check {
                path: PathBuf::new(),
                limits: ecdysis_sandbox::sandbox::Limits::default(),
                cpu_seconds: 1,
            },
            cancel: None,
            reply,
            task: task.map(str::to_string),
            passed_over: 0,
        }
    }

    fn memory(tasks: &[&str]) -> TaskMemory {
        let mut m = TaskMemory::default();
        for t in tasks {
            m.remember(t.to_string());
        }
        m
    }

    #[test]
    fn a_slot_takes_a_task_its_worker_has_run_else_the_oldest() {
        let jobs: VecDeque<Job> = [Some("r/1"), None, Some("r/2"), Some("r/1")]
            .into_iter()
            .map(job)
            .collect();
        assert_eq!(pick(&jobs, &memory(&["r/2"])), Some(2));
        assert_eq!(pick(&jobs, &memory(&["r/1", "r/2"])), Some(0));
        assert_eq!(pick(&jobs, &memory(&["r/9"])), Some(0));
        assert_eq!(pick(&jobs, &TaskMemory::default()), Some(0));
        assert_eq!(pick(&VecDeque::new(), &memory(&["r/1"])), None);
    }

    #[test]
    fn no_request_is_passed_over_more_than_the_bound() {
        let queue = Queue::default();
        queue.push(job(Some("r/old")));
        let seen = memory(&["r/hot"]);
        // Slots that have run `r/hot` keep finding more of it behind the
        // old request: it is passed over at most MAX_PASSED_OVER times.
        let mut served = Vec::new();
        for _ in 0..MAX_PASSED_OVER + 3 {
            queue.push(job(Some("r/hot")));
            let next = queue.next(&seen).unwrap();
            served.push(next.task.unwrap());
        }
        let old_at = served.iter().position(|t| t == "r/old").unwrap();
        assert_eq!(old_at, MAX_PASSED_OVER);
        assert!(served[..old_at].iter().all(|t| t == "r/hot"));
        // A closed queue still hands out what it holds, then ends.
        queue.close();
        let mut left = 0;
        while queue.next(&seen).is_some() {
            left += 1;
        }
        assert_eq!(left, 1);
        assert!(!queue.push(job(None)));
    }

    #[test]
    fn task_memory_is_bounded() {
        let mut m = TaskMemory::default();
        for i in 0..TaskMemory::MAX + 10 {
            m.remember(format!("r/{i}"));
        }
        assert!(m.tasks.len() <= TaskMemory::MAX);
        assert!(m.contains(&format!("r/{}", TaskMemory::MAX + 9)));
    }
}
