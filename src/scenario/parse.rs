//! Reading scenario TOML into a [`Scenario`]. Every error names `file:line:col` and what to
//! change; nothing here panics on any input (a property test feeds it arbitrary text).

use super::{Expectation, Neighbour, Op, Scenario, SizeSpec, Step, Variant, VariantKind};
use crate::input::line_col;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use thiserror::Error;
use toml::Spanned;

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

    let scenario = Scenario {
        id,
        title: raw.title,
        fingerprint,
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

/// Parse a size: `30%`, `2GiB`, `1ctx` (when `allow_ctx`), a name from `[sizes]`, or
/// `K*name`. Fractions above 100 % are refused unless `allow_over`.
fn size_spec(
    cx: &Ctx,
    s: &Spanned<String>,
    sizes: &BTreeMap<String, SizeSpec>,
    allow_over: bool,
    allow_ctx: bool,
) -> Result<SizeSpec, ScenarioError> {
    let text = s.get_ref().trim();
    let bad = |why: String| cx.err(s.span(), why);
    let number = |n: &str| -> Option<f64> {
        n.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    let spec = if let Some(p) = text.strip_suffix('%') {
        let v = number(p).ok_or_else(|| {
            bad(format!(
                "size {text:?} is not a percentage (write e.g. \"30%\")"
            ))
        })?;
        SizeSpec::Fraction(v / 100.0)
    } else if let Some(n) = text.strip_suffix("ctx") {
        if !allow_ctx {
            return Err(bad(format!("size {text:?}: `ctx` units are for expectations only (write e.g. \"30%\" or \"2GiB\")")));
        }
        SizeSpec::Contexts(number(n).ok_or_else(|| {
            bad(format!(
                "size {text:?} is not a number of contexts (write e.g. \"1ctx\")"
            ))
        })?)
    } else if let Some((k, name)) = text.split_once('*') {
        let k = number(k).ok_or_else(|| {
            bad(format!(
                "size {text:?}: write a factor then a name, e.g. \"0.5*model\""
            ))
        })?;
        match sizes.get(name.trim()) {
            Some(SizeSpec::Fraction(f) | SizeSpec::FractionOfSmallest(f)) => {
                SizeSpec::FractionOfSmallest(f * k)
            }
            Some(SizeSpec::Bytes(b)) => SizeSpec::Bytes((*b as f64 * k).round() as u64),
            Some(SizeSpec::Contexts(c)) => SizeSpec::Contexts(c * k),
            None => {
                return Err(bad(format!(
                    "size {text:?} names no entry of [sizes] (define {} there)",
                    name.trim()
                )))
            }
        }
    } else if let Some(named) = sizes.get(text) {
        // A named fraction is one amount of bytes for the whole variant (docs/scenarios.md).
        match *named {
            SizeSpec::Fraction(f) => SizeSpec::FractionOfSmallest(f),
            other => other,
        }
    } else {
        SizeSpec::Bytes(crate::units::parse_size(text).map_err(|e| bad(e.to_string()))?)
    };
    if let SizeSpec::Fraction(f) | SizeSpec::FractionOfSmallest(f) = spec {
        if f > 1.0 && !allow_over {
            return Err(bad(format!(
                "size {text:?} is over 100 % of the device ({:.1}%; write at most \"100%\")",
                f * 100.0
            )));
        }
    }
    Ok(spec)
}

/// Environment variable prefixes a scenario may set: what a workload's memory behaviour
/// depends on. Everything else (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `PATH`, `PYTHON*`,
/// `VRAMDOC_*`…) is refused: a scenario file arrives with a bug ticket and must not choose
/// what code the worker loads. See docs/security.md.
pub const ENV_ALLOWED_PREFIXES: &[&str] = &[
    "CUDA_", "PYTORCH_", "TORCH_", "NCCL_", "ONEFLOW_", "VLLM_", "TF_", "XLA_", "JAX_",
];
/// Single variables a scenario may set.
pub const ENV_ALLOWED_NAMES: &[&str] = &["OMP_NUM_THREADS", "MKL_NUM_THREADS"];
/// Parts of a name refused even under an allowed prefix: variables that make a library load
/// code (`CUDA_INJECTION64_PATH`, `NCCL_NET_PLUGIN`, `NCCL_TUNER_PLUGIN`…).
const ENV_REFUSED_PARTS: &[&str] = &["INJECTION", "PLUGIN", "PRELOAD", "LIBRARY"];
/// Longest environment value a scenario may set.
const ENV_MAX_VALUE: usize = 4096;

/// Why a scenario may not set `name`, or `None` when it may.
pub fn env_refusal(name: &str) -> Option<String> {
    let allowed = ENV_ALLOWED_NAMES.contains(&name)
        || ENV_ALLOWED_PREFIXES
            .iter()
            .any(|p| name.starts_with(p) && name.len() > p.len());
    if !allowed {
        return Some(format!(
            "environment variable {name:?} may not be set by a scenario (allowed: {}*, {}; see docs/security.md)",
            ENV_ALLOWED_PREFIXES.join("*, ").trim_end_matches('*'),
            ENV_ALLOWED_NAMES.join(", ")
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Some(format!(
            "environment variable {name:?} is not a plain name (use A-Z, 0-9 and '_')"
        ));
    }
    if let Some(part) = ENV_REFUSED_PARTS.iter().find(|p| name.contains(*p)) {
        return Some(format!(
            "environment variable {name:?} makes a library load code ({part}); a scenario may not set it (see docs/security.md)"
        ));
    }
    None
}

fn checked_env(
    cx: &Ctx,
    env: &BTreeMap<Spanned<String>, Spanned<String>>,
) -> Result<BTreeMap<String, String>, ScenarioError> {
    let mut out = BTreeMap::new();
    for (k, v) in env {
        if let Some(why) = env_refusal(k.get_ref()) {
            return Err(cx.err(k.span(), why));
        }
        let value = v.get_ref();
        if value.contains('\0') || value.len() > ENV_MAX_VALUE {
            return Err(cx.err(
                v.span(),
                format!(
                    "value of {} has a NUL byte or is over {ENV_MAX_VALUE} bytes (write a plain value)",
                    k.get_ref()
                ),
            ));
        }
        out.insert(k.get_ref().clone(), value.clone());
    }
    Ok(out)
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

/// The `[sizes]` entry a size refers to (`name` or `K*name`), when it names one.
fn size_reference<'a>(text: &'a str, names: &BTreeMap<String, Spanned<String>>) -> Option<&'a str> {
    let text = text.trim();
    let name = text.split_once('*').map_or(text, |(_, n)| n.trim());
    names.contains_key(name).then_some(name)
}

/// Resolve `[sizes]`: entries may refer to each other in any order; a cycle is an error.
fn named_sizes(
    cx: &Ctx,
    raw: &BTreeMap<String, Spanned<String>>,
) -> Result<BTreeMap<String, SizeSpec>, ScenarioError> {
    let mut sizes: BTreeMap<String, SizeSpec> = BTreeMap::new();
    let mut pending: Vec<&String> = raw.keys().collect();
    while !pending.is_empty() {
        let before = pending.len();
        let mut still = Vec::new();
        for name in pending {
            let value = &raw[name];
            match size_reference(value.get_ref(), raw) {
                Some(r) if !sizes.contains_key(r) => still.push(name),
                _ => {
                    let s = size_spec(cx, value, &sizes, true, false)?;
                    sizes.insert(name.clone(), s);
                }
            }
        }
        if still.len() == before {
            let names: Vec<&str> = still.iter().map(|s| s.as_str()).collect();
            let first = &raw[still[0]];
            return Err(cx.err(
                first.span(),
                format!(
                    "sizes {} refer to each other in a cycle (give one of them a value such as \"30%\")",
                    names.join(", ")
                ),
            ));
        }
        pending = still;
    }
    Ok(sizes)
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MINIMAL: &str = r#"
id = "t"
title = "T"
description = "d"
source = "s"
devices = 2

[sizes]
model = "40%"

[[steps]]
id = "ctx"
op = "context"
device = 1

[[steps]]
id = "load"
op = "alloc"
tag = "w"
device = 1
size = "0.5*model"

[[variants]]
name = "bug"
[[variants.expect]]
check = "completes"

[[variants]]
name = "fix-x"
skip = ["load"]
[variants.patch.ctx]
label = "ctx on 0"
device = 0
[[variants.expect]]
check = "worker_on_device"
device = 0
max = "1ctx"
"#;

    #[test]
    fn minimal_scenario_parses_and_plans() {
        let s = parse_scenario("t.toml", MINIMAL).unwrap();
        assert_eq!(s.devices, 2);
        assert_eq!(
            s.steps[1].op,
            Op::Alloc {
                tag: "w".into(),
                device: 1,
                // A named fraction: one size in bytes for the whole variant.
                size: SizeSpec::FractionOfSmallest(0.2),
                allocator: None,
                group: None,
                fill: true
            }
        );
        let fix = s.variant("fix-x").unwrap();
        assert_eq!(fix.kind, VariantKind::Fix);
        let plan = s.plan(fix);
        assert_eq!(plan.steps.len(), 1);
        assert_eq!(plan.steps[0].op, Op::Context { device: 0 });
        assert_eq!(plan.steps[0].label, "ctx on 0");
        assert_eq!(s.variant("bug").unwrap().kind, VariantKind::Bug);
    }

    fn err_of(text: &str) -> ScenarioError {
        parse_scenario("x.toml", text).unwrap_err()
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = err_of(&MINIMAL.replace("op = \"context\"", "op = \"contxt\""));
        assert_eq!((e.line, e.col), (13, 6), "{e}");
        assert!(
            e.message.contains("unknown op") && e.message.contains("context, alloc"),
            "{e}"
        );
        assert!(e.to_string().starts_with("x.toml:13:6: "));

        let e = err_of(&MINIMAL.replace("\"0.5*model\"", "\"130%\""));
        assert!(e.message.contains("over 100 %"), "{e}");
        assert_eq!(e.line, 21);

        let e = err_of(&MINIMAL.replace("device = 1\nsize", "device = 7\nsize"));
        assert!(e.message.contains("unknown device 7"), "{e}");
        assert_eq!(e.line, 20);

        let e = err_of(&MINIMAL.replace("devices = 2", "devices = \"two\""));
        assert!(e.message.contains("invalid type"), "{e}");
        assert_eq!(e.line, 6);

        let e = err_of(&MINIMAL.replace("source = \"s\"\n", ""));
        assert!(e.message.contains("missing field `source`"), "{e}");

        let e = err_of(&MINIMAL.replace("size = \"0.5*model\"\n", ""));
        assert!(e.message.contains("missing field `size`"), "{e}");
        assert!(e.line >= 16, "{e}");

        let e = err_of(&MINIMAL.replace("skip = [\"load\"]", "skip = [\"lod\"]"));
        assert!(e.message.contains("unknown step \"lod\""), "{e}");

        let e = err_of(&MINIMAL.replace(
            "device = 1\n\n[[steps]]",
            "device = 1\nonly = [\"fix-y\"]\n\n[[steps]]",
        ));
        assert!(e.message.contains("unknown variant \"fix-y\""), "{e}");
    }

    #[test]
    fn env_allow_list() {
        for ok in [
            "CUDA_VISIBLE_DEVICES",
            "PYTORCH_CUDA_ALLOC_CONF",
            "NCCL_DEBUG",
            "OMP_NUM_THREADS",
        ] {
            assert_eq!(env_refusal(ok), None, "{ok}");
        }
        for bad in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "PATH",
            "PYTHONPATH",
            "VRAMDOC_SIM_DIR",
            "CUDA_",
            "CUDA_INJECTION64_PATH",
            "NCCL_NET_PLUGIN",
            "cuda_x",
            "CUDA_A=B",
        ] {
            assert!(env_refusal(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn sizes_in_any_order_and_cycles() {
        let text = MINIMAL.replace("model = \"40%\"", "a = \"0.5*model\"\nmodel = \"40%\"");
        let s = parse_scenario(
            "x.toml",
            &text.replace("\"0.5*model\"\n\n[[variants]]", "\"a\"\n\n[[variants]]"),
        )
        .unwrap();
        assert!(
            matches!(s.steps[1].op, Op::Alloc { size: SizeSpec::FractionOfSmallest(f), .. } if (f - 0.2).abs() < 1e-9)
        );
        let e = err_of(&MINIMAL.replace("model = \"40%\"", "model = \"2*self\"\nself = \"model\""));
        assert!(e.message.contains("cycle"), "{e}");
        assert_eq!(e.line, 9, "{e}");
    }

    #[test]
    fn line_col_counts_characters() {
        assert_eq!(line_col("a\nbé c", 6), (2, 4));
        assert_eq!(line_col("", 10), (1, 1));
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC*") {
            let _ = parse_scenario("fuzz.toml", &s);
        }

        #[test]
        fn mutated_scenarios_never_panic(pos in 0usize..2000, junk in "[\\[\\]=\"%a-z0-9*. \n]{0,12}") {
            let mut text = MINIMAL.to_string();
            let mut p = pos.min(text.len());
            while !text.is_char_boundary(p) { p -= 1; }
            text.insert_str(p, &junk);
            let _ = parse_scenario("fuzz.toml", &text);
        }
    }
}
