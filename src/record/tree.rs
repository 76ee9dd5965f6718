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
    /// Where `NVIDIA_VISIBLE_DEVICES` names a directory (the device plugin's volume-mounts
    /// strategy), the device IDs mounted there, read once (`None`: no such directory, or
    /// unreadable).
    pub mounted_device_ids: Option<Vec<String>>,
    /// When `name` was last read from the process itself (alive, same start time).
    pub name_ms: f64,
    /// `name` was read after the process ended (its zombie, before it was reaped): its
    /// final name, whatever it exec'd before.
    pub name_final: bool,
    /// When a process list first named it.
    pub listed_ms: Option<f64>,
}

/// The value of `key` among the variables read of a process ([`GPU_ENV`]).
fn env_of(vars: &[(String, String)], key: &str) -> Option<String> {
    vars.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
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
    /// Process `pid` with nothing else known (no parent, name, environment or times): the
    /// start of a test's member, its other fields set with `..TreeProcess::bare(pid)`.
    #[cfg(test)]
    pub(crate) fn bare(pid: u32) -> TreeProcess {
        TreeProcess {
            pid,
            ppid: None,
            nspid: Vec::new(),
            name: None,
            cmdline: None,
            start_time: 0,
            start_ms: 0.0,
            end_ms: None,
            gpu_env: Vec::new(),
            via: None,
            pod: None,
            node_minors: None,
            cgroup_minors: None,
            mounted_device_ids: None,
            name_ms: 0.0,
            name_final: false,
            listed_ms: None,
        }
    }

    /// Whether this is the process a line's prefix names as `pid` (its PID here, or in its
    /// own namespace).
    pub fn named_by(&self, pid: u32) -> bool {
        self.pid == pid || self.nspid.last() == Some(&pid)
    }

    /// Its name where it can be vouched for (issue 39): read when a process list named it
    /// or later (a name read before may be the one of a program it then exec'd away
    /// from, `bash` before `exec python3`), or after it ended; `None`: unknown.
    pub fn known_name(&self) -> Option<&str> {
        let current = self.name_final || self.listed_ms.is_none_or(|l| self.name_ms >= l);
        self.name.as_deref().filter(|_| current)
    }

    /// The value of one of [`GPU_ENV`].
    pub fn env(&self, key: &str) -> Option<String> {
        env_of(&self.gpu_env, key)
    }

    /// Its [`crate::model::GpuEnv`], as the recording keeps it.
    pub fn gpu_env(&self) -> crate::model::GpuEnv {
        crate::model::GpuEnv {
            mounted_device_ids: self.mounted_device_ids.clone(),
            node_minors: self.node_minors.clone(),
            cgroup_minors: self.cgroup_minors.clone(),
            ..crate::model::GpuEnv::from_vars(|k| self.env(k))
        }
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
    let gpu_env: Vec<(String, String)> = host::environ(pid)
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
    let mounted_device_ids = crate::model::GpuEnv::from_vars(|k| env_of(&gpu_env, k))
        .mount_dir()
        .and_then(|dir| host::container::dir_entries(pid, dir).ok());
    let pod = crate::pods::cgroup_pod(pid).map(Box::new);
    TreeProcess {
        gpu_env,
        via,
        pod,
        node_minors,
        cgroup_minors,
        mounted_device_ids,
        pid,
        ppid: Some(ppid),
        nspid,
        name,
        cmdline,
        start_time,
        start_ms: t_ms,
        end_ms: None,
        name_ms: t_ms,
        name_final: false,
        listed_ms: None,
    }
}

/// `comm` as a report shows it.
fn shown_name(comm: &[u8]) -> String {
    crate::term::one_line(&crate::term::escape_bytes(comm))
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
        let helper = |pid: &u32| self.scope.helpers.contains(pid);
        for pid in self.joined.keys().filter(|p| !helper(p)) {
            if all.contains_key(pid) && !members.contains(pid) {
                members.push(*pid);
                stack.push(*pid);
            }
        }
        while let Some(p) = stack.pop() {
            if let Some(kids) = children.get(&p) {
                for k in kids {
                    if *k != self.root && !helper(k) && !members.contains(k) {
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
            if e.is_exited()
                || *pid == self.root
                || members.contains(pid)
                || self.scope.helpers.contains(pid)
            {
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
                // A zombie still has its last name: the final one.
                if let Some(e) = all
                    .get(&pid)
                    .filter(|e| e.is_exited() && e.start_time == tp.start_time)
                {
                    tp.name = Some(shown_name(&e.comm));
                    tp.name_final = true;
                }
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
                    if tp.name.as_deref() == Some(shown_name(&e.comm).as_str()) {
                        tp.name_ms = tp.name_ms.max(t_ms);
                    } else {
                        // A rule-joined process keeps its rule (updated by the exec).
                        let via = tp.via.take().map(|v| {
                            self.joined
                                .get(&pid)
                                .filter(|(st, _)| *st == e.start_time)
                                .map_or(v, |(_, j)| j.clone())
                        });
                        let listed_ms = tp.listed_ms;
                        *tp = TreeProcess {
                            name_ms: t_ms,
                            listed_ms,
                            ..details(
                                pid,
                                e.ppid,
                                e.start_time,
                                tp.start_ms,
                                via,
                                self.dev_dir.as_deref(),
                            )
                        };
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
        if self.scope.helpers.contains(&pid) {
            return None;
        }
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
        let (member, change) = self.resolve_pid(nvml_pid, t_ms);
        if let Some(tp) = member.and_then(|m| self.live.get_mut(&m)) {
            tp.listed_ms.get_or_insert(t_ms);
        }
        (member, change)
    }

    fn resolve_pid(&mut self, nvml_pid: u32, t_ms: f64) -> (Option<u32>, Option<TreeChange>) {
        if self.include_root && nvml_pid == self.root {
            return (Some(nvml_pid), None);
        }
        if let Some(tp) = self.live.get_mut(&nvml_pid) {
            let now = host::stat(nvml_pid).ok();
            let same = now.as_ref().filter(|e| e.start_time == tp.start_time);
            if tp.end_ms.is_none() {
                // Seen by the list: its name now (a program it exec'd since the last refresh).
                if let Some(e) = same.filter(|e| !e.is_exited()) {
                    if tp.name.as_deref() != Some(shown_name(&e.comm).as_str()) {
                        let (listed_ms, via) = (tp.listed_ms, tp.via.clone());
                        *tp = TreeProcess {
                            name_ms: t_ms,
                            listed_ms,
                            ..details(
                                nvml_pid,
                                e.ppid,
                                e.start_time,
                                tp.start_ms,
                                via,
                                self.dev_dir.as_deref(),
                            )
                        };
                        let change = TreeChange::Started(Box::new(tp.clone()));
                        return (Some(nvml_pid), Some(change));
                    }
                    tp.name_ms = tp.name_ms.max(t_ms);
                }
                return (Some(nvml_pid), None);
            }
            // An ended member NVML still lists (its memory kept by a descriptor another
            // process inherited: issue 37), while its PID names no other process.
            if same.is_some() || now.is_none() {
                return (Some(nvml_pid), None);
            }
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
    /// The root's child `pid` was just started by the root (the command `run` spawned):
    /// the job's from now on, whether or not a refresh ever sees it alive (issue 37: a
    /// command that exits before the first round). Its name is read again when a list
    /// names it, at each refresh while it runs and as it ends ([`ProcessTree::ending`]).
    pub fn spawned(&mut self, pid: u32, t_ms: f64) -> Option<TreeChange> {
        let e = host::stat(pid).ok()?;
        self.add(pid, e.ppid, e.start_time, t_ms, false)
    }

    /// The member `pid` has ended and is about to be reaped (a zombie of vramdoc's): its
    /// final name, read now.
    pub fn ending(&mut self, pid: u32) {
        let Some(tp) = self.live.get_mut(&pid) else {
            return;
        };
        if let Some(e) = host::stat(pid)
            .ok()
            .filter(|e| e.is_exited() && e.start_time == tp.start_time)
        {
            tp.name = Some(shown_name(&e.comm));
            tp.name_final = true;
        }
    }

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
#[path = "tree_tests.rs"]
mod tests;
