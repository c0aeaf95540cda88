//! Why: the opening message names the user's request in their own words;
//! BM25 over each skill's title and keywords finds the matching procedure
//! without any task id, and scores nothing when nothing matches.

use crate::tables::{SKILL_RETRIEVAL, STOP_WORDS, Skill};
use crate::text::words;

fn terms(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// The indexed text of a skill: its title and keywords.
fn document(skill: &Skill) -> Vec<String> {
    terms(&format!("{} {}", skill.title, skill.keywords))
}

/// BM25 score of each skill for `query` (same order as `skills`). Query
/// terms count once each; idf is the non-negative `ln(1 + (N-n+.5)/(n+.5))`.
pub fn scores(skills: &[&Skill], query: &str) -> Vec<f64> {
    let docs: Vec<Vec<String>> = skills.iter().map(|s| document(s)).collect();
    let n = docs.len() as f64;
    if docs.is_empty() {
        return Vec::new();
    }
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
