//! The `vramdoc plan vllm` command that fits a vLLM start-up which failed for memory (issue
//! 35): from the numbers vLLM's own error line states — the tokens its KV cache holds, the
//! longest request it estimates, the free memory its start-up check saw — the flags to plan
//! with. A pure function of the line; `out_of_memory` appends it to the finding's fix.

use crate::model::RunErrorKind;

/// Half the last printed digit of vLLM's `GiB` figures (`format_gib`, two decimals).
const PRINTED_HALF_STEP: f64 = 0.005;

/// The digits (with `,` separators and one `.`) at the start of `s`, as a number.
fn number_at(s: &str) -> Option<f64> {
    let t: String = s
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
        .take(24)
        .filter(|c| *c != ',')
        .collect();
    t.parse().ok().filter(|v: &f64| v.is_finite())
}

/// The number right after `key` in `line`.
fn after(line: &str, key: &str) -> Option<f64> {
    line.find(key)
        .and_then(|i| number_at(&line[i + key.len()..]))
}

/// The flags vLLM's error line says would fit, and what they rest on.
fn fitting_flags(line: &str, kind: &RunErrorKind) -> Option<(String, String)> {
    match kind {
        // V0: "... larger than the maximum number of tokens that can be stored in KV cache (7344)"
        // V1: "... Based on the available memory, the estimated maximum model length is 15984."
        RunErrorKind::VllmKvCache => {
            let tokens = after(line, "stored in KV cache (")
                .or_else(|| after(line, "estimated maximum model length is "))?;
            let tokens = tokens as u64 / 16 * 16;
            (tokens > 0).then(|| {
                (
                    format!("--max-model-len {tokens}"),
                    format!("the KV cache held {tokens} tokens"),
                )
            })
        }
        // "Free memory on device cuda:0 (19.77/22.05 GiB) on startup is less than desired ..."
        RunErrorKind::VllmFreeMemory => {
            let i = line.find("Free memory on device")?;
            let rest = &line[i..];
            let open = rest.find('(')?;
            let free = number_at(&rest[open + 1..])?;
            let slash = rest[open..].find('/')? + open;
            let total = number_at(&rest[slash + 1..])?;
            if total <= 0.0 || free > total {
                return None;
            }
            // vLLM prints both in GiB to two decimals: the least free and the largest
            // total that print so, then the one convention, so that vLLM's
            // ceil(U x total) fits in what was free whatever the rounding hid.
            let gib = crate::units::GIB as f64;
            let free_lo = ((free - PRINTED_HALF_STEP).max(0.0) * gib) as u64;
            let total_hi = ((total + PRINTED_HALF_STEP) * gib) as u64;
            let u = crate::diagnose::vllm_utilization::fitting(total_hi, free_lo)?;
            Some((
                format!("--gpu-memory-utilization {u:.2}"),
                format!("{free} of {total} GiB was free at start-up"),
            ))
        }
        RunErrorKind::VllmNoCacheBlocks => Some((
            String::new(),
            "the weights and the profiling peak filled the budget".into(),
        )),
        _ => None,
    }
}

/// The sentence naming the plan command for a vLLM start-up that failed for memory, `None`
/// for other lines.
pub(super) fn plan_hint(line: &str, kind: &RunErrorKind) -> Option<String> {
    let (flags, because) = fitting_flags(line, kind)?;
    let cmd = if flags.is_empty() {
        "vramdoc plan vllm MODEL_DIR".to_string()
    } else {
        format!("vramdoc plan vllm MODEL_DIR {flags}")
    };
    Some(format!(
        " {because}: `{cmd}` (with the server's other flags) checks on this GPU, beside what \
         holds it now, that the server starts, and suggests the utilisation and length that \
         do (docs/plan.md)."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kv_cache_line_gives_the_length_that_fits() {
        let h = plan_hint(
            "ValueError: The model's max seq len (32768) is larger than the maximum number of \
             tokens that can be stored in KV cache (7344). Try increasing",
            &RunErrorKind::VllmKvCache,
        )
        .unwrap();
        assert!(
            h.contains("`vramdoc plan vllm MODEL_DIR --max-model-len 7344`"),
            "{h}"
        );
        let v1 = plan_hint(
            "ValueError: To serve at least one request with the model's max seq len (65536), \
             (4.76 GiB KV cache is needed, which is larger than the available KV cache memory \
             (1.56 GiB). Based on the available memory, the estimated maximum model length is \
             15984. Try increasing",
            &RunErrorKind::VllmKvCache,
        )
        .unwrap();
        assert!(v1.contains("--max-model-len 15984`"), "{v1}");
    }

    #[test]
    fn the_free_memory_line_gives_a_utilisation_that_passes_the_check() {
        let h = plan_hint(
            "ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less \
             than desired GPU memory utilization (0.9, 19.84 GiB).",
            &RunErrorKind::VllmFreeMemory,
        )
        .unwrap();
        // 19.77 / 22.05 = 0.8966: 0.89 x 22.05 = 19.62 GiB fits in 19.77.
        assert!(h.contains("--gpu-memory-utilization 0.89`"), "{h}");
        assert!(h.contains("19.77 of 22.05 GiB"), "{h}");
        // 4.00 / 20.00 is 0.20 exactly, but the free memory that prints as 4.00 may be
        // 3.995 GiB, under 0.20 x 20.00: the suggestion allows for the rounding.
        let edge = plan_hint(
            "ValueError: Free memory on device cuda:0 (4.00/20.00 GiB) on startup is less \
             than desired GPU memory utilization (0.9, 18.00 GiB).",
            &RunErrorKind::VllmFreeMemory,
        )
        .unwrap();
        assert!(edge.contains("--gpu-memory-utilization 0.19`"), "{edge}");
        // Nearly everything held: no utilisation fits, so no flags are made up.
        assert_eq!(
            plan_hint(
                "Free memory on device cuda:0 (0.01/80.00 GiB) on startup",
                &RunErrorKind::VllmFreeMemory
            ),
            None
        );
    }

    #[test]
    fn lines_without_numbers_or_of_other_kinds_give_no_flags() {
        let h = plan_hint(
            "ValueError: No available memory for the cache blocks.",
            &RunErrorKind::VllmNoCacheBlocks,
        )
        .unwrap();
        assert!(h.contains("`vramdoc plan vllm MODEL_DIR`"), "{h}");
        assert_eq!(plan_hint("out of memory", &RunErrorKind::CudaOom), None);
        assert_eq!(
            plan_hint("stored in KV cache (abc)", &RunErrorKind::VllmKvCache),
            None
        );
        assert_eq!(
            plan_hint(
                "Free memory on device (30.0/20.0 GiB)",
                &RunErrorKind::VllmFreeMemory
            ),
            None
        );
        // No expansion: a long run of digits is cut, not parsed into a huge length.
        let long = format!("stored in KV cache ({})", "9".repeat(5000));
        assert!(plan_hint(&long, &RunErrorKind::VllmKvCache).is_none_or(|h| h.len() < 400));
    }
}
