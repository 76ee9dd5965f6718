//! A container's own cgroup, in every cgroup hierarchy mounted (cgroup v2, and on v1 or
//! hybrid hosts each v1 controller hierarchy), as runc places a container: created under the
//! hierarchy's mount point at a runtime-shaped path, the container process joins it before it
//! runs the command, and the directories are removed when it has exited.

use super::ContainerError;
use std::fs;
use std::path::PathBuf;

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount: PathBuf,
    pub v2: bool,
    /// Super options (v1: the controllers, e.g. `rw,memory`).
    pub options: String,
}

/// The cgroup hierarchies mounted in this process's mount namespace (`/proc/self/mountinfo`).
pub fn cgroup_hierarchies() -> Vec<Hierarchy> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let tail: Vec<&str> = right.split(' ').collect();
        let (Some(mount), Some(fstype)) = (fields.get(4), tail.first()) else {
            continue;
        };
        let v2 = *fstype == "cgroup2";
        if !v2 && *fstype != "cgroup" {
            continue;
        }
        let options = tail.get(2).copied().unwrap_or("").to_string();
        // cpuset needs cpus and mems copied into every new child before a task may join:
        // runc does it, and so does `create` below.
        out.push(Hierarchy {
            mount: PathBuf::from(unescape(mount)),
            v2,
            options,
        });
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap_or(b'?');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A container's cgroup directories, one per hierarchy.
#[derive(Debug, Default)]
pub struct Cgroups {
    /// The container's directory in each hierarchy.
    pub dirs: Vec<PathBuf>,
    /// Directories this created (parents first), removed by [`Cgroups::remove`].
    created: Vec<PathBuf>,
}

/// Check a runtime-shaped cgroup path: relative, no `..`, no empty components.
pub fn check_path(rel: &str) -> Result<String, String> {
    let rel = rel.trim().trim_start_matches('/').trim_end_matches('/');
    if rel.is_empty() {
        return Err("empty cgroup path".into());
    }
    if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!(
            "{rel:?}: components must be non-empty names (no `.` or `..`)"
        ));
    }
    Ok(rel.to_string())
}

impl Cgroups {
    /// Create `rel` (relative to each hierarchy's root) in every hierarchy.
    pub fn create(rel: &str) -> Result<Cgroups, ContainerError> {
        let rel = check_path(rel).map_err(ContainerError::Spawn)?;
        let hierarchies = cgroup_hierarchies();
        if hierarchies.is_empty() {
            return Err(ContainerError::Spawn(
                "no cgroup hierarchy is mounted (see /proc/self/mountinfo); use `--cgroup none`"
                    .into(),
            ));
        }
        let mut cg = Cgroups::default();
        for h in &hierarchies {
            let mut dir = h.mount.clone();
            let cpuset = !h.v2 && h.options.split(',').any(|o| o == "cpuset");
            for comp in rel.split('/') {
                let parent = dir.clone();
                dir.push(comp);
                if dir.is_dir() {
                    continue;
                }
                if let Err(e) = fs::create_dir(&dir) {
                    if e.kind() != std::io::ErrorKind::AlreadyExists {
                        cg.remove();
                        return Err(ContainerError::Refused {
                            what: format!("creating cgroup {}", dir.display()),
                            source: e,
                        });
                    }
                    continue;
                }
                cg.created.push(dir.clone());
                if cpuset {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        if let Ok(v) = fs::read(parent.join(f)) {
                            let _ = fs::write(dir.join(f), v);
                        }
                    }
                }
            }
            cg.dirs.push(dir);
        }
        Ok(cg)
    }

    /// Open every `cgroup.procs` for writing (the child writes `0` to join before exec).
    pub fn procs_files(&self) -> Result<Vec<fs::File>, ContainerError> {
        self.dirs
            .iter()
            .map(|d| {
                let p = d.join("cgroup.procs");
                fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map_err(|e| ContainerError::Refused {
                        what: format!("opening {}", p.display()),
                        source: e,
                    })
            })
            .collect()
    }

    /// Remove the directories this created, deepest first (a parent another container still
    /// uses stays).
    pub fn remove(&self) {
        for d in self.created.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }

    /// The directories this created (to remove later with [`remove_dirs`]).
    pub fn created(&self) -> &[PathBuf] {
        &self.created
    }
}

/// Remove cgroup directories recorded earlier, deepest first.
pub fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs.iter().rev() {
        let _ = fs::remove_dir(d);
    }
}
