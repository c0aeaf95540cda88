//! The Python value type and its insertion-ordered dictionary.

use std::sync::{Arc, OnceLock};

use num_bigint::BigInt;

/// A Python value: what τ²'s databases, tool arguments and results hold,
/// and what DBBench's rows and its checker's `eval` of literals hold.
///
/// Pydantic models are represented as [`Dict`]s whose keys are the model's
/// fields in declaration order (`model_dump()` order). Containers are
/// reference counted so that an episode's database is a cheap
/// copy-on-write clone of the pristine one: mutating goes through
/// [`Arc::make_mut`], which copies only the path that changes.
///
/// [`crate::ops`] implements Python's operators for the types τ²'s tools
/// meet (`None`, `bool`, `int` within 128 bits, `float`, `str`, `list`,
/// `dict` with str keys); DBBench only renders and compares the others.
#[derive(Clone, Debug)]
pub enum Val {
    /// `None`.
    None,
    /// `bool`.
    Bool(bool),
    /// `int` within 128 bits: every value JSON arguments (at most 64-bit)
    /// and the tools' arithmetic can produce.
    Int(i128),
    /// `int` outside 128 bits (only `eval` of a literal makes one). Never a
    /// value [`Val::Int`] could hold, so each int has one representation;
    /// build it with [`Val::int`].
    BigInt(Arc<BigInt>),
    /// `float`.
    Float(f64),
    /// `str`.
    Str(Arc<str>),
    /// `bytes` (binary columns and geometry).
    Bytes(Arc<[u8]>),
    /// `list`.
    List(Arc<Vec<Val>>),
    /// `tuple` (one result row).
    Tuple(Arc<Vec<Val>>),
    /// `set`, in insertion order (Python's own order is hash order, which
    /// for strings changes from run to run).
    Set(Arc<Vec<Val>>),
    /// `dict` with string keys, or a pydantic model instance.
    Dict(Arc<Dict>),
    /// `dict` with a key that is not a `str` (only `eval` of a literal
    /// makes one, e.g. `{1: 'a'}`), its pairs in insertion order: [`Dict`]
    /// is keyed by str, which τ²'s hashed, copy-on-write databases need.
    AnyDict(Arc<Vec<(Val, Val)>>),
    /// `decimal.Decimal`, as its text (mysql-connector's DECIMAL values).
    Decimal(Arc<str>),
    /// Any other object, known by its class and `repr` (dates and times
    /// from the MySQL client).
    Object(Arc<Object>),
}

/// An object [`Val`] has no variant for, reduced to what is shown of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// `type(obj).__name__`, e.g. `date`.
    pub type_name: &'static str,
    /// `repr(obj)`, e.g. `datetime.date(2020, 1, 2)`.
    pub repr: String,
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

    /// A `tuple` value.
    pub fn tuple(items: Vec<Val>) -> Self {
        Val::Tuple(Arc::new(items))
    }

    /// A `dict` value.
    pub fn dict(d: Dict) -> Self {
        Val::Dict(Arc::new(d))
    }

    /// An `int` value of any size: [`Val::Int`] when it fits.
    pub fn int(i: BigInt) -> Self {
        match i128::try_from(&i) {
            Ok(small) => Val::Int(small),
            Err(_) => Val::BigInt(Arc::new(i)),
        }
    }

    /// `int(text)` for an optional sign and ASCII digits; `None` for any
    /// other text.
    pub fn int_from_decimal(text: &str) -> Option<Self> {
        let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        match text.parse::<i128>() {
            Ok(i) => Some(Val::Int(i)),
            Err(_) => BigInt::parse_bytes(text.as_bytes(), 10).map(Val::int),
        }
    }

    /// An object shown by its `repr`.
    pub fn object(type_name: &'static str, repr: String) -> Self {
        Val::Object(Arc::new(Object { type_name, repr }))
    }

    /// Python's `type(v).__name__`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Val::None => "NoneType",
            Val::Bool(_) => "bool",
            Val::Int(_) | Val::BigInt(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Bytes(_) => "bytes",
            Val::List(_) => "list",
            Val::Tuple(_) => "tuple",
            Val::Set(_) => "set",
            Val::Dict(_) | Val::AnyDict(_) => "dict",
            Val::Decimal(_) => "Decimal",
            Val::Object(o) => o.type_name,
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

impl From<u128> for Val {
    /// An `int` (MySQL's BIT cells, hex literals).
    fn from(v: u128) -> Self {
        Val::int(BigInt::from(v))
    }
}

/// Above this many entries a [`Dict`] keeps a hash index; below, a linear
/// scan over the (short, model-sized) entry list is faster.
const INDEX_THRESHOLD: usize = 12;

/// Entries per storage chunk of a large [`Dict`] (a database collection).
/// Copying a collection on an episode's first write to it copies its chunk
/// list and shares every chunk; the write then copies one chunk. Before,
/// the first write to `orders` copied all 1000 entries and their index
/// (and dropping the episode's state freed them again): the largest part
/// of a τ² tool call's CPU in `bench --runner`.
const CHUNK: usize = 64;

type Entry = (Arc<str>, Val);

/// A dict's entries in insertion order: one vector while small, chunks of
/// [`CHUNK`] (all full but the last) shared copy-on-write once larger.
#[derive(Clone, Debug)]
enum Entries {
    Flat(Vec<Entry>),
    Chunked {
        chunks: Vec<Arc<Vec<Entry>>>,
        len: usize,
    },
}

impl Default for Entries {
    fn default() -> Self {
        Entries::Flat(Vec::new())
    }
}

impl Entries {
    fn len(&self) -> usize {
        match self {
            Entries::Flat(v) => v.len(),
            Entries::Chunked { len, .. } => *len,
        }
    }

    fn get(&self, i: usize) -> &Entry {
        match self {
            Entries::Flat(v) => &v[i],
            Entries::Chunked { chunks, .. } => &chunks[i / CHUNK][i % CHUNK],
        }
    }

    /// Mutable access to entry `i`, copying its chunk first if shared.
    fn get_mut(&mut self, i: usize) -> &mut Entry {
        match self {
            Entries::Flat(v) => &mut v[i],
            Entries::Chunked { chunks, .. } => {
                &mut Arc::make_mut(&mut chunks[i / CHUNK])[i % CHUNK]
            }
        }
    }

    fn push(&mut self, e: Entry) {
        match self {
            Entries::Flat(v) => {
                v.push(e);
                if v.len() > CHUNK {
                    let flat = std::mem::take(v);
                    *self = Entries::chunked(flat);
                }
            }
            Entries::Chunked { chunks, len } => {
                match chunks.last_mut() {
                    Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(e),
                    _ => {
                        let mut c = Vec::with_capacity(CHUNK);
                        c.push(e);
                        chunks.push(Arc::new(c));
                    }
                }
                *len += 1;
            }
        }
    }

    fn chunked(flat: Vec<Entry>) -> Entries {
        let len = flat.len();
        let mut chunks = Vec::with_capacity(len.div_ceil(CHUNK));
        let mut it = flat.into_iter().peekable();
        while it.peek().is_some() {
            chunks.push(Arc::new(it.by_ref().take(CHUNK).collect::<Vec<_>>()));
        }
        Entries::Chunked { chunks, len }
    }

    fn remove(&mut self, i: usize) -> Entry {
        match self {
            Entries::Flat(v) => v.remove(i),
            Entries::Chunked { .. } => {
                // Rare (`pop` on a collection): rebuild the chunks so all
                // but the last stay full.
                let mut flat: Vec<Entry> = self.iter().cloned().collect();
                let e = flat.remove(i);
                *self = if flat.len() > CHUNK {
                    Entries::chunked(flat)
                } else {
                    Entries::Flat(flat)
                };
                e
            }
        }
    }

    fn iter(&self) -> EntriesIter<'_> {
        match self {
            Entries::Flat(v) => EntriesIter::Flat(v.iter()),
            Entries::Chunked { chunks, .. } => {
                EntriesIter::Chunked(chunks.iter().flat_map(chunk_entries as ChunkEntries))
            }
        }
    }
}

type ChunkEntries = for<'a> fn(&'a Arc<Vec<Entry>>) -> std::slice::Iter<'a, Entry>;

fn chunk_entries(c: &Arc<Vec<Entry>>) -> std::slice::Iter<'_, Entry> {
    c.iter()
}

/// [`Entries::iter`] without a boxed iterator: dicts are iterated on every
/// dump and validation, and a boxed iterator is an allocation each time.
enum EntriesIter<'a> {
    Flat(std::slice::Iter<'a, Entry>),
    Chunked(
        std::iter::FlatMap<
            std::slice::Iter<'a, Arc<Vec<Entry>>>,
            std::slice::Iter<'a, Entry>,
            ChunkEntries,
        >,
    ),
}

impl<'a> Iterator for EntriesIter<'a> {
    type Item = &'a Entry;

    fn next(&mut self) -> Option<&'a Entry> {
        match self {
            EntriesIter::Flat(it) => it.next(),
            EntriesIter::Chunked(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            EntriesIter::Flat(it) => it.size_hint(),
            EntriesIter::Chunked(it) => it.size_hint(),
        }
    }
}

/// Positions of a large dict's entries by key: a table of entry positions
/// hashed by key (the keys stay in the entries), shared between copies
/// until one of them adds or removes a key.
#[derive(Clone, Debug, Default)]
struct Index(hashbrown::HashTable<u32>);

fn key_hash(key: &str) -> u64 {
    use std::hash::BuildHasher;
    // Fixed seed: the index is private to the process and never iterated,
    // so a keyed hash (SipHash) would cost time and buy nothing.
    foldhash::fast::FixedState::with_seed(0x6563_6479_7369_7321).hash_one(key)
}

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
    entries: Entries,
    index: Option<Arc<Index>>,
    sorted_dump: OnceLock<Arc<[u8]>>,
    /// A lookup structure a tool derived from this content (see
    /// [`Dict::memo`]); cleared with the dump by every mutation.
    memo: OnceLock<Memo>,
}

/// What [`Dict::memo`] keeps.
#[derive(Clone)]
struct Memo(Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

impl Clone for Dict {
    fn clone(&self) -> Self {
        // The clone has identical content, so the cached dump stays valid.
        let sorted_dump = OnceLock::new();
        if let Some(d) = self.sorted_dump.get() {
            let _ = sorted_dump.set(d.clone());
        }
        let memo = OnceLock::new();
        if let Some(m) = self.memo.get() {
            let _ = memo.set(m.clone());
        }
        Self {
            entries: self.entries.clone(),
            index: self.index.clone(),
            sorted_dump,
            memo,
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
            entries: Entries::Flat(Vec::with_capacity(n.min(CHUNK))),
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
        self.len() == 0
    }

    fn position(&self, key: &str) -> Option<usize> {
        match (&self.index, &self.entries) {
            (Some(ix), _) => {
                ix.0.find(key_hash(key), |&i| &*self.entries.get(i as usize).0 == key)
                    .map(|&i| i as usize)
            }
            (None, Entries::Flat(v)) => v.iter().position(|(k, _)| &**k == key),
            (None, Entries::Chunked { .. }) => self.entries.iter().position(|(k, _)| &**k == key),
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<&Val> {
        self.position(key).map(|i| &self.entries.get(i).1)
    }

    /// Mutable access to the value at `key`.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Val> {
        let i = self.position(key)?;
        self.forget_derived();
        Some(&mut self.entries.get_mut(i).1)
    }

    /// `d[key] = val`: replaces in place or appends.
    pub fn insert(&mut self, key: &str, val: Val) {
        self.forget_derived();
        match self.position(key) {
            Some(i) => self.entries.get_mut(i).1 = val,
            None => {
                let at = self.entries.len();
                self.entries.push((Arc::from(key), val));
                match &mut self.index {
                    Some(ix) => {
                        let entries = &self.entries;
                        Arc::make_mut(ix)
                            .0
                            .insert_unique(key_hash(key), at as u32, |&i| {
                                key_hash(&entries.get(i as usize).0)
                            });
                    }
                    None if self.entries.len() > INDEX_THRESHOLD => self.rebuild_index(),
                    None => {}
                }
            }
        }
    }

    /// `d.pop(key)`: removes the entry, keeping the others' order.
    pub fn remove(&mut self, key: &str) -> Option<Val> {
        let i = self.position(key)?;
        self.forget_derived();
        let (_, v) = self.entries.remove(i);
        if self.index.is_some() {
            self.rebuild_index();
        }
        Some(v)
    }

    /// Drops what was derived from the content (the dump, the memo).
    fn forget_derived(&mut self) {
        self.sorted_dump = OnceLock::new();
        self.memo = OnceLock::new();
    }

    /// A lookup structure derived from this dict's content, made by `make`
    /// on first use and kept until the dict changes. Copies of the dict
    /// share it: an episode's database shares the pristine collections, so
    /// an index a read-only tool builds over them is built once per
    /// process, not once per call. `None` when `make` declines (returns
    /// `None`, e.g. for content it cannot index) or a memo of another type
    /// is kept; the caller then does the work directly.
    pub fn memo<T: std::any::Any + Send + Sync>(
        &self,
        make: impl FnOnce(&Dict) -> Option<T>,
    ) -> Option<Arc<T>> {
        let memo = self.memo.get_or_init(|| match make(self) {
            Some(t) => Memo(Arc::new(t)),
            None => Memo(Arc::new(())),
        });
        memo.0.clone().downcast::<T>().ok()
    }

    fn rebuild_index(&mut self) {
        let mut table = hashbrown::HashTable::with_capacity(self.entries.len());
        for (i, (k, _)) in self.entries.iter().enumerate() {
            let entries = &self.entries;
            table.insert_unique(key_hash(k), i as u32, |&j| {
                key_hash(&entries.get(j as usize).0)
            });
        }
        self.index = Some(Arc::new(Index(table)));
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

    /// The entry at position `i` (insertion order).
    pub fn entry_at(&self, i: usize) -> (&str, &Val) {
        let (k, v) = self.entries.get(i);
        (k, v)
    }

    /// Positions below `min(self.len(), other.len())` whose entries may
    /// differ between the two: all of them, except those in storage the two
    /// still share (a copy and its original share every chunk it has not
    /// written to), which hold the same keys and values.
    pub fn unshared_positions<'a>(&'a self, other: &'a Dict) -> impl Iterator<Item = usize> + 'a {
        let n = self.len().min(other.len());
        let shared = move |c: usize| match (&self.entries, &other.entries) {
            (Entries::Chunked { chunks: a, .. }, Entries::Chunked { chunks: b, .. }) => {
                matches!((a.get(c), b.get(c)), (Some(x), Some(y)) if Arc::ptr_eq(x, y))
            }
            _ => false,
        };
        (0..n.div_ceil(CHUNK))
            .filter(move |&c| !shared(c))
            .flat_map(move |c| c * CHUNK..((c + 1) * CHUNK).min(n))
    }

    /// The cached `json.dumps(self, sort_keys=True)` bytes, computing them
    /// with `make` on first use.
    pub(crate) fn sorted_dump_cached(&self, make: impl FnOnce() -> Vec<u8>) -> Arc<[u8]> {
        self.sorted_dump.get_or_init(|| Arc::from(make())).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(n: usize) -> Dict {
        Dict::from_pairs((0..n).map(|i| (format!("k{i}"), Val::Int(i as i128))))
    }

    fn int(d: &Dict, k: &str) -> Option<i128> {
        match d.get(k) {
            Some(Val::Int(i)) => Some(*i),
            _ => None,
        }
    }

    #[test]
    fn a_large_dict_keeps_python_order_across_chunks() {
        let mut d = big(3 * CHUNK + 5);
        assert_eq!(d.len(), 3 * CHUNK + 5);
        assert_eq!(int(&d, "k0"), Some(0));
        assert_eq!(
            int(&d, &format!("k{}", 2 * CHUNK + 1)),
            Some(2 * CHUNK as i128 + 1)
        );
        assert!(d.get("absent").is_none());
        // Assigning an existing key keeps its place; a new key goes last.
        d.insert("k7", Val::Int(-7));
        d.insert("new", Val::Int(-1));
        let keys: Vec<&str> = d.keys().collect();
        assert_eq!(keys[7], "k7");
        assert_eq!(*keys.last().unwrap(), "new");
        assert_eq!(int(&d, "k7"), Some(-7));
        // `pop` keeps the others' order, across a chunk boundary too.
        assert_eq!(
            d.remove(&format!("k{}", CHUNK - 1)).and_then(|v| match v {
                Val::Int(i) => Some(i),
                _ => None,
            }),
            Some(CHUNK as i128 - 1)
        );
        let keys: Vec<String> = d.keys().map(String::from).collect();
        let mut want: Vec<String> = (0..3 * CHUNK + 5)
            .filter(|&i| i != CHUNK - 1)
            .map(|i| format!("k{i}"))
            .collect();
        want.push("new".into());
        assert_eq!(keys, want);
        for (i, k) in want.iter().enumerate() {
            assert_eq!(d.entry_at(i).0, k);
            assert!(d.contains_key(k), "{k} after the pop");
        }
        // Shrinking back below one chunk keeps it working.
        for k in &want[10..] {
            d.remove(k);
        }
        assert_eq!(
            d.keys().collect::<Vec<_>>(),
            want[..10].iter().map(String::as_str).collect::<Vec<_>>()
        );
        assert_eq!(int(&d, "k3"), Some(3));
    }

    #[test]
    fn a_copy_shares_storage_until_written_and_then_only_one_chunk_differs() {
        let original = big(4 * CHUNK);
        let mut copy = original.clone();
        assert_eq!(copy.unshared_positions(&original).count(), 0, "all shared");
        *copy.get_mut(&format!("k{}", 2 * CHUNK + 3)).unwrap() = Val::Int(0);
        let unshared: Vec<usize> = copy.unshared_positions(&original).collect();
        assert_eq!(unshared, (2 * CHUNK..3 * CHUNK).collect::<Vec<_>>());
        assert_eq!(
            int(&original, &format!("k{}", 2 * CHUNK + 3)),
            Some(2 * CHUNK as i128 + 3)
        );
        assert_eq!(int(&copy, &format!("k{}", 2 * CHUNK + 3)), Some(0));
        // A key added to the copy gets its own index; the original's
        // lookups are untouched.
        copy.insert("only-in-copy", Val::None);
        assert!(copy.contains_key("only-in-copy"));
        assert!(!original.contains_key("only-in-copy"));
        assert_eq!(original.len() + 1, copy.len());
        // Small dicts (no chunks) compare position by position.
        let small = big(5);
        assert_eq!(small.unshared_positions(&small.clone()).count(), 5);
    }

    #[test]
    fn a_memo_is_shared_by_copies_and_forgotten_on_change() {
        let built = std::sync::atomic::AtomicUsize::new(0);
        let count = |d: &Dict| {
            built.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Some(d.len())
        };
        let mut d = big(100);
        assert_eq!(d.memo(count).as_deref(), Some(&100));
        let copy = d.clone();
        assert_eq!(copy.memo(count).as_deref(), Some(&100));
        assert_eq!(
            built.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "built once"
        );
        d.insert("more", Val::None);
        assert_eq!(
            d.memo(count).as_deref(),
            Some(&101),
            "rebuilt after a change"
        );
        *d.get_mut("k1").unwrap() = Val::None;
        assert_eq!(
            d.memo(|_| None::<usize>),
            None,
            "declined: the caller scans"
        );
        assert_eq!(
            copy.memo(|_| Some("other type")),
            None,
            "one memo type per dict"
        );
        assert_eq!(
            copy.memo(count).as_deref(),
            Some(&100),
            "the copy kept its own"
        );
    }
}
