//! Tests against the real MariaDB (one private server per test process;
//! SKIPPED without `mariadbd` unless `$CI` is set).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::testing::{domain, first_task};
use super::*;
use ecdysis_env::Domain;

/// A statement that must end as a tool error in bounded time, followed by
/// a normal query on the same episode (the positive control).
fn hostile(db: &EpisodeDb, sql: &str, bound: Duration) -> Executed {
    let t0 = Instant::now();
    let out = db.execute(sql);
    let took = t0.elapsed();
    assert!(took < bound, "{sql}: took {took:?}, bound {bound:?}");
    let control = db.execute("SELECT COUNT(*) FROM `Jiu-Jitsu Championships Results`");
    assert_eq!(control.printed, "[(18,)]", "positive control after {sql}");
    assert!(!control.error);
    out
}

use sql::{EpisodeDb, Executed};

#[test]
fn results_print_exactly_as_the_original_client() {
    let Some(d) = domain() else { return };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/dbbench/render_vectors.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("vectors"))
        .expect("vectors JSON");
    let task = &d.all_tasks()[doc["task_index"].as_u64().expect("index") as usize];
    let db = d.episode_db(task).expect("episode schema");
    let mut bad = Vec::new();
    let vectors = doc["vectors"].as_array().expect("vectors");
    for v in vectors {
        let sql = v["sql"].as_str().expect("sql");
        let want = v["printed"]
            .as_str()
            .expect("printed")
            .replace("{schema}", db.schema());
        let got = db.execute(sql).printed;
        if got != want {
            bad.push(format!("{sql}\n  want {want}\n  got  {got}"));
        }
    }
    assert!(vectors.len() > 30);
    assert!(bad.is_empty(), "{} differ:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn a_huge_cross_join_times_out_as_a_tool_error() {
    let Some(d) = domain() else { return };
    let db = d.episode_db(&first_task(&d)).expect("schema");
    let t = "`Jiu-Jitsu Championships Results`";
    let out = hostile(
        &db,
        &format!("SELECT COUNT(*) FROM {t} a, {t} b, {t} c, {t} e, {t} f, {t} g, {t} h, {t} i"),
        Duration::from_secs(12),
    );
    assert!(out.error);
    assert_eq!(out.printed, sql::TIMEOUT_TEXT);
}

#[test]
fn a_huge_result_is_cut_and_stops_early() {
    let Some(d) = domain() else { return };
    let db = d.episode_db(&first_task(&d)).expect("schema");
    let t = "`Jiu-Jitsu Championships Results`";
    let out = hostile(
        &db,
        &format!("SELECT * FROM {t} a, {t} b, {t} c, {t} e, {t} f, {t} g"),
        Duration::from_secs(8),
    );
    assert!(!out.error, "{}", out.printed);
    assert!(out.printed.ends_with(render::TRUNCATED), "{}", out.printed);
    assert_eq!(
        out.printed.chars().count(),
        render::MAX_CHARS + render::TRUNCATED.len()
    );
}

#[test]
fn sleep_is_bounded_even_after_lifting_the_session_limit() {
    let Some(d) = domain() else { return };
    let db = d.episode_db(&first_task(&d)).expect("schema");
    let out = hostile(&db, "SELECT SLEEP(100)", Duration::from_secs(12));
    assert!(out.error, "{}", out.printed);
    // The session variable is the agent's to change; the per-user limit
    // and the client-side watchdog still end it.
    let lifted = db.execute("SET SESSION max_statement_time = 0");
    assert!(!lifted.error, "{}", lifted.printed);
    let out = hostile(&db, "SELECT SLEEP(100)", Duration::from_secs(15));
    assert!(out.error, "{}", out.printed);
    assert_eq!(out.printed, sql::TIMEOUT_TEXT);
}

#[test]
fn files_and_other_schemas_are_out_of_reach() {
    let Some(d) = domain() else { return };
    let task = first_task(&d);
    let db = d.episode_db(&task).expect("schema");
    let other = d.episode_db(&task).expect("another schema");
    let bound = Duration::from_secs(5);
    let outfile = hostile(
        &db,
        "SELECT * FROM `Jiu-Jitsu Championships Results` INTO OUTFILE '/tmp/ecdysis-dbbench-leak.txt'",
        bound,
    );
    assert!(outfile.error, "{}", outfile.printed);
    assert!(!std::path::Path::new("/tmp/ecdysis-dbbench-leak.txt").exists());
    let load = hostile(&db, "SELECT LOAD_FILE('/etc/passwd')", bound);
    assert_eq!(
        load.printed, "[(None,)]",
        "LOAD_FILE needs the FILE privilege"
    );
    let users = hostile(&db, "SELECT User FROM mysql.user", bound);
    assert!(users.error, "{}", users.printed);
    let foreign = hostile(
        &db,
        &format!(
            "SELECT * FROM `{}`.`Jiu-Jitsu Championships Results`",
            other.schema()
        ),
        bound,
    );
    assert!(foreign.error, "{}", foreign.printed);
    let create = hostile(&db, "CREATE DATABASE ecdysis_escape", bound);
    assert!(create.error, "{}", create.printed);
    let grant = hostile(&db, "SET GLOBAL max_statement_time = 0", bound);
    assert!(grant.error, "{}", grant.printed);
}

/// Gold INSERT/UPDATE statements whose `answer_md5` MySQL 8's default
/// (strict) `sql_mode` cannot reproduce: the UPDATE compares a TEXT column
/// with a bare number, and a strict-mode DML statement fails on the
/// truncation (error 1292); the labels were made without strict mode.
pub const STRICT_MODE_LABELS: &[&str] = &["standard-278", "standard-295"];

/// The gold statement runs, but its `answer_md5` matches neither the
/// updated nor the original table: an inconsistent upstream label.
pub const INCONSISTENT_LABELS: &[&str] = &["standard-225"];

/// Tasks whose table the original cannot create (an empty column name):
/// a task error, 0 for any agent.
pub const SETUP_FAILS: &[&str] = &["dev-5"];

/// Held by the tests that open every task and by the one that asserts the
/// schema names of a task nobody else has open.
static EVERY_TASK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn every_task() -> std::sync::MutexGuard<'static, ()> {
    EVERY_TASK.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn gold_replay_reproduces_the_labels() {
    let Some(d) = domain() else { return };
    let _every_task = every_task();
    let t0 = Instant::now();
    let records = ecdysis_env::replay_gold(&d).expect("gold replay");
    let mut failed: Vec<&str> = records
        .iter()
        .filter(|r| r.reward != 1.0)
        .map(|r| r.task_id.as_str())
        .collect();
    let modifying = d.all_tasks().iter().filter(|t| t.is_modifying()).count();
    assert_eq!(modifying, 240);
    assert_eq!(records.len(), 360);
    // Every SELECT label passes the ported checker, and every gold
    // statement reproduces its hash but the three named upstream cases.
    let mut known: Vec<&str> = STRICT_MODE_LABELS
        .iter()
        .chain(INCONSISTENT_LABELS)
        .chain(SETUP_FAILS)
        .copied()
        .collect();
    known.sort();
    failed.sort();
    assert_eq!(failed, known, "gold replay failures");
    // The broken task's own label still passes the checker.
    for id in SETUP_FAILS {
        let t = d.all_tasks().iter().find(|t| t.id == *id).expect("task");
        assert!(t.setup_error().is_some());
        assert!(checker::compare(
            checker::Input::Json(&t.label),
            checker::Input::Json(&t.label),
            &t.kind
        ));
        let (view, _) = d.task(id).expect("task");
        let mut env = d.new_env_for(&view).expect("env of a broken task");
        let out = env.call(EXECUTE_SQL, &json!({"query": "SELECT 1"}));
        assert!(out.error && out.content.contains("1166"), "{}", out.content);
    }
    eprintln!(
        "gold replay: {} tasks in {:?}; not reproduced: {failed:?}",
        records.len(),
        t0.elapsed()
    );
}

#[test]
fn the_strict_mode_labels_reproduce_without_strict_mode() {
    let Some(d) = domain() else { return };
    for id in STRICT_MODE_LABELS {
        let t = d.all_tasks().iter().find(|t| t.id == *id).expect("task");
        let db = d.episode_db(t).expect("schema");
        let gold = t.gold_sql.as_deref().expect("gold statement");
        let strict = db.execute(gold);
        assert!(
            strict.printed.starts_with("1292 (22007)"),
            "{id}: {}",
            strict.printed
        );
        assert!(!db.execute("SET SESSION sql_mode = ''").error);
        assert_eq!(db.execute(gold).printed, "[]", "{id}");
        let want = checker::extract_hash(t.answer_md5.as_deref().expect("md5"));
        assert_eq!(db.tables_hash(&t.tables), want, "{id}");
    }
}

/// The domain opened with `--sql-mode lenient` reproduces the two
/// strict-mode labels through its own scoring (239 of 240 gold statements,
/// all but the inconsistent one), while the default domain, on the same
/// shared server, still runs MySQL 8's strict mode: the mode is the
/// domain's, not the server's.
#[test]
fn lenient_sql_mode_reproduces_the_strict_mode_labels() {
    let Some(strict) = domain() else { return };
    let lenient = DbbenchDomain::load(Options {
        limits: Limits {
            statement_timeout: Duration::from_secs(2),
            sql_mode: mysql8::SqlMode::Lenient,
        },
        ..Options::default()
    })
    .expect("DBBench data");
    let gold_reward = |d: &DbbenchDomain, id: &str| {
        let (_, oracle) = d.task(id).expect("task");
        let run = d.gold_trajectory(&oracle).expect("gold");
        d.evaluate(&oracle, &run).expect("evaluate").reward
    };
    for id in STRICT_MODE_LABELS {
        assert_eq!(gold_reward(&lenient, id), 1.0, "{id} under lenient mode");
        assert_eq!(gold_reward(&strict, id), 0.0, "{id} under MySQL 8's mode");
    }
    // Positive control: a label that reproduces in both modes.
    for d in [&strict, &lenient] {
        assert_eq!(
            gold_reward(d, "standard-0").max(gold_reward(d, "standard-1")),
            1.0
        );
    }
    for id in INCONSISTENT_LABELS {
        assert_eq!(
            gold_reward(&lenient, id),
            0.0,
            "{id} is inconsistent upstream"
        );
    }
    assert_eq!("lenient".parse(), Ok(mysql8::SqlMode::Lenient));
    assert!(
        "strict"
            .parse::<mysql8::SqlMode>()
            .unwrap_err()
            .to_string()
            .contains("`strict`")
    );
}

#[test]
fn the_protocol_answers_as_the_original() {
    let Some(d) = domain() else { return };
    let (view, _) = d.task("standard-0").expect("task");
    let mut env = d.new_env_for(&view).expect("env");
    let call = |env: &mut Box<dyn ecdysis_env::Environment>, name: &str, args: Value| {
        env.call(name, &args)
    };
    assert_eq!(
        call(&mut env, "drop_table", json!({})).content,
        INVALID_FUNCTION
    );
    assert_eq!(
        call(&mut env, EXECUTE_SQL, json!({})).content,
        "Error executing query: list index out of range"
    );
    assert_eq!(
        call(&mut env, EXECUTE_SQL, json!("not json")).content,
        BAD_ARGUMENTS
    );
    assert_eq!(
        call(&mut env, EXECUTE_SQL, json!({"q": 5})).content,
        "'int' object has no attribute 'encode'"
    );
    // Any key: the original takes the first argument's value.
    let out = call(
        &mut env,
        EXECUTE_SQL,
        json!({"sql": "SELECT COUNT(*) FROM `Jiu-Jitsu Championships Results`"}),
    );
    assert_eq!(out.content, "[(18,)]");
    assert!(!env.state_hash().is_empty());
}

/// Trials of one task run at once (`--trials 3 --concurrency 4`) take and
/// give back the same schema names: a name is free again only once its
/// database and user are dropped, or the next trial's CREATE USER fails.
#[test]
fn concurrent_trials_of_one_task_reuse_names_without_a_clash() {
    let Some(d) = domain() else { return };
    // Not the first task: another test holds its names meanwhile.
    let task = d.all_tasks()[2].clone();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    for _ in 0..8 {
                        let db = d.episode_db(&task).expect("a schema for the trial");
                        assert!(!db.execute("SELECT 1").error);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("no trial failed");
        }
    });
}

/// The schema's name (which some error texts show) is the same for the
/// same task in every run, and still unique among the episodes open at
/// once.
#[test]
fn schema_names_are_a_function_of_the_task_and_unique_while_open() {
    let Some(d) = domain() else { return };
    // Tasks no other test opens while this runs (the gold replay opens
    // them all): a name another test holds meanwhile would shift the
    // suffixes asserted here.
    let _every_task = every_task();
    let tasks = d.all_tasks();
    let task = tasks[tasks.len() - 1].clone();
    let first = d.episode_db(&task).expect("schema");
    let name = first.schema().to_string();
    assert!(
        name.starts_with("ecdysis_dbb_") && name.len() <= 32,
        "{name}"
    );
    let second = d.episode_db(&task).expect("a second schema");
    assert_eq!(second.schema(), format!("{name}_2"));
    drop(first);
    let again = d.episode_db(&task).expect("the name again");
    assert_eq!(again.schema(), name, "the same task, the same name");
    let other = &tasks[tasks.len() - 2];
    let third = d.episode_db(other).expect("another task");
    assert_ne!(third.schema(), name);
    // Each works on its own schema.
    for db in [&second, &again, &third] {
        assert!(!db.execute("SELECT 1").error);
    }
}
