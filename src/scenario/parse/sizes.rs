//! Sizes in a scenario: `30%`, `2GiB`, `1ctx`, the named sizes of `[sizes]` and `K*name`.

use super::{Ctx, ScenarioError, SizeSpec};
use std::collections::BTreeMap;
use toml::Spanned;

/// Parse a size: `30%`, `2GiB`, `1ctx` (when `allow_ctx`), a name from `[sizes]`, or
/// `K*name`. Fractions above 100 % are refused unless `allow_over`.
pub(super) fn size_spec(
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

/// The `[sizes]` entry a size refers to (`name` or `K*name`), when it names one.
fn size_reference<'a>(text: &'a str, names: &BTreeMap<String, Spanned<String>>) -> Option<&'a str> {
    let text = text.trim();
    let name = text.split_once('*').map_or(text, |(_, n)| n.trim());
    names.contains_key(name).then_some(name)
}

/// Resolve `[sizes]`: entries may refer to each other in any order; a cycle is an error.
pub(super) fn named_sizes(
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
