//! Scenarios: the model of a replayable VRAM failure (steps, variants, expectations), the
//! TOML parser that reads it with `file:line:col` errors ([`parse`]), and the five built-in
//! scenarios embedded in the binary ([`builtin`]). The format is documented in
//! docs/scenarios.md.

pub mod builtin;
pub mod parse;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use parse::{parse_scenario, ScenarioError};

/// A size as a scenario writes it, resolved later against a device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeSpec {
    /// Absolute bytes (`2GiB`).
    Bytes(u64),
    /// Fraction of the device's total memory, 0.0–1.0 (`30%` written in a step or check).
    Fraction(f64),
    /// A named size of `[sizes]` given as a fraction (`model = "58%"`, used as `"model"` or
    /// `"0.5*model"`): a fixed amount of bytes for the whole variant, this fraction of the
    /// smallest total among the scenario's devices. A model has one size in bytes, whichever
    /// GPU holds a copy or a shard of it; on GPUs of one size this equals [`Self::Fraction`].
    FractionOfSmallest(f64),
    /// Multiples of the measured per-context cost (`1ctx`; expectations only).
    Contexts(f64),
}

impl SizeSpec {
    /// Bytes for a device of `total` bytes whose context costs `context` bytes, in a
    /// variant whose smallest device has `smallest` bytes in total.
    pub fn resolve(&self, total: u64, smallest: u64, context: u64) -> u64 {
        match *self {
            SizeSpec::Bytes(b) => b,
            SizeSpec::Fraction(f) => (f * total as f64).round() as u64,
            SizeSpec::FractionOfSmallest(f) => (f * smallest as f64).round() as u64,
            SizeSpec::Contexts(n) => (n * context as f64).round() as u64,
        }
    }

    /// Human form (`30.0%`, `2.00 GiB`, `1ctx`).
    pub fn describe(&self) -> String {
        match *self {
            SizeSpec::Bytes(b) => crate::units::format_bytes(b),
            SizeSpec::Fraction(f) => format!("{:.1}%", f * 100.0),
            SizeSpec::FractionOfSmallest(f) => format!("{:.1}% of the smallest GPU", f * 100.0),
            SizeSpec::Contexts(n) => format!("{n}ctx"),
        }
    }
}

/// One operation of a workload, executed by the worker process. Devices are CUDA ordinals
/// as the worker sees them (renumbered by `CUDA_VISIBLE_DEVICES`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Create the context on a device (any CUDA work does this implicitly).
    Context { device: u32 },
    /// Allocate a tagged tensor; through a named caching allocator when `allocator` is set,
    /// owned by a process group when `group` is set; the fill kernel touches it when `fill`.
    Alloc {
        tag: String,
        device: u32,
        size: SizeSpec,
        allocator: Option<String>,
        group: Option<String>,
        fill: bool,
    },
    /// Drop a tagged tensor: back to its allocator's cache, to the driver, or (when a
    /// process group owns it) nowhere until the group is destroyed.
    Free { tag: String },
    /// Run the fill kernel (and the checksum) over a tagged tensor.
    Fill { tag: String, value: u32 },
    /// Return cached blocks to the driver: of one allocator, or of all when `None`.
    EmptyCache { allocator: Option<String> },
    /// Initialise a process group over devices, with communicator buffers on each.
    ProcessGroup {
        name: String,
        devices: Vec<u32>,
        buffers: SizeSpec,
    },
    /// Destroy a process group: its buffers are freed and the tensors it owned released.
    DestroyProcessGroup { name: String },
    /// Claim `fraction` of the device's total minus what the worker already holds there
    /// (vLLM's `gpu_memory_utilization` budget for the KV cache).
    ClaimUtilization {
        tag: String,
        device: u32,
        fraction: f64,
    },
    /// Sleep.
    Pause { ms: u64 },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Context { .. } => "context",
            Op::Alloc { .. } => "alloc",
            Op::Free { .. } => "free",
            Op::Fill { .. } => "fill",
            Op::EmptyCache { .. } => "empty_cache",
            Op::ProcessGroup { .. } => "process_group",
            Op::DestroyProcessGroup { .. } => "destroy_process_group",
            Op::ClaimUtilization { .. } => "claim_utilization",
            Op::Pause { .. } => "pause",
        }
    }
}

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub id: String,
    /// What the step stands for in the original program (`model.to("cuda:1")`).
    pub label: String,
    pub op: Op,
    /// Only in these variants (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
}

/// A process started next to the worker, holding memory for the whole variant, or from
/// one step to another (`from`, `until`: a recorded neighbour that came and went).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    pub label: String,
    /// Physical device.
    pub device: u32,
    pub size: SizeSpec,
    /// Started just before this step runs (`None`: before the worker starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Stopped (its memory freed) just after this step ran (`None`: at the variant's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// What a variant must show, checked on the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum Expectation {
    /// The worker ran every step.
    Completes,
    /// The worker ran out of memory at or after step `at_or_after` and before `before`.
    Oom {
        at_or_after: Option<String>,
        before: Option<String>,
    },
    /// The worker's own usage on a physical device (max over the run) is within bounds.
    WorkerOnDevice {
        device: u32,
        min: Option<SizeSpec>,
        max: Option<SizeSpec>,
    },
    /// After step `after`, each listed physical device (all the scenario needs when empty)
    /// holds within bounds more than before the worker started; `spread` bounds the
    /// difference between devices.
    Residual {
        after: String,
        devices: Vec<u32>,
        min: Option<SizeSpec>,
        max: Option<SizeSpec>,
        spread: Option<SizeSpec>,
    },
    /// Peak used memory of a physical device over the run.
    Peak {
        device: u32,
        min: Option<SizeSpec>,
        max: Option<SizeSpec>,
    },
    /// The worker's allocations summed over every device after step `at`; fractions refer
    /// to physical device 0.
    Footprint {
        at: String,
        min: Option<SizeSpec>,
        max: Option<SizeSpec>,
    },
}

/// Whether a variant shows the bug or a fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VariantKind {
    Bug,
    Fix,
}

/// One way of running the scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    pub kind: VariantKind,
    pub description: String,
    /// Worker environment on top of the scenario's.
    pub env: BTreeMap<String, String>,
    /// Steps left out.
    pub skip: Vec<String>,
    /// Steps whose order is changed: they take their own positions in this order.
    pub reorder: Vec<String>,
    /// Field overrides per step id (already applied by [`Scenario::plan`]).
    pub patches: BTreeMap<String, Op>,
    /// Labels set by patches, per step id.
    #[serde(default)]
    pub patch_labels: BTreeMap<String, String>,
    pub expect: Vec<Expectation>,
}

/// A parsed scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub id: String,
    pub title: String,
    /// One line.
    pub description: String,
    /// Upstream project and symptom.
    pub source: String,
    /// Physical devices needed.
    pub devices: u32,
    /// The timeline fingerprint (diagnose/timeline.rs) the bug variant exhibits; replay
    /// requires it to fire on the bug variant and to stay silent on every fix variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The GPUs a converted recording was made on, as a box spec (`t4`, `2x16GiB`):
    /// `replay --sim recorded` rebuilds that box (docs/repro.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_on: Option<String>,
    pub env: BTreeMap<String, String>,
    pub neighbours: Vec<Neighbour>,
    pub steps: Vec<Step>,
    pub variants: Vec<Variant>,
}

/// The resolved workload of one variant: what the worker runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantPlan {
    pub scenario: String,
    pub variant: String,
    pub env: BTreeMap<String, String>,
    pub steps: Vec<Step>,
}

impl Scenario {
    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The steps and environment of a variant, with `only`, `skip`, `patch`, `reorder` applied.
    pub fn plan(&self, variant: &Variant) -> VariantPlan {
        let mut steps: Vec<Step> = self
            .steps
            .iter()
            .filter(|s| s.only.is_empty() || s.only.iter().any(|v| v == &variant.name))
            .filter(|s| !variant.skip.contains(&s.id))
            .cloned()
            .collect();
        for s in &mut steps {
            if let Some(op) = variant.patches.get(&s.id) {
                s.op = op.clone();
            }
            if let Some(label) = variant.patch_labels.get(&s.id) {
                s.label = label.clone();
            }
        }
        if !variant.reorder.is_empty() {
            let positions: Vec<usize> = steps
                .iter()
                .enumerate()
                .filter(|(_, s)| variant.reorder.contains(&s.id))
                .map(|(i, _)| i)
                .collect();
            let ordered: Vec<Step> = variant
                .reorder
                .iter()
                .filter_map(|id| steps.iter().find(|s| &s.id == id).cloned())
                .collect();
            for (pos, step) in positions.into_iter().zip(ordered) {
                steps[pos] = step;
            }
        }
        let mut env = self.env.clone();
        env.extend(variant.env.clone());
        VariantPlan {
            scenario: self.id.clone(),
            variant: variant.name.clone(),
            env,
            steps,
        }
    }
}
