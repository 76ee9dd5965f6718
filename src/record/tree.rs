//! The job's process tree, read from /proc through [`crate::host`]: every descendant of a
//! root PID ever seen (children, grandchildren, short-lived workers, torchrun ranks), with its
//! parent, `NSpid` (its PID in every nested namespace) and redacted command line, and the
//! matching of NVML PIDs to tree members across PID namespaces.

use crate::host::{self, Stat};
use std::collections::{BTreeMap, HashMap};

/// One process of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeProcess {
    pub pid: u32,
    pub ppid: Option<u32>,
    /// PID in each namespace, outermost (vramdoc's) first; empty when unknown.
    pub nspid: Vec<u32>,
    pub name: Option<String>,
    /// Redacted command line.
    pub cmdline: Option<String>,
    /// Kernel start time (clock ticks since boot), to tell a reused PID from the process.
    pub start_time: u64,
    pub start_ms: f64,
    pub end_ms: Option<f64>,
    /// `CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`, `NVIDIA_VISIBLE_DEVICES`,
    /// `PYTORCH_CUDA_ALLOC_CONF` from its environment (redacted), when set and readable.
    pub gpu_env: Vec<(String, String)>,
}

/// The environment variables that decide which GPUs a process sees, and how PyTorch's
/// caching allocator is configured (read before suggesting `expandable_segments`).
pub const GPU_ENV: [&str; 4] = [
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
];

impl TreeProcess {
    /// The value of one of [`GPU_ENV`].
    pub fn env(&self, key: &str) -> Option<String> {
        self.gpu_env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }
}

/// A change in the tree, for the JSONL stream.
#[derive(Debug, Clone, PartialEq)]
pub enum TreeChange {
    /// First seen; again (same PID and start) when a fork seen before its exec is re-read.
    Started(TreeProcess),
    Exited {
        pid: u32,
        t_ms: f64,
    },
}

/// Every process ever seen below `root` (the root itself excluded unless `include_root`).
#[derive(Debug, Default)]
pub struct ProcessTree {
    root: u32,
    include_root: bool,
    /// By PID; a reused PID replaces an ended entry (the ended one moves to `past`).
    live: BTreeMap<u32, TreeProcess>,
    past: Vec<TreeProcess>,
}

/// The details of a new member, read once: `status` (name, `NSpid`), the command line
/// (redacted) and the GPU variables of its environment (redacted), each through
/// [`crate::host`]. A read that fails (the process exited, another user's environ) leaves
/// its field empty.
fn details(pid: u32, ppid: u32, start_time: u64, t_ms: f64) -> TreeProcess {
    let status = host::status(pid).ok();
    let nspid = status.as_ref().map(|s| s.nspid.clone()).unwrap_or_default();
    let name = status.map(|s| crate::term::one_line(&s.name));
    let cmdline = host::cmdline(pid)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| crate::term::one_line(&crate::redact::redact_cmdline(&v)));
    let gpu_env = host::environ(pid)
        .map(|env| {
            GPU_ENV
                .iter()
                .filter_map(|k| {
                    let v = crate::redact::redact_env(k, &env.get(k)?)?;
                    Some((k.to_string(), crate::term::one_line(&v)))
                })
                .collect()
        })
        .unwrap_or_default();
    TreeProcess {
        gpu_env,
        pid,
        ppid: Some(ppid),
        nspid,
        name,
        cmdline,
        start_time,
        start_ms: t_ms,
        end_ms: None,
    }
}

impl ProcessTree {
    /// Track the descendants of `root`; with `include_root`, `root` itself too.
    pub fn new(root: u32, include_root: bool) -> ProcessTree {
        ProcessTree {
            root,
            include_root,
            ..ProcessTree::default()
        }
    }

    /// Read /proc once: add new descendants, end the ones gone (or zombies). Returns the
    /// changes. Unreadable entries are skipped (a process can vanish mid-scan).
    pub fn refresh(&mut self, t_ms: f64) -> Vec<TreeChange> {
        let all: HashMap<u32, Stat> = host::pids()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|pid| Some((pid, host::stat(pid).ok()?)))
            .collect();
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (pid, e) in &all {
            children.entry(e.ppid).or_default().push(*pid);
        }
        let mut members: Vec<u32> = Vec::new();
        let mut stack = vec![self.root];
        if self.include_root && all.contains_key(&self.root) {
            members.push(self.root);
        }
        while let Some(p) = stack.pop() {
            if let Some(kids) = children.get(&p) {
                for k in kids {
                    if *k != self.root && !members.contains(k) {
                        members.push(*k);
                        stack.push(*k);
                    }
                }
            }
        }
        let mut changes = Vec::new();
        // Ended: gone, a zombie, or the PID now names another process.
        let ended: Vec<u32> = self
            .live
            .iter()
            .filter(|(pid, tp)| {
                tp.end_ms.is_none()
                    && all
                        .get(pid)
                        .is_none_or(|e| e.is_exited() || e.start_time != tp.start_time)
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in ended {
            if let Some(tp) = self.live.get_mut(&pid) {
                tp.end_ms = Some(t_ms);
                changes.push(TreeChange::Exited { pid, t_ms });
            }
        }
        for pid in members {
            let Some(e) = all.get(&pid) else { continue };
            if e.is_exited() {
                continue;
            }
            // A fork seen before its exec: same process, new program; read it again.
            if let Some(tp) = self.live.get_mut(&pid) {
                if tp.start_time == e.start_time && tp.end_ms.is_none() {
                    if tp.name.as_deref() != Some(crate::term::one_line(&e.comm).as_str()) {
                        *tp = details(pid, e.ppid, e.start_time, tp.start_ms);
                        changes.push(TreeChange::Started(tp.clone()));
                    }
                    continue;
                }
            }
            changes.extend(self.add(pid, e.ppid, e.start_time, t_ms));
        }
        changes
    }

    fn add(&mut self, pid: u32, ppid: u32, start_time: u64, t_ms: f64) -> Option<TreeChange> {
        if let Some(old) = self.live.get(&pid) {
            if old.start_time == start_time && old.end_ms.is_none() {
                return None;
            }
        }
        let tp = details(pid, ppid, start_time, t_ms);
        if let Some(old) = self.live.insert(pid, tp.clone()) {
            self.past.push(old);
        }
        Some(TreeChange::Started(tp))
    }

    /// Whether `pid` (a PID of vramdoc's namespace) descends from the root now, by walking
    /// its parents; used for NVML PIDs of workers too short-lived for the periodic scan.
    fn descends(&self, pid: u32) -> Option<(u32, u64)> {
        let mut cur = pid;
        let mut first: Option<(u32, u64)> = None;
        for _ in 0..64 {
            let e = host::stat(cur).ok()?;
            if first.is_none() {
                if e.is_exited() {
                    return None;
                }
                first = Some((e.ppid, e.start_time));
            }
            if e.ppid == self.root {
                return first;
            }
            if e.ppid <= 1 {
                return None;
            }
            cur = e.ppid;
        }
        None
    }

    /// The tree member an NVML PID names, if any: the same PID in vramdoc's namespace, else a
    /// live descendant not yet seen (added now), else a member whose `NSpid` lists it (the
    /// job runs in a nested PID namespace and the driver reports its inner PID). PIDs of
    /// processes outside the tree give `None`.
    pub fn resolve(&mut self, nvml_pid: u32, t_ms: f64) -> (Option<u32>, Option<TreeChange>) {
        if self.include_root && nvml_pid == self.root {
            return (Some(nvml_pid), None);
        }
        if self
            .live
            .get(&nvml_pid)
            .is_some_and(|tp| tp.end_ms.is_none())
        {
            return (Some(nvml_pid), None);
        }
        if let Some((ppid, start)) = self.descends(nvml_pid) {
            let change = self.add(nvml_pid, ppid, start, t_ms);
            return (Some(nvml_pid), change);
        }
        // A member in a nested PID namespace, reported by its inner PID. Inner PIDs are small
        // and nearly always also name some process here (1, 2, ...), so a member's NSpid
        // wins over that unrelated process.
        if let Some(tp) = self
            .live
            .values()
            .find(|tp| tp.end_ms.is_none() && tp.nspid.iter().skip(1).any(|n| *n == nvml_pid))
        {
            return (Some(tp.pid), None);
        }
        (None, None)
    }

    /// Every process ever seen, in start order.
    pub fn all(&self) -> Vec<TreeProcess> {
        let mut v: Vec<TreeProcess> = self
            .past
            .iter()
            .chain(self.live.values())
            .cloned()
            .collect();
        v.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms).then(a.pid.cmp(&b.pid)));
        v
    }

    /// Members not yet seen to end.
    pub fn live_pids(&self) -> Vec<u32> {
        self.live
            .values()
            .filter(|t| t.end_ms.is_none())
            .map(|t| t.pid)
            .collect()
    }

    /// Mark every live member ended at `t_ms` (the recording stops).
    pub fn end_all(&mut self, t_ms: f64) {
        for tp in self.live.values_mut() {
            if tp.end_ms.is_none() && !host::is_alive(tp.pid, tp.start_time) {
                tp.end_ms = Some(t_ms);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_children_and_grandchildren_and_their_exit() {
        // sh -> sleep (grandchild of the test process through sh).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let me = std::process::id();
        let mut tree = ProcessTree::new(me, false);
        let mut names = Vec::new();
        for _ in 0..100 {
            tree.refresh(1.0);
            names = tree.all().into_iter().filter_map(|t| t.name).collect();
            if names.iter().any(|n| n == "sleep") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(names.iter().any(|n| n == "sh"), "{names:?}");
        assert!(names.iter().any(|n| n == "sleep"), "{names:?}");
        let sleep_pid = tree
            .all()
            .into_iter()
            .find(|t| t.name.as_deref() == Some("sleep"))
            .unwrap()
            .pid;
        assert_eq!(tree.resolve(sleep_pid, 2.0).0, Some(sleep_pid));
        assert_eq!(tree.resolve(1, 2.0).0, None, "init is not in the tree");
        // A member in a nested namespace, reported by its inner PID 1.
        let mut nested = tree.all()[0].clone();
        nested.pid = sleep_pid;
        nested.nspid = vec![sleep_pid, 1];
        tree.live.insert(sleep_pid, nested);
        assert_eq!(tree.resolve(1, 2.0).0, Some(sleep_pid), "NSpid match");
        unsafe { libc::kill(sleep_pid as i32, libc::SIGKILL) };
        let _ = child.wait();
        tree.refresh(3.0);
        assert!(tree.all().iter().all(|t| t.end_ms == Some(3.0)));
    }
}
