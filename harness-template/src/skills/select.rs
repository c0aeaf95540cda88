//! Why: guidance helps only when it fits the request; a score threshold,
//! a relative cut for the second skill and a cap of two keep irrelevant
//! procedures out of the prompt.

use crate::tables::{SKILL_RETRIEVAL, SKILLS, Skill};
use crate::text::domain_matches;
use crate::types::Guide;

use super::bm25::scores;

/// The skills for the opening message of an episode in `domain`.
pub fn select(domain: &str, first_user_message: &str) -> Vec<Guide> {
    let library: Vec<&Skill> = SKILLS
        .iter()
        .filter(|s| domain_matches(s.domain, domain))
        .collect();
    let s = scores(&library, first_user_message);
    let mut ranked: Vec<(usize, f64)> = s.into_iter().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let best = ranked.first().map(|r| r.1).unwrap_or(0.0);
    ranked
        .into_iter()
        .filter(|(_, score)| {
            *score >= SKILL_RETRIEVAL.min_score && *score >= best * SKILL_RETRIEVAL.second_fraction
        })
        .take(SKILL_RETRIEVAL.max_skills)
        .map(|(i, _)| Guide {
            title: library[i].title.to_string(),
            text: library[i].text.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_at_most_two_relevant_skills() {
        let g = select(
            "retail",
            "Hi. I want to exchange the keyboard of my order #W1 for a different color.",
        );
        assert!(!g.is_empty() && g.len() <= 2, "{g:?}");
        assert_eq!(g[0].title, "Exchange or modify items in one call");
        let g = select(
            "airline",
            "Hi, I want to cancel my reservation, the flight was delayed.",
        );
        assert!(g.iter().any(|g| g.title == "Cancel a reservation"), "{g:?}");
        assert!(select("retail", "Hello there.").is_empty());
        assert!(select("telecom", "I want to cancel my order").is_empty());
    }
}
