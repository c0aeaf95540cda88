//! A training run's spend limits (`--max-coder-calls`, `--max-episodes`,
//! `--max-usd`): what the run may spend in all, checked before each round
//! and each unit. Not to be confused with the task budget a run may train
//! on ([`crate::evaluate::task_budget`]) or the token budget of a request
//! ([`crate::diagnose::token_budget`]).

use super::TrainConfig;

/// The first spend limit reached, if any (its stop reason keeps the word
/// the records have always used: "budget"). Every attempt counts: failed builds,
/// trapped candidates and failed coder runs were paid for too.
pub(super) fn reached(
    config: &TrainConfig,
    coder_calls: u32,
    episodes: u64,
    usd: f64,
    call_refused: bool,
) -> Option<String> {
    if let Some(m) = config.plan.max_coder_calls.filter(|m| coder_calls >= *m) {
        return Some(format!("coder-call budget ({m}) used"));
    }
    if let Some(m) = config.plan.max_episodes.filter(|m| episodes >= *m) {
        return Some(format!("episode budget ({m}) used"));
    }
    if let Some(m) = config.plan.max_usd.filter(|m| usd >= *m) {
        return Some(format!("dollar budget (${m:.2}) used: ${usd:.4} spent"));
    }
    if let Some(m) = config.plan.max_usd.filter(|_| call_refused) {
        return Some(format!(
            "dollar budget (${m:.2}) used: ${usd:.4} spent, and the next call would have crossed it"
        ));
    }
    None
}
