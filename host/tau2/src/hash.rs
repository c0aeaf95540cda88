//! Fast DB hashes. τ²'s DB hash is sha256 over the whole sorted JSON dump
//! (5 MB for airline), while an episode changes a few entities. Entities
//! cache their own dumps (see [`ecdysis_pyemu::Dict`]), and the pristine
//! database keeps the sha256 state at every entity boundary of its dump: an
//! episode's hash resumes from the last boundary before its first changed
//! entity instead of hashing the unchanged prefix again.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use ecdysis_pyemu::{Dict, Val, json};

/// Hasher states along the pristine dump.
#[derive(Debug)]
pub struct Checkpoints {
    /// Hex hash of the pristine dump.
    pristine: String,
    /// Per collection, in sorted order.
    colls: Vec<CollMarks>,
}

#[derive(Debug)]
struct CollMarks {
    name: String,
    /// The pristine collection, to recognise an untouched one by pointer.
    dict: Arc<Dict>,
    /// Sorted keys and the pristine entities under them.
    entries: Vec<(String, Val)>,
    /// `states[j]`: hasher state after entity `j - 1` (after the opening
    /// brace for `j == 0`), before the separator of entity `j`.
    states: Vec<Sha256>,
}

fn sorted(d: &Dict) -> Vec<(&str, &Val)> {
    let mut v: Vec<(&str, &Val)> = d.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

fn key(h: &mut Sha256, k: &str) {
    let mut buf = Vec::with_capacity(k.len() + 4);
    json::write_str(&mut buf, k);
    buf.extend_from_slice(b": ");
    h.update(&buf);
}

/// An entity's sorted dump, from its cache when it is a dict.
fn entity(h: &mut Sha256, v: &Val) {
    match v {
        Val::Dict(d) => h.update(json::sorted_bytes(d)),
        other => h.update(json::dumps_sorted(other).as_bytes()),
    }
}

fn collection(h: &mut Sha256, d: &Dict) {
    h.update(b"{");
    for (j, (k, v)) in sorted(d).into_iter().enumerate() {
        if j > 0 {
            h.update(b", ");
        }
        key(h, k);
        entity(h, v);
    }
    h.update(b"}");
}

fn same(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Dict(x), Val::Dict(y)) => Arc::ptr_eq(x, y),
        _ => false,
    }
}

/// Hashes a database root (`{collection: {key: entity}}`) from scratch and
/// records the checkpoints; `None` for another shape.
pub fn build(root: &Val) -> Option<Checkpoints> {
    let root = root.as_dict()?;
    let mut h = Sha256::new();
    h.update(b"{");
    let mut colls = Vec::new();
    for (i, (name, coll)) in sorted(root).into_iter().enumerate() {
        let Val::Dict(dict) = coll else { return None };
        if i > 0 {
            h.update(b", ");
        }
        key(&mut h, name);
        h.update(b"{");
        let mut states = vec![h.clone()];
        let mut entries = Vec::with_capacity(dict.len());
        for (j, (k, v)) in sorted(dict).into_iter().enumerate() {
            if j > 0 {
                h.update(b", ");
            }
            key(&mut h, k);
            entity(&mut h, v);
            states.push(h.clone());
            entries.push((k.to_string(), v.clone()));
        }
        h.update(b"}");
        colls.push(CollMarks {
            name: name.to_string(),
            dict: dict.clone(),
            entries,
            states,
        });
    }
    h.update(b"}");
    Some(Checkpoints {
        pristine: super::db::hex(&h.finalize()),
        colls,
    })
}

/// The hash of `root`, a (possibly changed) copy of the database the
/// checkpoints were built from; `None` when its shape no longer matches.
pub fn resume(root: &Val, ck: &Checkpoints) -> Option<String> {
    let names = sorted(root.as_dict()?);
    if names.len() != ck.colls.len() || names.iter().zip(&ck.colls).any(|((n, _), m)| *n != m.name)
    {
        return None;
    }
    let Some(i) = names
        .iter()
        .zip(&ck.colls)
        .position(|((_, v), m)| !matches!(v, Val::Dict(d) if Arc::ptr_eq(d, &m.dict)))
    else {
        return Some(ck.pristine.clone());
    };
    let marks = &ck.colls[i];
    let ents = sorted(names[i].1.as_dict()?);
    let j = ents
        .iter()
        .zip(&marks.entries)
        .position(|((k, v), (pk, pv))| *k != pk || !same(v, pv))
        .unwrap_or(ents.len().min(marks.entries.len()));
    let mut h = marks.states[j].clone();
    for (n, (k, v)) in ents[j..].iter().enumerate() {
        if j + n > 0 {
            h.update(b", ");
        }
        key(&mut h, k);
        entity(&mut h, v);
    }
    h.update(b"}");
    for (name, coll) in &names[i + 1..] {
        h.update(b", ");
        key(&mut h, name);
        match coll {
            Val::Dict(d) => collection(&mut h, d),
            other => entity(&mut h, other),
        }
    }
    h.update(b"}");
    Some(super::db::hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(root: &Val) -> String {
        super::super::db::hex(&Sha256::digest(json::dumps_sorted(root).as_bytes()))
    }

    #[test]
    fn resumed_hashes_equal_full_hashes() {
        let root = Val::from_json(&serde_json::json!({
            "b": {"k1": {"x": 1}, "k3": {"x": [1, 2]}, "k5": {"x": "é"}},
            "a": {"z": {"y": 1.5}},
            "c": {},
        }));
        let ck = build(&root).unwrap();
        assert_eq!(resume(&root, &ck).unwrap(), full(&root));
        type Edit = Box<dyn Fn(&mut Dict)>;
        let edits: Vec<Edit> = vec![
            Box::new(|d| d.insert("k0", Val::dict(Dict::new()))),
            Box::new(|d| d.insert("k4", Val::Int(3))),
            Box::new(|d| d.insert("k9", Val::None)),
            Box::new(|d| d.insert("k3", Val::str("changed"))),
            Box::new(|d| {
                d.remove("k1");
            }),
        ];
        for edit in &edits {
            let mut r = root.clone();
            edit(
                r.as_dict_mut()
                    .unwrap()
                    .get_mut("b")
                    .unwrap()
                    .as_dict_mut()
                    .unwrap(),
            );
            assert_eq!(resume(&r, &ck).unwrap(), full(&r));
            let mut r2 = r.clone();
            r2.as_dict_mut()
                .unwrap()
                .get_mut("c")
                .unwrap()
                .as_dict_mut()
                .unwrap()
                .insert("n", Val::Bool(true));
            assert_eq!(resume(&r2, &ck).unwrap(), full(&r2));
        }
    }
}
