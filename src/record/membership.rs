//! Which processes are the job's beyond its process tree (issue 17): the [`Scope`] a
//! recording follows (the root and its descendants, a container the job started, the job's
//! marker file or Slurm step in a process's environment, an attached cgroup or container),
//! the container id a cgroup path names ([`container_id`]), and how each reason reads in a
//! report. [`super::tree`] applies it to /proc.

/// Which processes are the job's: the descendants of `root` (and `root` itself with
/// `include_root`), and every process a rule below matches, with its descendants. The rules
/// look at processes started while the recording ran (and, for `cgroups`, at every process
/// once at the start).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    pub root: u32,
    pub include_root: bool,
    /// A process whose environment holds one of these `(KEY, VALUE)` sets (every pair of
    /// the set) is the job's: the marker file vramdoc gave the command, the Slurm step.
    pub env: Vec<Vec<(String, String)>>,
    /// A process in a container cgroup (a path component holding a 64-hex container id)
    /// that no process had when the recording started is the job's: a container the job
    /// started (docker, podman, containerd: the runtime, not the CLI, is its parent) ...
    pub new_containers: bool,
    /// ... when its first process started while a member of the job whose `comm` is one of
    /// these ran (a container CLI: `docker`, `podman`, …), or up to one round after it was
    /// last seen. Empty: any time during the recording.
    pub container_clients: Vec<String>,
    /// Processes in these cgroups are the job's (attach: `--cgroup`, `--container`).
    pub cgroups: Vec<CgroupMatch>,
    /// PIDs of vramdoc's own helpers among the root's children (`run`'s output pump):
    /// never the job's, whatever else matches.
    pub helpers: Vec<u32>,
}

/// An attached cgroup.
#[derive(Debug, Clone, PartialEq)]
pub enum CgroupMatch {
    /// A cgroup path as `/proc/PID/cgroup` shows it (`/docker/<id>`), and everything below.
    Path(String),
    /// A container id, or a prefix of at least 12 of its hex digits (as `docker ps` shows).
    Container(String),
}

impl CgroupMatch {
    pub(super) fn matches(&self, path: &str) -> bool {
        match self {
            CgroupMatch::Path(p) => {
                let p = p.trim_end_matches('/');
                path == p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
            }
            CgroupMatch::Container(id) => container_id(path).is_some_and(|c| c.starts_with(id)),
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            CgroupMatch::Path(p) => format!("cgroup {}", crate::term::one_line(p)),
            CgroupMatch::Container(id) => format!("container {}", crate::term::one_line(id)),
        }
    }
}

impl Scope {
    /// The descendants of `root` only.
    pub fn descendants(root: u32) -> Scope {
        Scope {
            root,
            ..Scope::default()
        }
    }

    pub(super) fn has_rules(&self) -> bool {
        !self.env.is_empty() || self.new_containers || !self.cgroups.is_empty()
    }
}

/// The container id a cgroup path names: the last path component holding a run of 64 hex
/// digits (`/docker/<id>`, `/system.slice/docker-<id>.scope`, `cri-containerd-<id>.scope`,
/// `libpod-<id>.scope`, `crio-<id>.scope`, kubepods' `/kubepods/.../pod<uid>/<id>`).
pub fn container_id(path: &str) -> Option<&str> {
    path.rsplit('/').find_map(|comp| {
        let b = comp.as_bytes();
        let mut run = 0;
        for (i, c) in b.iter().enumerate() {
            if c.is_ascii_hexdigit() && !c.is_ascii_uppercase() {
                run += 1;
                let next_hex = b
                    .get(i + 1)
                    .is_some_and(|n| n.is_ascii_hexdigit() && !n.is_ascii_uppercase());
                if run == 64 && !next_hex {
                    return comp.get(i + 1 - 64..=i);
                }
            } else {
                run = 0;
            }
        }
        None
    })
}

/// How an environment rule reads in a report: `environment VRAMDOC_MARKERS`, `Slurm step
/// 12.0`.
pub(super) fn describe_env(set: &[(String, String)]) -> String {
    let get = |k: &str| set.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    match (get("SLURM_JOB_ID"), get("SLURM_STEP_ID")) {
        (Some(j), Some(s)) => format!(
            "Slurm step {}.{}",
            crate::term::one_line(j),
            crate::term::one_line(s)
        ),
        (Some(j), None) => format!("Slurm job {}", crate::term::one_line(j)),
        _ => {
            let keys: Vec<&str> = set.iter().map(|(k, _)| k.as_str()).collect();
            format!("environment {}", keys.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_are_read_from_every_runtime_s_cgroup_shape() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/docker/{id}"),
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods.slice/kubepods-burstable.slice/cri-containerd-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/kubepods/burstable/pod1234-5678/{id}"),
        ] {
            assert_eq!(container_id(&path), Some(id), "{path}");
        }
        for path in [
            "/",
            "/user.slice/user-1000.slice/session-3.scope",
            "/docker/0123456789abcdef",
            &format!("/docker/{}", id.to_uppercase()),
            &format!("/docker/{id}0"),
        ] {
            assert_eq!(container_id(path), None, "{path}");
        }
        let m = CgroupMatch::Path("/kubepods/burstable/".into());
        assert!(m.matches("/kubepods/burstable"));
        assert!(m.matches(&format!("/kubepods/burstable/pod1/{id}")));
        assert!(!m.matches("/kubepods/burstable-2"));
        let c = CgroupMatch::Container(id[..12].into());
        assert!(c.matches(&format!("/system.slice/docker-{id}.scope")));
        assert!(!c.matches("/system.slice/cron.service"));
    }

    #[test]
    fn slurm_steps_are_described_by_job_and_step() {
        let set = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            describe_env(&set(&[("SLURM_JOB_ID", "12"), ("SLURM_STEP_ID", "0")])),
            "Slurm step 12.0"
        );
        assert_eq!(
            describe_env(&set(&[("VRAMDOC_MARKERS", "/tmp/x")])),
            "environment VRAMDOC_MARKERS"
        );
    }
}
