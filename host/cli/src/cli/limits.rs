//! The sandbox limit flags shared by `check`, `run` and `train`.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;

use ecdysis_sandbox::sandbox::{Limits, WasiProfile};

/// Per-hook limits of the harness sandbox; unset flags keep the defaults
/// (see docs/src/reference/limits.md).
#[derive(Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// Fuel (roughly, wasm instructions) per hook call.
    #[arg(long, help_heading = "Sandbox limits")]
    pub fuel: Option<u64>,
    /// Wall-clock deadline per hook call, in milliseconds.
    #[arg(long, help_heading = "Sandbox limits")]
    pub deadline_ms: Option<u64>,
    /// Guest linear-memory cap, in MiB (1 to 4096).
    #[arg(long, help_heading = "Sandbox limits")]
    pub memory_mib: Option<usize>,
    /// Text the harness may add to the model's input in one episode, in
    /// KiB (prompt and description growth, guidance, notes, block feedback,
    /// calls it writes): crossing it is a contract violation, handled by
    /// the failure policy. Default 64.
    #[arg(long, help_heading = "Sandbox limits")]
    pub max_added_kib: Option<u64>,
    /// Which WASI a harness may import besides `wasi:io` and `wasi:cli`:
    /// `virtual` (default) also grants a frozen clock, randomness seeded
    /// per episode, an empty filesystem and sockets that always refuse,
    /// which Python and JavaScript harnesses import; `minimal` refuses a
    /// component that imports them.
    #[arg(long, value_name = "PROFILE", help_heading = "Sandbox limits")]
    pub wasi: Option<WasiProfile>,
}

impl LimitArgs {
    /// The limits, or an error naming the flag whose value cannot work.
    pub fn limits(&self) -> Result<Limits> {
        let mut l = Limits::default();
        if let Some(f) = self.fuel {
            if f == 0 {
                bail!("--fuel 0 leaves a hook no fuel at all; give at least 1");
            }
            l.fuel_per_hook = f;
        }
        if let Some(ms) = self.deadline_ms {
            if ms == 0 {
                bail!("--deadline-ms 0 would stop every hook at once; give at least 1");
            }
            l.deadline = Duration::from_millis(ms);
        }
        if let Some(m) = self.memory_mib {
            // A wasm32 memory cannot exceed 4 GiB; a Rust guest needs at
            // least its first pages.
            if !(1..=4096).contains(&m) {
                bail!("--memory-mib {m} is out of range (1 to 4096)");
            }
            l.memory_bytes = m << 20;
        }
        if let Some(k) = self.max_added_kib {
            l.max_added_bytes = k << 10;
        }
        if let Some(p) = self.wasi {
            l.wasi = p;
        }
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_flags_keep_the_defaults_and_set_ones_apply() {
        assert_eq!(LimitArgs::default().limits().unwrap(), Limits::default());
        let l = LimitArgs {
            fuel: Some(7),
            deadline_ms: Some(30),
            memory_mib: Some(16),
            max_added_kib: Some(8),
            wasi: Some(WasiProfile::Minimal),
        }
        .limits()
        .unwrap();
        assert_eq!(
            (
                l.fuel_per_hook,
                l.deadline,
                l.memory_bytes,
                l.max_added_bytes,
                l.wasi
            ),
            (
                7,
                Duration::from_millis(30),
                16 << 20,
                8 << 10,
                WasiProfile::Minimal
            )
        );
    }

    #[test]
    fn impossible_values_name_their_flag() {
        for (args, flag) in [
            (
                LimitArgs {
                    fuel: Some(0),
                    ..Default::default()
                },
                "--fuel",
            ),
            (
                LimitArgs {
                    deadline_ms: Some(0),
                    ..Default::default()
                },
                "--deadline-ms",
            ),
            (
                LimitArgs {
                    memory_mib: Some(0),
                    ..Default::default()
                },
                "--memory-mib",
            ),
            (
                LimitArgs {
                    memory_mib: Some(5000),
                    ..Default::default()
                },
                "--memory-mib",
            ),
        ] {
            let err = args.limits().unwrap_err().to_string();
            assert!(err.contains(flag), "{err}");
        }
    }
}
