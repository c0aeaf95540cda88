//! Which of a harness's four layers run. A switched-off layer's hook is not
//! called: the episode gets that hook's neutral answer, exactly as if the
//! harness had returned it. Layer ablation and selection (`ablate`,
//! `train --select-layers`) evaluate a harness with subsets of its layers;
//! the chosen set travels with the harness in `harness.json`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One lifecycle layer, named by its hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Environment contract (`contract`): system prompt and tool descriptions.
    Contract,
    /// Procedural skills (`skills`): guidance joined to the system prompt.
    Skills,
    /// Action realization (`realize`): tool calls checked before they run.
    Realize,
    /// Trajectory regulation (`regulate`): loops and stalls after each step.
    Regulate,
}

impl Layer {
    /// Every layer, in lifecycle order.
    pub const ALL: [Layer; 4] = [
        Layer::Contract,
        Layer::Skills,
        Layer::Realize,
        Layer::Regulate,
    ];

    /// The hook's name (the WIT function).
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Contract => "contract",
            Layer::Skills => "skills",
            Layer::Realize => "realize",
            Layer::Regulate => "regulate",
        }
    }

    /// The layer whose hook is `hook`, if it is one (the constructor is not).
    pub fn of_hook(hook: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == hook)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of layers: the ones that run. The default is all four.
///
/// Serialized as the list of layer names in lifecycle order (`["contract",
/// "realize"]`), which is what `harness.json` and `config.json` hold and
/// what the Python and JavaScript runtimes read.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayerSet(u8);

impl LayerSet {
    /// All four layers: the harness as written.
    pub const ALL: LayerSet = LayerSet(0b1111);
    /// No layer: only the constructor runs (Direct with a harness loaded).
    pub const NONE: LayerSet = LayerSet(0);

    /// Whether `layer` runs.
    pub fn contains(self, layer: Layer) -> bool {
        self.0 & layer.bit() != 0
    }

    /// The set without `layer`.
    pub fn without(self, layer: Layer) -> LayerSet {
        LayerSet(self.0 & !layer.bit())
    }

    /// The set with `layer`.
    pub fn with(self, layer: Layer) -> LayerSet {
        LayerSet(self.0 | layer.bit())
    }

    /// True for all four layers.
    pub fn is_all(self) -> bool {
        self == LayerSet::ALL
    }

    /// The layers that run, in lifecycle order.
    pub fn iter(self) -> impl Iterator<Item = Layer> {
        Layer::ALL.into_iter().filter(move |l| self.contains(*l))
    }

    /// The layers that do not run, in lifecycle order.
    pub fn off(self) -> impl Iterator<Item = Layer> {
        Layer::ALL.into_iter().filter(move |l| !self.contains(*l))
    }

    /// The layers' names.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Layer::as_str).collect()
    }
}

impl Default for LayerSet {
    fn default() -> Self {
        LayerSet::ALL
    }
}

impl FromIterator<Layer> for LayerSet {
    fn from_iter<I: IntoIterator<Item = Layer>>(iter: I) -> Self {
        iter.into_iter().fold(LayerSet::NONE, LayerSet::with)
    }
}

impl fmt::Debug for LayerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// `contract,skills,realize,regulate`, `all` or `none`.
impl fmt::Display for LayerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayerSet::ALL => f.write_str("all"),
            LayerSet::NONE => f.write_str("none"),
            set => f.write_str(&set.names().join(",")),
        }
    }
}

/// A layer list that names no layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown layer `{0}` (the layers are contract, skills, realize, regulate; or `all`, `none`)"
)]
pub struct UnknownLayer(pub String);

impl FromStr for Layer {
    type Err = UnknownLayer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Layer::of_hook(s.trim()).ok_or_else(|| UnknownLayer(s.trim().to_string()))
    }
}

/// Comma-separated layer names, or `all` / `none`; a repeated name is the
/// same set.
impl FromStr for LayerSet {
    type Err = UnknownLayer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "all" => return Ok(LayerSet::ALL),
            "none" | "" => return Ok(LayerSet::NONE),
            _ => {}
        }
        s.split(',').map(str::parse::<Layer>).collect()
    }
}

impl Serialize for LayerSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

impl<'de> Deserialize<'de> for LayerSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        names
            .iter()
            .map(|n| n.parse::<Layer>())
            .collect::<Result<LayerSet, _>>()
            .map_err(serde::de::Error::custom)
    }
}

/// For `skip_serializing_if`: files written before layers existed, and
/// runs of the whole harness, keep their shape.
pub fn is_all(set: &LayerSet) -> bool {
    set.is_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_every_subset_the_same_way() {
        for bits in 0u8..16 {
            let set = LayerSet(bits);
            let text = set.to_string();
            assert_eq!(text.parse::<LayerSet>(), Ok(set), "{text}");
            let json = serde_json::to_string(&set).unwrap();
            assert_eq!(
                serde_json::from_str::<LayerSet>(&json).unwrap(),
                set,
                "{json}"
            );
            assert_eq!(set.iter().count() + set.off().count(), 4);
        }
        assert_eq!(
            "realize, contract".parse::<LayerSet>().unwrap().names(),
            vec!["contract", "realize"]
        );
        assert_eq!(
            serde_json::to_string(&LayerSet::ALL.without(Layer::Skills)).unwrap(),
            r#"["contract","realize","regulate"]"#
        );
    }

    #[test]
    fn an_unknown_layer_is_named() {
        let e = "contract,regulation".parse::<LayerSet>().unwrap_err();
        assert_eq!(e, UnknownLayer("regulation".into()));
        assert!(e.to_string().contains("`regulation`"));
        let e = serde_json::from_str::<LayerSet>(r#"["constructor"]"#).unwrap_err();
        assert!(e.to_string().contains("`constructor`"), "{e}");
    }

    #[test]
    fn the_constructor_is_no_layer() {
        assert_eq!(Layer::of_hook("constructor"), None);
        assert_eq!(Layer::of_hook("regulate"), Some(Layer::Regulate));
    }
}
