//! Host bindings of the `ecdysis:harness` world, one module per world
//! version, as hosts of versioned plugin worlds keep them (wasmtime's own
//! `wasmtime-wasi` keeps `p2`/`p3` side by side; Spin keeps one module per
//! `spin:up` world version). A future 0.2 lives beside 0.1 as `v0_2_0`; the
//! host picks the module matching the interface a component exports (read
//! from its bytes by [`world_of`]), so old harnesses keep running.

pub mod v0_1_0;

pub use v0_1_0::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guidance, Harness,
    HarnessPre, LogLevel, Regulation, StepKind, StepReport, TaskView, ToolCall, ToolDescription,
    ToolOutcome, ToolSpec, ViewError, ecdysis,
};

/// The world version this host implements (the newest bindings module).
pub const WORLD_VERSION: &str = v0_1_0::WORLD;

/// Every world version this host can run.
pub const SUPPORTED_WORLDS: &[&str] = &[v0_1_0::WORLD];

/// The package whose `hooks` interface a harness exports.
const HOOKS_PREFIX: &str = "ecdysis:harness/hooks@";

/// Bytes [`world_of`] cannot parse: the parser's error, which names the
/// offset of the offending byte.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UnparsableComponent(#[from] pub wasmparser::BinaryReaderError);

/// The harness world a component implements, read from its top-level
/// exports without compiling it: `Some("ecdysis:harness/harness@X")` when it
/// exports `ecdysis:harness/hooks@X`, `None` when it exports no hooks
/// interface at all. Errors only when the bytes do not parse.
pub fn world_of(bytes: &[u8]) -> Result<Option<String>, UnparsableComponent> {
    use wasmparser::{Parser, Payload};
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    let export = export?;
                    if let Some(version) = export.name.name.strip_prefix(HOOKS_PREFIX) {
                        return Ok(Some(format!("ecdysis:harness/harness@{version}")));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(None)
}
