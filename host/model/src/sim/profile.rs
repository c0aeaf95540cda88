//! Quirks and profiles of the simulated agent models.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Ground-truth class of a quirk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuirkKind {
    /// An interface mismatch a harness can legitimately fix (and the model
    /// corrects when feedback states the fix).
    Systematic,
    /// The model's own limit; nothing the harness says corrects it.
    ModelSpecific,
}

impl QuirkKind {
    /// The snake_case name, as in testbed notes and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Systematic => "systematic",
            Self::ModelSpecific => "model_specific",
        }
    }
}

impl fmt::Display for QuirkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One quirk a simulated agent can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quirk {
    /// Writes the call as a fenced ```json `{"name", "arguments"}` object in
    /// the message text instead of a structured call.
    TextCall,
    /// Drops the leading `#` of string ids such as `#W2378156`.
    DropHash,
    /// Passes numeric arguments as strings (`"2"` for `2`).
    NumbersAsStrings,
    /// Calls a plausible wrong tool name (`get_order_info` for
    /// `get_order_details`).
    ToolAlias,
    /// After a failed call, repeats the identical call once more.
    RepeatFailingCall,
    /// Skips a read-only lookup the plan has right before a write.
    SkipPrecondition,
    /// Replaces one `item_ids`/`new_item_ids` entry with a different but
    /// plausible item id.
    WrongVariant,
    /// Stops before the last planned call.
    EarlyStop,
    /// Changes a numeric amount argument slightly.
    Miscount,
}

impl Quirk {
    /// Every quirk, in declaration order.
    pub const ALL: [Quirk; 9] = [
        Self::TextCall,
        Self::DropHash,
        Self::NumbersAsStrings,
        Self::ToolAlias,
        Self::RepeatFailingCall,
        Self::SkipPrecondition,
        Self::WrongVariant,
        Self::EarlyStop,
        Self::Miscount,
    ];

    /// Whether a harness can legitimately fix the quirk (systematic) or not
    /// (model-specific).
    pub fn kind(self) -> QuirkKind {
        match self {
            Self::TextCall
            | Self::DropHash
            | Self::NumbersAsStrings
            | Self::ToolAlias
            | Self::RepeatFailingCall
            | Self::SkipPrecondition => QuirkKind::Systematic,
            Self::WrongVariant | Self::EarlyStop | Self::Miscount => QuirkKind::ModelSpecific,
        }
    }

    /// The snake_case name used in profiles, notes and `--help`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TextCall => "text_call",
            Self::DropHash => "drop_hash",
            Self::NumbersAsStrings => "numbers_as_strings",
            Self::ToolAlias => "tool_alias",
            Self::RepeatFailingCall => "repeat_failing_call",
            Self::SkipPrecondition => "skip_precondition",
            Self::WrongVariant => "wrong_variant",
            Self::EarlyStop => "early_stop",
            Self::Miscount => "miscount",
        }
    }
}

impl fmt::Display for Quirk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Quirk {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|q| q.as_str() == s)
            .ok_or_else(|| format!("unknown quirk `{s}`"))
    }
}

/// Per-quirk firing probabilities (per eligible step). Missing fields are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuirkRates {
    /// Probability of [`Quirk::TextCall`].
    pub text_call: f64,
    /// Probability of [`Quirk::DropHash`].
    pub drop_hash: f64,
    /// Probability of [`Quirk::NumbersAsStrings`].
    pub numbers_as_strings: f64,
    /// Probability of [`Quirk::ToolAlias`].
    pub tool_alias: f64,
    /// Probability of [`Quirk::RepeatFailingCall`].
    pub repeat_failing_call: f64,
    /// Probability of [`Quirk::SkipPrecondition`].
    pub skip_precondition: f64,
    /// Probability of [`Quirk::WrongVariant`].
    pub wrong_variant: f64,
    /// Probability of [`Quirk::EarlyStop`].
    pub early_stop: f64,
    /// Probability of [`Quirk::Miscount`].
    pub miscount: f64,
}

impl QuirkRates {
    /// The firing probability of `quirk`.
    pub fn get(&self, quirk: Quirk) -> f64 {
        match quirk {
            Quirk::TextCall => self.text_call,
            Quirk::DropHash => self.drop_hash,
            Quirk::NumbersAsStrings => self.numbers_as_strings,
            Quirk::ToolAlias => self.tool_alias,
            Quirk::RepeatFailingCall => self.repeat_failing_call,
            Quirk::SkipPrecondition => self.skip_precondition,
            Quirk::WrongVariant => self.wrong_variant,
            Quirk::EarlyStop => self.early_stop,
            Quirk::Miscount => self.miscount,
        }
    }

    /// Set the firing probability of `quirk`.
    pub fn set(&mut self, quirk: Quirk, probability: f64) {
        let slot = match quirk {
            Quirk::TextCall => &mut self.text_call,
            Quirk::DropHash => &mut self.drop_hash,
            Quirk::NumbersAsStrings => &mut self.numbers_as_strings,
            Quirk::ToolAlias => &mut self.tool_alias,
            Quirk::RepeatFailingCall => &mut self.repeat_failing_call,
            Quirk::SkipPrecondition => &mut self.skip_precondition,
            Quirk::WrongVariant => &mut self.wrong_variant,
            Quirk::EarlyStop => &mut self.early_stop,
            Quirk::Miscount => &mut self.miscount,
        };
        *slot = probability;
    }

    /// Only `quirk`, at `probability`.
    pub fn only(quirk: Quirk, probability: f64) -> Self {
        let mut rates = Self::default();
        rates.set(quirk, probability);
        rates
    }
}

/// A simulated agent model: which quirks it shows and how readily it heeds
/// a fix the harness states. Plain data; `sim:<name>` selects a built-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimProfile {
    /// Profile name, without the `sim:` prefix.
    pub name: String,
    /// One line for `--help`.
    pub summary: String,
    /// Per-quirk firing probabilities.
    pub rates: QuirkRates,
    /// Probability that the model heeds a visible fix cue for a systematic
    /// quirk (rolled once per quirk and plan step).
    pub correction_probability: f64,
}

pub use ecdysis_sys::ids::SIM_PREFIX;

impl SimProfile {
    /// A profile with the given rates.
    pub fn new(name: impl Into<String>, rates: QuirkRates, correction_probability: f64) -> Self {
        Self {
            name: name.into(),
            summary: String::new(),
            rates,
            correction_probability,
        }
    }

    /// The model name, `sim:<name>`.
    pub fn model_name(&self) -> String {
        format!("{SIM_PREFIX}{}", self.name)
    }

    /// The built-in profiles, `oracle` first.
    pub fn builtins() -> Vec<SimProfile> {
        let profile = |name: &str, summary: &str, rates: QuirkRates, correction: f64| Self {
            name: name.to_owned(),
            summary: summary.to_owned(),
            rates,
            correction_probability: correction,
        };
        vec![
            profile(
                "oracle",
                "no quirks: follows the gold plan exactly (upper bound of the testbed)",
                QuirkRates::default(),
                1.0,
            ),
            profile(
                "clumsy",
                "heavy systematic quirks (aliases, dropped '#', text calls...), heeds fixes",
                QuirkRates {
                    text_call: 0.25,
                    drop_hash: 0.6,
                    numbers_as_strings: 0.6,
                    tool_alias: 0.3,
                    repeat_failing_call: 0.5,
                    skip_precondition: 0.4,
                    wrong_variant: 0.05,
                    early_stop: 0.05,
                    miscount: 0.05,
                },
                0.9,
            ),
            profile(
                "careless",
                "mostly model-specific quirks (wrong variants, early stops, miscounts)",
                QuirkRates {
                    text_call: 0.0,
                    drop_hash: 0.1,
                    numbers_as_strings: 0.1,
                    tool_alias: 0.05,
                    repeat_failing_call: 0.1,
                    skip_precondition: 0.1,
                    wrong_variant: 0.4,
                    early_stop: 0.25,
                    miscount: 0.4,
                },
                0.8,
            ),
            profile(
                "mixed",
                "a moderate mix of systematic and model-specific quirks",
                QuirkRates {
                    text_call: 0.15,
                    drop_hash: 0.3,
                    numbers_as_strings: 0.3,
                    tool_alias: 0.15,
                    repeat_failing_call: 0.3,
                    skip_precondition: 0.2,
                    wrong_variant: 0.15,
                    early_stop: 0.1,
                    miscount: 0.15,
                },
                0.7,
            ),
            profile(
                "texter",
                "always writes calls as fenced JSON text (like a small local model), nothing else",
                QuirkRates::only(Quirk::TextCall, 1.0),
                0.9,
            ),
        ]
    }

    /// Built-in profile by name, with or without the `sim:` prefix.
    pub fn builtin(name: &str) -> Option<SimProfile> {
        let name = name.strip_prefix(SIM_PREFIX).unwrap_or(name);
        Self::builtins().into_iter().find(|p| p.name == name)
    }

    /// Parses a `sim:<profile>` model name.
    pub fn parse(model: &str) -> Result<SimProfile, UnknownProfile> {
        let Some(name) = model.trim().strip_prefix(SIM_PREFIX) else {
            return Err(UnknownProfile(model.to_owned()));
        };
        Self::builtin(name).ok_or_else(|| UnknownProfile(model.to_owned()))
    }

    /// One line per built-in profile, for `--help`.
    pub fn help_text() -> String {
        Self::builtins()
            .iter()
            .map(|p| format!("  sim:{:<10} {}", p.name, p.summary))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `sim:<name>` does not name a built-in profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown simulated model `{0}` (testbed profiles: {names})", names = builtin_names())]
pub struct UnknownProfile(pub String);

fn builtin_names() -> String {
    SimProfile::builtins()
        .iter()
        .map(|p| p.model_name())
        .collect::<Vec<_>>()
        .join(", ")
}
