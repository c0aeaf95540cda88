//! Layer ablation and selection: a harness evaluated with each of its four
//! layers switched off in turn, each variant compared with the full harness
//! pair by pair (the same tasks and trials), and the subset the data
//! favours. `ablate` runs it on any harness; `train --select-layers` runs it
//! on the final incumbent over the training tasks.
//!
//! The rule: a layer is dropped when the harness scored strictly higher
//! without it; a tie keeps it (the harness as trained is the default, and
//! one evaluation cannot tell a neutral layer from one that helps on other
//! tasks). When the rule drops two or more layers the chosen subset is a
//! combination nobody evaluated yet, so it is evaluated too and compared
//! with the full harness like the others.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_runner::eval::intervals::{Interval, task_intervals};
use ecdysis_runner::eval::metrics::TaskResult;
use ecdysis_sandbox::sandbox::{Layer, LayerSet};

use crate::gate::accept::{PairedDifference, paired_difference};

/// One evaluated variant, as the ablation needs it.
pub struct Evaluated {
    /// The run's per-task results (`summary.json`'s).
    pub per_task: Vec<TaskResult>,
    /// Its episodes, for the paired comparison.
    pub episodes: Vec<EpisodeRecord>,
    /// Its result directory.
    pub dir: PathBuf,
}

/// A variant's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantScore {
    /// The layers that ran.
    pub layers: LayerSet,
    /// Accuracy over tasks with its 95% bootstrap interval.
    pub accuracy: Interval,
    /// Episodes scored.
    pub episodes: u64,
    /// The result directory.
    pub dir: PathBuf,
}

/// A variant compared with the full harness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// The variant's score.
    pub score: VariantScore,
    /// The variant minus the full harness (negative: it does worse).
    pub vs_full: PairedDifference,
}

/// The effect of one layer: the harness without it, against the full one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerEffect {
    /// The layer switched off.
    pub layer: Layer,
    /// The harness without it.
    pub without: Compared,
}

/// What the ablation found (`ablation.json`, and `layer_selection` in a
/// training run's `summary.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ablation {
    /// The full harness.
    pub full: VariantScore,
    /// Each layer off in turn, in lifecycle order.
    pub layers: Vec<LayerEffect>,
    /// The layers kept by the rule.
    pub chosen: LayerSet,
    /// The chosen subset against the full harness (`None` when the rule
    /// kept every layer).
    pub chosen_vs_full: Option<Compared>,
}

/// A variant's name, for its result directory: `full`, `without-<layer>`,
/// or `only-<layers>` when more than one layer is off.
pub fn variant_name(layers: LayerSet) -> String {
    match layers.off().collect::<Vec<_>>().as_slice() {
        [] => "full".into(),
        [one] => format!("without-{one}"),
        _ => format!("only-{}", layers.names().join("-")),
    }
}

/// Bootstrap resamples of the accuracy intervals.
const BOOTSTRAP: usize = 2000;

/// Why a layer ablation could not finish.
#[derive(Debug, thiserror::Error)]
pub enum AblationError<E: std::fmt::Debug + std::fmt::Display> {
    /// An evaluation failed.
    #[error("{0}")]
    Evaluate(E),
    /// Two variants share no (task, trial) episode: nothing to compare.
    #[error("the {layers} variant shares no scored episode with the full harness")]
    NoCommonEpisodes {
        /// The variant's layers.
        layers: LayerSet,
    },
}

/// Ablate: `evaluate` runs the harness with the given layers (resuming
/// what it ran before), `seed` fixes the intervals.
pub async fn ablate<E: std::fmt::Debug + std::fmt::Display>(
    mut evaluate: impl AsyncFnMut(LayerSet) -> Result<Evaluated, E>,
    seed: u64,
) -> Result<Ablation, AblationError<E>> {
    let full = evaluate(LayerSet::ALL)
        .await
        .map_err(AblationError::Evaluate)?;
    let full_score = score(LayerSet::ALL, &full, seed);
    let mut layers = Vec::new();
    for layer in Layer::ALL {
        let set = LayerSet::ALL.without(layer);
        let variant = evaluate(set).await.map_err(AblationError::Evaluate)?;
        layers.push(LayerEffect {
            layer,
            without: compare(set, &full, &variant, seed)?,
        });
    }
    let chosen = choose(&layers);
    let chosen_vs_full = if chosen.is_all() {
        None
    } else if let Some(e) = layers.iter().find(|e| e.without.score.layers == chosen) {
        Some(e.without.clone())
    } else {
        let variant = evaluate(chosen).await.map_err(AblationError::Evaluate)?;
        Some(compare(chosen, &full, &variant, seed)?)
    };
    Ok(Ablation {
        full: full_score,
        layers,
        chosen,
        chosen_vs_full,
    })
}

/// The rule of the module docs: drop every layer without which the harness
/// scored strictly higher.
pub fn choose(effects: &[LayerEffect]) -> LayerSet {
    effects
        .iter()
        .filter(|e| e.without.vs_full.delta.estimate > 0.0)
        .fold(LayerSet::ALL, |set, e| set.without(e.layer))
}

fn score(layers: LayerSet, e: &Evaluated, seed: u64) -> VariantScore {
    VariantScore {
        layers,
        accuracy: task_intervals(&e.per_task, BOOTSTRAP, seed).accuracy,
        episodes: e.episodes.len() as u64,
        dir: e.dir.clone(),
    }
}

fn compare<E: std::fmt::Debug + std::fmt::Display>(
    layers: LayerSet,
    full: &Evaluated,
    variant: &Evaluated,
    seed: u64,
) -> Result<Compared, AblationError<E>> {
    let vs_full = paired_difference(&full.episodes, &variant.episodes, seed)
        .ok_or(AblationError::NoCommonEpisodes { layers })?;
    Ok(Compared {
        score: score(layers, variant, seed),
        vs_full,
    })
}

impl Ablation {
    /// The table: each variant's accuracy, its difference from the full
    /// harness with the interval, and the two-sided paired p.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<18} {:<28} {:>22} {:>26} {:>7}\n",
            "variant", "layers", "accuracy [95% CI]", "vs full [95% CI]", "p"
        );
        let acc = |a: &Interval| format!("{:.3} [{:.3}, {:.3}]", a.estimate, a.low, a.high);
        out += &format!(
            "{:<18} {:<28} {:>22}\n",
            "full",
            self.full.layers.to_string(),
            acc(&self.full.accuracy)
        );
        let row = |name: &str, c: &Compared| {
            let d = &c.vs_full.delta;
            format!(
                "{:<18} {:<28} {:>22} {:>26} {:>7}\n",
                name,
                c.score.layers.to_string(),
                acc(&c.score.accuracy),
                format!("{:+.3} [{:+.3}, {:+.3}]", d.estimate, d.low, d.high),
                crate::gate::accept::p_cell(Some(c.vs_full.p_two_sided())),
            )
        };
        for e in &self.layers {
            out += &row(&format!("without {}", e.layer), &e.without);
        }
        match &self.chosen_vs_full {
            None => out += "chosen: all four layers (no layer's removal raised the score)\n",
            Some(c) => {
                out += &row("chosen", c);
                let dropped: Vec<&str> = self.chosen.off().map(Layer::as_str).collect();
                out += &format!(
                    "chosen: {} (dropped {}: the harness scored higher without {})\n",
                    self.chosen,
                    dropped.join(", "),
                    if dropped.len() == 1 { "it" } else { "each" }
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake evaluation: task i is solved unless a layer it needs is off;
    /// `hurts` is a layer whose presence fails task "h".
    fn fake(layers: LayerSet, needs: &[(&str, Layer)], hurts: Option<Layer>) -> Evaluated {
        let mut episodes = vec![];
        let mut per_task = vec![];
        for (task, layer) in needs {
            let reward = if layers.contains(*layer) { 1.0 } else { 0.0 };
            episodes.push(EpisodeRecord::bare(task, 0, reward));
            per_task.push(TaskResult {
                task_id: task.to_string(),
                trials: 1,
                successes: reward as u64,
                mean_reward: reward,
                ends: vec![],
            });
        }
        let h = if hurts.is_some_and(|l| layers.contains(l)) {
            0.0
        } else {
            1.0
        };
        episodes.push(EpisodeRecord::bare("h", 0, h));
        per_task.push(TaskResult {
            task_id: "h".into(),
            trials: 1,
            successes: h as u64,
            mean_reward: h,
            ends: vec![],
        });
        Evaluated {
            per_task,
            episodes,
            dir: PathBuf::from(layers.to_string()),
        }
    }

    #[tokio::test]
    async fn a_layer_that_hurts_is_dropped_and_the_ones_that_help_kept() {
        let needs = [("a", Layer::Contract), ("b", Layer::Realize)];
        let mut asked = vec![];
        let ablation = ablate(
            async |layers: LayerSet| -> Result<Evaluated, std::io::Error> {
                asked.push(layers);
                Ok(fake(layers, &needs, Some(Layer::Regulate)))
            },
            1,
        )
        .await
        .unwrap();
        // Full, then each layer off; the chosen set (without regulate) was
        // one of them, so it is not evaluated again.
        assert_eq!(asked.len(), 5);
        assert_eq!(ablation.chosen.to_string(), "contract,skills,realize");
        let effect = |l: Layer| {
            ablation
                .layers
                .iter()
                .find(|e| e.layer == l)
                .unwrap()
                .without
                .vs_full
                .delta
                .estimate
        };
        // Three tasks: losing contract or realize loses one, dropping
        // regulate wins one, skills changes nothing (a tie keeps it).
        assert!((effect(Layer::Contract) + 1.0 / 3.0).abs() < 1e-12);
        assert!((effect(Layer::Regulate) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(effect(Layer::Skills), 0.0);
        let chosen = ablation.chosen_vs_full.as_ref().unwrap();
        assert_eq!(chosen.score.accuracy.estimate, 1.0);
        let table = ablation.render();
        assert!(table.contains("without regulate"), "{table}");
        assert!(table.contains("dropped regulate"), "{table}");
    }

    #[tokio::test]
    async fn two_dropped_layers_make_a_subset_that_is_evaluated_too() {
        let needs = [("a", Layer::Contract)];
        let mut asked = vec![];
        // Both skills and regulate hurt task "h" (either one fails it).
        let ablation = ablate(
            async |layers: LayerSet| -> Result<Evaluated, std::io::Error> {
                asked.push(layers);
                let mut e = fake(layers, &needs, Some(Layer::Regulate));
                if layers.contains(Layer::Skills) && layers.contains(Layer::Regulate) {
                    return Ok(e);
                }
                // Without either one, "h" is solved.
                e.episodes.last_mut().unwrap().reward = 1.0;
                e.per_task.last_mut().unwrap().mean_reward = 1.0;
                Ok(e)
            },
            1,
        )
        .await
        .unwrap();
        assert_eq!(ablation.chosen.to_string(), "contract,realize");
        assert_eq!(asked.len(), 6);
        assert_eq!(*asked.last().unwrap(), ablation.chosen);
    }

    #[tokio::test]
    async fn when_no_removal_helps_every_layer_stays() {
        let needs = [("a", Layer::Contract)];
        let ablation = ablate(
            async |layers: LayerSet| -> Result<Evaluated, std::io::Error> {
                Ok(fake(layers, &needs, None))
            },
            1,
        )
        .await
        .unwrap();
        assert!(ablation.chosen.is_all());
        assert!(ablation.chosen_vs_full.is_none());
        assert!(ablation.render().contains("all four layers"));
        // An evaluation error stops the ablation, typed.
        let err = ablate(
            async |_| -> Result<Evaluated, std::io::Error> { Err(std::io::Error::other("boom")) },
            1,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, AblationError::Evaluate(_)));
    }
}
