//! `--concurrency N` or `--concurrency auto[:MAX]`, parsed.

use std::fmt;
use std::str::FromStr;

use super::controller::DEFAULT_MAX;

/// How many episodes a run keeps in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Always this many.
    Fixed(usize),
    /// Adapted to the endpoint, between 1 and `max`.
    Auto {
        /// The most in flight.
        max: usize,
    },
}

/// A `--concurrency` value that is neither a positive number nor
/// `auto[:MAX]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid concurrency `{0}`: give a number of episodes (at least 1), `auto` or `auto:MAX` (MAX at least 1)"
)]
pub struct ConcurrencyError(pub String);

impl Concurrency {
    /// The most episodes ever in flight (what pools are sized for).
    pub fn most(self) -> usize {
        match self {
            Self::Fixed(n) | Self::Auto { max: n } => n,
        }
    }

    /// `Some(max)` when adaptive.
    pub fn auto_max(self) -> Option<usize> {
        match self {
            Self::Auto { max } => Some(max),
            Self::Fixed(_) => None,
        }
    }
}

impl FromStr for Concurrency {
    type Err = ConcurrencyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || ConcurrencyError(text.to_owned());
        let positive = |n: &str| n.trim().parse::<usize>().ok().filter(|n| *n >= 1);
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto { max: DEFAULT_MAX });
        }
        if let Some((head, max)) = trimmed.split_once(':') {
            if !head.eq_ignore_ascii_case("auto") {
                return Err(invalid());
            }
            return positive(max)
                .map(|max| Self::Auto { max })
                .ok_or_else(invalid);
        }
        positive(trimmed).map(Self::Fixed).ok_or_else(invalid)
    }
}

impl fmt::Display for Concurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Auto { max } => write!(f, "auto:{max}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numbers_and_auto_and_names_what_it_rejects() {
        assert_eq!("4".parse(), Ok(Concurrency::Fixed(4)));
        assert_eq!("auto".parse(), Ok(Concurrency::Auto { max: DEFAULT_MAX }));
        assert_eq!("AUTO:6".parse(), Ok(Concurrency::Auto { max: 6 }));
        for bad in ["0", "auto:0", "auto:", "lots", "-1", "fixed:3", ""] {
            let err = bad.parse::<Concurrency>().unwrap_err();
            assert_eq!(err, ConcurrencyError(bad.into()));
            assert!(err.to_string().contains(&format!("`{bad}`")));
        }
        assert_eq!(Concurrency::Auto { max: 6 }.to_string(), "auto:6");
        assert_eq!("auto:6".parse::<Concurrency>().unwrap().most(), 6);
        assert_eq!(Concurrency::Fixed(3).auto_max(), None);
    }
}
