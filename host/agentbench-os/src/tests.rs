//! Tests of the OS-interaction tasks and machines (the machine tests need
//! bubblewrap, which CI installs).

use std::time::{Duration, Instant};

use super::machine::{self, Machine, MachineLimits};
use super::task::{self, Judge, Language, Script};

/// The tests that load the host (fork bombs, disk fillers, a writer
/// between commands, the replay of every reference solution on four
/// threads) or time commands run one at a time: beside each other they
/// would starve each other's machines of CPU and measure that instead.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// SIGINT ignored in this process until dropped.
struct IgnoredSigint(libc::sighandler_t);

impl IgnoredSigint {
    fn new() -> Self {
        // SAFETY: sets a disposition (no handler runs); restored on drop.
        IgnoredSigint(unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) })
    }
}

impl Drop for IgnoredSigint {
    fn drop(&mut self) {
        // SAFETY: puts back the disposition saved in `new`.
        unsafe { libc::signal(libc::SIGINT, self.0) };
    }
}

fn data() -> std::path::PathBuf {
    task::locate(None).expect("data/agentbench-os in the repository")
}

#[test]
fn every_task_loads_with_upstreams_counts_and_forms() {
    let tasks = task::load(&data()).unwrap();
    let count = |g: &str| tasks.iter().filter(|t| t.group == g).count();
    let groups: Vec<usize> = (1..=7).map(|g| count(&format!("std-{g:03}"))).collect();
    assert_eq!(groups, [7, 5, 6, 19, 10, 9, 88]);
    assert_eq!(count("dev"), 26);
    let std: Vec<_> = tasks.iter().filter(|t| t.group != "dev").collect();
    let matches = std
        .iter()
        .filter(|t| matches!(t.judge, Judge::Match { .. }))
        .count();
    assert_eq!((matches, std.len() - matches), (9, 135));
    // Ids are upstream's sample names and unique.
    let mut ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    assert!(ids.contains(&"std-004-Q30-00003"), "{ids:?}");
    assert!(ids.contains(&"dev-00025"));
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), tasks.len());
    // A file-named checker is read from the group's script folder.
    let q19 = tasks.iter().find(|t| t.id == "std-004-Q19-00000").unwrap();
    let Judge::Check { steps, example } = &q19.judge else {
        panic!("{:?}", q19.judge)
    };
    assert_eq!(steps[0], None);
    let checker = steps[1].as_ref().unwrap();
    assert_eq!(checker.language, Language::Python);
    assert!(
        checker.code.contains("int(argv[1]) == int(argv[2])"),
        "{checker:?}"
    );
    assert_eq!(
        example.as_ref().unwrap().code,
        "cat /root/matrix.txt | wc -l"
    );
    assert_eq!(q19.init.len(), 1);
    // `start` is kept for the shell.
    let q49 = tasks.iter().find(|t| t.id == "std-004-Q49-00000").unwrap();
    assert_eq!(q49.start.as_ref().unwrap().code, "var=3.14");
    assert_eq!(
        q49.judge,
        Judge::Match {
            answer: "no".into(),
            strip: true
        }
    );
}

#[test]
fn the_split_is_seeded_and_covers_every_group_on_both_sides() {
    let tasks = task::load(&data()).unwrap();
    let (train, test) = task::split_standard(&tasks, task::SPLIT_SEED);
    assert_eq!(train.len() + test.len(), 144);
    assert_eq!(train.len(), 3 + 2 + 3 + 9 + 5 + 4 + 44);
    for g in 1..=7 {
        let prefix = format!("std-{g:03}-");
        assert!(train.iter().any(|t| t.starts_with(&prefix)), "{g}");
        assert!(test.iter().any(|t| t.starts_with(&prefix)), "{g}");
    }
    assert_eq!(
        task::split_standard(&tasks, task::SPLIT_SEED),
        (train.clone(), test)
    );
    assert_ne!(task::split_standard(&tasks, 1).0, train);
}

#[test]
fn malformed_tasks_are_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    for g in 1..=7 {
        std::fs::create_dir_all(dir.path().join(format!("data/{g}"))).unwrap();
        std::fs::create_dir_all(dir.path().join(format!("scripts/{g}"))).unwrap();
    }
    let cases = [
        ("[{\"evaluation\": {\"match\": \"x\"}}]", "no `description`"),
        (
            "[{\"description\": \"d\", \"evaluation\": {}}]",
            "neither `match` nor `check`",
        ),
        (
            "[{\"description\": \"d\", \"evaluation\": {\"check\": [null]}}]",
            "no `example`",
        ),
        (
            "[{\"description\": \"d\", \"evaluation\": {\"check\": {\"file\": \"../../etc/passwd\"}}}]",
            "leaves its folder",
        ),
        (
            "[{\"description\": \"d\", \"evaluation\": {\"check\": {\"code\": \"x\", \"language\": \"c\"}}}]",
            "language `c`",
        ),
        ("not json", "expected"),
    ];
    for (text, why) in cases {
        std::fs::write(dir.path().join("data/3/bad.json"), text).unwrap();
        let err = task::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("data/3/bad.json") && err.contains(why),
            "{err}"
        );
    }
    // The same folder with a good file loads (positive control).
    std::fs::write(
        dir.path().join("data/3/bad.json"),
        "{\"description\": \"d\", \"evaluation\": {\"match\": \"x\"}}",
    )
    .unwrap();
    assert_eq!(task::load(dir.path()).unwrap().len(), 1);
}

#[test]
fn output_is_cleaned_and_cut_as_upstream_does() {
    assert_eq!(
        machine::clean(b"\x1b]0;root@x: ~\x07\x1b[01;32mok\x1b[0m\r\n\x1b[?2004h"),
        "ok\r\n"
    );
    assert_eq!(
        machine::clean(&[0xff, 0xfe]),
        "OS Environment output cannot be decoded as UTF-8"
    );
    let long = "é".repeat(801);
    let cut = machine::truncate(&long);
    assert_eq!(cut, format!("{}{}", "é".repeat(780), machine::TRUNCATED));
    assert_eq!(machine::truncate(&"a".repeat(800)), "a".repeat(800));
}

fn bash(code: &str) -> Script {
    Script {
        language: Language::Bash,
        code: code.to_string(),
    }
}

fn machine() -> Machine {
    Machine::start(MachineLimits::default()).expect("bubblewrap makes an OS machine")
}

#[test]
fn the_shell_keeps_its_state_and_scripts_get_upstreams_arguments() {
    let mut m = machine();
    let r = m.shell("cd /tmp && X=41; echo $((X + 1))").unwrap();
    assert_eq!(r.output, "42\r\n");
    assert!(!r.timed_out && !r.shell_restarted);
    assert_eq!(
        m.shell("pwd; echo $X; whoami").unwrap().output,
        "/tmp\r\n41\r\nroot\r\n"
    );
    // Output without a final newline, and no output at all.
    assert_eq!(m.shell("printf abc").unwrap().output, "abc");
    assert_eq!(m.shell("true").unwrap().output, "");
    // A terminal: ls prints columns, as in upstream's container.
    let ls = m
        .shell("mkdir -p /root/d && cd /root/d && touch a b c && ls")
        .unwrap();
    assert!(ls.output.contains("a  b  c"), "{:?}", ls.output);

    // Scripts: their own process, as root in /root, `$1` the first
    // parameter, stdout only.
    let r = m
        .run_script(
            "check",
            &bash("pwd; echo \"[$1][$2]\"; echo err >&2; exit 3"),
            &["x y".into(), "z".into()],
        )
        .unwrap();
    assert_eq!((r.status, r.stdout.as_str()), (3, "/root\n[x y][z]\n"));
    let py = Script {
        language: Language::Python,
        code: "from sys import argv\nprint(int(argv[1]) == int(argv[2]))".into(),
    };
    let r = m
        .run_script("check", &py, &[" 7\n".into(), "7".into()])
        .unwrap();
    assert_eq!((r.status, r.stdout.as_str()), (0, "True\n"));
    // Init writes what the agent's shell then sees.
    m.run_script(
        "init",
        &bash("useradd -m jack && echo hi > /home/jack/f && chown jack /home/jack/f"),
        &[],
    )
    .unwrap();
    let r = m
        .shell("stat -c %U /home/jack/f; cat /home/jack/f")
        .unwrap();
    assert_eq!(r.output, "jack\r\nhi\r\n");
}

#[test]
fn a_command_past_the_timeout_is_interrupted_and_the_next_one_runs() {
    let _heavy = heavy();
    // As when the host runs in the background of a script: SIGINT ignored,
    // which every child inherits unless the machine restores it.
    let _ignored = IgnoredSigint::new();
    let limits = MachineLimits {
        command_timeout: Duration::from_secs(2),
        ..MachineLimits::default()
    };
    let mut m = Machine::start(limits).unwrap();
    m.shell("cd /tmp").unwrap();
    let t = Instant::now();
    let r = m.shell("echo started; sleep 100").unwrap();
    assert!(r.timed_out && !r.shell_restarted, "{r:?}");
    assert!(r.output.starts_with("started"), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Interrupted, not restarted: the directory is kept.
    assert_eq!(m.shell("pwd").unwrap().output, "/tmp\r\n");
    // An unfinished quote is interrupted too.
    let r = m.shell("echo 'open").unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(m.shell("echo fine").unwrap().output, "fine\r\n");
}

#[test]
fn a_shell_that_exits_or_is_killed_is_replaced() {
    let _heavy = heavy();
    let mut m = machine();
    // Several times over: each new shell gets a new terminal and FIFOs.
    for how in ["exit", "kill -9 $$"].repeat(4) {
        let t = Instant::now();
        let r = m.shell(how).unwrap();
        assert!(r.shell_restarted && !r.timed_out, "{how}: {r:?}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{how}: {:?}",
            t.elapsed()
        );
        assert_eq!(m.shell("echo back").unwrap().output, "back\r\n", "{how}");
    }
}

/// Tasks whose reference solution cannot score on this project's
/// machines, with the reason (docs/src/guides/agentbench-os.md lists them
/// too). They are replayed anyway; only the others must score.
const REFERENCE_CANNOT_SCORE: &[(&str, &str)] = &[
    (
        "std-004-Q09-00000",
        "its init writes to descriptor 123321: needs a descriptor limit above the host's hard limit (Docker's is 2^20)",
    ),
    (
        "std-004-Q47-00000",
        "the check wants the moved file's old path as the answer, which the reference prints only while it moves the file",
    ),
    (
        "std-005-new-00001",
        "the check counts files under /bin, /lib and /usr/include with a recursive bash function: on a full host /usr/lib it outlives the script timeout",
    ),
    (
        "std-005-new-00005",
        "`du -sh /usr` prints a decimal size (5.4G) that the size checker cannot parse: fails upstream too",
    ),
    (
        "std-006-new-00003",
        "its init sets the SUID bit of /usr/bin/find: the host's /usr/bin is read-only",
    ),
    ("std-006-new-00005", "needs apt and the network"),
    ("std-006-new-00006", "needs apt and the network"),
    ("std-006-new-00008", "needs apt and the network"),
    (
        "std-007-bootstrap-00067",
        "sums the sizes of /var/log's files: the machine's /var/log is empty, the answer is no integer",
    ),
];

/// Tasks whose reference reads the machine's live state: process counts
/// (a pipeline's children are `bash` until they exec) and memory use. The
/// check reads it again in another process, so on a loaded machine the two
/// readings differ now and then (as in upstream's container). They may
/// miss, but only by answering an integer the check disagrees with.
const REFERENCE_READS_LIVE_STATE: &[&str] = &[
    "std-007-bootstrap-00001",
    "std-007-bootstrap-00006",
    "std-007-bootstrap-00018",
    "std-007-bootstrap-00075",
];

/// Replays every standard task's reference solution as a testbed agent
/// (the example typed into the shell, then the answer the check compares
/// with, or a finish) on the task's machine and scores it: all but the
/// listed tasks score 1.
#[test]
fn every_reference_solution_scores_except_the_listed_ones() {
    let _heavy = heavy();
    let d = super::OsDomain::load(super::Options {
        limits: MachineLimits {
            script_timeout: Duration::from_secs(20),
            ..MachineLimits::default()
        },
        ..super::Options::default()
    })
    .unwrap();
    let tasks: Vec<_> = d
        .all_tasks()
        .iter()
        .filter(|t| t.group != "dev")
        .cloned()
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(t) = tasks.get(i) else { break };
                    let verdict = match d.replay_reference(t) {
                        Ok(Some((true, _))) => Ok(()),
                        Ok(Some((false, answer))) => Err(format!("answered {answer}")),
                        Ok(None) => Err("its set-up failed".into()),
                        Err(e) => Err(e.to_string()),
                    };
                    results.lock().unwrap().push((t.id.clone(), verdict));
                }
            });
        }
    });
    let results = results.into_inner().unwrap();
    let scored = results.iter().filter(|(_, v)| v.is_ok()).count();
    eprintln!(
        "reference solutions: {scored} of {} score 1 ({:?})",
        results.len(),
        t0.elapsed()
    );
    let listed = |id: &str| REFERENCE_CANNOT_SCORE.iter().any(|(l, _)| *l == id);
    let answered_an_integer = |verdict: &Result<(), String>| {
        let Err(e) = verdict else { return false };
        e.strip_prefix("answered \"")
            .and_then(|a| a.strip_suffix('"'))
            .is_some_and(|n| n.parse::<i64>().is_ok())
    };
    let reads_live_state = |id: &str, verdict: &Result<(), String>| {
        REFERENCE_READS_LIVE_STATE.contains(&id) && answered_an_integer(verdict)
    };
    let unexpected: Vec<_> = results
        .iter()
        .filter(|(id, v)| v.is_err() && !listed(id) && !reads_live_state(id, v))
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:?}");
    assert_eq!(results.len(), 144);
    assert!(scored >= 144 - REFERENCE_CANNOT_SCORE.len() - REFERENCE_READS_LIVE_STATE.len());
}

/// One hostile command, then the positive control in the same machine: a
/// normal command answers, within bounds.
fn hostile_then_normal(m: &mut Machine, attack: &str, bound: Duration) -> machine::CommandRun {
    let t = Instant::now();
    let run = m.shell(attack).unwrap();
    assert!(t.elapsed() < bound, "{attack}: {:?}", t.elapsed());
    let t = Instant::now();
    let ok = m
        .shell("echo fine; ls /root >/dev/null && echo forked")
        .unwrap();
    assert_eq!(ok.output, "fine\r\nforked\r\n", "after {attack}: {ok:?}");
    // Seconds, not the milliseconds it takes on a quiet machine: a loaded
    // machine answers slowly after the largest attacks, and a machine the
    // attack broke never answers, so a generous bound still shows it.
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "after {attack}: {:?}",
        t.elapsed()
    );
    run
}

#[test]
fn hostile_commands_end_in_bounded_time_and_the_machine_still_works() {
    let _heavy = heavy();
    let limits = MachineLimits {
        command_timeout: Duration::from_secs(8),
        ..MachineLimits::default()
    };
    let mut m = Machine::start(limits).unwrap();
    let bound = Duration::from_secs(25);

    // A fork bomb: stopped at the process limit (as root, a pids cgroup
    // counts the machine's tasks), every process killed, a new shell.
    if rustix::process::geteuid().is_root() {
        let run = hostile_then_normal(&mut m, ":(){ :|:& };:; sleep 2", bound);
        assert!(
            run.limit
                .as_deref()
                .is_some_and(|l| l.contains("process limit")),
            "{run:?}"
        );
    }

    // One huge file: the file-size limit stops the writer.
    let run = hostile_then_normal(&mut m, "yes > /root/big; echo status=$?", bound);
    assert!(
        run.output.contains("status=153") || run.output.contains("File size limit"),
        "{run:?}"
    );
    // Many files: the disk quota stops every writer.
    let run = hostile_then_normal(
        &mut m,
        "for i in $(seq 100); do head -c 60000000 /dev/zero > /var/f$i; done",
        bound,
    );
    assert!(
        run.limit
            .as_deref()
            .is_some_and(|l| l.contains("disk quota")),
        "{run:?}"
    );
    m.shell("rm -f /root/big /var/f*").unwrap();
    assert!(m.disk_usage() < 8 << 20, "{}", m.disk_usage());

    // A sleep past the timeout is interrupted.
    let run = hostile_then_normal(&mut m, "sleep 600", bound);
    assert!(run.timed_out, "{run:?}");
    // ... also with more typed behind it than the terminal holds.
    let padded = format!("sleep 600\n{}", "echo pad\n".repeat(30_000));
    let run = hostile_then_normal(&mut m, &padded, bound);
    assert!(run.timed_out, "{:?}", run.limit);

    // Raising a hard limit is refused (no CAP_SYS_RESOURCE inside).
    let run = hostile_then_normal(
        &mut m,
        "ulimit -Hu unlimited; ulimit -Hf unlimited; ulimit -Hv unlimited; echo done",
        bound,
    );
    assert!(
        run.output.matches("Operation not permitted").count() >= 2,
        "{run:?}"
    );

    // The host's files are not there, and /proc/sys is read-only.
    let here = env!("CARGO_MANIFEST_DIR");
    let run = hostile_then_normal(
        &mut m,
        &format!(
            "ls {here} 2>&1; cat /etc/shadow | grep -v ':\\*:' | wc -l; echo 1 > /proc/sys/vm/drop_caches 2>&1; cat /proc/1/cmdline | tr '\\0' ' ' | cut -c1-12"
        ),
        bound,
    );
    assert!(run.output.contains("No such file or directory"), "{run:?}");
    assert!(
        run.output.contains("\r\n0\r\n"),
        "a shadow entry with a password: {run:?}"
    );
    assert!(run.output.contains("Read-only file system"), "{run:?}");
    // PID 1 is the machine's own (bubblewrap), not the host's init.
    assert!(
        run.output.contains("/usr/bin/bwr") || run.output.contains("bwrap"),
        "{run:?}"
    );

    // No network beyond its own loopback.
    let run = hostile_then_normal(
        &mut m,
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\" 2>&1 | tail -1; ls /sys/class/net 2>/dev/null || cat /proc/net/dev | tail -n +3 | cut -d: -f1",
        bound,
    );
    assert!(
        run.output.contains("unreachable") || run.output.contains("Errno"),
        "{run:?}"
    );
    assert!(!run.output.contains("eth0"), "{run:?}");

    // Killing the shell: a new one.
    let run = hostile_then_normal(&mut m, "kill -9 $$", bound);
    assert!(run.shell_restarted, "{run:?}");

    // Memory no quota would see: /run and /dev/shm are small tmpfs, /dev
    // is read-only.
    let run = hostile_then_normal(
        &mut m,
        "head -c 50000000 /dev/zero > /run/x; head -c 50000000 /dev/zero > /dev/shm/x; touch /dev/evil; rm -f /run/x /dev/shm/x",
        bound,
    );
    assert_eq!(
        run.output.matches("No space left on device").count(),
        2,
        "{run:?}"
    );
    assert!(run.output.contains("Read-only file system"), "{run:?}");

    // Junk written into the supervisor's answers, and links planted where
    // the host reads: neither is taken for an answer or followed.
    let run = hostile_then_normal(
        &mut m,
        "S=$(for p in /proc/[0-9]*; do grep -qa run/ecdysis/supervisor $p/cmdline 2>/dev/null && echo ${p#/proc/}; done | head -1); \
         (head -c 3000000 /dev/zero | tr '\\0' 'x' > /proc/$S/fd/1; for i in $(seq 50); do echo \"$i 0\"; done > /proc/$S/fd/1) ; \
         for i in $(seq 0 200); do ln -sf /dev/zero /run/ecdysis/out/$i; ln -sf /dev/zero /run/ecdysis/out/shell-$i.in; done; echo planted",
        bound,
    );
    assert!(run.output.contains("planted"), "{run:?}");
    let check = m
        .run_script("check", &bash("echo checked; exit 4"), &[])
        .unwrap();
    assert_eq!((check.status, check.stdout.as_str()), (4, "checked\n"));
    let run = hostile_then_normal(&mut m, "exit", bound);
    assert!(run.shell_restarted, "{run:?}");
}

#[test]
fn a_machine_starts_and_is_removed_without_a_trace() {
    let m = machine();
    let dir = m.host_dir();
    assert!(dir.join("etc/passwd").is_file());
    drop(m);
    assert!(!dir.exists(), "{}", dir.display());
}

#[test]
fn an_init_that_fails_or_hangs_is_the_tasks_set_up_failure_and_scores_0() {
    use ecdysis_env::Domain;
    let dir = tempfile::tempdir().unwrap();
    for g in 1..=7 {
        std::fs::create_dir_all(dir.path().join(format!("data/{g}"))).unwrap();
        std::fs::create_dir_all(dir.path().join(format!("scripts/{g}"))).unwrap();
    }
    let task = |init: &str| {
        format!(
            "{{\"description\": \"d\", \"create\": {{\"init\": {}}}, \"evaluation\": {{\"match\": \"x\"}}}}",
            serde_json::to_string(init).unwrap()
        )
    };
    std::fs::write(
        dir.path().join("data/1/t.json"),
        format!(
            "[{}, {}, {}]",
            task("sleep 100"),
            task("exit 3"),
            task("echo ok > /root/f")
        ),
    )
    .unwrap();
    let d = super::OsDomain::load(super::Options {
        data: Some(dir.path().to_path_buf()),
        limits: MachineLimits {
            script_timeout: Duration::from_secs(1),
            ..MachineLimits::default()
        },
    })
    .unwrap();
    let tasks = d.all_tasks().to_vec();
    for (t, why) in tasks
        .iter()
        .zip(["did not finish within 1 s", "exited with 3"])
    {
        let t0 = Instant::now();
        let err = d.machine_for(t).unwrap().unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        // The episode's calls say so, and a right answer scores 0.
        let (view, oracle) = d.task(&t.id).unwrap();
        let mut env = d.new_env_for(&view).unwrap();
        let out = env.call(super::BASH, &serde_json::json!({"script": "true"}));
        assert!(out.error && out.content.contains(why), "{out:?}");
        let run = ecdysis_env::Trajectory {
            tool_calls: vec![ecdysis_env::ToolCall::agent(
                super::ANSWER,
                serde_json::json!({"answer": "x"}),
            )],
            assistant_texts: Vec::new(),
            termination: ecdysis_env::Termination::AgentStop,
        };
        assert!(
            !d.evaluate_final(&oracle, &run, env.into_final_state())
                .unwrap()
                .success
        );
    }
    // Positive control: a task whose init works.
    let (view, oracle) = d.task(&tasks[2].id).unwrap();
    let mut env = d.new_env_for(&view).unwrap();
    let out = env.call(super::BASH, &serde_json::json!({"script": "cat /root/f"}));
    assert_eq!(out.content, "The output of the OS:\n\nok\r\n");
    let run = ecdysis_env::Trajectory {
        tool_calls: vec![ecdysis_env::ToolCall::agent(
            super::ANSWER,
            serde_json::json!({"answer": " x\n"}),
        )],
        assistant_texts: Vec::new(),
        termination: ecdysis_env::Termination::AgentStop,
    };
    assert!(
        d.evaluate_final(&oracle, &run, env.into_final_state())
            .unwrap()
            .success
    );
}

/// The texts the agent reads are upstream's: compared with the vectors
/// `tests/agentbench-os/gen_protocol_vectors.py` extracts from AgentBench's
/// source at the data's commit.
#[test]
fn the_agent_reads_upstreams_texts_and_tools() {
    use ecdysis_env::Domain;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/agentbench-os/protocol_vectors.json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("protocol vectors")).unwrap();
    let text = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("{k}")).to_string();
    assert_eq!(super::SYSTEM_PROMPT, text("system_prompt"));
    assert_eq!(super::TASK_PREFIX, text("task_prefix"));
    assert_eq!(super::NO_CALL_REPLY, text("no_call_reply"));
    assert_eq!(super::INVALID_FUNCTION, text("invalid_function"));
    assert_eq!(machine::TRUNCATED, text("cut_suffix"));
    assert_eq!(
        machine::OUTPUT_LIMIT as u64,
        v["cut_limit"].as_u64().unwrap()
    );
    assert_eq!(machine::OUTPUT_KEEP as u64, v["cut_keep"].as_u64().unwrap());
    assert_eq!(
        u64::from(super::MAX_ROUNDS),
        v["round_limit"].as_u64().unwrap()
    );
    assert_eq!(
        super::observation("x"),
        format!("{}x", text("output_prefix"))
    );
    assert_eq!(super::observation(""), text("empty_output"));
    // The tools, as the model receives them, in upstream's order.
    let d = super::OsDomain::load(super::Options::default()).unwrap();
    let ours: Vec<serde_json::Value> = d
        .tools()
        .iter()
        .map(|t| {
            serde_json::json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": *t.parameters,
            }})
        })
        .collect();
    assert_eq!(serde_json::Value::Array(ours), v["tools"]);
}

/// A background job that keeps writing while no command runs (the model
/// is thinking) is stopped by the watchdog with the whole machine; the
/// disk it holds stays bounded.
#[test]
fn a_writer_between_commands_is_stopped_with_its_machine() {
    let _heavy = heavy();
    let limits = MachineLimits {
        disk: 64 << 20,
        ..MachineLimits::default()
    };
    let mut m = Machine::start(limits).unwrap();
    let run = m
        .shell("nohup sh -c 'i=0; while :; do head -c 20000000 /dev/zero > /root/f$i; i=$((i+1)); done' >/dev/null 2>&1 & echo started")
        .unwrap();
    assert!(run.output.contains("started"), "{run:?}");
    let t = Instant::now();
    while !m.stopped_over_quota() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(m.stopped_over_quota(), "{} bytes", m.disk_usage());
    std::thread::sleep(Duration::from_millis(500));
    let held = m.disk_usage();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(m.disk_usage(), held, "still writing");
    // Twice the quota, plus what a writer manages in one 50 ms look.
    assert!(held < 2 * (64 << 20) + (200 << 20), "{held}");
    assert!(m.shell("echo hi").is_err());
    drop(m);
    // Positive control: the next machine works.
    assert_eq!(machine().shell("echo hi").unwrap().output, "hi\r\n");
}

/// Many empty files count toward the disk quota too (each is an inode of
/// the host's memory). A small quota, so the loop reaches it in a moment
/// whatever the machine's load. The loop makes 50,000 files, past the
/// quota (32,768 entries) and short of the watchdog's twice the quota
/// however late the command's own check sees it (a machine past that is
/// stopped whole: the writer between commands above).
#[test]
fn many_empty_files_hit_the_disk_quota() {
    let _heavy = heavy();
    let limits = MachineLimits {
        disk: 32 << 20,
        ..MachineLimits::default()
    };
    let mut m = Machine::start(limits).unwrap();
    let run = hostile_then_normal(
        &mut m,
        "mkdir /root/many && cd /root/many && for i in $(seq 50000); do : > $i; done",
        Duration::from_secs(40),
    );
    assert!(
        run.limit
            .as_deref()
            .is_some_and(|l| l.contains("disk quota")),
        "{run:?}"
    );
    // The files are kept, and the disk may stay past the quota: looking
    // around and deleting still work (only writing more is stopped), and
    // after the delete the quota holds as before.
    let ls = m.shell("ls /root/many | wc -l").unwrap();
    assert!(ls.limit.is_none(), "{ls:?}");
    let rm = m.shell("rm -rf /root/many && echo gone").unwrap();
    assert_eq!(rm.output, "gone\r\n", "{rm:?}");
    let write = m
        .shell("echo data > /root/small && cat /root/small")
        .unwrap();
    assert_eq!(write.output, "data\r\n", "{write:?}");
    let big = m
        .shell("head -c 36000000 /dev/zero > /root/big; echo written")
        .unwrap();
    assert!(
        big.limit
            .as_deref()
            .is_some_and(|l| l.contains("disk quota")),
        "{big:?}"
    );
}

/// The dependence measurement tells the three kinds apart: a group count
/// changes on the variant system (one more group); random init data is
/// seeded from the task, so two plain machines agree; a task without a
/// reference solution is named as such. Positive control: a task that only
/// reads what its init made is stable.
#[test]
fn dependence_on_the_system_is_measured_and_random_inits_are_reproducible() {
    let _heavy = heavy();
    use super::dependence::Dependence;
    let d = super::OsDomain::load(super::Options::default()).unwrap();
    let task = |id: &str| {
        d.all_tasks()
            .iter()
            .find(|t| t.id == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id}"))
    };
    let class = |id: &str| {
        let m = d.dependence(&task(id)).unwrap();
        (m.class, m.plain, m.variant)
    };
    // `getent group | wc -l`.
    let (c, plain, variant) = class("std-003-ac-00001");
    assert_eq!(c, Dependence::DependsOnSystem, "{plain:?} {variant:?}");
    let (plain, variant) = (plain.unwrap(), variant.unwrap());
    assert_eq!(
        variant.parse::<u32>().unwrap(),
        plain.parse::<u32>().unwrap() + 1
    );
    // 401 log lines drawn with $RANDOM: the same on every machine.
    assert_eq!(class("std-001-stock-00000").0, Dependence::Stable);
    assert_eq!(class("std-004-N41-00000").0, Dependence::NoReference);
    assert_eq!(class("std-004-Q19-00000").0, Dependence::Stable);
}
