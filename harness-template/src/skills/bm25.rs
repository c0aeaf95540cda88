//! Why: the opening message names the user's request in their own words;
//! BM25 over each skill's title and keywords finds the matching procedure
//! without any task id, and scores nothing when nothing matches.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

use crate::tables::{SKILL_RETRIEVAL, STOP_WORDS, Skill};

/// FNV-1a: a few operations per byte, where the standard SipHash costs
/// hundreds per word in the guest. Keys are still compared on a hit, so a
/// collision costs time, never a wrong count; the maps are never iterated,
/// so their order cannot leak into a score.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type Fixed = BuildHasherDefault<Fnv>;

/// The retrieval terms of already lower-cased text: [`crate::text::words`]
/// without the stop words, borrowed from the text.
fn terms<'a>(lower: &'a str, stop: &HashSet<&str, Fixed>) -> Vec<&'a str> {
    lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty() && !stop.contains(w))
        .collect()
}

/// BM25 score of each skill for `query` (same order as `skills`), over each
/// skill's title and keywords. Query terms count once each; idf is the
/// non-negative `ln(1 + (N-n+.5)/(n+.5))`.
pub fn scores(skills: &[&Skill], query: &str) -> Vec<f64> {
    if skills.is_empty() {
        return Vec::new();
    }
    // Words become numbers once, through hashed maps: a `String` per word
    // and string comparisons (each a byte-by-byte `memcmp` call in the
    // guest) against every stop word and every word of every skill were
    // about half of the skills hook's fuel (the performance page).
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
    let query_terms = terms(&query, &stop);
    // A float sum starts at -0.0; the terms left out above added +0.0 to
    // it, so a query with terms scores +0.0 where it matches nothing.
    let zero = if query_terms.is_empty() { -0.0 } else { 0.0 };
    let mut q: Vec<(&str, usize)> = query_terms
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
                .fold(zero, |sum, x| sum + x)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::SKILLS;

    /// The plain definition, strings throughout: the scores above must be
    /// the same numbers, bit for bit (the selection compares them).
    fn reference(skills: &[&Skill], query: &str) -> Vec<f64> {
        let terms = |t: &str| -> Vec<String> {
            crate::text::words(t)
                .into_iter()
                .filter(|w| !STOP_WORDS.contains(&w.as_str()))
                .collect()
        };
        let docs: Vec<Vec<String>> = skills
            .iter()
            .map(|s| terms(&format!("{} {}", s.title, s.keywords)))
            .collect();
        let n = docs.len() as f64;
        let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n;
        let mut q = terms(query);
        q.sort();
        q.dedup();
        let (k1, b) = (SKILL_RETRIEVAL.k1, SKILL_RETRIEVAL.b);
        docs.iter()
            .map(|doc| {
                let len = doc.len() as f64;
                q.iter()
                    .map(|term| {
                        let tf = doc.iter().filter(|w| *w == term).count() as f64;
                        if tf == 0.0 {
                            return 0.0;
                        }
                        let df = docs.iter().filter(|d| d.contains(term)).count() as f64;
                        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                        idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * len / avg.max(1.0)))
                    })
                    .sum()
            })
            .collect()
    }

    /// Every domain's library against seeded queries drawn from its own
    /// words, stop words, other domains' words, case and punctuation.
    #[test]
    fn scores_equal_the_plain_definition() {
        let mut next = crate::seeded(0x9e37_79b9_7f4a_7c15_u64);
        let vocabulary: Vec<String> = SKILLS
            .iter()
            .flat_map(|s| {
                format!("{} {} {}", s.title, s.keywords, s.text)
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .chain(STOP_WORDS.iter().map(|w| w.to_uppercase()))
            .chain(["I'd", "'quoted'", "Ünïcode", "#W123", "don't"].map(String::from))
            .collect();
        let mut domains: Vec<&str> = SKILLS.iter().map(|s| s.domain).collect();
        domains.dedup();
        let mut matched = 0;
        for domain in domains {
            let library: Vec<&Skill> = SKILLS.iter().filter(|s| s.domain == domain).collect();
            for _ in 0..300 {
                let words = (next() % 60) as usize;
                let query: Vec<&str> = (0..words)
                    .map(|_| vocabulary[(next() % vocabulary.len() as u64) as usize].as_str())
                    .collect();
                let query = query.join(if next().is_multiple_of(2) { " " } else { ", " });
                let (got, want) = (scores(&library, &query), reference(&library, &query));
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{domain}: {query}");
                matched += usize::from(want.iter().any(|x| *x > 0.0));
            }
        }
        assert!(matched > 500, "too few queries matched a skill: {matched}");
    }

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
