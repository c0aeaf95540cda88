//! The dynamic value type and its insertion-ordered dictionary.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// A Python value as it occurs in τ²'s databases and tool arguments.
///
/// Pydantic models are represented as [`Dict`]s whose keys are the model's
/// fields in declaration order (`model_dump()` order). Containers are
/// reference counted so that an episode's database is a cheap
/// copy-on-write clone of the pristine one: mutating goes through
/// [`Arc::make_mut`], which copies only the path that changes.
#[derive(Clone, Debug)]
pub enum Val {
    /// `None`.
    None,
    /// `bool`.
    Bool(bool),
    /// `int`. Python ints are unbounded; 128 bits cover every value JSON
    /// arguments (at most 64-bit) and the tools' arithmetic can produce.
    Int(i128),
    /// `float`.
    Float(f64),
    /// `str`.
    Str(Arc<str>),
    /// `list`.
    List(Arc<Vec<Val>>),
    /// `dict` with string keys, or a pydantic model instance.
    Dict(Arc<Dict>),
}

impl Val {
    /// A `str` value.
    pub fn str(s: &str) -> Self {
        Val::Str(Arc::from(s))
    }

    /// A `list` value.
    pub fn list(items: Vec<Val>) -> Self {
        Val::List(Arc::new(items))
    }

    /// A `dict` value.
    pub fn dict(d: Dict) -> Self {
        Val::Dict(Arc::new(d))
    }

    /// Python's `type(v).__name__`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Val::None => "NoneType",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::List(_) => "list",
            Val::Dict(_) => "dict",
        }
    }

    /// The string, if this is a `str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The dict, if this is a `dict`.
    pub fn as_dict(&self) -> Option<&Dict> {
        match self {
            Val::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// Mutable access to the dict (copying it first if it is shared).
    pub fn as_dict_mut(&mut self) -> Option<&mut Dict> {
        match self {
            Val::Dict(d) => Some(Arc::make_mut(d)),
            _ => None,
        }
    }

    /// The items, if this is a `list`.
    pub fn as_list(&self) -> Option<&[Val]> {
        match self {
            Val::List(l) => Some(l),
            _ => None,
        }
    }

    /// Mutable access to the list (copying it first if it is shared).
    pub fn as_list_mut(&mut self) -> Option<&mut Vec<Val>> {
        match self {
            Val::List(l) => Some(Arc::make_mut(l)),
            _ => None,
        }
    }

    /// Converts parsed JSON the way `json.loads` would: integers stay `int`,
    /// numbers with a fraction or exponent become `float`.
    pub fn from_json(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Val::None,
            serde_json::Value::Bool(b) => Val::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Val::Int(i128::from(i))
                } else if let Some(u) = n.as_u64() {
                    Val::Int(i128::from(u))
                } else {
                    Val::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Val::str(s),
            serde_json::Value::Array(a) => Val::list(a.iter().map(Val::from_json).collect()),
            serde_json::Value::Object(o) => {
                let mut d = Dict::with_capacity(o.len());
                for (k, v) in o {
                    d.insert(k, Val::from_json(v));
                }
                Val::dict(d)
            }
        }
    }
}

/// Above this many entries a [`Dict`] keeps a hash index; below, a linear
/// scan over the (short, model-sized) entry list is faster.
const INDEX_THRESHOLD: usize = 12;

/// An insertion-ordered `dict` with string keys (Python 3.7+ semantics:
/// assigning an existing key keeps its position, `pop` keeps the others'
/// order).
///
/// It also caches its own `json.dumps(sort_keys=True)` text, which is what
/// makes database hashing cheap: an episode's database shares all untouched
/// entities (and their cached text) with the pristine one. Every mutating
/// method clears the cache; entries are only reachable through these
/// methods, so a stale cache cannot be observed.
#[derive(Debug, Default)]
pub struct Dict {
    entries: Vec<(Arc<str>, Val)>,
    index: Option<HashMap<Arc<str>, usize>>,
    sorted_dump: OnceLock<Arc<[u8]>>,
}

impl Clone for Dict {
    fn clone(&self) -> Self {
        // The clone has identical content, so the cached dump stays valid.
        let sorted_dump = OnceLock::new();
        if let Some(d) = self.sorted_dump.get() {
            let _ = sorted_dump.set(d.clone());
        }
        Self {
            entries: self.entries.clone(),
            index: self.index.clone(),
            sorted_dump,
        }
    }
}

impl Dict {
    /// An empty dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty dict with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
            ..Self::default()
        }
    }

    /// Builds a dict (or model instance) from `(key, value)` pairs in order.
    pub fn from_pairs<K: AsRef<str>>(pairs: impl IntoIterator<Item = (K, Val)>) -> Self {
        let mut d = Dict::new();
        for (k, v) in pairs {
            d.insert(k.as_ref(), v);
        }
        d
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the dict is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(ix) => ix.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| &**k == key),
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<&Val> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    /// Mutable access to the value at `key`.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Val> {
        let i = self.position(key)?;
        self.sorted_dump = OnceLock::new();
        Some(&mut self.entries[i].1)
    }

    /// `d[key] = val`: replaces in place or appends.
    pub fn insert(&mut self, key: &str, val: Val) {
        self.sorted_dump = OnceLock::new();
        match self.position(key) {
            Some(i) => self.entries[i].1 = val,
            None => {
                let k: Arc<str> = Arc::from(key);
                if let Some(ix) = &mut self.index {
                    ix.insert(k.clone(), self.entries.len());
                }
                self.entries.push((k, val));
                if self.index.is_none() && self.entries.len() > INDEX_THRESHOLD {
                    self.rebuild_index();
                }
            }
        }
    }

    /// `d.pop(key)`: removes the entry, keeping the others' order.
    pub fn remove(&mut self, key: &str) -> Option<Val> {
        let i = self.position(key)?;
        self.sorted_dump = OnceLock::new();
        let (_, v) = self.entries.remove(i);
        if self.index.is_some() {
            self.rebuild_index();
        }
        Some(v)
    }

    fn rebuild_index(&mut self) {
        self.index = Some(
            self.entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect(),
        );
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Val)> {
        self.entries.iter().map(|(k, v)| (&**k, v))
    }

    /// Keys in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| &**k)
    }

    /// Values in insertion order.
    pub fn values(&self) -> impl Iterator<Item = &Val> {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The cached `json.dumps(self, sort_keys=True)` bytes, computing them
    /// with `make` on first use.
    pub(crate) fn sorted_dump_cached(&self, make: impl FnOnce() -> Vec<u8>) -> Arc<[u8]> {
        self.sorted_dump.get_or_init(|| Arc::from(make())).clone()
    }
}
