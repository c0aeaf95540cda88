//! `ecdysis-host export`: hand a stored harness to another runtime.
//!
//! ```text
//! <out>/harness.wasm   the component, byte for byte as stored
//! <out>/harness.json   hash, world, lineage, limits, training scores
//! <oci>/               optional OCI image layout of the same component
//! ```
//!
//! `harness.json` is what the Python and JavaScript runtimes read before they
//! run a component: they recompute the blake3 hash of `harness.wasm` and
//! refuse a mismatch, refuse a world version they do not implement, and take
//! the limits as their defaults, so a harness runs elsewhere under the limits
//! it was trained under.
//!
//! The OCI layout follows the Wasm OCI artifact convention of the component
//! ecosystem's registry tools (the `oci-wasm` crate used by wasm-pkg-tools /
//! `wkg`): an image manifest whose config blob has media type
//! `application/vnd.wasm.config.v0+json` (architecture `wasm`, os `wasip2`,
//! the layer digests, and the component's world imports/exports) and one
//! layer of media type `application/wasm` holding the component. The layout
//! itself is the OCI image-layout spec (`oci-layout`, `index.json`,
//! `blobs/sha256/…`), which `oras cp --from-oci-layout`, `skopeo` and
//! `crane` can push to any registry. Ecdysis facts ride along as manifest
//! annotations. Timestamps come from the store manifest, so exporting the
//! same harness twice gives the same digests.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::{ComponentHash, ComponentStore, Manifest, StoreError};
use crate::sandbox::{FailurePolicy, LayerSet, Limits, Sandbox};
use ecdysis_sys::fsutil::{PathError, atomic_write};
use ecdysis_sys::ids::ModelId;
use ecdysis_sys::layout::{RunLayout, TrainLayout};

/// Version of the `harness.json` format.
pub const EXPORT_FORMAT: &str = "ecdysis-harness-export/1";
/// OCI media types (see the module docs for where they come from): the
/// image manifest,
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// the layout's `index.json`,
pub const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// the Wasm config blob,
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// and the layer holding the component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Cap on the items of any list a hook returns; mirrored here so other
/// runtimes read it instead of hard-coding it.
const MAX_LIST_ITEMS: usize = crate::sandbox::MAX_LIST_ITEMS;

/// Why a harness could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The harness is not in the store, or its bytes are corrupt.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] PathError),
    /// `--train-run` names a directory that is not a usable training run, or
    /// one in which the harness has no place.
    #[error("{path} is not a training run: {reason}")]
    TrainRun {
        /// The directory given.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
}

/// One ancestor in a harness's lineage, from the store manifests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineageEntry {
    /// The ancestor.
    pub hash: ComponentHash,
    /// Its own parent (`None` at the root).
    pub parent: Option<ComponentHash>,
    /// A crate directory or a file path.
    pub origin: String,
    /// RFC 3339 UTC time the store first saw it.
    pub built_at: String,
    /// blake3 over its crate's source files (`None` for imported files).
    pub source_tree_hash: Option<String>,
    /// Cargo features it was built with.
    pub features: Vec<String>,
}

/// The limits a runtime applies, flattened to plain numbers so a Python or
/// JavaScript runtime reads them without knowing Rust's `Duration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedLimits {
    /// Fuel (roughly, wasm instructions) one hook call may burn.
    pub fuel_per_hook: u64,
    /// Wall-clock deadline per hook call, in milliseconds.
    pub deadline_ms: u64,
    /// Linear memory the guest may grow to, in bytes.
    pub memory_bytes: usize,
    /// Table elements per table.
    pub table_elements: usize,
    /// Instances, tables and memories a component may create.
    pub instances: usize,
    /// Maximum wasm stack, in bytes.
    pub max_wasm_stack: usize,
    /// Cap on the total bytes of text one hook may return.
    pub max_output_bytes: usize,
    /// Cap on the items of any list a hook returns.
    pub max_list_items: usize,
    /// Read-only env-view calls one hook call may make.
    pub env_view_calls_per_hook: u32,
    /// Log lines one hook call may write.
    pub log_lines_per_hook: u32,
    /// Bytes of guest stdout/stderr kept.
    pub stdio_bytes: usize,
    /// Which WASI beyond `wasi:io` and `wasi:cli` the harness may import.
    #[serde(default)]
    pub wasi: crate::sandbox::WasiProfile,
}

impl From<&Limits> for ExportedLimits {
    fn from(l: &Limits) -> Self {
        ExportedLimits {
            fuel_per_hook: l.fuel_per_hook,
            deadline_ms: l.deadline.as_millis() as u64,
            memory_bytes: l.memory_bytes,
            table_elements: l.table_elements,
            instances: l.instances,
            max_wasm_stack: l.max_wasm_stack,
            max_output_bytes: l.max_output_bytes,
            max_list_items: MAX_LIST_ITEMS,
            env_view_calls_per_hook: l.env_view_calls_per_hook,
            log_lines_per_hook: l.log_lines_per_hook,
            stdio_bytes: l.stdio_bytes,
            wasi: l.wasi,
        }
    }
}

/// What a training run says about the exported harness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingFacts {
    /// The training run directory, as given.
    pub run: String,
    /// The training method (`ecdysis`, `ecdysis-nofdcr`, `self-evolution`).
    pub method: String,
    /// The domain trained on, e.g. `tau2/retail`.
    pub domain: String,
    /// The agent model it was trained with (`sim:<profile>` for a testbed
    /// agent).
    pub agent_model: ModelId,
    /// `incumbent`, `initial` or `candidate`: the harness's place in the run.
    pub role: String,
    /// Training score of this harness, when the run recorded one.
    pub train_score: Option<f64>,
    /// Held-out test score: known only for the final incumbent.
    pub test_score: Option<f64>,
    /// Held-out test tasks the run had (0 without a test split).
    pub test_tasks: usize,
    /// Present when the scores come from a simulated testbed agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `harness.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessExport {
    /// [`EXPORT_FORMAT`].
    pub format: String,
    /// blake3 of `harness.wasm`, 64 lowercase hex digits.
    pub hash: ComponentHash,
    /// `blake3`.
    pub hash_algorithm: String,
    /// The WIT world the component implements.
    pub world: String,
    /// The component's file name beside `harness.json` (`harness.wasm`).
    pub file: String,
    /// Size of the component, in bytes.
    pub size: u64,
    /// The harness first, then its parent, and so on to the root.
    pub lineage: Vec<LineageEntry>,
    /// Set when the chain stops at a parent the store does not hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage_truncated_at: Option<ComponentHash>,
    /// The limits to run it under (those it was trained under, with
    /// `--train-run`).
    pub limits: ExportedLimits,
    /// What a failing hook does.
    pub failure_policy: FailurePolicy,
    /// The layers whose hooks a runtime calls (the others answer
    /// neutrally): all four unless layer selection chose fewer. Files
    /// written before layers existed mean all four.
    #[serde(default)]
    pub layers: LayerSet,
    /// What the training run says about it (`None` without `--train-run`).
    pub training: Option<TrainingFacts>,
    /// `ecdysis-host <version>`.
    pub exported_by: String,
}

/// What `export` wrote.
#[derive(Debug, Clone)]
pub struct ExportOutcome {
    /// The contents of `harness.json`.
    pub export: HarnessExport,
    /// Where `harness.wasm` was written.
    pub wasm_path: PathBuf,
    /// Where `harness.json` was written.
    pub json_path: PathBuf,
    /// The OCI manifest's digest (`sha256:…`), when a layout was written.
    pub oci_manifest_digest: Option<String>,
}

/// How to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Directory for `harness.wasm` and `harness.json`.
    pub out: PathBuf,
    /// Directory for an OCI image layout (`None`: none written).
    pub oci: Option<PathBuf>,
    /// Reference name of the image in the OCI index (default: the short hash).
    pub oci_tag: Option<String>,
    /// The limits written to `harness.json`.
    pub limits: Limits,
    /// The failure policy written to `harness.json`.
    pub policy: FailurePolicy,
    /// The layers written to `harness.json`.
    pub layers: LayerSet,
    /// Training facts to include (from [`read_training_run`]).
    pub training: Option<TrainingFacts>,
}

/// What a training run says about one of its harnesses: the facts for
/// `harness.json` and what the harness ran under.
#[derive(Debug, Clone)]
pub struct TrainedUnder {
    /// Role, scores and run of the harness.
    pub facts: TrainingFacts,
    /// The sandbox limits of the run.
    pub limits: Limits,
    /// The run's failure policy.
    pub policy: FailurePolicy,
    /// The layers layer selection chose for the final incumbent; all four
    /// for any other harness, or when the run selected none.
    pub layers: LayerSet,
}

/// The training facts and the limits of a training run directory
/// (`config.json` and `summary.json` of `ecdysis-host train`) for `hash`.
/// Read as plain JSON so the export does not depend on the trainer's
/// internal types.
pub fn read_training_run(dir: &Path, hash: &ComponentHash) -> Result<TrainedUnder, ExportError> {
    let bad = |reason: String| ExportError::TrainRun {
        path: dir.to_path_buf(),
        reason,
    };
    let layout = TrainLayout::new(dir);
    let read = |name: &str| -> Result<serde_json::Value, ExportError> {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| PathError::new("read", &path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("{name}: {e}")))
    };
    let config = read(RunLayout::CONFIG)?;
    let train = config
        .get("train")
        .ok_or_else(|| bad("config.json has no `train` runner config".into()))?;
    let limits: Limits = serde_json::from_value(train.get("limits").cloned().unwrap_or_default())
        .map_err(|e| bad(format!("config.json train.limits: {e}")))?;
    let policy: FailurePolicy = train
        .get("policy")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| bad(format!("config.json train.policy: {e}")))?
        .unwrap_or_default();
    let text = |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    let agent_model = ModelId::new(text(train, "agent_model").unwrap_or_default());
    // The summary exists once the run finished; before that only the
    // rounds so far say anything about scores.
    let summary = match read(RunLayout::SUMMARY) {
        Ok(s) => Some(s),
        Err(ExportError::Io(e)) if e.source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let incumbent = summary
        .as_ref()
        .and_then(|s| text(s, "incumbent"))
        .or_else(|| {
            std::fs::read_to_string(layout.incumbent())
                .ok()
                .map(|s| s.trim().to_string())
        });
    let initial = summary
        .as_ref()
        .and_then(|s| text(s, "initial"))
        .or_else(|| {
            std::fs::read_to_string(layout.initial())
                .ok()
                .map(|s| s.trim().to_string())
        });
    let is = |h: &Option<String>| h.as_deref() == Some(hash.as_str());
    let num =
        |v: Option<&serde_json::Value>, k: &str| v.and_then(|s| s.get(k)).and_then(|x| x.as_f64());
    let (role, train_score, test_score) = if is(&incumbent) {
        let train =
            num(summary.as_ref(), "final_train_score").or_else(|| last_round_score(dir, hash));
        ("incumbent", train, num(summary.as_ref(), "test_score"))
    } else if is(&initial) {
        (
            "initial",
            num(summary.as_ref(), "initial_train_score"),
            None,
        )
    } else if let Some(score) = last_round_score(dir, hash) {
        ("candidate", Some(score), None)
    } else {
        return Err(bad(format!(
            "harness {} is neither the incumbent, the initial harness nor a scored candidate of this run",
            hash.short()
        )));
    };
    let test_tasks = config
        .get("test_tasks")
        .and_then(|t| t.as_array())
        .map(Vec::len)
        .unwrap_or(0);
    // `summary.json`'s `layer_selection.chosen` (train --select-layers).
    let layers = match summary
        .as_ref()
        .and_then(|s| s.get("layer_selection"))
        .and_then(|l| l.get("chosen"))
    {
        Some(chosen) if role == "incumbent" => serde_json::from_value(chosen.clone())
            .map_err(|e| bad(format!("summary.json layer_selection.chosen: {e}")))?,
        _ => LayerSet::ALL,
    };
    let facts = TrainingFacts {
        run: dir.display().to_string(),
        method: text(&config, "method").unwrap_or_default(),
        domain: text(train, "domain").unwrap_or_default(),
        note: agent_model
            .is_simulated()
            .then(|| "simulated agent — not a benchmark result".to_string()),
        agent_model,
        role: role.to_string(),
        train_score,
        test_score,
        test_tasks,
    };
    Ok(TrainedUnder {
        facts,
        limits,
        policy,
        layers,
    })
}

/// The training score the run's `rounds.jsonl` recorded for `hash` (as the
/// round's incumbent or candidate), the latest one.
fn last_round_score(dir: &Path, hash: &ComponentHash) -> Option<f64> {
    let text = std::fs::read_to_string(TrainLayout::new(dir).rounds()).ok()?;
    let mut found = None;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v.get("candidate").and_then(|c| c.as_str()) == Some(hash.as_str()) {
            found = v.get("candidate_score").and_then(|s| s.as_f64()).or(found);
        }
        if v.get("incumbent").and_then(|c| c.as_str()) == Some(hash.as_str()) {
            found = v.get("incumbent_score").and_then(|s| s.as_f64()).or(found);
        }
    }
    found
}

impl ComponentStore {
    /// The lineage of `hash` from the store manifests: the harness, its
    /// parent, and so on. Stops at a root, at a parent the store does not
    /// hold (returned as the second value), or at a cycle.
    pub fn lineage(
        &self,
        hash: &ComponentHash,
    ) -> Result<(Vec<LineageEntry>, Option<ComponentHash>), StoreError> {
        let mut out: Vec<LineageEntry> = Vec::new();
        let mut next = Some(hash.clone());
        while let Some(h) = next.take() {
            if out.iter().any(|e| e.hash == h) {
                break;
            }
            let Some(m) = self.manifest(&h)? else {
                return Ok((out, Some(h)));
            };
            next = m.parent.clone();
            out.push(lineage_entry(&m));
        }
        Ok((out, None))
    }

    /// Write `harness.wasm` and `harness.json` (and an OCI layout when asked)
    /// for a stored harness. Every file is written atomically.
    pub fn export(
        &self,
        sandbox: &Sandbox,
        hash: &ComponentHash,
        opts: &ExportOptions,
    ) -> Result<ExportOutcome, ExportError> {
        let manifest = self
            .manifest(hash)?
            .ok_or_else(|| StoreError::NotFound(hash.to_string()))?;
        let bytes = self.read_component(hash)?;
        let (lineage, truncated) = self.lineage(hash)?;
        let export = HarnessExport {
            format: EXPORT_FORMAT.to_string(),
            hash: hash.clone(),
            hash_algorithm: "blake3".to_string(),
            world: manifest.world.clone(),
            file: "harness.wasm".to_string(),
            size: bytes.len() as u64,
            lineage,
            lineage_truncated_at: truncated,
            limits: ExportedLimits::from(&opts.limits),
            failure_policy: opts.policy,
            layers: opts.layers,
            training: opts.training.clone(),
            exported_by: format!("ecdysis-host {}", env!("CARGO_PKG_VERSION")),
        };
        let wasm_path = opts.out.join("harness.wasm");
        let json_path = opts.out.join("harness.json");
        atomic_write(&wasm_path, &bytes).map_err(|e| PathError::new("write", &wasm_path, e))?;
        let mut json = serde_json::to_vec_pretty(&export).expect("export serializes");
        json.push(b'\n');
        atomic_write(&json_path, &json).map_err(|e| PathError::new("write", &json_path, e))?;
        let oci_manifest_digest = match &opts.oci {
            Some(dir) => Some(write_oci_layout(
                &self.world_names(sandbox, hash)?,
                dir,
                &bytes,
                &manifest,
                &export,
                opts.oci_tag.as_deref(),
            )?),
            None => None,
        };
        Ok(ExportOutcome {
            export,
            wasm_path,
            json_path,
            oci_manifest_digest,
        })
    }
}

fn lineage_entry(m: &Manifest) -> LineageEntry {
    LineageEntry {
        hash: m.hash.clone(),
        parent: m.parent.clone(),
        origin: m.origin.clone(),
        built_at: m.built_at.clone(),
        source_tree_hash: m.source_tree_hash.clone(),
        features: m.features.clone(),
    }
}

/// `sha256:<hex>` of some bytes, the OCI digest form.
pub fn oci_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// An OCI content descriptor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<serde_json::Map<String, serde_json::Value>>,
}

fn write_blob(dir: &Path, media_type: &str, bytes: &[u8]) -> Result<Descriptor, ExportError> {
    let digest = oci_digest(bytes);
    let path = dir
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    atomic_write(&path, bytes).map_err(|e| PathError::new("write", &path, e))?;
    Ok(Descriptor {
        media_type: media_type.to_string(),
        digest,
        size: bytes.len() as u64,
        annotations: None,
    })
}

impl ComponentStore {
    /// The component's world imports and exports (interface names), as the
    /// Wasm OCI config lists them, from its compiled form (compiled like
    /// any load, by the store's compiler).
    fn world_names(
        &self,
        sandbox: &Sandbox,
        hash: &ComponentHash,
    ) -> Result<(Vec<String>, Vec<String>), ExportError> {
        let (component, _) = self.component(sandbox, hash)?;
        let ty = component.component_type();
        let engine = sandbox.engine();
        let imports = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        Ok((imports, exports))
    }
}

fn write_oci_layout(
    (imports, exports): &(Vec<String>, Vec<String>),
    dir: &Path,
    bytes: &[u8],
    manifest: &Manifest,
    export: &HarnessExport,
    tag: Option<&str>,
) -> Result<String, ExportError> {
    let layer = write_blob(dir, WASM_LAYER_MEDIA_TYPE, bytes)?;
    let config = serde_json::json!({
        "created": manifest.built_at,
        "author": null,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer.digest],
        "component": {
            "exports": exports,
            "imports": imports,
            "target": null,
        },
    });
    let config = write_blob(
        dir,
        WASM_CONFIG_MEDIA_TYPE,
        &serde_json::to_vec(&config).expect("config serializes"),
    )?;
    let mut annotations = serde_json::Map::new();
    let mut note = |k: &str, v: String| {
        annotations.insert(k.to_string(), serde_json::Value::String(v));
    };
    note(
        "org.opencontainers.image.created",
        manifest.built_at.clone(),
    );
    note(
        "org.opencontainers.image.title",
        format!("ecdysis harness {}", export.hash.short()),
    );
    note(
        "org.opencontainers.image.description",
        "An Ecdysis runtime harness: a WebAssembly component of the ecdysis:harness world".into(),
    );
    note("dev.ecdysis.harness.blake3", export.hash.to_string());
    note("dev.ecdysis.harness.world", export.world.clone());
    if let Some(parent) = &manifest.parent {
        note("dev.ecdysis.harness.parent", parent.to_string());
    }
    note(
        "dev.ecdysis.harness.limits",
        serde_json::to_string(&export.limits).expect("limits serialize"),
    );
    if let Some(t) = &export.training {
        note(
            "dev.ecdysis.harness.training",
            serde_json::to_string(t).expect("training facts serialize"),
        );
    }
    let image = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": config,
        "layers": [layer],
        "annotations": annotations,
    });
    let mut image_desc = write_blob(
        dir,
        OCI_MANIFEST_MEDIA_TYPE,
        &serde_json::to_vec(&image).expect("manifest serializes"),
    )?;
    let reference = tag
        .map(str::to_string)
        .unwrap_or_else(|| export.hash.short().to_string());
    let mut ref_note = serde_json::Map::new();
    ref_note.insert(
        "org.opencontainers.image.ref.name".into(),
        serde_json::Value::String(reference),
    );
    image_desc.annotations = Some(ref_note);
    let digest = image_desc.digest.clone();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX_MEDIA_TYPE,
        "manifests": [image_desc],
    });
    let index_path = dir.join("index.json");
    atomic_write(
        &index_path,
        &serde_json::to_vec_pretty(&index).expect("index serializes"),
    )
    .map_err(|e| PathError::new("write", &index_path, e))?;
    let layout_path = dir.join("oci-layout");
    atomic_write(&layout_path, br#"{"imageLayoutVersion":"1.0.0"}"#)
        .map_err(|e| PathError::new("write", &layout_path, e))?;
    Ok(digest)
}
