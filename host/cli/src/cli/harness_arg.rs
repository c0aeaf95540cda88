//! What a `--harness` flag names: the Direct baseline or a component.

use std::fmt;
use std::str::FromStr;

/// A `--harness` value, parsed once by clap so that no command compares
/// the flag's text with a sentinel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessArg {
    /// `none`: the Direct baseline, the same loop with no hooks.
    Direct,
    /// A guest crate directory, a `.wasm` file, a stored hash (or a unique
    /// prefix of one) or an exported harness directory, as given.
    Component(String),
}

impl HarnessArg {
    /// The text that names Direct on the command line.
    pub const DIRECT: &'static str = "none";

    /// The component the flag names, or `None` for Direct.
    pub fn component(&self) -> Option<&str> {
        match self {
            HarnessArg::Direct => None,
            HarnessArg::Component(c) => Some(c),
        }
    }
}

/// `--harness ""`: neither Direct nor a component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the harness is empty: give a crate directory, a .wasm file, a stored hash or `none`")]
pub struct EmptyHarness;

impl FromStr for HarnessArg {
    type Err = EmptyHarness;
    fn from_str(s: &str) -> Result<Self, EmptyHarness> {
        match s.trim() {
            "" => Err(EmptyHarness),
            HarnessArg::DIRECT => Ok(HarnessArg::Direct),
            _ => Ok(HarnessArg::Component(s.to_string())),
        }
    }
}

impl fmt::Display for HarnessArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.component().unwrap_or(HarnessArg::DIRECT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_direct_and_anything_else_is_kept_as_given() {
        assert_eq!("none".parse(), Ok(HarnessArg::Direct));
        assert_eq!(
            "guests/direct".parse(),
            Ok(HarnessArg::Component("guests/direct".into()))
        );
        // A crate directory that happens to be called `none/` is a path,
        // not the sentinel.
        assert_eq!("./none".parse(), Ok(HarnessArg::Component("./none".into())));
        assert_eq!("  ".parse::<HarnessArg>(), Err(EmptyHarness));
        for s in ["none", "a1b2c3", "harness-template"] {
            assert_eq!(s.parse::<HarnessArg>().unwrap().to_string(), s);
        }
    }
}
