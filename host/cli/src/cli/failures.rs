//! `failures`: the failure groups of result directories.

use std::path::PathBuf;

use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;

use ecdysis_model::{
    CachePolicy, ModelConfig, ModelHub, ModelRole, PriceTable, ResponseCache, UsageLedger,
};

use ecdysis_report::failures::{self, FailureFilter};

#[derive(Args)]
pub struct FailuresArgs {
    /// Run, training or experiment directories; every run directory under
    /// them is read (an episode found in several counts once).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// An episode fails when its reward is below this (0 < λ ≤ 1).
    #[arg(long, default_value_t = 1.0, value_parser = super::eval_args::parse_lambda)]
    pub lambda: f64,
    /// Only runs of the harness whose hash starts with this (`none`: runs
    /// without a harness).
    #[arg(long)]
    pub harness: Option<String>,
    /// Print the groups as JSON (every failure record included) instead of
    /// text.
    #[arg(long)]
    pub json: bool,
    /// Also ask this model for each failure's label, from the same closed
    /// set (one call per failure, temperature 0, through the response
    /// cache), shown beside the key's with how often they agree. For models
    /// strong enough to read an excerpt better than the key's rule does.
    #[arg(long)]
    pub labeler_model: Option<String>,
    /// The labeler's OpenAI-compatible base URL.
    #[arg(
        long,
        requires = "labeler_model",
        default_value = "http://127.0.0.1:8080/v1"
    )]
    pub labeler_base_url: String,
    /// The environment variable holding the labeler's API key ('' for
    /// none).
    #[arg(long, requires = "labeler_model", default_value = "OPENAI_API_KEY")]
    pub labeler_api_key_env: String,
    /// Constrain the labeler's reply to the label set's JSON schema
    /// (`response_format`; OpenAI, vLLM and llama.cpp take it).
    #[arg(long, requires = "labeler_model")]
    pub labeler_structured: bool,
    /// The response cache directory the labeler's calls go through.
    #[arg(long, default_value = ".ecdysis/cache")]
    pub cache_dir: PathBuf,
}

/// Prints the groups; `false` when a line or file could not be read or the
/// labeler stopped (the groups of everything else are still printed, the
/// problems go to stderr).
pub fn failures_command(args: FailuresArgs) -> Result<bool> {
    // Hashes print in lowercase hex; a prefix copied in capitals still
    // selects.
    let filter = FailureFilter {
        harness: args.harness.map(|h| h.to_ascii_lowercase()),
    };
    let mut view = failures::collect(&args.dirs, args.lambda, &filter)?;
    if let Some(model) = &args.labeler_model {
        let mut config = ModelConfig::new(model, &args.labeler_base_url);
        config.api_key_env =
            (!args.labeler_api_key_env.is_empty()).then(|| args.labeler_api_key_env.clone());
        let hub = ModelHub::new(
            Arc::new(UsageLedger::new(PriceTable::embedded_default())),
            Arc::new(ResponseCache::new(&args.cache_dir, CachePolicy::ReadWrite)),
        );
        // Recorded under the Analyst's role: labelling is diagnosis.
        let labeler = hub
            .http_model(ModelRole::Analyst, config)
            .with_context(|| format!("the labeler model {model} at {}", args.labeler_base_url))?;
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(failures::label_with(
                &mut view,
                labeler.as_ref(),
                args.labeler_structured,
            ));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print!("{}", failures::render_text(&view));
    }
    for p in &view.problems {
        eprintln!("error: {p}");
    }
    // A reply naming no label is that failure's result (counted in the
    // JSON's `errors`); a labeler that stopped left failures unasked.
    let stopped = view.llm.as_ref().and_then(|l| l.stopped.as_ref());
    if let Some(why) = stopped {
        eprintln!("error: the labeler stopped: {why}");
    }
    Ok(view.problems.is_empty() && stopped.is_none())
}
