//! `vramdoc plan vllm`'s answer for people: the verdict line, per GPU the arithmetic of
//! vLLM's start-up (budget, weights, allowances, KV cache) and who else is there, then the
//! flags to paste. Pure.

use super::{table, WIDTH};
use crate::plan::VllmPlan;
use crate::units::format_bytes;

/// One row's cell of a GPU.
type Cell = fn(&crate::plan::DevicePlan) -> String;

pub fn render(p: &VllmPlan) -> String {
    let m = &p.model;
    let mut s = format!(
        "{}: {} ({} in {} file{}, {} tensors{}), KV {} per token ({} per GPU)\n",
        m.dir,
        m.arch.name,
        format_bytes(p.weights_bytes),
        m.files,
        if m.files == 1 { "" } else { "s" },
        m.tensors,
        m.quantization
            .as_deref()
            .map(|q| format!(", {q}"))
            .unwrap_or_default(),
        format_bytes(p.kv_bytes_per_token),
        format_bytes(p.kv_bytes_per_token_per_gpu),
    );
    s += &format!(
        "vLLM {}: --tp {}{} --max-model-len {} --gpu-memory-utilization {} --max-num-seqs {} \
         --max-num-batched-tokens {}\n\n",
        p.options.version.label(),
        p.options.tensor_parallel_size,
        if p.options.pipeline_parallel_size > 1 {
            format!(" --pp {}", p.options.pipeline_parallel_size)
        } else {
            String::new()
        },
        p.max_model_len,
        p.options.gpu_memory_utilization,
        p.max_num_seqs,
        p.max_num_batched_tokens
    );
    let mut header = vec!["".to_string()];
    header.extend(
        p.devices
            .iter()
            .map(|d| format!("GPU {} {}", d.index, d.name)),
    );
    let mut t = table(header.iter().map(String::as_str).collect(), WIDTH);
    let u = p.options.gpu_memory_utilization;
    let rows: [(String, Cell); 10] = [
        ("total (CUDA)".into(), |d| format_bytes(d.total)),
        ("free at start-up".into(), |d| {
            format_bytes(d.free_at_startup)
        }),
        (format!("budget ({u} x total)"), |d| format_bytes(d.budget)),
        ("- weights".into(), |d| format_bytes(d.weights_bytes)),
        ("- rotary cache".into(), |d| {
            format_bytes(d.rotary_cache_bytes)
        }),
        ("- non-torch".into(), |d| format_bytes(d.non_torch_bytes)),
        ("- activation peak".into(), |d| {
            format_bytes(d.activation_bytes)
        }),
        ("CUDA graphs".into(), |d| {
            let place = if d.cudagraph_in_budget {
                "in budget"
            } else {
                "beside it"
            };
            format!("{} ({place})", format_bytes(d.cudagraph_bytes))
        }),
        ("= KV cache".into(), |d| format_bytes(d.kv_bytes)),
        ("KV tokens".into(), |d| d.kv_tokens.to_string()),
    ];
    for (label, cell) in rows {
        let mut row = vec![label];
        row.extend(p.devices.iter().map(cell));
        t.add_row(row);
    }
    s += &t.to_string();
    s += "\n";
    for d in &p.devices {
        for o in &d.others {
            s += &format!(
                "  GPU {}: PID {}{} holds {}\n",
                d.index,
                o.pid,
                o.name
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default(),
                o.bytes.map_or("an unknown amount".into(), format_bytes)
            );
        }
    }
    s += &format!(
        "\nstarts: {}\n{}\n",
        if p.starts { "yes" } else { "no" },
        p.reason
    );
    if !p.starts {
        s += &format!("suggested: {}\n", p.suggested.flags);
        if let Some(kv) = p.suggested.kv_cache_memory_bytes {
            s += &format!("  or pin the KV cache: --kv-cache-memory-bytes {kv}\n");
        }
    }
    s
}
