//! `ecdysis-host report` checked in a real browser: a run, a training run
//! and an experiment are produced through the CLI (simulated agents, few
//! tasks, one round), their reports are loaded in headless Chromium
//! (Debian's `chromium`), and the dumped DOM must hold the charts, the
//! lineage, the trajectory list and the simulated-agent label, with no
//! script error logged. A hostile trajectory must not run in the browser,
//! and a page with a deliberate error proves the error check can fail.
//!
//! Without Chromium the tests fail when `CI` is set (CI installs it) and
//! are skipped otherwise.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::{host_bin, repo_root};

const LABEL: &str = "simulated agent — not a benchmark result";

/// The Chromium binary, or `None` (skip) when it is missing outside CI.
fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        });
        if found.is_some() {
            return found;
        }
    }
    if std::env::var_os("CI").is_some() {
        panic!("chromium is not installed: .ci/run installs Debian's `chromium` package");
    }
    eprintln!("SKIPPED: chromium is not installed (apt-get install chromium)");
    None
}

/// Headless, offline and quiet: what every browser these tests start runs
/// with.
const CHROMIUM_FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// `report --watch DIR` on a free loopback port, once it listens.
fn serve_watched(dir: &Path) -> (std::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let server = Command::new(support::host_bin())
        .args(["report", "--watch", "--addr", &addr])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "report --watch did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    (server, addr)
}

/// What the browser made of a page: the DOM after scripts ran, and its log.
struct Loaded {
    dom: String,
    log: String,
}

impl Loaded {
    /// Script errors the browser reported, by either channel: its console
    /// log, or the page's own error hook writing onto the document.
    fn script_errors(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .log
            .lines()
            .filter(|l| l.contains("Uncaught") || (l.contains(":CONSOLE") && l.contains("rror")))
            .map(str::to_string)
            .collect();
        // The attribute itself (the hook's source mentions its name).
        if self.dom.contains("data-script-error=\"") {
            out.push("data-script-error set on the document".into());
        }
        out
    }
}

/// Load `url` in headless Chromium and dump its DOM.
fn load(browser: &Path, url: &str) -> Loaded {
    load_with(browser, url, &[])
}

/// [`load`] with more browser flags.
fn load_with(browser: &Path, url: &str, extra: &[&str]) -> Loaded {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(browser)
        .args(CHROMIUM_FLAGS)
        .args(["--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg("--dump-dom")
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    // Read both pipes on threads (a full pipe would block the browser).
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).ok();
        s
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish loading {url} in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Loaded {
        dom: out.join().unwrap(),
        log: err.join().unwrap(),
    }
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

fn host(store: &Path, args: &[&str]) -> Output {
    let out = Command::new(host_bin())
        .current_dir(repo_root())
        .args(["--quiet", "--store"])
        .arg(store)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ecdysis-host {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn report(dirs: &[&Path], out: &Path) {
    let mut c = Command::new(host_bin());
    c.arg("report");
    for d in dirs {
        c.arg(d);
    }
    let o = c.arg("--out").arg(out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        out.display().to_string(),
        "report prints the page's path"
    );
}

/// Result directories made once per test process through the CLI.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    fn store(&self) -> PathBuf {
        self.root.join("store")
    }
    fn dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// Tasks where `sim:mixed` with the template fails some trials (seed 0).
const RUN_TASKS: &str = "5,9,27,33";

/// The fixture's directory (made once per test process); its parts are
/// made on first use by [`runs`] and [`trainings`].
fn fixture_root() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        Fixture {
            root: tmp.path().to_path_buf(),
            _tmp: tmp,
        }
    })
}

/// The fixture with its two runs (`run`: the template, `direct`). Apart
/// from [`trainings`], so that a test reading only runs never waits for a
/// training and an experiment (a thread of the test harness would idle
/// for all of it).
fn runs() -> &'static Fixture {
    static RUNS: OnceLock<()> = OnceLock::new();
    let f = fixture_root();
    RUNS.get_or_init(|| {
        let store = f.store();
        let store = store.as_path();
        let run = f.dir("run");
        let o = host(
            store,
            &[
                "run",
                "--tasks",
                RUN_TASKS,
                "--trials",
                "3",
                "--agent-model",
                "sim:mixed",
                "--report",
                "--out",
                run.to_str().unwrap(),
            ],
        );
        // `--report` writes the page at the end and prints its path.
        let page = run.join("report.html");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(&format!("report: {}", page.display())),
            "run --report prints the page's path"
        );
        assert!(page.is_file());
        let direct = f.dir("direct");
        host(
            store,
            &[
                "run",
                "--harness",
                "none",
                "--tasks",
                RUN_TASKS,
                "--trials",
                "3",
                "--agent-model",
                "sim:mixed",
                "--out",
                direct.to_str().unwrap(),
            ],
        );
    });
    f
}

/// The fixture with a training (`train`) and an experiment (`experiment`).
fn trainings() -> &'static Fixture {
    static TRAININGS: OnceLock<()> = OnceLock::new();
    let f = fixture_root();
    TRAININGS.get_or_init(|| {
        let store = f.store();
        let store = store.as_path();
        let train = f.dir("train");
        let o = support::train_command(&f.root, &["--method", "ecdysis", "--rounds", "1", "--out"])
            .arg(&train)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let exp = f.dir("experiment");
        let target = repo_root().join("target/evolve-candidates");
        // A hand-configured baseline: one realization primitive switched on.
        let hand = f.root.join("hand-retail.json");
        std::fs::write(
            &hand,
            r#"{"domain": "retail", "edits": [{"kind": "refuse_finish_after_error",
                "tool": "transfer_to_human_agents", "feedback": ""}]}"#,
        )
        .unwrap();
        host(
            store,
            &[
                "experiment",
                "--hand-configured",
                hand.to_str().unwrap(),
                "--rounds",
                "1",
                "--tasks",
                "0,1,2,3,4,6,7,8",
                "--coder-latency-ms",
                "0",
                "--transfer",
                "sim:mixed",
                "--cargo-target-dir",
                target.to_str().unwrap(),
                "--out",
                exp.to_str().unwrap(),
            ],
        );
    });
    f
}

/// A run's page shows its failure groups as `failures` does: mechanism,
/// label, details, an excerpt reply by reply (every value escaped).
#[test]
fn the_run_page_shows_the_failure_groups() {
    let f = runs();
    let page = std::fs::read_to_string(f.dir("run").join("report.html")).unwrap();
    assert!(page.contains("Failure groups (by mechanism)"), "no section");
    let section = &page[page.find("<div class=\"failures\">").expect("the groups")..];
    assert!(
        section.contains("below λ = 1"),
        "{}",
        &section[..400.min(section.len())]
    );
    assert!(
        section.contains("<details"),
        "{}",
        &section[..400.min(section.len())]
    );
    assert!(section.contains(": rule "), "a layer label");
    assert!(section.contains("reply 1"), "an excerpt reply by reply");
}

/// The hand-configured baseline is evaluated like Human-Augmented, from a
/// copy of the starting harness with its edits applied, and compared with
/// it pair by pair; the methods' p-values carry Holm's adjustment.
#[test]
fn the_experiment_evaluates_a_hand_configured_baseline() {
    let f = trainings();
    let exp = f.dir("experiment");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(exp.join("experiment.json")).unwrap()).unwrap();
    let baselines = report["baselines"].as_array().unwrap();
    let names: Vec<&str> = baselines
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["direct", "human-augmented", "hand-configured"]);
    let human = &baselines[1];
    let hand = &baselines[2];
    assert_ne!(
        hand["harness"], human["harness"],
        "the edits changed the harness"
    );
    assert!(hand["test"].is_object(), "{hand}");
    assert!(hand["test_p_vs_human"].as_f64().is_some(), "{hand}");
    let tables =
        std::fs::read_to_string(exp.join("hand-configured.source/harness/src/tables.rs")).unwrap();
    assert!(
        tables.contains("transfer_to_human_agents"),
        "the edit is in the copy's tables"
    );
    for m in report["methods"].as_array().unwrap() {
        let (p, holm) = (m["test_p_vs_human"].as_f64(), m["test_p_holm"].as_f64());
        if let (Some(p), Some(holm)) = (p, holm) {
            assert!(holm >= p && holm <= 1.0, "{m}");
        }
    }
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

/// Assertions every page must pass in the browser.
fn common(page: &Loaded, what: &str) {
    assert!(
        page.dom.contains("data-script=\"ok\""),
        "{what}: the page's script did not run to its end"
    );
    assert_eq!(
        page.script_errors(),
        Vec::<String>::new(),
        "{what}: script errors"
    );
    assert!(
        page.dom.contains(LABEL),
        "{what}: simulated-agent label missing"
    );
    assert!(count(&page.dom, "<svg") >= 1, "{what}: no chart");
}

#[test]
fn run_report_shows_charts_trajectories_and_working_filters() {
    let Some(browser) = chromium() else { return };
    let f = runs();
    let out = f.root.join("run.html");
    report(&[&f.dir("run")], &out);
    let page = load(&browser, &file_url(&out));
    common(&page, "run report");
    assert!(
        count(&page.dom, "<svg") >= 4,
        "accuracy, ends, fuel, time charts"
    );
    assert!(page.dom.contains("class=\"viewer\""), "trajectory viewer");
    let eps: Vec<&str> = page
        .dom
        .split("<details class=\"ep\"")
        .skip(1)
        .map(|s| &s[..s.find('>').unwrap()])
        .collect();
    assert_eq!(eps.len(), 12, "4 tasks x 3 trials in the trajectory list");
    assert!(
        eps.iter().all(|e| !e.contains("hidden")),
        "no filter applied: every episode shown"
    );
    // The filter form is revealed by the script.
    assert!(!page.dom.contains("class=\"filters\" hidden"));

    // `?failed=1` preselects the failed-only filter: the script must hide
    // exactly the successful episodes.
    let filtered = load(&browser, &format!("{}?failed=1", file_url(&out)));
    common(&filtered, "filtered run report");
    let eps: Vec<&str> = filtered
        .dom
        .split("<details class=\"ep\"")
        .skip(1)
        .map(|s| &s[..s.find('>').unwrap()])
        .collect();
    let failed = eps
        .iter()
        .filter(|e| e.contains("data-failed=\"1\""))
        .count();
    assert!(
        failed >= 1 && failed < eps.len(),
        "the run has both outcomes"
    );
    for e in &eps {
        assert_eq!(
            e.contains("hidden"),
            e.contains("data-failed=\"0\""),
            "failed-only filter: {e}"
        );
    }
    assert!(
        filtered
            .dom
            .contains(&format!("{failed} of 12 episodes shown"))
    );
}

#[test]
fn training_and_experiment_reports_show_lineage_methods_and_charts() {
    let Some(browser) = chromium() else { return };
    let f = trainings();
    let out = f.root.join("train.html");
    report(&[&f.dir("train")], &out);
    let page = load(&browser, &file_url(&out));
    common(&page, "training report");
    assert!(page.dom.contains("class=\"tree lineage\""), "lineage tree");
    assert!(
        count(&page.dom, "data-hash=") >= 2,
        "initial and a candidate"
    );
    assert!(page.dom.contains("diff.patch"), "the candidate's diff");
    assert!(page.dom.contains("Failure groups of incumbent"));

    let out = f.root.join("experiment.html");
    report(&[&f.dir("experiment")], &out);
    let page = load(&browser, &file_url(&out));
    common(&page, "experiment report");
    assert!(page.dom.contains("Methods side by side"));
    // Offline (no role models) Ecdysis and Ecdysis-without-FDCR run the
    // same heuristic code: one row that says so, not two.
    for m in ["self-evolution", "ecdysis = ecdysis-nofdcr"] {
        assert!(
            page.dom.contains(&format!("<strong>{m}</strong>")),
            "{m} row"
        );
    }
    assert!(!page.dom.contains("<strong>ecdysis-nofdcr</strong>"));
    // The untrained baselines of the paper's table, and the fixture's
    // hand-configured one, marked as such.
    for b in ["direct", "human-augmented", "hand-configured"] {
        assert!(
            page.dom.contains(&format!("<strong>{b}</strong>")),
            "{b} row"
        );
    }
    assert_eq!(count(&page.dom, "baseline, not trained"), 3);
    assert!(
        page.dom
            .contains("heuristic diagnoser; FDCR needs role models")
    );
    assert!(page.dom.contains("Cross-model transfer"));
    assert!(
        count(&page.dom, "class=\"tree lineage\"") == 2,
        "each training run's lineage"
    );
    assert!(count(&page.dom, "<svg") >= 6);
    let file: serde_json::Value = serde_json::from_slice(
        &std::fs::read(f.dir("experiment").join("experiment.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file["simulated"], true);
    assert_eq!(file["label"], LABEL);
    let methods = file["methods"].as_array().unwrap();
    assert_eq!(methods.len(), 2, "{file}");
    assert_eq!(methods[1]["same_as"], serde_json::json!(["ecdysis-nofdcr"]));
    // Measured accommodation (transfer to sim:mixed) in every method's row,
    // counted from the file: accommodating / labelled / undetermined.
    assert!(page.dom.contains("measured accommodation"));
    for m in methods {
        let changes = m["measured_accommodation"]["changes"].as_array().unwrap();
        let label = |c: &&serde_json::Value| c["accommodation"].as_bool();
        let labelled = changes.iter().filter_map(|c| label(&c)).count();
        let yes = changes.iter().filter(|c| label(c) == Some(true)).count();
        let cell = format!(
            "data-measured=\"{yes}/{labelled}/{}\"",
            changes.len() - labelled
        );
        assert!(page.dom.contains(&cell), "{cell} for {}", m["method"]);
    }
}

#[test]
fn two_runs_are_compared_side_by_side() {
    let Some(browser) = chromium() else { return };
    let f = runs();
    let out = f.root.join("compare.html");
    report(&[&f.dir("run"), &f.dir("direct")], &out);
    let page = load(&browser, &file_url(&out));
    common(&page, "comparison");
    assert!(page.dom.contains("Comparison of 2 directories"));
    assert!(page.dom.contains("Per-task differences"));
    assert_eq!(
        count(&page.dom, "class=\"viewer\""),
        2,
        "both trajectory lists"
    );
}

#[test]
fn a_hostile_trajectory_does_not_run_in_the_browser() {
    let Some(browser) = chromium() else { return };
    let f = runs();
    // Copy the run and plant markup a hostile model could write.
    let dir = f.root.join("hostile");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(f.dir("run").join("config.json"), dir.join("config.json")).unwrap();
    let payload = "<script>document.body.setAttribute('data-pwned','script')</script><img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">";
    let text = std::fs::read_to_string(f.dir("run").join("trajectories.jsonl")).unwrap();
    let mut lines = String::new();
    for line in text.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        for e in v["transcript"].as_array_mut().unwrap() {
            for key in ["text", "content", "name"] {
                if let Some(s) = e.get(key).and_then(|s| s.as_str()) {
                    e[key] = serde_json::Value::String(format!("{s}{payload}"));
                }
            }
        }
        v["end_detail"] = serde_json::Value::String(payload.into());
        lines += &v.to_string();
        lines.push('\n');
    }
    std::fs::write(dir.join("trajectories.jsonl"), lines).unwrap();
    let out = f.root.join("hostile.html");
    report(&[&dir], &out);
    let page = load(&browser, &file_url(&out));
    // Positive control: the page's own script ran.
    assert!(page.dom.contains("data-script=\"ok\""));
    // The attribute an injected script or handler would set (its name alone
    // is in the payload shown as text).
    assert!(!page.dom.contains("data-pwned=\""), "injected markup ran");
    assert!(!page.dom.contains("<img"), "an injected element");
    assert!(
        page.dom
            .contains("&lt;script&gt;document.body.setAttribute"),
        "the payload is shown as text"
    );
    assert_eq!(page.script_errors(), Vec::<String>::new());
}

#[test]
fn the_browser_check_catches_a_script_error() {
    // Positive control of the error detection the other tests rely on.
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("broken.html");
    std::fs::write(
        &page,
        "<!doctype html><html><head><script>window.addEventListener('error',function(e){document.documentElement.setAttribute('data-script-error',String(e.message));});</script></head><body><p>x</p><script>no_such_function();</script></body></html>",
    )
    .unwrap();
    let loaded = load(&browser, &file_url(&page));
    let errors = loaded.script_errors();
    assert!(errors.iter().any(|e| e.contains("Uncaught")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("data-script-error")),
        "{errors:?}"
    );
}

/// What MLflow tracking would send of the same directories (the plan is a
/// pure function of a directory): a run, a training with its rounds as
/// steps, and an experiment as a parent run with one child per method.
#[test]
fn tracking_plans_the_runs_trainings_and_experiments_the_report_reads() {
    use ecdysis_track::plan;
    runs();
    let f = trainings();
    let run = plan(&f.dir("run")).unwrap();
    assert_eq!(run.runs.len(), 1);
    let r = &run.runs[0];
    assert!(r.finished);
    assert!(
        r.metrics.iter().any(|(k, _, s)| k == "accuracy" && *s == 0),
        "{:?}",
        r.metrics
    );
    assert!(r.artifacts.iter().any(|(n, _)| n == "report.html"));
    assert!(
        r.tags.contains(&("ecdysis.note".into(), LABEL.into())),
        "{:?}",
        r.tags
    );

    let train = plan(&f.dir("train")).unwrap();
    let t = &train.runs[0];
    assert!(
        t.metrics
            .iter()
            .any(|(k, _, s)| k == "round.incumbent_score" && *s == 1)
    );
    assert!(
        t.metrics
            .iter()
            .any(|(k, _, s)| k == "final_train_score" && *s == 0)
    );
    assert!(t.tags.iter().any(|(k, _)| k == "ecdysis.lineage"));

    let exp = plan(&f.dir("experiment")).unwrap();
    assert_eq!(exp.runs[0].key, "experiment");
    let children: Vec<&str> = exp.runs[1..].iter().map(|r| r.key.as_str()).collect();
    assert_eq!(children.len(), 2, "{children:?}");
    for c in &exp.runs[1..] {
        assert_eq!(c.parent.as_deref(), Some("experiment"));
        assert!(c.key.starts_with("method:"));
        assert!(
            c.metrics
                .iter()
                .any(|(k, _, s)| k.starts_with("round.") && *s == 1)
        );
    }
}

/// `report --watch` on a run still being written: the page served shows
/// how far it got and polls for changes in the browser (its script runs
/// without errors); as episodes and then the summary land, the fingerprint
/// the page polls changes and the page served next says so.
#[test]
fn the_watched_report_follows_a_directory_as_it_is_written() {
    let f = runs();
    let Some(browser) = chromium() else {
        return;
    };
    let full = f.dir("run");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("live");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(full.join("config.json"), dir.join("config.json")).unwrap();
    let lines: Vec<String> = std::fs::read_to_string(full.join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    let total = lines.len();
    std::fs::write(dir.join("trajectories.jsonl"), lines[..2].concat()).unwrap();
    let (mut server, addr) = serve_watched(&dir);
    let get = |path: &str| {
        let o = Command::new("curl")
            .args(["-s", &format!("http://{addr}{path}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let first = get("/");
    assert!(
        first.contains(&format!("live: live: 2 of {total} episodes")),
        "{}",
        &first[first.len().saturating_sub(800)..]
    );
    let v1 = get("/version");
    // In the browser: the page draws and its poll runs, without errors.
    let page = load_with(
        &browser,
        &format!("http://{addr}/"),
        &["--virtual-time-budget=6000"],
    );
    assert!(
        page.script_errors().is_empty(),
        "{:?}",
        page.script_errors()
    );
    assert!(page.dom.contains("id=\"ecdysis-watch\""), "banner");
    assert!(!page.dom.contains("data-polls=\"0\""), "the page polled");
    // More episodes, then the summary.
    std::fs::write(dir.join("trajectories.jsonl"), lines.concat()).unwrap();
    let v2 = get("/version");
    assert_ne!(v1, v2, "new episodes change the fingerprint");
    assert!(get("/").contains(&format!("{total} of {total} episodes")));
    std::fs::copy(full.join("summary.json"), dir.join("summary.json")).unwrap();
    assert_ne!(get("/version"), v2);
    assert!(get("/").contains("live: live: finished"));
    server.kill().ok();
    server.wait().ok();
}

/// The live view in a browser that stays open while a short training runs:
/// headless Chromium keeps the watched page loaded (real time, no virtual
/// clock), and its DevTools endpoint (`/json/list`, plain HTTP) is read for
/// the page's title, which only the server writes (the progress in front
/// of the report's title). The title must move from one round count to a
/// later one while the training still runs, which only a reload of the
/// page in the browser can do, and end on "finished".
#[test]
fn the_watched_page_reloads_in_the_browser_while_a_training_runs() {
    use std::os::unix::process::CommandExt;
    let Some(browser) = chromium() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("live");
    // A coder that takes 4 s (and changes nothing) keeps each of the three
    // rounds open across two of the page's polls.
    let mut training = support::train_command(
        tmp.path(),
        &[
            "--method",
            "ecdysis-nofdcr",
            "--coder-command",
            "sleep 4",
            "--rounds",
            "3",
            "--plateau",
            "5",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !out.join("config.json").is_file() {
        assert!(
            training.try_wait().unwrap().is_none(),
            "the training ended before writing its config"
        );
        assert!(Instant::now() < deadline, "the training wrote no config");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (mut server, addr) = serve_watched(&out);
    let profile = tempfile::tempdir().unwrap();
    // Its own process group: the renderers go with the browser at the end.
    let mut chrome = Command::new(&browser)
        .args(CHROMIUM_FLAGS)
        .arg("--remote-debugging-port=0")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("http://{addr}/"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start chromium");
    // The page's title as the browser has it, once its DevTools port is up.
    let title = || -> Option<String> {
        let port = std::fs::read_to_string(profile.path().join("DevToolsActivePort")).ok()?;
        let port = port.lines().next()?.trim().to_string();
        let o = Command::new("curl")
            .args(["-s", "--max-time", "5"])
            .arg(format!("http://127.0.0.1:{port}/json/list"))
            .output()
            .ok()?;
        let targets: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        targets
            .as_array()?
            .iter()
            .find(|t| t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.contains(&addr)))
            .and_then(|t| t["title"].as_str().map(str::to_string))
    };
    // Round counts the browser showed while the training ran, in order.
    let mut running_rounds: Vec<usize> = Vec::new();
    let mut titles: Vec<String> = Vec::new();
    let mut ended_at = None;
    let finished = loop {
        let now = title();
        if let Some(t) = &now
            && titles.last() != Some(t)
        {
            titles.push(t.clone());
        }
        if ended_at.is_none() {
            if let Some(status) = training.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(training.stderr.as_mut().unwrap(), &mut err).ok();
                assert!(status.success(), "the training failed: {err}");
                ended_at = Some(Instant::now());
            } else if let Some(n) = now.as_deref().and_then(rounds_done)
                && running_rounds.last() != Some(&n)
            {
                running_rounds.push(n);
            }
        }
        if now.as_deref().is_some_and(|t| t.contains("finished")) {
            break true;
        }
        if ended_at.is_some_and(|t| t.elapsed() > Duration::from_secs(20))
            || Instant::now() > deadline
        {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", chrome.id())])
        .status()
        .ok();
    chrome.wait().ok();
    server.kill().ok();
    server.wait().ok();
    training.kill().ok();
    training.wait().ok();
    eprintln!("titles the browser showed: {titles:#?}");
    assert!(
        finished,
        "the browser's page never said finished: {titles:?}"
    );
    assert!(
        running_rounds.windows(2).any(|w| w[1] > w[0]),
        "the page in the browser did not move on while the training ran: {titles:?}"
    );
    assert!(
        titles.iter().any(|t| t.contains("finished (3 rounds")),
        "{titles:?}"
    );
}

/// `N` of a live title "live: N of 3 rounds, …".
fn rounds_done(title: &str) -> Option<usize> {
    let (before, _) = title.split_once(" of 3 rounds")?;
    before.rsplit(' ').next()?.parse().ok()
}
