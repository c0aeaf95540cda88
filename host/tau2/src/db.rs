//! A domain database: pydantic-validated JSON held as [`Val`]s, cloned
//! copy-on-write per episode, hashed like τ²'s `get_db_hash`.

use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};

use ecdysis_pyemu::pydantic::{self, Model, ValidationError};
use ecdysis_pyemu::{Dict, PyErr, PyResult, Val, json};

/// `db.json` does not validate against the domain's root model; shown as
/// pydantic shows the `ValidationError` (`str(exc)`).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{}", .0.text())]
pub struct InvalidDb(pub ValidationError);

/// The state of one domain's database.
///
/// Cloning is O(number of collections): all entities are shared with the
/// original until a tool writes to them ([`Arc::make_mut`]).
#[derive(Clone, Debug)]
pub struct Db {
    root: Val,
    hash: OnceLock<String>,
    /// Hasher checkpoints along the pristine state's dump (shared by every
    /// clone), see [`super::hash`].
    checkpoints: Option<Arc<super::hash::Checkpoints>>,
}

impl Db {
    /// Validates parsed `db.json` against the domain's root model, the way
    /// `DB.load` does (`Model.model_validate`): coercions such as `100` →
    /// `100.0` for float fields, defaults for absent optional fields and
    /// `model_dump()` field order.
    pub fn load(model: &'static Model, json: &serde_json::Value) -> Result<Self, InvalidDb> {
        let raw = Val::from_json(json);
        let root = pydantic::validate_model(model, &raw).map_err(InvalidDb)?;
        let checkpoints = super::hash::build(&root).map(Arc::new);
        Ok(Self {
            root,
            hash: OnceLock::new(),
            checkpoints,
        })
    }

    /// The root model instance (for databases whose collections are lists
    /// or nested models rather than dicts keyed by id).
    pub fn root(&self) -> &Dict {
        match &self.root {
            Val::Dict(d) => d,
            // `load` validated a model, which is a dict.
            _ => unreachable!("a database root is a model"),
        }
    }

    /// Mutable access to the root; invalidates the cached hash.
    pub fn root_mut(&mut self) -> &mut Dict {
        self.hash = OnceLock::new();
        match self.root.as_dict_mut() {
            Some(d) => d,
            None => unreachable!("a database root is a model"),
        }
    }

    /// A top-level collection (`users`, `orders`...).
    pub fn coll(&self, name: &str) -> PyResult<&Dict> {
        self.root
            .as_dict()
            .and_then(|d| d.get(name))
            .and_then(Val::as_dict)
            .ok_or_else(|| PyErr::internal(format!("database has no collection {name}")))
    }

    /// Mutable access to a collection; invalidates the cached hash.
    pub fn coll_mut(&mut self, name: &str) -> PyResult<&mut Dict> {
        self.hash = OnceLock::new();
        self.root
            .as_dict_mut()
            .and_then(|d| d.get_mut(name))
            .and_then(Val::as_dict_mut)
            .ok_or_else(|| PyErr::internal(format!("database has no collection {name}")))
    }

    /// The entity `key` of collection `coll`.
    pub fn entity(&self, coll: &str, key: &str) -> PyResult<&Dict> {
        self.coll(coll)?
            .get(key)
            .and_then(Val::as_dict)
            .ok_or_else(|| PyErr::internal(format!("{coll} has no entity {key}")))
    }

    /// Mutable access to the entity `key` of collection `coll`.
    pub fn entity_mut(&mut self, coll: &str, key: &str) -> PyResult<&mut Dict> {
        self.coll_mut(coll)?
            .get_mut(key)
            .and_then(Val::as_dict_mut)
            .ok_or_else(|| PyErr::internal(format!("{coll} has no entity {key}")))
    }

    /// `sha256(json.dumps(db.model_dump(), sort_keys=True, default=str))`
    /// in hex, which is τ²'s `ToolKitBase.get_db_hash`. Cached until the
    /// next write; untouched entities reuse their cached serialisation.
    pub fn hash(&self) -> String {
        self.hash
            .get_or_init(|| {
                if let Some(h) = self
                    .checkpoints
                    .as_ref()
                    .and_then(|ck| super::hash::resume(&self.root, ck))
                {
                    return h;
                }
                let mut buf = Vec::with_capacity(8 << 20);
                json::write_sorted_cached(&mut buf, &self.root, 2);
                hex(&Sha256::digest(&buf))
            })
            .clone()
    }

    /// Whether two states hash equally (τ²'s DB check), decided without
    /// hashing: see [`Db::diff`].
    pub fn same_state(&self, other: &Db) -> bool {
        self.diff(other, 1).is_empty()
    }

    /// Where this state differs from `other`, as `collection/key` for each
    /// entity whose sorted dump differs or that only one side has (at most
    /// `limit`, this side's order first); empty when the two hash equally.
    ///
    /// Decided without hashing: the sorted dump of the database is a
    /// function of each collection's key set and each entity's sorted dump,
    /// so comparing those is equivalent to comparing the hashes. An
    /// episode's state and gold both derive from the pristine one, so their
    /// collections list the same keys in the same order, and entities still
    /// shared between them (the usual case) compare by pointer: the walk
    /// goes pairwise and looks keys up only where the orders part.
    pub fn diff(&self, other: &Db, limit: usize) -> Vec<String> {
        let mut out = Vec::new();
        match (&self.root, &other.root) {
            (Val::Dict(a), Val::Dict(b)) => {
                if Arc::ptr_eq(a, b) {
                    return out;
                }
                let mut push = |name: &str, key: Option<&str>| {
                    out.push(match key {
                        Some(k) => format!("{name}/{k}"),
                        None => name.to_string(),
                    })
                };
                for (name, x) in a.iter() {
                    match b.get(name) {
                        None => push(name, None),
                        Some(y) => diff_collection(x, y, limit, &mut |k| push(name, k)),
                    }
                }
                for (name, _) in b.iter() {
                    if !a.contains_key(name) {
                        push(name, None);
                    }
                }
            }
            _ => {
                if self.hash() != other.hash() {
                    out.push(String::new());
                }
            }
        }
        out.truncate(limit);
        out
    }
}

/// Calls `differs` with each key whose entity differs between collections
/// `x` and `y` or that only one has (`None`: the two are not both dicts and
/// differ as wholes), stopping after `limit`.
fn diff_collection(x: &Val, y: &Val, limit: usize, differs: &mut dyn FnMut(Option<&str>)) {
    let (Val::Dict(a), Val::Dict(b)) = (x, y) else {
        if json::dumps_sorted(x) != json::dumps_sorted(y) {
            differs(None);
        }
        return;
    };
    if Arc::ptr_eq(a, b) {
        return;
    }
    let mut found = 0;
    // Reports `k`; true once `limit` keys are reported.
    let mut report = |k: &str| {
        found += 1;
        differs(Some(k));
        found >= limit
    };
    // Pairwise while both list the same keys in the same order, skipping
    // the storage the two still share.
    let mut parted_at = None;
    for i in a.unshared_positions(b) {
        let ((ka, ea), (kb, eb)) = (a.entry_at(i), b.entry_at(i));
        if ka != kb {
            parted_at = Some(i);
            break;
        }
        if !same_entity(ea, eb) && report(ka) {
            return;
        }
    }
    let start = match parted_at {
        Some(i) => i,
        None if a.len() == b.len() => return,
        None => a.len().min(b.len()),
    };
    // Where the orders part: by lookup, both ways.
    for (k, ea) in a.iter().skip(start) {
        if !b.get(k).is_some_and(|eb| same_entity(ea, eb)) && report(k) {
            return;
        }
    }
    for (k, _) in b.iter().skip(start) {
        if !a.contains_key(k) && report(k) {
            return;
        }
    }
}

fn same_entity(ea: &Val, eb: &Val) -> bool {
    match (ea, eb) {
        (Val::Dict(p), Val::Dict(q)) => {
            Arc::ptr_eq(p, q) || json::sorted_bytes(p) == json::sorted_bytes(q)
        }
        _ => json::dumps_sorted(ea) == json::dumps_sorted(eb),
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Typed reads of a model instance's fields. A missing or mistyped field is
/// a state the reference cannot reach; it becomes an internal error result
/// rather than a panic.
pub trait Fields {
    /// The field's value.
    fn f(&self, name: &str) -> PyResult<&Val>;

    /// A `str` field.
    fn s(&self, name: &str) -> PyResult<&str> {
        self.f(name)?
            .as_str()
            .ok_or_else(|| PyErr::internal(format!("field {name} is not a str")))
    }

    /// A dict (or nested model) field.
    fn d(&self, name: &str) -> PyResult<&Dict> {
        self.f(name)?
            .as_dict()
            .ok_or_else(|| PyErr::internal(format!("field {name} is not a dict")))
    }

    /// A list field.
    fn l(&self, name: &str) -> PyResult<&[Val]> {
        self.f(name)?
            .as_list()
            .ok_or_else(|| PyErr::internal(format!("field {name} is not a list")))
    }
}

impl Fields for Dict {
    fn f(&self, name: &str) -> PyResult<&Val> {
        self.get(name)
            .ok_or_else(|| PyErr::internal(format!("missing field {name}")))
    }
}

/// Typed writes of a model instance's fields.
pub trait FieldsMut {
    /// Mutable access to a field.
    fn fm(&mut self, name: &str) -> PyResult<&mut Val>;

    /// Mutable access to a dict field.
    fn dm(&mut self, name: &str) -> PyResult<&mut Dict> {
        self.fm(name)?
            .as_dict_mut()
            .ok_or_else(|| PyErr::internal(format!("field {name} is not a dict")))
    }

    /// Mutable access to a list field.
    fn lm(&mut self, name: &str) -> PyResult<&mut Vec<Val>> {
        self.fm(name)?
            .as_list_mut()
            .ok_or_else(|| PyErr::internal(format!("field {name} is not a list")))
    }
}

impl FieldsMut for Dict {
    fn fm(&mut self, name: &str) -> PyResult<&mut Val> {
        self.get_mut(name)
            .ok_or_else(|| PyErr::internal(format!("missing field {name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecdysis_pyemu::pydantic::{Field, Ty};

    static ITEM: Model = Model {
        name: "Item",
        extra_forbid: false,
        fields: &[
            Field::req("n", Ty::Float),
            Field::opt("s", Ty::Opt(&Ty::Str)),
        ],
    };
    static ROOT: Model = Model {
        name: "Root",
        extra_forbid: false,
        fields: &[Field::req("items", Ty::Dict(&Ty::Model(&ITEM)))],
    };

    fn db() -> Db {
        Db::load(
            &ROOT,
            &serde_json::json!({"items": {"b": {"n": 1}, "a": {"n": 2.5, "s": "x"}}}),
        )
        .unwrap()
    }

    #[test]
    fn load_coerces_like_pydantic_and_hash_matches_python() {
        let d = db();
        assert_eq!(
            json::dumps(d.coll("items").unwrap().get("b").unwrap()),
            r#"{"n": 1.0, "s": null}"#
        );
        // hashlib.sha256(json.dumps({"items": {"b": {"n": 1.0, "s": None},
        //     "a": {"n": 2.5, "s": "x"}}}, sort_keys=True).encode()).hexdigest()
        assert_eq!(
            d.hash(),
            "6edabed9bac2b77d869e9b3201425200ed25daa49c755a3e06f1f704b333eee0"
        );
    }

    #[test]
    fn a_diff_names_the_entities_that_differ() {
        let a = db();
        let mut b = a.clone();
        assert!(b.diff(&a, 20).is_empty());
        b.entity_mut("items", "a")
            .unwrap()
            .insert("n", Val::Float(9.0));
        assert_eq!(b.diff(&a, 20), vec!["items/a"]);
        b.coll_mut("items")
            .unwrap()
            .insert("z", Val::dict(Dict::new()));
        b.coll_mut("items").unwrap().remove("b");
        let mut d = b.diff(&a, 20);
        d.sort();
        assert_eq!(d, vec!["items/a", "items/b", "items/z"]);
        assert_eq!(b.diff(&a, 2).len(), 2, "capped");
        assert_eq!(a.diff(&b, 20).len(), 3, "both ways");
    }

    #[test]
    fn same_state_agrees_with_hashes() {
        let a = db();
        let mut b = a.clone();
        assert!(a.same_state(&b));
        b.entity_mut("items", "b")
            .unwrap()
            .insert("n", Val::Float(1.0));
        assert!(a.same_state(&b), "rewriting an equal value keeps the state");
        assert_eq!(a.hash(), b.hash());
        b.entity_mut("items", "b").unwrap().insert("n", Val::Int(1));
        assert!(!a.same_state(&b), "1 and 1.0 dump differently");
        assert_ne!(a.hash(), b.hash());
        let mut c = a.clone();
        c.coll_mut("items")
            .unwrap()
            .insert("c", Val::dict(Dict::new()));
        assert!(!a.same_state(&c));
        assert_ne!(a.hash(), c.hash());
    }
}
