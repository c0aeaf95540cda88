//! Why: the 24-hour cancellation rule needs "now", and the harness has no
//! clock; the policy the agent reads states the current time, so the gates
//! use exactly the time the agent is told.

/// Minutes since 1970-01-01 of `YYYY-MM-DD[ T]HH:MM[:SS]` at the start of
/// `text`.
pub fn minutes(text: &str) -> Option<i64> {
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() < 16 {
        return None;
    }
    let n = |s: &str| s.parse::<i64>().ok();
    let (y, mo, d) = (n(t.get(0..4)?)?, n(t.get(5..7)?)?, n(t.get(8..10)?)?);
    if b[4] != b'-' || b[7] != b'-' || !(b[10] == b' ' || b[10] == b'T') || b[13] != b':' {
        return None;
    }
    let (h, mi) = (n(t.get(11..13)?)?, n(t.get(14..16)?)?);
    Some(days_from_civil(y, mo, d) * 1440 + h * 60 + mi)
}

/// Days since 1970-01-01 (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// "The current time is 2024-05-15 15:00:00 EST." in the policy.
pub fn now_from_policy(policy: &str) -> Option<i64> {
    let lower = policy.to_lowercase();
    let at = lower.find("current time is")? + "current time is".len();
    minutes(&policy[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_policy_clock() {
        let now =
            now_from_policy("# Policy\n\nThe current time is 2024-05-15 15:00:00 EST.\n").unwrap();
        let created = minutes("2024-05-14T16:00:00").unwrap();
        assert_eq!(now - created, 23 * 60);
        assert_eq!(
            minutes("2024-03-01 00:00").unwrap() - minutes("2024-02-28 00:00").unwrap(),
            2 * 1440
        );
        assert!(now_from_policy("no clock here").is_none());
        assert!(minutes("2024-05").is_none());
    }
}
