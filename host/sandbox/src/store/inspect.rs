//! `inspect`: what a stored component is, read from its bytes and its
//! manifest, and whether this host can link it.

use serde::Serialize;

use super::{ComponentHash, ComponentStore, Manifest, StoreError};
use crate::sandbox::{SUPPORTED_WORLDS, Sandbox, WORLD_VERSION};

/// A component's identity, interface and linkability.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// The store's record of it (its `world` is read from the component).
    pub manifest: Manifest,
    /// The newest world this host implements.
    pub host_world: String,
    /// Every world this host can run.
    pub supported_worlds: Vec<String>,
    /// Whether the component's world is one of them.
    pub world_supported: bool,
    /// The component's imports, by name.
    pub imports: Vec<String>,
    /// The component's exports, by name.
    pub exports: Vec<String>,
    /// Why this host cannot link it (`None`: it links).
    pub link_error: Option<String>,
}

impl ComponentStore {
    /// Inspect a stored component: compile it for `sandbox` (as a load
    /// would), list its imports and exports, and try to link it.
    pub fn inspect(
        &self,
        sandbox: &Sandbox,
        hash: &ComponentHash,
    ) -> Result<Inspection, StoreError> {
        let manifest = self
            .manifest(hash)?
            .ok_or_else(|| StoreError::NotFound(hash.to_string()))?;
        // Compiled like any load (by the store's compiler, possibly a
        // limited child process), never in place from untrusted bytes.
        let (component, _) = self.component(sandbox, hash)?;
        let ty = component.component_type();
        let engine = sandbox.engine();
        let imports = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let link_error = sandbox.prepare(&component).err().map(|e| e.to_string());
        Ok(Inspection {
            world_supported: SUPPORTED_WORLDS.contains(&manifest.world.as_str()),
            manifest,
            host_world: WORLD_VERSION.to_string(),
            supported_worlds: SUPPORTED_WORLDS.iter().map(|w| w.to_string()).collect(),
            imports,
            exports,
            link_error,
        })
    }
}

impl Inspection {
    /// The text `inspect` prints, one fact per line.
    pub fn render(&self) -> String {
        let m = &self.manifest;
        let mut out = format!("hash       {}\n", m.hash);
        out += &format!("size       {} bytes\n", m.size);
        out += &format!(
            "world      {} ({}; host implements {})\n",
            m.world,
            if self.world_supported {
                "supported"
            } else {
                "NOT supported"
            },
            self.supported_worlds.join(", ")
        );
        out += &format!("origin     {}\n", m.origin);
        out += &format!("built at   {}\n", m.built_at);
        if let Some(p) = &m.parent {
            out += &format!("parent     {p}\n");
        }
        if let Some(t) = &m.toolchain {
            out += &format!("toolchain  {t}\n");
        }
        if let Some(s) = &m.source_tree_hash {
            out += &format!("source     {s}\n");
        }
        if !m.features.is_empty() {
            out += &format!("features   {}\n", m.features.join(","));
        }
        out += &format!("exports    {}\n", self.exports.join(", "));
        out += &format!("imports    {}\n", self.imports.join(", "));
        match &self.link_error {
            None => out += "links      ok: every import is granted by this host\n",
            Some(e) => out += &format!("links      NO: {e}\n"),
        }
        out
    }
}
