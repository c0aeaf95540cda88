//! `experiment`: the three evolution methods side by side, from the flags
//! into the library's [`ExperimentSpec`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use ecdysis_evolve::experiment::{self, ExperimentSpec};
use ecdysis_evolve::train::Method;
use ecdysis_model::{ModelFlags, ModelId};
use ecdysis_sandbox::store::ComponentStore;

use super::env::DataArgs;
use super::train::{KnobDefaults, TrainKnobs};

/// Flags of `experiment`: the training knobs every method shares (the
/// same flags as `train`), the transfer models and the directory.
#[derive(Args)]
pub struct ExperimentArgs {
    /// Agent models the initial and the Ecdysis-trained harness are also
    /// tested on, on the held-out tasks (cross-model transfer): other `sim:`
    /// profiles offline; with a real agent, `MODEL` (served at
    /// --agent-base-url) or `MODEL@BASE_URL` (served elsewhere, same API-key
    /// variable). `none` for no transfer.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sim:mixed,sim:careless,sim:texter"
    )]
    pub transfer: Vec<String>,
    /// Experiment directory (one training run per method inside).
    #[arg(long, default_value = "runs/experiment")]
    pub out: PathBuf,
    /// Also evaluate a hand-configured baseline: a JSON file of rule-table
    /// edits a person chose (`{"domain": "dbbench", "notes": [...],
    /// "edits": [...]}`, the edits as the table coder writes them; e.g.
    /// scripts/hand-configured/tables-dbbench.json), applied to a copy of
    /// the starting harness and evaluated like Human-Augmented, with its
    /// held-out p against it. It shows the ceiling the edit vocabulary
    /// allows.
    #[arg(long)]
    pub hand_configured: Option<PathBuf>,
    #[command(flatten)]
    pub knobs: TrainKnobs,
}

/// `experiment`'s defaults where `train`'s differ: every method gets every
/// round; a simulated agent starts from blank rule tables (the rule coder
/// has something to add) and gets a simulated coder latency, a real agent
/// starts from the source as written (the human-augmented harness).
fn defaults(simulated: bool) -> KnobDefaults {
    KnobDefaults {
        plateau: None,
        start_blank: simulated,
        coder_latency_ms: if simulated { 2000 } else { 0 },
    }
}

/// `experiment`: every method from the same start, then the comparison.
pub async fn experiment(
    args: ExperimentArgs,
    store: &ComponentStore,
    data: &DataArgs,
) -> Result<()> {
    let simulated = args
        .knobs
        .eval
        .agent_model
        .as_deref()
        .is_none_or(ModelId::names_simulated);
    let mut train = args.knobs.spec(Method::Ecdysis, defaults(simulated))?;
    train.eval = args.knobs.eval.with_endpoint_cap(train.eval).await;
    let services = args.knobs.eval.services()?;
    let transfer = args
        .transfer
        .iter()
        .filter(|m| *m != "none" && !m.is_empty())
        .map(|m| transfer_model(m))
        .collect::<Result<Vec<_>>>()?;
    let spec = ExperimentSpec {
        train,
        transfer,
        out: args.out,
        hand_configured: args.hand_configured,
    };
    let domain = data.open(&spec.train.eval.settings.domain)?;
    let report = experiment::run(&spec, store, domain, &services).await?;
    print!("{}", report.render());
    Ok(())
}

/// A `--transfer` entry: `MODEL` or `MODEL@BASE_URL`.
fn transfer_model(entry: &str) -> Result<ModelFlags> {
    let (model, base_url) = match entry.split_once('@') {
        Some((m, url)) if url.starts_with("http://") || url.starts_with("https://") => {
            (m, Some(url.to_string()))
        }
        Some(_) => anyhow::bail!(
            "--transfer `{entry}`: after `@` comes the model's base URL (http://… or https://…)"
        ),
        None => (entry, None),
    };
    if model.is_empty() {
        anyhow::bail!("--transfer `{entry}`: no model name");
    }
    Ok(ModelFlags {
        model: Some(model.to_string()),
        base_url,
        ..ModelFlags::default()
    })
}

#[cfg(test)]
mod tests {
    use super::transfer_model;

    #[test]
    fn transfer_entries_name_a_model_and_optionally_its_endpoint() {
        let plain = transfer_model("sim:mixed").unwrap();
        assert_eq!(plain.model.as_deref(), Some("sim:mixed"));
        assert_eq!(plain.base_url, None);
        let served = transfer_model("qwen-0.5b@http://127.0.0.1:8081/v1").unwrap();
        assert_eq!(served.model.as_deref(), Some("qwen-0.5b"));
        assert_eq!(served.base_url.as_deref(), Some("http://127.0.0.1:8081/v1"));
        let err = transfer_model("qwen@127.0.0.1:8081")
            .unwrap_err()
            .to_string();
        assert!(err.contains("base URL"), "{err}");
        assert!(transfer_model("@http://x/v1").is_err());
    }
}
