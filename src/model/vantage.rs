//! Where vramdoc stands when it reads the driver (issue 25): its PID namespace, the driver
//! generation that answers, and the GPU device nodes it can open. Established once per
//! command (`crate::inventory::establish_vantage`) and recorded in scan and run reports; the rules in
//! `diagnose/` read it to know what they can conclude from here (docs/findings.md, "needs").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use vramdoc_gpu_spec::driver::{generation_of, DriverGeneration};

/// Which PID namespace vramdoc runs in, and how that was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PidNamespace {
    /// True in the host (initial) PID namespace, where NVML's PIDs are our PIDs.
    pub host: bool,
    /// One line: why we think so.
    pub reason: String,
}

impl PidNamespace {
    pub fn label(&self) -> &'static str {
        if self.host {
            "host"
        } else {
            "container"
        }
    }
}

/// Where vramdoc stands: what its reads of the driver can and cannot show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Vantage {
    pub pid_namespace: PidNamespace,
    /// The driver version the monitor reported, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// What NVML's process lists show a caller outside the host namespace under this driver
    /// ([`generation_of`] the version).
    #[serde(default)]
    pub generation: DriverGeneration,
    /// The GPU device nodes (`nvidiaN`) present where vramdoc runs: the GPUs it can open.
    /// `None` when not looked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_nodes: Option<Vec<String>>,
}

/// What the process lists mean from a vantage (decided by [`Vantage::view`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListView {
    /// Host namespace: every client under its host PID, with usage.
    Host,
    /// Outside the host namespace, a driver that reports host PIDs (before 535.113, or one
    /// that listed PIDs not visible here): every client listed, some not visible here.
    HostPidsInContainer,
    /// Outside the host namespace, a translating driver: only this namespace's processes are
    /// listed; every other tenant's memory is in `used` and in no list. `zero_usage`: their
    /// entries carry 0 bytes (535.113 to 560), so per-process bytes are unknown.
    OwnNamespaceOnly { zero_usage: bool },
    /// Outside the host namespace under a driver of unknown generation: the lists may be
    /// either; nothing beyond them can be concluded.
    Unknown,
}

impl Vantage {
    /// A vantage in namespace `pid_namespace` on a driver of version `driver_version`.
    pub fn new(pid_namespace: PidNamespace, driver_version: Option<String>) -> Vantage {
        let generation = driver_version
            .as_deref()
            .map_or(DriverGeneration::Unknown, generation_of);
        Vantage {
            pid_namespace,
            driver_version,
            generation,
            device_nodes: None,
        }
    }

    /// The facts the driver gives, where not known yet: its version (and so the generation)
    /// and the GPU device nodes present (`nvidiaN` names).
    pub fn with_driver(mut self, driver_version: &str, device_nodes: Vec<String>) -> Vantage {
        if self.driver_version.is_none() && !driver_version.trim().is_empty() {
            self.generation = generation_of(driver_version);
            self.driver_version = Some(driver_version.trim().to_string());
        }
        if self.device_nodes.is_none() {
            self.device_nodes = Some(device_nodes);
        }
        self
    }

    /// Whether vramdoc runs in the host PID namespace.
    pub fn host(&self) -> bool {
        self.pid_namespace.host
    }

    /// What the lists mean from here. `lists_invisible_pid`: NVML listed a PID that does not
    /// exist in this namespace. Where the version gives no generation, that means host PIDs.
    /// Where it says "translated" it does not: a translating driver lists a process of this
    /// namespace that exited while a forked child keeps its context under its (now free)
    /// namespace PID (H200, driver 580.159.04, docs/simulator.md), so the version decides.
    pub fn view(&self, lists_invisible_pid: bool) -> ListView {
        self.view_seen(lists_invisible_pid, false)
    }

    /// [`Vantage::view`], corrected also by `lists_own_usage`: NVML gave a process visible
    /// here more than 0 bytes, which the 535.113–560 drivers never do from a container (a
    /// box whose driver fixed it, or a simulated box read from its own namespace): the lists
    /// carry usage, whatever the version says.
    pub fn view_seen(&self, lists_invisible_pid: bool, lists_own_usage: bool) -> ListView {
        match self.view_by_version(lists_invisible_pid) {
            ListView::OwnNamespaceOnly { zero_usage: true } if lists_own_usage => {
                ListView::OwnNamespaceOnly { zero_usage: false }
            }
            v => v,
        }
    }

    fn view_by_version(&self, lists_invisible_pid: bool) -> ListView {
        if self.host() {
            return ListView::Host;
        }
        match self.generation {
            DriverGeneration::Unknown if lists_invisible_pid => ListView::HostPidsInContainer,
            DriverGeneration::HostPids => ListView::HostPidsInContainer,
            DriverGeneration::TranslatedZeroUsage => {
                ListView::OwnNamespaceOnly { zero_usage: true }
            }
            DriverGeneration::Translated => ListView::OwnNamespaceOnly { zero_usage: false },
            DriverGeneration::Unknown => ListView::Unknown,
        }
    }

    /// One line for the terminal header (the reasons are in the JSON):
    /// `container PID namespace; driver 550.54.15: translated, own entries 0 bytes; nodes …`.
    /// In the host namespace every generation lists host PIDs: the version alone is shown.
    pub fn line(&self) -> String {
        let mut s = format!("{} PID namespace", self.pid_namespace.label());
        match (&self.driver_version, self.host()) {
            (Some(v), true) => s.push_str(&format!("; driver {v}: host PIDs here")),
            (Some(v), false) => s.push_str(&format!("; driver {v}: {}", self.generation.short())),
            (None, _) => s.push_str("; driver version unknown"),
        }
        if let Some(nodes) = &self.device_nodes {
            s.push_str(&format!(
                "; nodes {}",
                if nodes.is_empty() {
                    "none".to_string()
                } else {
                    nodes.join(" ")
                }
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(host: bool) -> PidNamespace {
        PidNamespace {
            host,
            reason: "test".into(),
        }
    }

    #[test]
    fn the_view_follows_namespace_generation_and_what_was_listed() {
        let v = |host: bool, driver: &str, invisible: bool| {
            Vantage::new(ns(host), Some(driver.into())).view(invisible)
        };
        assert_eq!(v(true, "550.54.15", false), ListView::Host);
        assert_eq!(v(true, "550.54.15", true), ListView::Host);
        assert_eq!(v(false, "535.54.03", false), ListView::HostPidsInContainer);
        assert_eq!(
            v(false, "550.54.15", false),
            ListView::OwnNamespaceOnly { zero_usage: true }
        );
        assert_eq!(
            v(false, "570.86.10", false),
            ListView::OwnNamespaceOnly { zero_usage: false }
        );
        // A listed PID that does not exist here: host PIDs where the version says nothing;
        // under a translating driver, a process of this namespace that exited.
        assert_eq!(
            Vantage::new(ns(false), None).view(true),
            ListView::HostPidsInContainer
        );
        assert_eq!(
            v(false, "570.86.10", true),
            ListView::OwnNamespaceOnly { zero_usage: false }
        );
        // Usage listed for a process of this namespace: not the 0-byte generation.
        let seen = Vantage::new(ns(false), Some("550.54.15".into())).view_seen(false, true);
        assert_eq!(seen, ListView::OwnNamespaceOnly { zero_usage: false });
        assert_eq!(Vantage::new(ns(false), None).view(false), ListView::Unknown);
        let line = Vantage::new(ns(false), Some("550.54.15".into())).line();
        assert_eq!(
            line,
            "container PID namespace; driver 550.54.15: translated, own entries 0 bytes"
        );
        let mut host = Vantage::new(ns(true), Some("550.54.15".into()));
        host.device_nodes = Some(vec!["nvidia0".into(), "nvidia1".into()]);
        assert_eq!(
            host.line(),
            "host PID namespace; driver 550.54.15: host PIDs here; nodes nvidia0 nvidia1"
        );
    }
}
