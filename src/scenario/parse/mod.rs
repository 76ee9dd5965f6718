//! Reading scenario TOML into a [`Scenario`]. Every error names `file:line:col` and what to
//! change; nothing here panics on any input (a property test feeds it arbitrary text).

use super::{Expectation, Neighbour, Op, Scenario, SizeSpec, Step, Variant, VariantKind};
use crate::input::line_col;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use thiserror::Error;
use toml::Spanned;

mod env;
mod sizes;

use env::checked_env;
pub use env::{env_refusal, ENV_ALLOWED_NAMES, ENV_ALLOWED_PREFIXES};
use sizes::{named_sizes, size_spec};

/// A scenario file that cannot be used: `file:line:col: message`.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{file}:{line}:{col}: {message}")]
pub struct ScenarioError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// The ops a step may name.
pub const OPS: &[&str] = &[
    "context",
    "alloc",
    "free",
    "fill",
    "empty_cache",
    "process_group",
    "destroy_process_group",
    "claim_utilization",
    "pause",
];

const CHECKS: &[&str] = &[
    "completes",
    "oom",
    "worker_on_device",
    "residual",
    "peak",
    "footprint",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    id: Spanned<String>,
    title: String,
    description: String,
    source: String,
    devices: Spanned<u32>,
    /// The timeline fingerprint the bug variant exhibits (diagnose::ids::FINGERPRINTS).
    fingerprint: Option<Spanned<String>>,
    /// The GPUs a converted recording was made on (a box spec, docs/repro.md).
    recorded_on: Option<Spanned<String>>,
    #[serde(default)]
    sizes: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    neighbours: Vec<Spanned<RawNeighbour>>,
    steps: Vec<Spanned<RawStep>>,
    variants: Vec<Spanned<RawVariant>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbour {
    label: Option<String>,
    device: Spanned<u32>,
    size: Spanned<String>,
    from: Option<Spanned<String>>,
    until: Option<Spanned<String>>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
struct RawStep {
    id: Option<Spanned<String>>,
    op: Option<Spanned<String>>,
    label: Option<String>,
    device: Option<Spanned<u32>>,
    devices: Option<Spanned<Vec<u32>>>,
    size: Option<Spanned<String>>,
    tag: Option<Spanned<String>>,
    allocator: Option<String>,
    group: Option<Spanned<String>>,
    fill: Option<bool>,
    value: Option<u32>,
    fraction: Option<Spanned<f64>>,
    duration: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    buffers: Option<Spanned<String>>,
    only: Option<Vec<Spanned<String>>>,
}

impl RawStep {
    /// `self` with every field `patch` sets replaced.
    fn patched(&self, patch: &RawStep) -> RawStep {
        macro_rules! pick {
            ($($f:ident),*) => { RawStep { $($f: patch.$f.clone().or_else(|| self.$f.clone()),)* } };
        }
        pick!(
            id, op, label, device, devices, size, tag, allocator, group, fill, value, fraction,
            duration, name, buffers, only
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVariant {
    name: Spanned<String>,
    kind: Option<Spanned<String>>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    skip: Vec<Spanned<String>>,
    #[serde(default)]
    reorder: Vec<Spanned<String>>,
    #[serde(default)]
    patch: BTreeMap<Spanned<String>, Spanned<RawStep>>,
    #[serde(default)]
    expect: Vec<Spanned<RawExpect>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    check: Spanned<String>,
    at_or_after: Option<Spanned<String>>,
    before: Option<Spanned<String>>,
    after: Option<Spanned<String>>,
    at: Option<Spanned<String>>,
    device: Option<Spanned<u32>>,
    devices: Option<Spanned<Vec<u32>>>,
    min: Option<Spanned<String>>,
    max: Option<Spanned<String>>,
    spread: Option<Spanned<String>>,
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: Range<usize>, message: impl Into<String>) -> ScenarioError {
        let (line, col) = line_col(self.text, span.start);
        ScenarioError {
            file: self.file.to_string(),
            line,
            col,
            message: message.into(),
        }
    }
}

/// Parse a scenario. `file` names it in errors (a path, or `builtin:<id>`).
pub fn parse_scenario(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let cx = Ctx { file, text };
    check_text(&cx)?;
    let raw: RawScenario = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        cx.err(span, hint_for(e.message()))
    })?;
    build(&cx, raw)
}

fn hint_for(message: &str) -> String {
    let m = message.trim().replace('\n', " ");
    if m.starts_with("missing field") {
        format!("{m} (add it; see docs/scenarios.md)")
    } else if m.starts_with("invalid type") {
        format!("{m} (change the value to the expected type)")
    } else if m.starts_with("unknown field") {
        format!("{m} (remove or rename it)")
    } else {
        m
    }
}

fn build(cx: &Ctx, raw: RawScenario) -> Result<Scenario, ScenarioError> {
    let devices = *raw.devices.get_ref();
    if devices == 0 || devices > 64 {
        return Err(cx.err(
            raw.devices.span(),
            format!("devices = {devices} is out of range (write how many GPUs the scenario needs, 1 to 64)"),
        ));
    }
    let id = raw.id.get_ref().clone();
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(cx.err(
            raw.id.span(),
            format!("id {id:?} is not a plain name (use letters, digits, '-' and '_')"),
        ));
    }
    let sizes = named_sizes(cx, &raw.sizes)?;

    let check_device = |d: &Spanned<u32>| -> Result<u32, ScenarioError> {
        let v = *d.get_ref();
        if v >= devices {
            Err(cx.err(
                d.span(),
                format!(
                    "unknown device {v}: this scenario needs {devices} device(s), numbered 0..{} (use one of those or raise `devices`)",
                    devices - 1
                ),
            ))
        } else {
            Ok(v)
        }
    };

    let mut neighbours = Vec::new();
    for n in &raw.neighbours {
        let n_ref = n.get_ref();
        neighbours.push(Neighbour {
            label: n_ref.label.clone().unwrap_or_else(|| "neighbour".into()),
            device: check_device(&n_ref.device)?,
            size: size_spec(cx, &n_ref.size, &sizes, false, false)?,
            from: n_ref.from.as_ref().map(|s| s.get_ref().clone()),
            until: n_ref.until.as_ref().map(|s| s.get_ref().clone()),
        });
    }

    let variant_names: BTreeSet<String> = raw
        .variants
        .iter()
        .map(|v| v.get_ref().name.get_ref().clone())
        .collect();

    // Steps.
    let mut steps = Vec::new();
    let mut step_ids = BTreeSet::new();
    let mut raw_by_id: BTreeMap<String, RawStep> = BTreeMap::new();
    let mut step_spans: BTreeMap<String, Range<usize>> = BTreeMap::new();
    let mut patch_spans: BTreeMap<(String, String), Range<usize>> = BTreeMap::new();
    for (i, s) in raw.steps.iter().enumerate() {
        let r = s.get_ref();
        let id =
            r.id.as_ref()
                .map(|x| x.get_ref().clone())
                .unwrap_or_else(|| format!("step-{}", i + 1));
        if !step_ids.insert(id.clone()) {
            let span = r.id.as_ref().map(|x| x.span()).unwrap_or(s.span());
            return Err(cx.err(
                span,
                format!("duplicate step id {id:?} (give every step its own id)"),
            ));
        }
        let mut only = Vec::new();
        for v in r.only.iter().flatten() {
            if !variant_names.contains(v.get_ref()) {
                return Err(cx.err(
                    v.span(),
                    format!(
                        "unknown variant {:?} in `only` (variants: {})",
                        v.get_ref(),
                        join(&variant_names)
                    ),
                ));
            }
            only.push(v.get_ref().clone());
        }
        let op = build_op(cx, r, s.span(), &sizes, &check_device)?;
        steps.push(Step {
            id: id.clone(),
            label: r.label.clone().unwrap_or_else(|| id.clone()),
            op,
            only,
        });
        raw_by_id.insert(id.clone(), r.clone());
        step_spans.insert(id, s.span());
    }
    if steps.is_empty() {
        return Err(cx.err(0..0, "no steps (add at least one [[steps]] table)"));
    }

    let known_step = |s: &Spanned<String>| -> Result<String, ScenarioError> {
        if step_ids.contains(s.get_ref()) {
            Ok(s.get_ref().clone())
        } else {
            Err(cx.err(
                s.span(),
                format!(
                    "unknown step {:?} (steps: {})",
                    s.get_ref(),
                    join(&step_ids)
                ),
            ))
        }
    };

    let mut variants = Vec::new();
    let mut seen = BTreeSet::new();
    for v in &raw.variants {
        let r = v.get_ref();
        let name = r.name.get_ref().clone();
        if !seen.insert(name.clone()) {
            return Err(cx.err(
                r.name.span(),
                format!("duplicate variant {name:?} (rename one)"),
            ));
        }
        let kind = match &r.kind {
            Some(k) => match k.get_ref().as_str() {
                "bug" => VariantKind::Bug,
                "fix" => VariantKind::Fix,
                other => {
                    return Err(cx.err(
                        k.span(),
                        format!("unknown variant kind {other:?} (use \"bug\" or \"fix\")"),
                    ))
                }
            },
            None if name == "bug" || name.starts_with("bug-") => VariantKind::Bug,
            None => VariantKind::Fix,
        };
        let skip = r
            .skip
            .iter()
            .map(&known_step)
            .collect::<Result<Vec<_>, _>>()?;
        let reorder = r
            .reorder
            .iter()
            .map(&known_step)
            .collect::<Result<Vec<_>, _>>()?;
        let mut patches = BTreeMap::new();
        let mut patch_labels = BTreeMap::new();
        for (key, p) in &r.patch {
            let id = known_step(key)?;
            if let Some(label) = &p.get_ref().label {
                patch_labels.insert(id.clone(), label.clone());
            }
            let base = raw_by_id.get(&id).cloned().unwrap_or_default();
            let merged = base.patched(p.get_ref());
            patch_spans.insert((name.clone(), id.clone()), p.span());
            patches.insert(id, build_op(cx, &merged, p.span(), &sizes, &check_device)?);
        }
        let mut expect = Vec::new();
        for e in &r.expect {
            expect.push(build_expect(cx, e, &sizes, &known_step, &check_device)?);
        }
        if expect.is_empty() {
            return Err(cx.err(
                r.name.span(),
                format!("variant {name:?} has no expectations (add [[variants.expect]] tables, e.g. check = \"completes\")"),
            ));
        }
        variants.push(Variant {
            name,
            kind,
            description: r.description.clone(),
            env: checked_env(cx, &r.env)?,
            skip,
            reorder,
            patches,
            patch_labels,
            expect,
        });
    }
    if variants.is_empty() {
        return Err(cx.err(
            0..0,
            "no variants (add [[variants]] with name = \"bug\" and one per fix)",
        ));
    }

    let fingerprint = match raw.fingerprint {
        Some(fp) => {
            let known = crate::diagnose::ids::FINGERPRINTS;
            if !known.contains(&fp.get_ref().as_str()) {
                return Err(cx.err(
                    fp.span(),
                    format!(
                        "unknown fingerprint {:?} (write one of: {})",
                        fp.get_ref(),
                        known.join(", ")
                    ),
                ));
            }
            Some(fp.into_inner())
        }
        None => None,
    };

    let recorded_on = match raw.recorded_on {
        Some(r) => Some(recorded_on(cx, r)?),
        None => None,
    };
    // A neighbour's `from` and `until` name steps of this scenario, in that order.
    let position = |s: &Spanned<String>| -> Result<usize, ScenarioError> {
        steps
            .iter()
            .position(|st: &Step| st.id == *s.get_ref())
            .ok_or_else(|| {
                cx.err(
                    s.span(),
                    format!(
                        "unknown step {:?} (name the id of one of the scenario's steps)",
                        s.get_ref()
                    ),
                )
            })
    };
    for n in &raw.neighbours {
        let n = n.get_ref();
        let from = n.from.as_ref().map(&position).transpose()?;
        let until = n.until.as_ref().map(&position).transpose()?;
        if let (Some(f), Some(u), Some(span)) = (from, until, n.until.as_ref()) {
            if u < f {
                return Err(cx.err(
                    span.span(),
                    "`until` names a step before `from` (the neighbour stops after it starts)",
                ));
            }
        }
    }
    let scenario = Scenario {
        id,
        title: raw.title,
        fingerprint,
        recorded_on,
        description: raw.description,
        source: raw.source,
        devices,
        env: checked_env(cx, &raw.env)?,
        neighbours,
        steps,
        variants,
    };
    check_variant_plans(cx, &scenario, &step_spans, &patch_spans)?;
    Ok(scenario)
}

/// `recorded_on`: a box spec of presets and sizes (`2xt4`, `h100,16GiB`), checked for its
/// shape here; whether each entry names a known GPU is the backend's to say when a box is
/// built from it.
fn recorded_on(cx: &Ctx, r: Spanned<String>) -> Result<String, ScenarioError> {
    let v = r.get_ref();
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, ',' | '-' | '.');
    if v.is_empty() || v.len() > 200 || !v.chars().all(plain) {
        return Err(cx.err(
            r.span(),
            "recorded_on is not a box spec (write presets or sizes, e.g. \"2xt4\" or \"16GiB,h100\")",
        ));
    }
    Ok(r.into_inner())
}

fn join(names: &BTreeSet<String>) -> String {
    names.iter().cloned().collect::<Vec<_>>().join(", ")
}

fn build_op(
    cx: &Ctx,
    r: &RawStep,
    span: Range<usize>,
    sizes: &BTreeMap<String, SizeSpec>,
    check_device: &dyn Fn(&Spanned<u32>) -> Result<u32, ScenarioError>,
) -> Result<Op, ScenarioError> {
    let op = r.op.as_ref().ok_or_else(|| {
        cx.err(
            span.clone(),
            format!("step has no `op` (add op = one of {})", OPS.join(", ")),
        )
    })?;
    let opname = op.get_ref().as_str();
    let missing = |field: &str, example: &str| {
        cx.err(
            span.clone(),
            format!("op {opname} is missing field `{field}` (add e.g. {field} = {example})"),
        )
    };
    let device = || -> Result<u32, ScenarioError> {
        check_device(r.device.as_ref().ok_or_else(|| missing("device", "0"))?)
    };
    let tag = || -> Result<String, ScenarioError> {
        Ok(r.tag
            .as_ref()
            .ok_or_else(|| missing("tag", "\"weights\""))?
            .get_ref()
            .clone())
    };
    Ok(match opname {
        "context" => Op::Context { device: device()? },
        "alloc" => Op::Alloc {
            tag: tag()?,
            device: device()?,
            size: size_spec(
                cx,
                r.size.as_ref().ok_or_else(|| missing("size", "\"30%\""))?,
                sizes,
                false,
                false,
            )?,
            allocator: r.allocator.clone(),
            group: r.group.as_ref().map(|g| g.get_ref().clone()),
            fill: r.fill.unwrap_or(true),
        },
        "free" => Op::Free { tag: tag()? },
        "fill" => Op::Fill {
            tag: tag()?,
            value: r.value.unwrap_or(0x5EED),
        },
        "empty_cache" => Op::EmptyCache {
            allocator: r.allocator.clone(),
        },
        "process_group" => {
            let devs = r
                .devices
                .as_ref()
                .ok_or_else(|| missing("devices", "[0, 1]"))?;
            for d in devs.get_ref() {
                check_device(&Spanned::new(devs.span(), *d))?;
            }
            Op::ProcessGroup {
                name: r
                    .name
                    .as_ref()
                    .ok_or_else(|| missing("name", "\"pg\""))?
                    .get_ref()
                    .clone(),
                devices: devs.get_ref().clone(),
                buffers: size_spec(
                    cx,
                    r.buffers
                        .as_ref()
                        .ok_or_else(|| missing("buffers", "\"3%\""))?,
                    sizes,
                    false,
                    false,
                )?,
            }
        }
        "destroy_process_group" => Op::DestroyProcessGroup {
            name: r
                .name
                .as_ref()
                .ok_or_else(|| missing("name", "\"pg\""))?
                .get_ref()
                .clone(),
        },
        "claim_utilization" => {
            let f = r
                .fraction
                .as_ref()
                .ok_or_else(|| missing("fraction", "0.9"))?;
            let v = *f.get_ref();
            if !(v > 0.0 && v <= 1.0) {
                return Err(cx.err(f.span(), format!("fraction {v} is out of range (write a number above 0 and at most 1, e.g. 0.9)")));
            }
            Op::ClaimUtilization {
                tag: tag()?,
                device: device()?,
                fraction: v,
            }
        }
        "pause" => {
            let d = r
                .duration
                .as_ref()
                .ok_or_else(|| missing("duration", "\"100ms\""))?;
            let dur = crate::units::parse_duration(d.get_ref())
                .map_err(|e| cx.err(d.span(), e.to_string()))?;
            Op::Pause {
                ms: dur.as_millis().min(u64::MAX as u128) as u64,
            }
        }
        other => {
            return Err(cx.err(
                op.span(),
                format!("unknown op {other:?} (use one of: {})", OPS.join(", ")),
            ))
        }
    })
}

fn build_expect(
    cx: &Ctx,
    e: &Spanned<RawExpect>,
    sizes: &BTreeMap<String, SizeSpec>,
    known_step: &dyn Fn(&Spanned<String>) -> Result<String, ScenarioError>,
    check_device: &dyn Fn(&Spanned<u32>) -> Result<u32, ScenarioError>,
) -> Result<Expectation, ScenarioError> {
    let r = e.get_ref();
    let check = r.check.get_ref().as_str();
    let missing = |field: &str, example: &str| {
        cx.err(
            e.span(),
            format!("check {check} is missing field `{field}` (add e.g. {field} = {example})"),
        )
    };
    let size = |s: &Option<Spanned<String>>| -> Result<Option<SizeSpec>, ScenarioError> {
        s.as_ref()
            .map(|s| size_spec(cx, s, sizes, true, true))
            .transpose()
    };
    let step = |s: &Option<Spanned<String>>| -> Result<Option<String>, ScenarioError> {
        s.as_ref().map(known_step).transpose()
    };
    let device = || -> Result<u32, ScenarioError> {
        check_device(r.device.as_ref().ok_or_else(|| missing("device", "0"))?)
    };
    Ok(match check {
        "completes" => Expectation::Completes,
        "oom" => Expectation::Oom {
            at_or_after: step(&r.at_or_after)?,
            before: step(&r.before)?,
        },
        "worker_on_device" => Expectation::WorkerOnDevice {
            device: device()?,
            min: size(&r.min)?,
            max: size(&r.max)?,
        },
        "residual" => {
            let mut devices = Vec::new();
            if let Some(ds) = &r.devices {
                for d in ds.get_ref() {
                    devices.push(check_device(&Spanned::new(ds.span(), *d))?);
                }
            }
            Expectation::Residual {
                after: step(&r.after)?.ok_or_else(|| missing("after", "\"release\""))?,
                devices,
                min: size(&r.min)?,
                max: size(&r.max)?,
                spread: size(&r.spread)?,
            }
        }
        "peak" => Expectation::Peak {
            device: device()?,
            min: size(&r.min)?,
            max: size(&r.max)?,
        },
        "footprint" => Expectation::Footprint {
            at: step(&r.at)?.ok_or_else(|| missing("at", "\"load\""))?,
            min: size(&r.min)?,
            max: size(&r.max)?,
        },
        other => {
            return Err(cx.err(
                r.check.span(),
                format!(
                    "unknown check {other:?} (use one of: {})",
                    CHECKS.join(", ")
                ),
            ))
        }
    })
}

/// NUL bytes, literal or escaped (`\u0000`), have no place in a scenario.
fn check_text(cx: &Ctx) -> Result<(), ScenarioError> {
    for needle in ["\0", "\\u0000", "\\U00000000"] {
        if let Some(pos) = cx.text.find(needle) {
            return Err(cx.err(
                pos..pos + needle.len(),
                "NUL byte in the scenario (remove it; scenario files are plain text)",
            ));
        }
    }
    Ok(())
}

/// Walk every variant's plan statically: tags allocated before they are freed or filled and
/// not allocated twice, process groups initialised before they are used or destroyed.
fn check_variant_plans(
    cx: &Ctx,
    scenario: &Scenario,
    step_spans: &BTreeMap<String, Range<usize>>,
    patch_spans: &BTreeMap<(String, String), Range<usize>>,
) -> Result<(), ScenarioError> {
    for variant in &scenario.variants {
        let plan = scenario.plan(variant);
        let mut tags: BTreeSet<&str> = BTreeSet::new();
        let mut groups: BTreeSet<&str> = BTreeSet::new();
        for step in &plan.steps {
            let span = patch_spans
                .get(&(variant.name.clone(), step.id.clone()))
                .or_else(|| step_spans.get(&step.id))
                .cloned()
                .unwrap_or(0..0);
            let fail = |what: String| {
                cx.err(
                    span.clone(),
                    format!("variant {:?}, step {:?}: {what}", variant.name, step.id),
                )
            };
            match &step.op {
                Op::Alloc { tag, group, .. } => {
                    if let Some(g) = group {
                        if !groups.contains(g.as_str()) {
                            return Err(fail(format!("group {g:?} is not initialised by an earlier process_group step (add one, or remove `group`)")));
                        }
                    }
                    if !tags.insert(tag) {
                        return Err(fail(format!(
                            "tag {tag:?} is already allocated (free it first or use another tag)"
                        )));
                    }
                }
                Op::ClaimUtilization { tag, .. } => {
                    if !tags.insert(tag) {
                        return Err(fail(format!(
                            "tag {tag:?} is already allocated (free it first or use another tag)"
                        )));
                    }
                }
                Op::Free { tag } => {
                    if !tags.remove(tag.as_str()) {
                        return Err(fail(format!("frees tag {tag:?} before any step allocates it (allocate it first, or skip this step in this variant)")));
                    }
                }
                Op::Fill { tag, .. } => {
                    if !tags.contains(tag.as_str()) {
                        return Err(fail(format!(
                            "fills tag {tag:?} before any step allocates it (allocate it first)"
                        )));
                    }
                }
                Op::ProcessGroup { name, .. } => {
                    if !groups.insert(name) {
                        return Err(fail(format!("process group {name:?} is already initialised (destroy it first or use another name)")));
                    }
                }
                Op::DestroyProcessGroup { name } => {
                    if !groups.remove(name.as_str()) {
                        return Err(fail(format!("destroys process group {name:?}, which no earlier process_group step initialises")));
                    }
                }
                Op::Context { .. } | Op::EmptyCache { .. } | Op::Pause { .. } => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
