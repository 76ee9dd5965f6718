//! Which recorded allocations scale with the card in `scenario from`: only an inference
//! engine's up-front claim of a share of the GPU (vLLM's `gpu_memory_utilization`, SGLang's
//! `mem_fraction_static`, TGI's `cuda_memory_fraction`, TensorRT-LLM's
//! `free_gpu_memory_fraction`, LMDeploy's `cache_max_entry_count`), identified by the job's
//! process names or flags. Everything else keeps its bytes: a plain job that held 9.6 GiB on
//! a 16 GiB card holds 9.6 GiB on an H100 too (issue 26).

use crate::scenario::{Op, SizeSpec, Step};
use std::collections::BTreeMap;

/// An engine seen in the recording, and what identified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineClaim {
    pub engine: &'static str,
    /// `process vllm`, `flag --gpu-memory-utilization`.
    pub why: String,
}

/// Engines whose memory is a share of the card, with the program names (a word of the
/// command line or the process name) and flags that identify them.
const ENGINES: [(&str, &[&str], &[&str]); 5] = [
    (
        "vLLM",
        &["vllm"],
        &["--gpu-memory-utilization", "gpu_memory_utilization"],
    ),
    ("SGLang", &["sglang"], &["--mem-fraction-static"]),
    (
        "TGI",
        &["text-generation-launcher", "text-generation-server"],
        &["--cuda-memory-fraction"],
    ),
    (
        "TensorRT-LLM",
        &["trtllm-serve", "tensorrt_llm"],
        &[
            "--kv_cache_free_gpu_memory_fraction",
            "free_gpu_memory_fraction",
        ],
    ),
    ("LMDeploy", &["lmdeploy"], &["--cache-max-entry-count"]),
];

/// The words of a command line or name: split at spaces, `/`, `.`, `=` and `:`
/// (`python -m vllm.entrypoints.openai.api_server` holds the word `vllm`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '/' | '.' | '=' | ':' | '"' | '\''))
        .filter(|w| !w.is_empty())
}

/// The first engine any of the job's processes (name, command line) or its command shows.
pub fn detect<'a>(texts: impl IntoIterator<Item = &'a str>) -> Option<EngineClaim> {
    for text in texts {
        for (engine, programs, flags) in ENGINES {
            for w in words(text) {
                if programs.contains(&w) {
                    return Some(EngineClaim {
                        engine,
                        why: format!("the job runs `{w}`"),
                    });
                }
            }
            for flag in flags {
                if text
                    .split_whitespace()
                    .any(|t| t.split('=').next() == Some(*flag))
                {
                    return Some(EngineClaim {
                        engine,
                        why: format!("the job passes `{flag}`"),
                    });
                }
            }
        }
    }
    None
}

/// The steps with every share-of-the-card claim turned back into the bytes it stood for on
/// the recorded card, unless `engine` says the recording shows an engine's claim; and a
/// sentence for the scenario's description saying which steps scale with the card and why.
/// `totals`: each scenario device's recorded total.
pub fn apply(
    mut steps: Vec<Step>,
    engine: Option<&EngineClaim>,
    totals: &[u64],
) -> (Vec<Step>, String) {
    let claims = steps
        .iter()
        .filter(|s| matches!(s.op, Op::ClaimUtilization { .. }))
        .count();
    if let Some(e) = engine {
        let note = if claims == 0 {
            format!(
                " {} was seen ({}), but no step is a claim of a share of the card: every size \
                 is absolute, as recorded.",
                e.engine, e.why
            )
        } else {
            format!(
                " The claim_utilization step{} scale{} with the card: {} claims a share of the \
                 GPU up front ({}); every other size is absolute, as recorded.",
                if claims == 1 { "" } else { "s" },
                if claims == 1 { "s" } else { "" },
                e.engine,
                e.why
            )
        };
        return (steps, note);
    }
    // Bytes the worker holds per device, by tag, as the steps run.
    let mut held: BTreeMap<u32, u64> = BTreeMap::new();
    let mut tags: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    for s in &mut steps {
        match &s.op {
            Op::Alloc {
                tag,
                device,
                size: SizeSpec::Bytes(b),
                ..
            } => {
                *held.entry(*device).or_default() += *b;
                tags.insert(tag.clone(), (*device, *b));
            }
            Op::Free { tag } => {
                if let Some((d, b)) = tags.remove(tag) {
                    let h = held.entry(d).or_default();
                    *h = h.saturating_sub(b);
                }
            }
            Op::ClaimUtilization {
                tag,
                device,
                fraction,
            } => {
                let total = totals.get(*device as usize).copied().unwrap_or(0);
                let share = (fraction * total as f64).round() as u64;
                let h = held.entry(*device).or_default();
                let bytes = share.saturating_sub(*h);
                *h += bytes;
                tags.insert(tag.clone(), (*device, bytes));
                s.label = format!(
                    "{} (as recorded: {}; no engine claim seen, so it keeps its bytes)",
                    s.label.replace("claim", "allocation of"),
                    crate::units::format_bytes(bytes)
                );
                s.op = Op::Alloc {
                    tag: tag.clone(),
                    device: *device,
                    size: SizeSpec::Bytes(bytes),
                    allocator: None,
                    group: None,
                    fill: false,
                };
            }
            _ => {}
        }
    }
    (
        steps,
        " Every size is absolute, as recorded: no engine claim (vLLM, SGLang, TGI, \
         TensorRT-LLM, LMDeploy) was seen in the job's processes, so nothing scales with the \
         card."
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(id: &str, op: Op) -> Step {
        Step {
            id: id.into(),
            label: format!("start: {id}"),
            op,
            only: Vec::new(),
        }
    }

    #[test]
    fn engines_are_seen_by_program_or_flag_only() {
        let v = detect(["python3 -m vllm.entrypoints.openai.api_server --model m"]).unwrap();
        assert_eq!(v.engine, "vLLM");
        let s = detect(["python3 serve.py --mem-fraction-static 0.8"]).unwrap();
        assert_eq!(s.engine, "SGLang");
        assert_eq!(detect(["text-generation-launcher"]).unwrap().engine, "TGI");
        assert!(detect(["python3 train.py --batch 8", "python3"]).is_none());
        assert!(detect(["python3 compare_vllm_outputs.py"]).is_none());
    }

    #[test]
    fn a_plain_job_keeps_its_bytes_and_an_engine_scales() {
        const GIB: u64 = 1 << 30;
        let steps = vec![
            step("s1", Op::Context { device: 0 }),
            step(
                "s2",
                Op::Alloc {
                    tag: "a1".into(),
                    device: 0,
                    size: SizeSpec::Bytes(GIB),
                    allocator: None,
                    group: None,
                    fill: false,
                },
            ),
            step(
                "s3",
                Op::ClaimUtilization {
                    tag: "a2".into(),
                    device: 0,
                    fraction: 0.6,
                },
            ),
        ];
        let total = 16 * GIB;
        let (plain, note) = apply(steps.clone(), None, &[total]);
        let want = (0.6 * total as f64).round() as u64 - GIB;
        assert!(
            matches!(&plain[2].op, Op::Alloc { size: SizeSpec::Bytes(b), .. } if *b == want),
            "{:?}",
            plain[2]
        );
        assert!(note.contains("absolute"));
        let engine = detect(["vllm serve m"]).unwrap();
        let (scaled, note) = apply(steps, Some(&engine), &[total]);
        assert!(matches!(scaled[2].op, Op::ClaimUtilization { .. }));
        assert!(note.contains("vLLM") && note.contains("scales"));
    }
}
