//! Which reference answers depend on the system the machine is made from.
//!
//! Upstream runs the tasks on an unpinned `ubuntu` image; here the machine
//! is the host's userland (Debian). No Ubuntu image is at hand, so the
//! dependence is measured by what a distribution changes, in kind: each
//! task's reference solution runs on the machine as it is, twice, and once
//! on a variant whose system differs the way another distribution's image
//! does ([`SYSTEM_VARIANT`]: one more user and group, one more command in
//! `PATH`, one more file in `/etc`, `/var/log` and `/usr/local`). An answer
//! that changes on the variant, but not between the two plain runs,
//! depends on the system; one that changes between the plain runs depends
//! on the moment (memory in use, processes, random data of its init).

use serde::Serialize;

use super::{Language, OsDomain, Script, Task};
use ecdysis_env::EnvError;

/// The variant system, made before the task's init scripts run.
pub const SYSTEM_VARIANT: &str = "set -e
useradd -m -U distro-extra
install -m 755 /dev/null /usr/local/bin/distro-extra
echo extra > /etc/distro-extra.conf
mkdir -p /var/log/distro-extra
echo extra > /var/log/distro-extra/extra.log
";

/// How a task's reference answer behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dependence {
    /// The same on both plain machines and on the variant.
    Stable,
    /// The same on both plain machines, different on the variant.
    DependsOnSystem,
    /// Different between the two plain machines.
    VariesBetweenRuns,
    /// No reference solution (a `match` task without an example).
    NoReference,
    /// The task's set-up fails on this machine (or on the variant).
    SetUpFails,
}

/// One task's measurement.
#[derive(Clone, Debug, Serialize)]
pub struct TaskDependence {
    /// The task.
    pub task_id: String,
    /// How its reference answer behaves.
    pub class: Dependence,
    /// What the reference printed on the first plain machine and on the
    /// variant (trimmed; `None` where it did not run).
    pub plain: Option<String>,
    /// See `plain`.
    pub variant: Option<String>,
}

impl OsDomain {
    /// What `t`'s reference solution prints as its check runs it, on a
    /// fresh machine (with `prepare` run first); `Ok(None)` when the set-up
    /// fails.
    fn reference_output(
        &self,
        t: &Task,
        example: &Script,
        prepare: Option<&Script>,
    ) -> Result<Option<String>, EnvError> {
        let Ok(mut m) = self.machine_prepared(t, prepare)? else {
            return Ok(None);
        };
        Ok(Some(
            m.run_script("example", example, &[])?
                .stdout
                .trim()
                .to_string(),
        ))
    }

    /// Measures one task (three machines; see the module's description).
    pub fn dependence(&self, t: &Task) -> Result<TaskDependence, EnvError> {
        let mut out = TaskDependence {
            task_id: t.id.clone(),
            class: Dependence::NoReference,
            plain: None,
            variant: None,
        };
        let Some(example) = &t.example else {
            return Ok(out);
        };
        let variant = Script {
            language: Language::Bash,
            code: SYSTEM_VARIANT.into(),
        };
        let first = self.reference_output(t, example, None)?;
        let second = self.reference_output(t, example, None)?;
        let on_variant = self.reference_output(t, example, Some(&variant))?;
        out.class = match (&first, &second, &on_variant) {
            (Some(a), Some(b), Some(_)) if a != b => Dependence::VariesBetweenRuns,
            (Some(a), Some(_), Some(v)) if a != v => Dependence::DependsOnSystem,
            (Some(_), Some(_), Some(_)) => Dependence::Stable,
            _ => Dependence::SetUpFails,
        };
        out.plain = first;
        out.variant = on_variant;
        Ok(out)
    }
}
