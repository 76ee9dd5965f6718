//! The worker: runs a plan's steps through a [`Driver`] in its own process, so its PID,
//! environment and crash are real. It models the framework on top of CUDA: tagged tensors,
//! named caching allocators (freed blocks kept and reused only by requests that fit), and
//! process groups that own tensors until destroyed.

use super::protocol::{WorkerEvent, WorkerInput};
use crate::backend::{self, Backend};
use crate::gpu::{self, AllocId, ContextId, Driver, GpuError};
use crate::model::StepErrorKind;
use crate::scenario::{Op, SizeSpec};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};

#[derive(Debug, Clone, Copy)]
struct Block {
    alloc: AllocId,
    ordinal: u32,
    bytes: u64,
}

#[derive(Debug)]
struct Tensor {
    block: Block,
    allocator: Option<String>,
    group: Option<String>,
}

#[derive(Default)]
struct Group {
    buffers: Vec<Block>,
    /// Tensors the user deleted that the group still references.
    owned: Vec<Tensor>,
}

/// Framework state of one worker.
struct Framework {
    driver: Box<dyn Driver>,
    contexts: HashMap<u32, ContextId>,
    /// UUID of the device behind each ordinal with a context.
    uuids: HashMap<u32, String>,
    tensors: BTreeMap<String, Tensor>,
    /// Cached free blocks per allocator name.
    caches: BTreeMap<String, Vec<Block>>,
    groups: BTreeMap<String, Group>,
    /// The smallest total among the scenario's devices, as the parent read it (0: unknown).
    smallest: u64,
}

#[derive(Debug, thiserror::Error)]
enum StepFailure {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("{0}")]
    Plan(String),
}

impl Framework {
    fn context(&mut self, ordinal: u32) -> Result<ContextId, GpuError> {
        if let Some(c) = self.contexts.get(&ordinal) {
            return Ok(*c);
        }
        let c = self.driver.create_context(ordinal)?;
        self.contexts.insert(ordinal, c);
        if let Ok(uuid) = self.driver.device_uuid(ordinal) {
            self.uuids.insert(ordinal, uuid);
        }
        Ok(c)
    }

    /// `(ordinal, bytes held)` for every ordinal with a context.
    fn held_per_ordinal(&self) -> Vec<(u32, u64)> {
        let mut o: Vec<u32> = self.contexts.keys().copied().collect();
        o.sort_unstable();
        o.into_iter().map(|o| (o, self.held_on(o))).collect()
    }

    /// `(ordinal, UUID)` of every context, by ordinal.
    fn context_uuids(&self) -> Vec<(u32, String)> {
        let mut v: Vec<(u32, String)> = self.uuids.iter().map(|(o, u)| (*o, u.clone())).collect();
        v.sort();
        v
    }

    fn total(&mut self, ordinal: u32) -> Result<u64, GpuError> {
        let ctx = self.context(ordinal)?;
        Ok(self.driver.mem_info(ctx)?.1)
    }

    /// Bytes of `size` for a step on `ordinal`. A named size given as a fraction refers to
    /// the smallest of the scenario's devices as the parent read it (the parent sees every
    /// device; this process may see fewer under `CUDA_VISIBLE_DEVICES`), else to the step's
    /// own device.
    fn bytes_of(&mut self, size: &SizeSpec, ordinal: u32) -> Result<u64, GpuError> {
        let total = self.total(ordinal)?;
        let smallest = if self.smallest > 0 {
            self.smallest
        } else {
            total
        };
        Ok(size.resolve(total, smallest, 0))
    }

    fn raw_alloc(&mut self, ordinal: u32, bytes: u64) -> Result<Block, GpuError> {
        let ctx = self.context(ordinal)?;
        let alloc = self.driver.alloc(ctx, bytes)?;
        Ok(Block {
            alloc,
            ordinal,
            bytes,
        })
    }

    /// A block from `allocator`'s cache (the smallest that fits) or a new one.
    fn cached_alloc(
        &mut self,
        allocator: &str,
        ordinal: u32,
        bytes: u64,
    ) -> Result<Block, GpuError> {
        let cache = self.caches.entry(allocator.to_string()).or_default();
        let best = cache
            .iter()
            .enumerate()
            .filter(|(_, b)| b.ordinal == ordinal && b.bytes >= bytes)
            .min_by_key(|(_, b)| b.bytes)
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(cache.swap_remove(i));
        }
        self.raw_alloc(ordinal, bytes)
    }

    fn release(&mut self, t: Tensor) -> Result<(), GpuError> {
        match t.allocator {
            Some(a) => {
                self.caches.entry(a).or_default().push(t.block);
                Ok(())
            }
            None => self.driver.free(t.block.alloc),
        }
    }

    fn held(&self) -> u64 {
        let tensors: u64 = self.tensors.values().map(|t| t.block.bytes).sum();
        let cached: u64 = self.caches.values().flatten().map(|b| b.bytes).sum();
        let groups: u64 = self
            .groups
            .values()
            .map(|g| {
                g.buffers.iter().map(|b| b.bytes).sum::<u64>()
                    + g.owned.iter().map(|t| t.block.bytes).sum::<u64>()
            })
            .sum();
        tensors + cached + groups
    }

    fn held_on(&self, ordinal: u32) -> u64 {
        let on = |b: &Block| if b.ordinal == ordinal { b.bytes } else { 0 };
        self.tensors.values().map(|t| on(&t.block)).sum::<u64>()
            + self.caches.values().flatten().map(on).sum::<u64>()
            + self
                .groups
                .values()
                .map(|g| {
                    g.buffers.iter().map(on).sum::<u64>()
                        + g.owned.iter().map(|t| on(&t.block)).sum::<u64>()
                })
                .sum::<u64>()
    }

    fn fill(&mut self, block: Block, value: u32) -> Result<u64, StepFailure> {
        let sum = self.driver.fill(block.alloc, value)?;
        let expected = gpu::expected_checksum(block.bytes, value);
        if sum != expected {
            return Err(StepFailure::Plan(format!(
                "fill kernel checksum {sum} != expected {expected}: device memory was not written"
            )));
        }
        Ok(sum)
    }

    /// Run one op; returns (bytes asked for, checksum).
    fn run(&mut self, op: &Op) -> Result<(Option<u64>, Option<u64>), StepFailure> {
        match op {
            Op::Context { device } => {
                self.context(*device)?;
                Ok((None, None))
            }
            Op::Alloc {
                tag,
                device,
                size,
                allocator,
                group,
                fill,
            } => {
                if self.tensors.contains_key(tag) {
                    return Err(StepFailure::Plan(format!(
                        "tag {tag:?} is already allocated; free it first"
                    )));
                }
                let bytes = self.bytes_of(size, *device)?.max(1);
                let block = match allocator {
                    Some(a) => self.cached_alloc(a, *device, bytes)?,
                    None => self.raw_alloc(*device, bytes)?,
                };
                self.tensors.insert(
                    tag.clone(),
                    Tensor {
                        block,
                        allocator: allocator.clone(),
                        group: group.clone(),
                    },
                );
                if let Some(g) = group {
                    self.groups.entry(g.clone()).or_default();
                }
                let sum = if *fill {
                    Some(self.fill(block, 0x5EED)?)
                } else {
                    None
                };
                Ok((Some(bytes), sum))
            }
            Op::Free { tag } => {
                let t = self
                    .tensors
                    .remove(tag)
                    .ok_or_else(|| StepFailure::Plan(format!("free of unknown tag {tag:?}")))?;
                match t.group.clone() {
                    Some(g) if self.groups.contains_key(&g) => {
                        if let Some(group) = self.groups.get_mut(&g) {
                            group.owned.push(t);
                        }
                    }
                    _ => self.release(t)?,
                }
                Ok((None, None))
            }
            Op::Fill { tag, value } => {
                let block = self
                    .tensors
                    .get(tag)
                    .map(|t| t.block)
                    .ok_or_else(|| StepFailure::Plan(format!("fill of unknown tag {tag:?}")))?;
                Ok((None, Some(self.fill(block, *value)?)))
            }
            Op::EmptyCache { allocator } => {
                let names: Vec<String> = match allocator {
                    Some(a) => vec![a.clone()],
                    None => self.caches.keys().cloned().collect(),
                };
                for n in names {
                    for b in self.caches.remove(&n).unwrap_or_default() {
                        self.driver.free(b.alloc)?;
                    }
                }
                Ok((None, None))
            }
            Op::ProcessGroup {
                name,
                devices,
                buffers,
            } => {
                let mut asked = 0;
                let mut blocks = Vec::new();
                for d in devices {
                    let bytes = self.bytes_of(buffers, *d)?.max(1);
                    asked += bytes;
                    let b = self.raw_alloc(*d, bytes)?;
                    self.fill(b, 0x0CC1)?;
                    blocks.push(b);
                }
                self.groups
                    .entry(name.clone())
                    .or_default()
                    .buffers
                    .extend(blocks);
                Ok((Some(asked), None))
            }
            Op::DestroyProcessGroup { name } => {
                let g = self
                    .groups
                    .remove(name)
                    .ok_or_else(|| StepFailure::Plan(format!("no process group {name:?}")))?;
                for b in g.buffers {
                    self.driver.free(b.alloc)?;
                }
                for t in g.owned {
                    self.release(t)?;
                }
                for t in self.tensors.values_mut() {
                    if t.group.as_deref() == Some(name.as_str()) {
                        t.group = None;
                    }
                }
                Ok((None, None))
            }
            Op::ClaimUtilization {
                tag,
                device,
                fraction,
            } => {
                if self.tensors.contains_key(tag) {
                    return Err(StepFailure::Plan(format!(
                        "tag {tag:?} is already allocated"
                    )));
                }
                let total = self.total(*device)?;
                let budget = SizeSpec::Fraction(*fraction).resolve(total, total, 0);
                let bytes = budget.saturating_sub(self.held_on(*device));
                if bytes == 0 {
                    return Ok((Some(0), None));
                }
                let block = self.raw_alloc(*device, bytes)?;
                self.tensors.insert(
                    tag.clone(),
                    Tensor {
                        block,
                        allocator: None,
                        group: None,
                    },
                );
                Ok((Some(bytes), Some(self.fill(block, 0x5EED)?)))
            }
            Op::Pause { ms } => {
                std::thread::sleep(std::time::Duration::from_millis(*ms));
                Ok((None, None))
            }
        }
    }
}

fn emit(out: &mut dyn Write, ev: &WorkerEvent) -> bool {
    match super::protocol::event_line(ev) {
        Some(line) => writeln!(out, "{line}").and_then(|_| out.flush()).is_ok(),
        None => false,
    }
}

/// The typed failure the worker reports: kind, and for an allocation that failed the
/// device (CUDA ordinal) and the bytes asked for, from the error's own fields.
fn failure_of(step: usize, e: &StepFailure) -> WorkerEvent {
    let (kind, device, requested) = match e {
        StepFailure::Gpu(GpuError::OutOfMemory {
            device, requested, ..
        }) => (StepErrorKind::OutOfMemory, Some(*device), Some(*requested)),
        // A backend that reports the driver's code as is.
        StepFailure::Gpu(GpuError::Driver { code, .. }) if code.contains("OUT_OF_MEMORY") => {
            (StepErrorKind::OutOfMemory, None, None)
        }
        StepFailure::Gpu(GpuError::DeviceLost(_)) => (StepErrorKind::DeviceLost, None, None),
        _ => (StepErrorKind::Error, None, None),
    };
    WorkerEvent::Failed {
        step,
        kind,
        message: e.to_string(),
        device,
        requested,
    }
}

/// Run a worker: read the plan from `input`, stream events to `out`. Returns the exit code
/// (0 all steps ran, 1 a step failed, 2 bad input, 3 no driver).
pub fn run_worker(backend: &Backend, input: &mut dyn BufRead, out: &mut dyn Write) -> i32 {
    let mut line = String::new();
    if input.read_line(&mut line).is_err() {
        return crate::exit::USAGE;
    }
    let plan: WorkerInput = match serde_json::from_str(&line) {
        Ok(p) => p,
        Err(e) => {
            crate::term::eprint_line(&format!("worker: bad plan on stdin: {e}"));
            return crate::exit::USAGE;
        }
    };
    let driver = match backend::open_driver(backend) {
        Ok(d) => d,
        Err(e) => {
            emit(
                out,
                &WorkerEvent::Failed {
                    step: 0,
                    kind: StepErrorKind::Environment,
                    message: e.to_string(),
                    device: None,
                    requested: None,
                },
            );
            return crate::exit::ENVIRONMENT;
        }
    };
    run_plan(driver, &plan, input, out)
}

/// Run `plan` through `driver` (the worker body, after the plan was read).
pub fn run_plan(
    mut driver: Box<dyn Driver>,
    plan: &WorkerInput,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> i32 {
    let devices = driver.device_count().unwrap_or(0);
    emit(
        out,
        &WorkerEvent::Hello {
            pid: std::process::id(),
            backend: driver.backend().to_string(),
            devices,
            nspid: crate::host::own_nspid(),
        },
    );
    let mut fw = Framework {
        driver,
        contexts: HashMap::new(),
        uuids: HashMap::new(),
        tensors: BTreeMap::new(),
        caches: BTreeMap::new(),
        groups: BTreeMap::new(),
        smallest: plan.smallest_total,
    };
    for (i, step) in plan.steps.iter().enumerate() {
        if !emit(out, &WorkerEvent::Start { step: i }) {
            return 1;
        }
        match fw.run(&step.op) {
            Ok((bytes, checksum)) => {
                let held = fw.held();
                if !emit(
                    out,
                    &WorkerEvent::End {
                        step: i,
                        bytes,
                        held,
                        checksum,
                        contexts: fw.context_uuids(),
                        held_on: fw.held_per_ordinal(),
                    },
                ) {
                    return 1;
                }
            }
            Err(e) => {
                emit(out, &failure_of(i, &e));
                // Like a framework raising: the process exits and the driver returns its memory.
                return 1;
            }
        }
        if plan.lockstep {
            let mut ack = String::new();
            match input.read_line(&mut ack) {
                Ok(n) if n > 0 => {}
                // The monitor went away: stop.
                _ => return 1,
            }
        }
    }
    if plan.hold {
        emit(out, &WorkerEvent::Ready);
        let mut rest = String::new();
        // Hold until stdin closes.
        while matches!(input.read_line(&mut rest), Ok(n) if n > 0) {
            rest.clear();
        }
        return 0;
    }
    emit(out, &WorkerEvent::Done);
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimDriver;
    use crate::scenario::Step;
    use crate::units::{GIB, MIB};
    use vramdoc_sim::{InitOptions, SimBox, SimProcess};

    fn step(op: Op) -> Step {
        Step {
            id: op.name().into(),
            label: op.name().into(),
            op,
            only: Vec::new(),
        }
    }

    fn alloc(
        tag: &str,
        device: u32,
        size: SizeSpec,
        allocator: Option<&str>,
        group: Option<&str>,
    ) -> Op {
        Op::Alloc {
            tag: tag.into(),
            device,
            size,
            allocator: allocator.map(String::from),
            group: group.map(String::from),
            fill: true,
        }
    }

    fn free(tag: &str) -> Op {
        Op::Free { tag: tag.into() }
    }

    /// Run ops on a fresh box; returns the events and the box (usage after each step can be
    /// read from `End.held`; the box shows what is left after the driver is dropped).
    fn run(spec: &str, ops: Vec<Op>) -> (Vec<WorkerEvent>, i32) {
        run_sized(spec, 0, ops)
    }

    /// As `run`, with the parent's smallest device total for named fractions.
    fn run_sized(spec: &str, smallest_total: u64, ops: Vec<Op>) -> (Vec<WorkerEvent>, i32) {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), spec, &InitOptions::default()).unwrap();
        let driver = Box::new(SimDriver::new(SimProcess::new(sim.clone(), None)));
        let plan = WorkerInput {
            steps: ops.into_iter().map(step).collect(),
            lockstep: false,
            hold: false,
            smallest_total,
        };
        let mut out = Vec::new();
        let code = run_plan(driver, &plan, &mut std::io::empty(), &mut out);
        // Dropping the driver returned everything.
        assert_eq!(sim.memory(0).unwrap().used, 0);
        let events = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (events, code)
    }

    fn helds(events: &[WorkerEvent]) -> Vec<u64> {
        events
            .iter()
            .filter_map(|e| match e {
                WorkerEvent::End { held, .. } => Some(*held),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn cached_blocks_are_reused_only_by_requests_that_fit() {
        let (ev, code) = run(
            "16GiB",
            vec![
                alloc("a", 0, SizeSpec::Bytes(GIB), Some("flow"), None),
                free("a"),
                // Smaller: reuses the 1 GiB block.
                alloc("b", 0, SizeSpec::Bytes(512 * MIB), Some("flow"), None),
                free("b"),
                // Larger: a new block; the old one stays cached.
                alloc("c", 0, SizeSpec::Bytes(2 * GIB), Some("flow"), None),
                free("c"),
                // Another allocator's empty_cache does not help.
                Op::EmptyCache {
                    allocator: Some("torch".into()),
                },
                Op::EmptyCache {
                    allocator: Some("flow".into()),
                },
            ],
        );
        assert_eq!(code, 0);
        assert_eq!(
            helds(&ev),
            vec![GIB, GIB, GIB, GIB, 3 * GIB, 3 * GIB, 3 * GIB, 0]
        );
        assert!(matches!(ev.last(), Some(WorkerEvent::Done)));
    }

    #[test]
    fn named_fractions_use_the_parents_smallest_total_else_the_steps_device() {
        let half = SizeSpec::FractionOfSmallest(0.5);
        // The parent saw a 4 GiB device among the scenario's: half of it, on a 16 GiB GPU.
        let (ev, code) = run_sized("16GiB", 4 * GIB, vec![alloc("m", 0, half, None, None)]);
        assert_eq!(code, 0);
        assert_eq!(helds(&ev), vec![2 * GIB]);
        // Unknown: the step's own device.
        let (ev, code) = run_sized("16GiB", 0, vec![alloc("m", 0, half, None, None)]);
        assert_eq!(code, 0);
        assert_eq!(helds(&ev), vec![8 * GIB]);
    }

    #[test]
    fn process_group_owns_tensors_until_destroyed() {
        let (ev, _) = run(
            "2x16GiB",
            vec![
                Op::ProcessGroup {
                    name: "pg".into(),
                    devices: vec![0, 1],
                    buffers: SizeSpec::Bytes(256 * MIB),
                },
                alloc("shard", 1, SizeSpec::Bytes(GIB), Some("torch"), Some("pg")),
                free("shard"),
                Op::EmptyCache { allocator: None },
                Op::DestroyProcessGroup { name: "pg".into() },
                Op::EmptyCache { allocator: None },
            ],
        );
        let g = 512 * MIB;
        assert_eq!(helds(&ev), vec![g, g + GIB, g + GIB, g + GIB, GIB, 0]);
    }

    #[test]
    fn claim_utilization_counts_only_own_tensors_and_oom_is_reported() {
        let (ev, code) = run(
            "10GiB",
            vec![
                alloc("w", 0, SizeSpec::Bytes(2 * GIB), None, None),
                Op::ClaimUtilization {
                    tag: "kv".into(),
                    device: 0,
                    fraction: 0.5,
                },
                alloc("big", 0, SizeSpec::Fraction(0.6), None, None),
            ],
        );
        assert_eq!(code, 1);
        let claimed = ev.iter().find_map(|e| match e {
            WorkerEvent::End { step: 1, bytes, .. } => *bytes,
            _ => None,
        });
        assert_eq!(claimed, Some(3 * GIB));
        match ev.last() {
            Some(WorkerEvent::Failed {
                step,
                kind,
                message,
                device,
                requested,
            }) => {
                assert_eq!((*step, kind), (2, &StepErrorKind::OutOfMemory));
                assert!(message.contains("out of memory"), "{message}");
                // Typed: the device and the size travel as fields, not inside the text.
                assert_eq!(*device, Some(0));
                assert!(
                    requested.is_some_and(|r| r > 5 * GIB && r < 7 * GIB),
                    "{requested:?}"
                );
            }
            other => panic!("expected an OOM, got {other:?}"),
        }
    }

    #[test]
    fn plan_errors_are_reported_not_panicked() {
        let (ev, code) = run("16GiB", vec![free("nothing")]);
        assert_eq!(code, 1);
        assert!(
            matches!(ev.last(), Some(WorkerEvent::Failed { kind, .. }) if *kind == StepErrorKind::Error)
        );
    }
}
