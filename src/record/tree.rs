//! The job's processes, read from /proc through [`crate::host`]: every descendant of a root
//! PID ever seen (children, grandchildren, short-lived workers, torchrun ranks), plus the
//! processes the [`Scope`]'s membership rules (`super::membership`) add, with their
//! descendants (issue 17: a container the job started, found through its new cgroup; a
//! process carrying the job's marker file or Slurm step in its environment; an attached
//! cgroup or container), each with its parent, `NSpid` (its PID in every nested namespace),
//! redacted command line and why it is the job's; and the matching of NVML PIDs to members
//! across PID namespaces.

use super::membership::describe_env;
pub use super::membership::{container_id, CgroupMatch, Scope};
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
    /// `PYTORCH_CUDA_ALLOC_CONF`, `PYTORCH_ALLOC_CONF` from its environment (redacted), when set and readable.
    pub gpu_env: Vec<(String, String)>,
    /// Why it is the job's when not as a descendant of the root: `cgroup /docker/<id>`,
    /// `environment VRAMDOC_MARKERS`, `Slurm step 12.0`, `attached`. Its own descendants
    /// say `None`.
    pub via: Option<String>,
    /// Its Kubernetes pod (UID and container id from its cgroup; named when the report is
    /// built), when it runs in one.
    pub pod: Option<Box<crate::model::PodRef>>,
    /// The minors of the GPU files in its view of the device directory, and those its v1
    /// device cgroup allows, read once ([`crate::host::devices::access`]; `None`: unknown).
    pub node_minors: Option<Vec<u32>>,
    pub cgroup_minors: Option<Vec<u32>>,
}

/// The environment variables that decide which GPUs a process sees.
pub const GPU_ENV: [&str; 7] = [
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "SLURM_STEP_GPUS",
    "SLURM_JOB_GPUS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
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
    Started(Box<TreeProcess>),
    Exited {
        pid: u32,
        t_ms: f64,
    },
}

/// Every process of the job ever seen (see [`Scope`]).
#[derive(Debug, Default)]
pub struct ProcessTree {
    root: u32,
    include_root: bool,
    scope: Scope,
    /// By PID; a reused PID replaces an ended entry (the ended one moves to `past`).
    live: BTreeMap<u32, TreeProcess>,
    past: Vec<TreeProcess>,
    /// Processes a rule matched: PID → (start time, why).
    joined: BTreeMap<u32, (u64, String)>,
    /// Processes the rules looked at: PID → (start time, comm), read again after an exec.
    checked: HashMap<u32, (u64, Vec<u8>)>,
    /// Clock ticks since boot when the recording started; processes started since are
    /// looked at by the rules.
    since: u64,
    /// Container cgroups some process had when the recording started.
    old_containers: Option<std::collections::HashSet<String>>,
    /// Container cgroups found to be the job's: later processes in them are too.
    job_containers: std::collections::HashSet<String>,
    /// Start times up to this (ticks since boot) are "while a container client of the job
    /// ran" (see [`Scope::container_clients`]).
    client_until: u64,
    /// A container client of the job ran at the previous round.
    client_before: bool,
    /// The driver's device directory, whose GPU files each member's view is read for.
    dev_dir: Option<std::path::PathBuf>,
}

/// The details of a new member, read once: `status` (name, `NSpid`), the command line
/// (redacted) and the GPU variables of its environment (redacted), each through
/// [`crate::host`]. A read that fails (the process exited, another user's environ) leaves
/// its field empty.
fn details(
    pid: u32,
    ppid: u32,
    start_time: u64,
    t_ms: f64,
    via: Option<String>,
    dev_dir: Option<&std::path::Path>,
) -> TreeProcess {
    let (node_minors, cgroup_minors) = host::devices::access(pid, dev_dir, &host::HostFiles::new());
    let status = host::status(pid).ok();
    let nspid = status.as_ref().map(|s| s.nspid.clone()).unwrap_or_default();
    let name = status.map(|s| crate::term::one_line(&crate::term::escape_bytes(&s.name)));
    let cmdline = host::cmdline(pid).ok().filter(|v| !v.is_empty()).map(|v| {
        crate::term::one_line(&crate::redact::redact_cmdline(&crate::term::escape_args(
            &v,
        )))
    });
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
    let pod = crate::pods::cgroup_pod(pid).map(Box::new);
    TreeProcess {
        gpu_env,
        via,
        pod,
        node_minors,
        cgroup_minors,
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
        ProcessTree::with_scope(Scope {
            include_root,
            ..Scope::descendants(root)
        })
    }

    /// Track the processes `scope` makes the job's, from now on.
    pub fn with_scope(scope: Scope) -> ProcessTree {
        ProcessTree {
            root: scope.root,
            include_root: scope.include_root,
            since: host::ticks_since_boot().unwrap_or(0).saturating_sub(1),
            scope,
            ..ProcessTree::default()
        }
    }

    /// Read each member's view of the driver's device files in `dir` (`/dev`, or a
    /// simulated box's `dev`; [`crate::host::devices::dev_dir_of`]).
    pub fn with_dev_dir(mut self, dir: Option<std::path::PathBuf>) -> ProcessTree {
        self.dev_dir = dir;
        self
    }

    /// The environment rule alone: why `pid`'s environment makes it the job's.
    fn env_matches(&self, pid: u32) -> Option<String> {
        if self.scope.env.is_empty() {
            return None;
        }
        let env = host::environ(pid).ok()?;
        self.scope
            .env
            .iter()
            .find(|set| {
                set.iter()
                    .all(|(k, v)| env.get(k).as_deref() == Some(v.as_str()))
            })
            .map(|set| describe_env(set))
    }

    /// Why the rules make `pid` (started at `start`) the job's, reading what they need.
    fn rule_matches(&self, pid: u32, start: u64, first: bool) -> Option<String> {
        let new = start >= self.since;
        if new {
            if let Some(why) = self.env_matches(pid) {
                return Some(why);
            }
        }
        let wants_cgroups = !self.scope.cgroups.is_empty() || self.scope.new_containers;
        // Old processes matter only to an attached cgroup (read once, at the first round).
        if !(wants_cgroups && (new || (first && !self.scope.cgroups.is_empty()))) {
            return None;
        }
        let paths = host::cgroup_paths(pid).ok()?;
        for m in &self.scope.cgroups {
            if paths.iter().any(|p| m.matches(p)) {
                return Some(m.describe());
            }
        }
        if new && self.scope.new_containers {
            let old = self.old_containers.as_ref()?;
            let in_window = self.scope.container_clients.is_empty() || start <= self.client_until;
            if let Some(p) = paths.iter().find(|p| {
                self.job_containers.contains(p.as_str())
                    || (in_window && container_id(p).is_some() && !old.contains(p.as_str()))
            }) {
                return Some(format!("cgroup {}", crate::term::one_line(p)));
            }
        }
        None
    }

    /// Whether a member of the job is a container client now (see
    /// [`Scope::container_clients`]); moves the window of start times accordingly.
    fn watch_clients(&mut self, all: &HashMap<u32, Stat>, members: &[u32]) {
        let clients = &self.scope.container_clients;
        if clients.is_empty() || !self.scope.new_containers {
            return;
        }
        let now = members.iter().any(|p| {
            all.get(p)
                .is_some_and(|e| !e.is_exited() && clients.iter().any(|c| c.as_bytes() == e.comm))
        });
        if now || self.client_before {
            self.client_until = host::ticks_since_boot().unwrap_or(u64::MAX);
        }
        self.client_before = now;
    }

    /// The root (with `include_root`), the processes the rules joined, and their
    /// descendants.
    fn members_from(
        &self,
        all: &HashMap<u32, Stat>,
        children: &HashMap<u32, Vec<u32>>,
    ) -> Vec<u32> {
        let mut members: Vec<u32> = Vec::new();
        let mut stack = vec![self.root];
        if self.include_root && all.contains_key(&self.root) {
            members.push(self.root);
        }
        for pid in self.joined.keys() {
            if all.contains_key(pid) && !members.contains(pid) {
                members.push(*pid);
                stack.push(*pid);
            }
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
        members
    }

    /// Apply the rules to the processes that are not `members` and were not looked at yet
    /// (or exec'd since); remembers matches in `joined`. Whether any joined.
    fn apply_rules(&mut self, all: &HashMap<u32, Stat>, members: &[u32]) -> bool {
        if !self.scope.has_rules() {
            return false;
        }
        let before = self.joined.len();
        let first = self.old_containers.is_none();
        if first {
            // The container cgroups of processes older than the recording are not the job's
            // (a container the job started before this first round is).
            let mut old = std::collections::HashSet::new();
            if self.scope.new_containers {
                let own = [self.root, std::process::id()];
                let older = all
                    .iter()
                    .filter(|(pid, e)| e.start_time < self.since || own.contains(pid));
                for (pid, _) in older {
                    for p in host::cgroup_paths(*pid).unwrap_or_default() {
                        if container_id(&p).is_some() {
                            old.insert(p);
                        }
                    }
                }
            }
            self.old_containers = Some(old);
        }
        self.checked.retain(|pid, _| all.contains_key(pid));
        self.joined
            .retain(|pid, (st, _)| all.get(pid).is_some_and(|e| e.start_time == *st));
        let members: std::collections::HashSet<u32> = members.iter().copied().collect();
        let (now, young) = (
            host::ticks_since_boot().unwrap_or(u64::MAX),
            2 * host::ticks_per_second(),
        );
        for (pid, e) in all {
            // Joined through its cgroup between its fork and its exec (a runtime moves the
            // process first): after the exec its environment may say more.
            let execd = self
                .checked
                .get(pid)
                .is_some_and(|(st, comm)| *st == e.start_time && *comm != e.comm);
            if let Some((st, via)) = self.joined.get(pid) {
                let young = e.start_time.saturating_add(young) >= now;
                if (execd || young) && *st == e.start_time && !via.starts_with("environment ") {
                    let st = *st;
                    self.checked.insert(*pid, (e.start_time, e.comm.clone()));
                    if let Some(why) = self.env_matches(*pid) {
                        self.joined.insert(*pid, (st, why));
                    }
                }
                continue;
            }
            if e.is_exited() || *pid == self.root || members.contains(pid) {
                continue;
            }
            if !first && e.start_time < self.since {
                continue;
            }
            // Looked at already, and not young: a process moved into its container's cgroup
            // just after its fork (runtimes do) is looked at again for its first seconds.
            let seen = self
                .checked
                .get(pid)
                .is_some_and(|(st, comm)| *st == e.start_time && *comm == e.comm);
            if seen && e.start_time.saturating_add(young) < now {
                continue;
            }
            self.checked.insert(*pid, (e.start_time, e.comm.clone()));
            if let Some(via) = self.rule_matches(*pid, e.start_time, first) {
                if let Some(path) = via.strip_prefix("cgroup ") {
                    if self.scope.new_containers {
                        self.job_containers.insert(path.to_string());
                    }
                }
                self.joined.insert(*pid, (e.start_time, via));
            }
        }
        self.joined.len() != before
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
        let mut members = self.members_from(&all, &children);
        self.watch_clients(&all, &members);
        if self.apply_rules(&all, &members) {
            members = self.members_from(&all, &children);
        }
        // A rule-joined member whose reason changed (its environment seen after its exec).
        for (pid, (st, why)) in &self.joined {
            if let Some(tp) = self.live.get_mut(pid) {
                if tp.start_time == *st && tp.via.as_ref().is_some_and(|v| v != why) {
                    tp.via = Some(why.clone());
                }
            }
        }
        let member_set: std::collections::HashSet<u32> = members.iter().copied().collect();
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
                    if tp.name.as_deref()
                        != Some(crate::term::one_line(&crate::term::escape_bytes(&e.comm)).as_str())
                    {
                        // A rule-joined process keeps its rule (updated by the exec).
                        let via = tp.via.take().map(|v| {
                            self.joined
                                .get(&pid)
                                .filter(|(st, _)| *st == e.start_time)
                                .map_or(v, |(_, j)| j.clone())
                        });
                        *tp = details(
                            pid,
                            e.ppid,
                            e.start_time,
                            tp.start_ms,
                            via,
                            self.dev_dir.as_deref(),
                        );
                        changes.push(TreeChange::Started(Box::new(tp.clone())));
                    }
                    continue;
                }
            }
            // A member's child is the job's as a descendant, whatever rule it also matches.
            let parent_is_member = member_set.contains(&e.ppid);
            changes.extend(self.add(pid, e.ppid, e.start_time, t_ms, parent_is_member));
        }
        changes
    }

    fn add(
        &mut self,
        pid: u32,
        ppid: u32,
        start_time: u64,
        t_ms: f64,
        parent_is_member: bool,
    ) -> Option<TreeChange> {
        if let Some(old) = self.live.get(&pid) {
            if old.start_time == start_time && old.end_ms.is_none() {
                return None;
            }
        }
        let via = if self.include_root && pid == self.root {
            Some("attached".to_string())
        } else if parent_is_member || ppid == self.root {
            None
        } else {
            self.joined
                .get(&pid)
                .filter(|(st, _)| *st == start_time)
                .map(|(_, v)| v.clone())
        };
        let tp = details(pid, ppid, start_time, t_ms, via, self.dev_dir.as_deref());
        if let Some(old) = self.live.insert(pid, tp.clone()) {
            self.past.push(old);
        }
        Some(TreeChange::Started(Box::new(tp)))
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
            if e.ppid == self.root || self.joined.contains_key(&e.ppid) {
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
            let parent_is_member = self.live.get(&ppid).is_some_and(|t| t.end_ms.is_none());
            let change = self.add(nvml_pid, ppid, start, t_ms, parent_is_member);
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
    pub fn live(&self) -> Vec<TreeProcess> {
        self.live
            .values()
            .filter(|t| t.end_ms.is_none())
            .cloned()
            .collect()
    }

    /// PIDs of the members not yet seen to end.
    pub fn live_pids(&self) -> Vec<u32> {
        self.live
            .values()
            .filter(|t| t.end_ms.is_none())
            .map(|t| t.pid)
            .collect()
    }

    /// Mark the live member `pid` ended at `t_ms`, when its parent reaped it then (vramdoc
    /// reaping the command: its exit is known to the millisecond, not at the next refresh).
    pub fn ended(&mut self, pid: u32, t_ms: f64) -> Option<TreeChange> {
        let tp = self.live.get_mut(&pid).filter(|tp| tp.end_ms.is_none())?;
        tp.end_ms = Some(t_ms);
        Some(TreeChange::Exited { pid, t_ms })
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
        // (Other tests of this process start children too: use this test's own.)
        let mut nested = tree.all().into_iter().find(|t| t.pid == sleep_pid).unwrap();
        nested.pid = sleep_pid;
        nested.nspid = vec![sleep_pid, 1];
        tree.live.insert(sleep_pid, nested);
        assert_eq!(tree.resolve(1, 2.0).0, Some(sleep_pid), "NSpid match");
        unsafe { libc::kill(sleep_pid as i32, libc::SIGKILL) };
        let _ = child.wait();
        tree.refresh(3.0);
        let sh = child.id();
        assert!(tree
            .all()
            .iter()
            .filter(|t| t.pid == sh || t.pid == sleep_pid)
            .all(|t| t.end_ms == Some(3.0)));
    }

    /// A member reaped by its parent is ended at that time, once (a later refresh or a
    /// second call changes nothing); a PID that is no member is left alone.
    #[test]
    fn a_reaped_member_ends_when_it_was_reaped() {
        let me = std::process::id();
        let mut tree = ProcessTree::new(me, true);
        tree.refresh(1.0);
        assert!(tree.live_pids().contains(&me), "the root, included");
        assert_eq!(
            tree.ended(me, 5.0),
            Some(TreeChange::Exited { pid: me, t_ms: 5.0 })
        );
        assert_eq!(tree.ended(me, 6.0), None, "ended once");
        assert!(tree
            .all()
            .iter()
            .any(|t| t.pid == me && t.end_ms == Some(5.0)));
        assert_eq!(tree.ended(u32::MAX, 7.0), None);
    }

    /// A process outside the root's tree that carries the job's variable is the job's, with
    /// why; its child is the job's as a descendant; a process without it is not.
    #[test]
    fn a_process_carrying_the_job_s_variable_joins_with_its_descendants() {
        let token = format!("token-{}", std::process::id());
        let mut tree = ProcessTree::with_scope(Scope {
            env: vec![vec![("VRAMDOC_TREE_TEST".into(), token.clone())]],
            ..Scope::descendants(u32::MAX)
        });
        let mut with = std::process::Command::new("sh")
            .args(["-c", "tail -f /dev/null & wait"])
            .env("VRAMDOC_TREE_TEST", &token)
            .spawn()
            .unwrap();
        let mut without = std::process::Command::new("tail")
            .args(["-f", "/dev/null"])
            .spawn()
            .unwrap();
        let (sh, other) = (with.id(), without.id());
        let mut all = Vec::new();
        for _ in 0..200 {
            tree.refresh(1.0);
            all = tree.all();
            if all.iter().any(|t| t.name.as_deref() == Some("tail")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = without.kill();
        let _ = without.wait();
        let sleep = all
            .iter()
            .find(|t| t.name.as_deref() == Some("tail"))
            .cloned();
        if let Some(s) = &sleep {
            unsafe { libc::kill(s.pid as i32, libc::SIGKILL) };
        }
        let _ = with.wait();
        let me = all.iter().find(|t| t.pid == sh).expect("sh joined");
        assert_eq!(me.via.as_deref(), Some("environment VRAMDOC_TREE_TEST"));
        let sleep = sleep.expect("its child too (tail)");
        assert_eq!(sleep.ppid, Some(sh));
        assert_eq!(sleep.via, None, "a member's child is a descendant");
        assert!(all.iter().all(|t| t.pid != other), "{all:?}");
    }
}
