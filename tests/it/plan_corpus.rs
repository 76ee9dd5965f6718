//! `plan vllm` against real vLLM start-ups (issue 35, "Published error"): each case in
//! tests/it/corpus/plan/ is one start-up from a public log — `startup.log` (the log lines,
//! with the issue they come from), `config.json` (the model's public architecture, the
//! fields memory needs) and `case.toml` (the vLLM release, the GPU as a simulator preset,
//! the flags, what other processes held, and what vLLM printed and did). The checkpoint's
//! safetensors headers are built here from the config the way the Hub ships that model
//! (bf16/fp16, GPTQ or AWQ int4, fp8 with 128×128 block scales; sparse files, never
//! written), the box is simulated, and `vramdoc plan vllm --json` predicts.
//!
//! The test writes the error table (docs/plan.md "Published error") to
//! `target/plan-corpus.md` (or `$VRAMDOC_PLAN_TABLE`), prints it, and asserts that every
//! start/fail verdict is right and that the KV error stays within the bounds docs/plan.md
//! states. Regenerate: `scripts/test --test it -- plan_corpus:: --nocapture`.

use crate::common::hold::Holder;
use crate::common::{fresh_box, on_box};
use serde::Deserialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const GIB: f64 = (1u64 << 30) as f64;

/// KV error bounds (|predicted − vLLM| / vLLM), as docs/plan.md states them: the largest
/// error seen, rounded up — dense models on vLLM 0.6.4 and later (V0 after its profiler
/// rewrite, and V1), dense models on the releases before, and mixture-of-experts models
/// (whose expert activations and workspaces the planner does not model).
const KV_BOUND_DENSE_RECENT: f64 = 0.27;
const KV_BOUND_DENSE_OLD: f64 = 0.51;
const KV_BOUND_MOE: f64 = 0.75;

#[derive(Debug, Deserialize)]
struct Case {
    source: String,
    model: String,
    #[serde(default)]
    stand_in: bool,
    vllm: String,
    gpu: String,
    args: Vec<String>,
    others_gib: Option<f64>,
    observed: Observed,
}

#[derive(Debug, Deserialize)]
struct Observed {
    starts: bool,
    /// Why vLLM did not start: `free` (the start-up free-memory check), `no_kv` ("No
    /// available memory for the cache blocks"), `max_len` (the KV cache holds less than
    /// one request of `max_model_len`).
    failure: Option<String>,
    kv_tokens: Option<u64>,
    kv_gib: Option<f64>,
    #[serde(default)]
    kv_derived: bool,
    weights_gib: Option<f64>,
    non_torch_gib: Option<f64>,
    activation_gib: Option<f64>,
}

fn dtype_of(cfg: &Value) -> (&'static str, u64) {
    match cfg["torch_dtype"].as_str() {
        Some("float32") => ("F32", 4),
        Some("float16") => ("F16", 2),
        _ => ("BF16", 2),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Quant {
    None,
    Gptq(u64),
    Awq(u64),
    Fp8Block(u64),
}

type Tensor = (String, &'static str, Vec<u64>, u64);

/// The tensors of one linear layer `out × in` as the checkpoint's quantization stores them
/// (AutoGPTQ: `qweight [in/8, out]`, `qzeros`, `scales`, `g_idx`; AutoAWQ: `qweight
/// [in, out/8]`, `qzeros`, `scales`; fp8: the weight in one byte and float32
/// `weight_scale_inv` per 128×128 block).
fn linear(
    t: &mut Vec<Tensor>,
    name: &str,
    out: u64,
    inp: u64,
    q: Quant,
    dt: (&'static str, u64),
    bias: bool,
) {
    match q {
        Quant::None => t.push((format!("{name}.weight"), dt.0, vec![out, inp], dt.1)),
        Quant::Gptq(g) => {
            t.push((format!("{name}.qweight"), "I32", vec![inp / 8, out], 4));
            t.push((format!("{name}.qzeros"), "I32", vec![inp / g, out / 8], 4));
            t.push((format!("{name}.scales"), "F16", vec![inp / g, out], 2));
            t.push((format!("{name}.g_idx"), "I32", vec![inp], 4));
        }
        Quant::Awq(g) => {
            t.push((format!("{name}.qweight"), "I32", vec![inp, out / 8], 4));
            t.push((format!("{name}.qzeros"), "I32", vec![inp / g, out / 8], 4));
            t.push((format!("{name}.scales"), "F16", vec![inp / g, out], 2));
        }
        Quant::Fp8Block(b) => {
            t.push((format!("{name}.weight"), "F8_E4M3", vec![out, inp], 1));
            t.push((
                format!("{name}.weight_scale_inv"),
                "F32",
                vec![out.div_ceil(b), inp.div_ceil(b)],
                4,
            ));
        }
    }
    if bias {
        t.push((format!("{name}.bias"), dt.0, vec![out], dt.1));
    }
}

/// The checkpoint's tensor table for a Llama-family config (Llama, Mistral, Qwen2 with its
/// q/k/v biases, Qwen3 with q/k norms, Qwen3-MoE with a router and per-expert MLPs).
fn checkpoint(cfg: &Value) -> Vec<Tensor> {
    let n = |k: &str| {
        cfg[k]
            .as_u64()
            .unwrap_or_else(|| panic!("config.json: {k}"))
    };
    let (hidden, heads, layers, vocab) = (
        n("hidden_size"),
        n("num_attention_heads"),
        n("num_hidden_layers"),
        n("vocab_size"),
    );
    let kv = cfg["num_key_value_heads"].as_u64().unwrap_or(heads);
    let hd = cfg["head_dim"].as_u64().unwrap_or(hidden / heads);
    let mt = cfg["model_type"].as_str().unwrap_or("");
    let qc = &cfg["quantization_config"];
    let group = qc["group_size"].as_u64().unwrap_or(128);
    let q = match qc["quant_method"].as_str() {
        Some("gptq") => Quant::Gptq(group),
        Some("awq") => Quant::Awq(group),
        Some("fp8") => Quant::Fp8Block(qc["weight_block_size"][0].as_u64().unwrap_or(128)),
        _ => Quant::None,
    };
    // GPTQ/AWQ checkpoints keep their other tensors in fp16.
    let dt = match q {
        Quant::Gptq(_) | Quant::Awq(_) => ("F16", 2),
        _ => dtype_of(cfg),
    };
    let mut t = vec![(
        "model.embed_tokens.weight".to_string(),
        dt.0,
        vec![vocab, hidden],
        dt.1,
    )];
    let qkv_bias = mt == "qwen2";
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        linear(
            &mut t,
            &format!("{p}.self_attn.q_proj"),
            heads * hd,
            hidden,
            q,
            dt,
            qkv_bias,
        );
        linear(
            &mut t,
            &format!("{p}.self_attn.k_proj"),
            kv * hd,
            hidden,
            q,
            dt,
            qkv_bias,
        );
        linear(
            &mut t,
            &format!("{p}.self_attn.v_proj"),
            kv * hd,
            hidden,
            q,
            dt,
            qkv_bias,
        );
        linear(
            &mut t,
            &format!("{p}.self_attn.o_proj"),
            hidden,
            heads * hd,
            q,
            dt,
            false,
        );
        if mt.starts_with("qwen3") {
            for nn in ["q_norm", "k_norm"] {
                t.push((format!("{p}.self_attn.{nn}.weight"), dt.0, vec![hd], dt.1));
            }
        }
        if let Some(experts) = cfg["num_experts"].as_u64() {
            let inter = n("moe_intermediate_size");
            t.push((
                format!("{p}.mlp.gate.weight"),
                dt.0,
                vec![experts, hidden],
                dt.1,
            ));
            for e in 0..experts {
                let ep = format!("{p}.mlp.experts.{e}");
                linear(
                    &mut t,
                    &format!("{ep}.gate_proj"),
                    inter,
                    hidden,
                    q,
                    dt,
                    false,
                );
                linear(
                    &mut t,
                    &format!("{ep}.up_proj"),
                    inter,
                    hidden,
                    q,
                    dt,
                    false,
                );
                linear(
                    &mut t,
                    &format!("{ep}.down_proj"),
                    hidden,
                    inter,
                    q,
                    dt,
                    false,
                );
            }
        } else {
            let inter = n("intermediate_size");
            linear(
                &mut t,
                &format!("{p}.mlp.gate_proj"),
                inter,
                hidden,
                q,
                dt,
                false,
            );
            linear(
                &mut t,
                &format!("{p}.mlp.up_proj"),
                inter,
                hidden,
                q,
                dt,
                false,
            );
            linear(
                &mut t,
                &format!("{p}.mlp.down_proj"),
                hidden,
                inter,
                q,
                dt,
                false,
            );
        }
        for nn in ["input_layernorm", "post_attention_layernorm"] {
            t.push((format!("{p}.{nn}.weight"), dt.0, vec![hidden], dt.1));
        }
    }
    t.push(("model.norm.weight".into(), dt.0, vec![hidden], dt.1));
    if cfg["tie_word_embeddings"].as_bool() != Some(true) {
        t.push(("lm_head.weight".into(), dt.0, vec![vocab, hidden], dt.1));
    }
    t
}

/// `dir` as the Hub ships the model: config.json and sharded safetensors with an index.
fn model_dir(case_dir: &Path, dir: &Path) -> u64 {
    let cfg_text = std::fs::read_to_string(case_dir.join("config.json")).unwrap();
    std::fs::write(dir.join("config.json"), &cfg_text).unwrap();
    let cfg: Value = serde_json::from_str(&cfg_text).unwrap();
    let all = checkpoint(&cfg);
    crate::plan::sharded(dir, &all, 8000)
}

/// The failure kind a plan's reason names (see [`Observed::failure`]).
fn failure_kind(reason: &str) -> &'static str {
    if reason.contains("refuses to start") || reason.contains("runs out of memory") {
        "free"
    } else if reason.contains("no room for the KV cache") {
        "no_kv"
    } else if reason.contains("one request of max_model_len") {
        "max_len"
    } else if reason.contains("CUDA-graph capture") {
        "graphs"
    } else {
        "?"
    }
}

struct Row {
    name: String,
    case: Case,
    plan: Value,
    kv_err: Option<f64>,
    moe: bool,
}

fn gib(b: &Value) -> f64 {
    b.as_u64().unwrap_or(0) as f64 / GIB
}

fn pct(pred: f64, obs: f64) -> f64 {
    (pred - obs) / obs.abs()
}

fn run_case(case_dir: &Path) -> Row {
    let name = case_dir.file_name().unwrap().to_string_lossy().into_owned();
    let case: Case = toml::from_str(&std::fs::read_to_string(case_dir.join("case.toml")).unwrap())
        .unwrap_or_else(|e| panic!("{name}/case.toml: {e}"));
    let log = std::fs::read_to_string(case_dir.join("startup.log")).unwrap();
    assert!(
        log.starts_with(&format!("# source: {}", case.source)),
        "{name}/startup.log names its source first"
    );
    let model = tempfile::tempdir().unwrap();
    model_dir(case_dir, model.path());
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(case_dir.join("config.json")).unwrap())
            .unwrap();
    let moe = cfg["num_experts"].is_u64();
    let b = fresh_box(&case.gpu);
    let _neighbour = case.others_gib.map(|g| {
        let mib = format!("{}MiB", (g * 1024.0).round() as u64);
        Holder::start(b.path(), &[], &["--size", &mib, "--", "python", "other.py"])
    });
    let o = on_box(b.path())
        .args(["plan", "vllm"])
        .arg(model.path())
        .args(["--vllm-version", &case.vllm, "--json"])
        .args(&case.args)
        .output()
        .expect("run vramdoc plan vllm");
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{name}: {e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    assert_eq!(
        o.status.code(),
        Some(if plan["starts"] == true { 0 } else { 1 }),
        "{name}: exit code follows the verdict"
    );
    let kv_err = match (case.observed.kv_tokens, case.observed.kv_gib) {
        (Some(t), _) => Some(pct(plan["kv_tokens"].as_u64().unwrap() as f64, t as f64)),
        (None, Some(g)) if g > 0.0 => Some(pct(gib(&plan["kv_bytes"]), g)),
        _ => None,
    };
    Row {
        name,
        case,
        plan,
        kv_err,
        moe,
    }
}

fn recent(version: &str) -> bool {
    let v: Vec<u64> = version
        .split('.')
        .map(|p| p.parse().unwrap_or(u64::MAX))
        .collect();
    version == "latest"
        || v.get(1).copied().unwrap_or(0) > 6
        || (v.get(1) == Some(&6) && v.get(2).copied().unwrap_or(0) >= 4)
}

fn fmt_err(e: Option<f64>) -> String {
    e.map_or("—".into(), |e| format!("{:+.1} %", e * 100.0))
}

fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| log | vLLM | GPU | model, flags | KV: vLLM | KV: plan | KV error | weights/GPU: vLLM · plan | activation, non-torch: vLLM · plan | outcome: vLLM | plan | verdict |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let o = &r.case.observed;
        let p = &r.plan;
        let src = short_source(&r.case.source);
        let (kv_obs, kv_pred) = match (o.kv_tokens, o.kv_gib) {
            (Some(t), _) => (format!("{t} tokens"), format!("{} tokens", p["kv_tokens"])),
            (None, Some(g)) => (
                format!("{g:.2} GiB{}", if o.kv_derived { " (derived)" } else { "" }),
                format!("{:.2} GiB", gib(&p["kv_bytes"])),
            ),
            _ => ("—".into(), format!("{} tokens", p["kv_tokens"])),
        };
        let weights = match o.weights_gib {
            Some(w) => format!("{w:.2} · {:.2} GiB", loaded_gib(p)),
            None => format!("— · {:.2} GiB", loaded_gib(p)),
        };
        let d = &p["devices"][0];
        let two = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => format!("{a:.2}, {b:.2}"),
            _ => "—".into(),
        };
        let profile = format!(
            "{} · {}",
            two(o.activation_gib, o.non_torch_gib),
            two(
                Some(gib(&d["activation_bytes"])),
                Some(gib(&d["non_torch_bytes"]))
            )
        );
        let outcome = |starts: bool, kind: Option<&str>| {
            if starts {
                "starts".to_string()
            } else {
                format!("fails ({})", kind.unwrap_or("?"))
            }
        };
        let pstarts = p["starts"] == true;
        let pkind = failure_kind(p["reason"].as_str().unwrap_or(""));
        let right = pstarts == o.starts;
        let flags = if r.case.args.is_empty() {
            "defaults".to_string()
        } else {
            r.case.args.join(" ")
        };
        let model = if r.case.stand_in {
            format!(
                "(stand-in {}) {flags}",
                p["model"]["arch"]["name"].as_str().unwrap_or("model")
            )
        } else {
            format!("{}, {flags}", r.case.model)
        };
        let others = r
            .case
            .others_gib
            .map_or(String::new(), |g| format!(", others hold {g:.2} GiB"));
        let _ = writeln!(
            s,
            "| [{src}]({}) | {} | {}{others} | {model} | {kv_obs} | {kv_pred} | {} | {weights} | {profile} | {} | {} | {} |",
            r.case.source,
            r.case.vllm,
            r.case.gpu,
            fmt_err(r.kv_err),
            outcome(o.starts, o.failure.as_deref()),
            outcome(pstarts, Some(pkind)),
            if right { "right" } else { "**wrong**" },
        );
    }
    s
}

/// What vLLM reports as "model weights" on the first GPU, as the plan has it: the
/// checkpoint's share plus the rotary cache built at load.
fn loaded_gib(p: &Value) -> f64 {
    let d = &p["devices"][0];
    gib(&d["weights_bytes"]) + gib(&d["rotary_cache_bytes"])
}

/// The per-figure error table (docs/plan.md "Per figure"): for each log that prints vLLM's
/// profiling breakdown, plan − vLLM in GiB for the budget (`U × total`; vLLM's is the sum of
/// its printed figures), the weights (with the rotary cache), the non-torch memory, the activation peak,
/// and the KV cache, on the first GPU (the rank vLLM logs).
fn figure_table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| log | flags | budget Δ | weights Δ | non-torch Δ | activation Δ | KV GiB: vLLM · plan (Δ) | KV GiB error (logged rank) | KV error |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let d = |x: f64| format!("{x:+.2}");
    for r in rows {
        let o = &r.case.observed;
        let (Some(w), Some(nt), Some(act), Some(kv)) =
            (o.weights_gib, o.non_torch_gib, o.activation_gib, o.kv_gib)
        else {
            continue;
        };
        let p = &r.plan;
        let dev = &p["devices"][0];
        let (pw, pnt, pact, pkv) = (
            loaded_gib(p),
            gib(&dev["non_torch_bytes"]),
            gib(&dev["activation_bytes"]),
            gib(&dev["kv_bytes"]),
        );
        let dkv = pkv - kv.max(0.0);
        // V0 prints `available = U x total - weights - non-torch - activation`: vLLM's
        // budget is the sum of its four figures (negative KV included).
        let budget = gib(&dev["budget"]) - (kv + w + nt + act);
        let src = short_source(&r.case.source);
        let flags = if r.case.args.is_empty() {
            "defaults".to_string()
        } else {
            r.case.args.join(" ")
        };
        let _ = writeln!(
            s,
            "| {src} ({}, {}) | {flags} | {} | {} | {} | {} | {kv:.2} · {pkv:.2} ({}) | {} | {} |",
            r.case.vllm,
            r.case.gpu,
            d(budget),
            d(pw - w),
            d(pnt - nt),
            d(pact - act),
            d(dkv),
            fmt_err((kv > 0.0).then(|| pct(pkv, kv))),
            fmt_err(r.kv_err),
        );
    }
    s
}

fn summary(rows: &[Row]) -> String {
    let right = rows
        .iter()
        .filter(|r| (r.plan["starts"] == true) == r.case.observed.starts)
        .count();
    let mut errs: Vec<f64> = rows.iter().filter_map(|r| r.kv_err.map(f64::abs)).collect();
    errs.sort_by(f64::total_cmp);
    let within = |b: f64| errs.iter().filter(|e| **e <= b).count();
    let median = if errs.is_empty() {
        0.0
    } else {
        errs[errs.len() / 2]
    };
    format!(
        "{} logs; verdicts right on {right} of {}; KV figure on {}: |error| median {:.1} %, \
         within 5 % on {}, within 10 % on {}, within 25 % on {}, largest {:.1} %",
        rows.len(),
        rows.len(),
        errs.len(),
        median * 100.0,
        within(0.05),
        within(0.10),
        within(0.25),
        errs.last().copied().unwrap_or(0.0) * 100.0
    )
}

#[test]
fn plan_vllm_against_real_start_up_logs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/corpus/plan");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("case.toml").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 20, "the corpus holds {} logs", dirs.len());
    let rows: Vec<Row> = dirs.iter().map(|d| run_case(d)).collect();
    let out = format!(
        "{}\n{}\n\n{}",
        table(&rows),
        summary(&rows),
        figure_table(&rows)
    );
    let path = std::env::var_os("VRAMDOC_PLAN_TABLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plan-corpus.md"));
    std::fs::write(&path, &out).unwrap();
    println!("{out}(written to {})", path.display());
    // docs/plan.md publishes this table: it is regenerated when the model changes.
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plan.md"))
        .unwrap();
    for line in out.lines().filter(|l| !l.is_empty()) {
        assert!(
            docs.contains(line),
            "docs/plan.md lacks this line of the error table (regenerate: scripts/test --test it \
             -- plan_corpus:: --nocapture, then paste target/plan-corpus.md):\n{line}"
        );
    }

    for r in &rows {
        let o = &r.case.observed;
        assert_eq!(
            r.plan["starts"] == true,
            o.starts,
            "{}: vLLM {}, the plan says {}",
            r.name,
            if o.starts { "started" } else { "did not start" },
            r.plan["reason"]
        );
        if let Some(e) = r.kv_err {
            let bound = if r.moe {
                KV_BOUND_MOE
            } else if recent(&r.case.vllm) {
                KV_BOUND_DENSE_RECENT
            } else {
                KV_BOUND_DENSE_OLD
            };
            assert!(
                e.abs() <= bound,
                "{}: KV error {:+.1} % beyond the stated {:.0} %",
                r.name,
                e * 100.0,
                bound * 100.0
            );
        }
        // The weights come from the headers: within 10 % of what vLLM loaded (quantized
        // kernels repack, and some logs print GB for GiB).
        if let Some(w) = o.weights_gib {
            let e = pct(loaded_gib(&r.plan), w);
            assert!(
                e.abs() <= 0.10,
                "{}: weights error {:+.1} %",
                r.name,
                e * 100.0
            );
        }
    }
}

/// A corpus case's source as a table shows it: `vllm-project/vllm#10517` for its GitHub URL.
fn short_source(url: &str) -> String {
    url.trim_start_matches("https://github.com/")
        .replace("/issues/", "#")
        .replace("/pull/", "#")
}
