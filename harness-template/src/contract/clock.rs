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
    const PHRASE: &str = "current time is";
    let at = find_ignore_ascii_case(policy.as_bytes(), PHRASE.as_bytes())? + PHRASE.len();
    minutes(&policy[at..])
}

/// Where `needle` first occurs in `hay`, ASCII case folded (Horspool:
/// shifts by up to the needle's length). Matched in place: lowering a copy
/// of the whole policy first was most of the contract hook's fuel, and its
/// offsets shift where a character changes length when lowered.
fn find_ignore_ascii_case(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let n = needle.len();
    if n == 0 || hay.len() < n {
        return (n == 0).then_some(0);
    }
    let mut shift = [n; 256];
    for (k, &b) in needle[..n - 1].iter().enumerate() {
        shift[b.to_ascii_lowercase() as usize] = n - 1 - k;
        shift[b.to_ascii_uppercase() as usize] = n - 1 - k;
    }
    let mut i = 0;
    while i + n <= hay.len() {
        let end = hay[i + n - 1];
        if end.eq_ignore_ascii_case(&needle[n - 1]) && hay[i..i + n].eq_ignore_ascii_case(needle) {
            return Some(i);
        }
        i += shift[end as usize];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the plain definition, on seeded random texts over the
    /// needle's letters in both cases.
    #[test]
    fn horspool_agrees_with_a_plain_search() {
        let naive = |hay: &[u8], needle: &[u8]| {
            hay.windows(needle.len())
                .position(|w| w.eq_ignore_ascii_case(needle))
        };
        let alphabet = b"cCuUrReEnNtT iImMsS-";
        let mut next = crate::seeded(0x2545_f491_u64);
        let mut found = 0;
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let mut hay: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if next().is_multiple_of(3) && len >= 15 {
                let at = (next() % (len as u64 - 14)) as usize;
                hay[at..at + 15].copy_from_slice(b"cuRRent Time is");
            }
            let want = naive(&hay, b"current time is");
            found += usize::from(want.is_some());
            assert_eq!(find_ignore_ascii_case(&hay, b"current time is"), want);
        }
        assert!(
            found > 1000,
            "the texts hold the needle too rarely: {found}"
        );
    }

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
        // 'İ' lowers to three bytes from two: an offset found in a lowered
        // copy would land one byte off in the policy itself.
        let shifted = now_from_policy("İİ The CURRENT time is 2024-05-15 15:00:00 EST.").unwrap();
        assert_eq!(shifted, now);
        for (hay, found) in [
            ("xxCurrent Time Isx", Some(2)),
            ("current time i", None),
            ("current time iscurrent time is", Some(0)),
            ("ccurrent time is", Some(1)),
            ("current-time is", None),
        ] {
            assert_eq!(
                find_ignore_ascii_case(hay.as_bytes(), b"current time is"),
                found,
                "{hay}"
            );
        }
        assert!(minutes("2024-05").is_none());
    }
}
