//! Why: the opening message names the user's request in their own words;
//! BM25 over each skill's title and keywords finds the matching procedure
//! without any task id, and scores nothing when nothing matches.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

use crate::tables::{SKILL_RETRIEVAL, STOP_WORDS, Skill};

/// FNV-1a: a few operations per byte where the standard SipHash costs
/// hundreds per word in the guest. Keys are still compared on a hit, so a
/// collision costs time, never a wrong count; the maps are never iterated,
/// so their order cannot leak into a score.
#[derive(Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type Fixed = BuildHasherDefault<Fnv>;

/// The retrieval terms of already lower-cased text: [`crate::text::words`]
/// without the stop words, borrowed from the text.
fn terms<'a>(lower: &'a str, stop: &HashSet<&str, Fixed>) -> Vec<&'a str> {
    let keep = |w: &&str| !w.is_empty() && !stop.contains(w);
    if !lower.is_ascii() {
        return lower
            .split(|c: char| !(c.is_alphanumeric() || c == '\''))
            .map(|w| w.trim_matches('\''))
            .filter(keep)
            .collect();
    }
    // The same split byte by byte: decoding each character for the
    // predicate was the larger part of the hook's fuel.
    let mut out = Vec::with_capacity(lower.len() / 4);
    let mut push = |w: &'a str| {
        let w = w.trim_matches('\'');
        if keep(&w) {
            out.push(w);
        }
    };
    let mut start = None;
    for (i, &b) in lower.as_bytes().iter().enumerate() {
        match (b.is_ascii_alphanumeric() || b == b'\'', start) {
            (true, None) => start = Some(i),
            (false, Some(from)) => {
                push(&lower[from..i]);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(from) = start {
        push(&lower[from..]);
    }
    out
}

/// BM25 score of each skill for `query` (same order as `skills`), over each
/// skill's title and keywords. Query terms count once each; idf is the
/// non-negative `ln(1 + (N-n+.5)/(n+.5))`.
pub fn scores(skills: &[&Skill], query: &str) -> Vec<f64> {
    if skills.is_empty() {
        return Vec::new();
    }
    // Words become numbers once: this runs once per episode, and comparing
    // words as strings (a `String` per word, every stop word, every word of
    // every skill) was most of the skills hook's fuel in the guest, where
    // each comparison is a call into a byte-by-byte `memcmp`.
    let mut stop: HashSet<&str, Fixed> =
        HashSet::with_capacity_and_hasher(STOP_WORDS.len(), Fixed::default());
    stop.extend(STOP_WORDS.iter().copied());
    let texts: Vec<String> = skills
        .iter()
        .map(|s| format!("{} {}", s.title, s.keywords).to_lowercase())
        .collect();
    let words: usize = texts.iter().map(|t| t.len() / 4).sum();
    let mut ids: HashMap<&str, usize, Fixed> =
        HashMap::with_capacity_and_hasher(words, Fixed::default());
    let docs: Vec<Vec<usize>> = texts
        .iter()
        .map(|t| {
            terms(t, &stop)
                .into_iter()
                .map(|w| {
                    let next = ids.len();
                    *ids.entry(w).or_insert(next)
                })
                .collect()
        })
        .collect();
    let n = docs.len() as f64;
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n;
    // A query term no skill holds adds 0 to every score, so only the others
    // are kept, summed in the order of their text as before.
    let query = query.to_lowercase();
    let mut q: Vec<(&str, usize)> = terms(&query, &stop)
        .into_iter()
        .filter_map(|w| ids.get(w).map(|&id| (w, id)))
        .collect();
    q.sort_unstable_by_key(|&(_, id)| id);
    q.dedup_by_key(|&mut (_, id)| id);
    q.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let idf: Vec<f64> = q
        .iter()
        .map(|&(_, id)| {
            let df = docs.iter().filter(|d| d.contains(&id)).count() as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let (k1, b) = (SKILL_RETRIEVAL.k1, SKILL_RETRIEVAL.b);
    docs.iter()
        .map(|doc| {
            let len = doc.len() as f64;
            q.iter()
                .zip(&idf)
                .map(|(&(_, id), idf)| {
                    let tf = doc.iter().filter(|w| **w == id).count() as f64;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * len / avg.max(1.0)))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::SKILLS;

    #[test]
    fn matching_terms_score_higher() {
        let retail: Vec<&Skill> = SKILLS.iter().filter(|s| s.domain == "retail").collect();
        let s = scores(&retail, "I want to return the headphones I received");
        let best = s
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0;
        assert_eq!(retail[best].title, "Return delivered items");
        let none = scores(&retail, "good morning");
        assert!(none.iter().all(|x| *x == 0.0));
    }
}
