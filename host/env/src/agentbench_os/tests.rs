//! Tests of the OS-interaction tasks and machines (the machine tests need
//! bubblewrap, which CI installs).

use std::time::{Duration, Instant};

use super::machine::{self, Machine, MachineLimits};
use super::task::{self, Judge, Language, Script};

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
