//! `vramdoc plan vllm MODEL_DIR` (issue 35): model directories built here (config.json and
//! safetensors files whose headers declare real models' shapes; the data sections are sparse
//! files of the declared length, never written), planned on simulated boxes with and without
//! a neighbour; the verdict, the reason naming the neighbour, suggested flags that do start,
//! `--json`'s names, tensor parallelism, GPU selection, and bad model directories.

use crate::common::hold::Holder;
use crate::common::{fresh_box, on_box};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;

/// One safetensors file of `tensors` (name, dtype, shape, bytes per element); returns the
/// data bytes it declares.
pub(crate) fn safetensors(path: &Path, tensors: &[(String, &str, Vec<u64>, u64)]) -> u64 {
    let mut header = serde_json::Map::new();
    let mut off = 0u64;
    for (name, dtype, shape, elem) in tensors {
        let n: u64 = shape.iter().product::<u64>() * elem;
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}),
        );
        off += n;
    }
    let h = serde_json::to_vec(&Value::Object(header)).unwrap();
    let f = std::fs::File::create(path).unwrap();
    use std::io::Write;
    (&f).write_all(&(h.len() as u64).to_le_bytes()).unwrap();
    (&f).write_all(&h).unwrap();
    // Sparse: the declared data section, not written.
    f.set_len(8 + h.len() as u64 + off).unwrap();
    off
}

/// A Llama-architecture model directory (Llama-3.1-8B's shapes by default) sharded over
/// `shards` files with an index; returns the weight bytes its headers declare.
fn llama(dir: &Path, layers: u64, hidden: u64, inter: u64, kv_heads: u64, shards: u64) -> u64 {
    let (vocab, heads) = (128_256u64, hidden / 128);
    std::fs::write(
        dir.join("config.json"),
        json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": heads,
            "num_hidden_layers": layers, "num_key_value_heads": kv_heads, "vocab_size": vocab,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16"})
        .to_string(),
    )
    .unwrap();
    let kv = kv_heads * 128;
    let mut all = vec![(
        "model.embed_tokens.weight".to_string(),
        "BF16",
        vec![vocab, hidden],
        2,
    )];
    for l in 0..layers {
        let p = format!("model.layers.{l}.");
        for (n, shape) in [
            ("self_attn.q_proj.weight", vec![hidden, hidden]),
            ("self_attn.k_proj.weight", vec![kv, hidden]),
            ("self_attn.v_proj.weight", vec![kv, hidden]),
            ("self_attn.o_proj.weight", vec![hidden, hidden]),
            ("mlp.gate_proj.weight", vec![inter, hidden]),
            ("mlp.up_proj.weight", vec![inter, hidden]),
            ("mlp.down_proj.weight", vec![hidden, inter]),
            ("input_layernorm.weight", vec![hidden]),
            ("post_attention_layernorm.weight", vec![hidden]),
        ] {
            all.push((format!("{p}{n}"), "BF16", shape, 2));
        }
    }
    all.push(("model.norm.weight".into(), "BF16", vec![hidden], 2));
    all.push(("lm_head.weight".into(), "BF16", vec![vocab, hidden], 2));
    sharded(dir, &all, all.len().div_ceil(shards as usize))
}

/// `tensors` written into `dir` as the Hub shards a checkpoint: `per` tensors a file, named
/// `model-NNNNN-of-NNNNN.safetensors`, with the index that maps each tensor to its file. The
/// bytes the headers declare.
pub(crate) fn sharded(dir: &Path, tensors: &[(String, &str, Vec<u64>, u64)], per: usize) -> u64 {
    let shards = tensors.len().div_ceil(per.max(1));
    let mut total = 0;
    let mut map = serde_json::Map::new();
    for (i, chunk) in tensors.chunks(per.max(1)).enumerate() {
        let file = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
        total += safetensors(&dir.join(&file), chunk);
        for t in chunk {
            map.insert(t.0.clone(), json!(file));
        }
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"metadata": {"total_size": total}, "weight_map": map}).to_string(),
    )
    .unwrap();
    total
}

/// An H100 box, a Llama-8B-shaped model directory ([`llama_8b`]) and a neighbour
/// (`python serve.py`) holding `size` on the GPU.
fn h100_beside_a_server(size: &str) -> (tempfile::TempDir, tempfile::TempDir, Holder) {
    let b = fresh_box("h100");
    let m = tempfile::tempdir().unwrap();
    llama_8b(m.path());
    let h = Holder::start(b.path(), &[], &["--size", size, "--", "python", "serve.py"]);
    (b, m, h)
}

fn llama_8b(dir: &Path) -> u64 {
    llama(dir, 32, 4096, 14336, 8, 4)
}

fn plan(boxdir: &Path, model: &Path, args: &[&str]) -> Output {
    on_box(boxdir)
        .args(["plan", "vllm"])
        .arg(model)
        .args(args)
        .output()
        .expect("run vramdoc plan vllm")
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn a_clean_h100_starts_llama_8b_with_the_kv_cache_left_in_the_budget() {
    let b = fresh_box("h100");
    let m = tempfile::tempdir().unwrap();
    let weights = llama_8b(m.path());
    let o = plan(b.path(), m.path(), &["--max-model-len", "32768", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json_of(&o);
    assert_eq!(v["starts"], true);
    // 32 layers x (K + V) x 8 heads x 128 x 2 bytes.
    assert_eq!(v["kv_bytes_per_token"], 131_072);
    assert_eq!(v["weights_bytes"], weights);
    assert_eq!(v["weights_bytes_per_gpu"], weights);
    let d = &v["devices"][0];
    assert_eq!(d["index"], 0);
    assert!(d["others"].as_array().unwrap().is_empty());
    let (total, free) = (d["total"].as_u64().unwrap(), d["free"].as_u64().unwrap());
    assert!(free <= total && total > 79 << 30, "{d}");
    // The KV cache is what the budget leaves after weights and allowances, in blocks.
    // Without the flag, the newest vLLM's default (`Version::default_utilization`).
    assert_eq!(v["options"]["gpu_memory_utilization"], 0.92);
    let budget = d["budget"].as_u64().unwrap();
    assert_eq!(budget, (0.92 * total as f64).ceil() as u64);
    let fixed: u64 = [
        "weights_bytes",
        "rotary_cache_bytes",
        "non_torch_bytes",
        "activation_bytes",
        "cudagraph_bytes",
    ]
    .iter()
    .map(|k| d[k].as_u64().unwrap())
    .sum();
    let kv = v["kv_bytes"].as_u64().unwrap();
    assert_eq!(kv, budget - fixed);
    // vLLM's rotary cos/sin cache: 131072 positions x 128 x 2 bytes.
    assert_eq!(d["rotary_cache_bytes"], 32 << 20);
    assert_eq!(v["kv_tokens"], kv / 131_072 / 16 * 16);
    assert!(v["reason"].as_str().unwrap().contains("tokens"), "{v}");
    // The headers, not the 15 GiB of data, were read.
    assert!(
        v["model"]["header_bytes_read"].as_u64().unwrap() < 64 << 10,
        "{v}"
    );
}

/// The utilisation taken without the flag is the one the vLLM version defaults to: 0.92 in
/// the newest (vllm/config/cache.py at main), 0.9 in the releases before.
#[test]
fn without_the_flag_the_utilisation_is_the_vllm_versions_default() {
    let b = fresh_box("h100");
    let m = tempfile::tempdir().unwrap();
    llama_8b(m.path());
    for (version, u) in [("latest", 0.92), ("0.9", 0.9), ("0.6.4", 0.9)] {
        let o = plan(
            b.path(),
            m.path(),
            &[
                "--max-model-len",
                "4096",
                "--vllm-version",
                version,
                "--json",
            ],
        );
        let v = json_of(&o);
        assert_eq!(v["options"]["gpu_memory_utilization"], u, "{version}: {v}");
        let d = &v["devices"][0];
        let total = d["total"].as_u64().unwrap() as f64;
        assert_eq!(
            d["budget"].as_u64(),
            Some((u * total).ceil() as u64),
            "{version}"
        );
    }
}

#[test]
fn a_neighbour_holding_60_gib_refuses_0_9_names_it_and_the_suggestion_starts() {
    let (b, m, h) = h100_beside_a_server("60GiB");
    let o = plan(
        b.path(),
        m.path(),
        &[
            "--max-model-len",
            "32768",
            "--gpu-memory-utilization",
            "0.9",
        ],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("starts: no"), "{text}");
    let reason = text
        .lines()
        .find(|l| l.contains("refuses to start"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(reason.contains("gpu_memory_utilization 0.9 "), "{reason}");
    assert!(reason.contains(&format!("PID {}", h.pid())), "{reason}");
    assert!(reason.contains("holds 60."), "{reason}");

    let v = json_of(&plan(
        b.path(),
        m.path(),
        &["--max-model-len", "32768", "--json"],
    ));
    assert_eq!(v["starts"], false);
    assert_eq!(v["devices"][0]["others"][0]["pid"], h.pid());
    assert!(v["devices"][0]["others"][0]["bytes"].as_u64().unwrap() >= 60 << 30);
    let s = &v["suggested"];
    let u = s["gpu_memory_utilization"].as_f64().expect("a utilisation");
    assert!(u > 0.0 && u < 0.9, "{s}");
    let len = s["max_model_len"].as_u64().expect("a length");
    assert!(len > 0 && len <= 32768 && len.is_multiple_of(16), "{s}");
    // The suggested flags start.
    let flags: Vec<String> = s["flags"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let again = plan(b.path(), m.path(), &[&flags[..], &["--json"]].concat());
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let w = json_of(&again);
    assert_eq!(w["starts"], true, "{w}");
    assert!(w["devices"][0]["budget"].as_u64() <= w["devices"][0]["free_at_startup"].as_u64());
    drop(h);
    // Without the neighbour 0.9 starts again.
    let o = plan(b.path(), m.path(), &["--max-model-len", "32768"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn tensor_parallelism_splits_weights_and_kv_heads_over_the_selected_gpus() {
    let b = fresh_box("2xh100");
    let m = tempfile::tempdir().unwrap();
    // Llama-3.1-70B's shapes: 80 layers, hidden 8192, MLP 28672, 8 KV heads (141 GB).
    let weights = llama(m.path(), 80, 8192, 28672, 8, 30);
    assert!(weights > 100_000_000_000);
    let v = json_of(&plan(
        b.path(),
        m.path(),
        &["--tp", "2", "--max-model-len", "8192", "--json"],
    ));
    assert_eq!(v["kv_bytes_per_token"], 80 * 2 * 8 * 128 * 2);
    assert_eq!(v["kv_bytes_per_token_per_gpu"], 80 * 2 * 4 * 128 * 2);
    let per_gpu = v["weights_bytes_per_gpu"].as_u64().unwrap();
    // Matrices split in two; the norms (two per layer and the final one) on both GPUs.
    let vectors = (80 * 2 + 1) * 8192 * 2;
    assert_eq!(per_gpu, (weights - vectors).div_ceil(2) + vectors);
    assert_eq!(v["devices"].as_array().unwrap().len(), 2);
    let files = std::fs::read_dir(m.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "safetensors")
        })
        .count();
    assert!(files > 20);
    assert_eq!(v["model"]["files"], files);
    assert!(v["model"]["header_bytes_read"].as_u64().unwrap() < 1 << 20);
    // 70B in bf16 does not fit one H100.
    let o = plan(b.path(), m.path(), &["--gpus", "1", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json_of(&o);
    assert!(v["suggested"]["gpu_memory_utilization"].is_null(), "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("no room for the KV cache"),
        "{v}"
    );
    // --tp 2 on one selected GPU is a usage error naming both.
    let o = plan(b.path(), m.path(), &["--tp", "2", "--gpus", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--tp 2 needs 2 GPUs; 1 selected"), "{e}");
}

#[test]
fn cuda_visible_devices_picks_the_gpu_as_vllm_would() {
    let b = fresh_box("2x24GiB");
    let m = tempfile::tempdir().unwrap();
    llama_8b(m.path());
    let _h = Holder::start(b.path(), &[], &["--device", "0", "--size", "12GiB"]);
    let run = |cvd: &str| {
        on_box(b.path())
            .env("CUDA_VISIBLE_DEVICES", cvd)
            .args(["plan", "vllm"])
            .arg(m.path())
            .args(["--max-model-len", "4096", "--json"])
            .output()
            .unwrap()
    };
    let busy = run("0");
    assert_eq!(busy.status.code(), Some(1));
    assert_eq!(json_of(&busy)["devices"][0]["index"], 0);
    let clean = run("1");
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    assert_eq!(json_of(&clean)["devices"][0]["index"], 1);
}

#[test]
fn mla_and_fp8_kv_change_the_bytes_per_token() {
    let b = fresh_box("h100");
    let m = tempfile::tempdir().unwrap();
    // deepseek-ai/DeepSeek-V2-Lite's attention: 27 layers, kv_lora_rank 512, rope 64.
    std::fs::write(
        m.path().join("config.json"),
        json!({"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
            "hidden_size": 2048, "intermediate_size": 10944, "num_attention_heads": 16,
            "num_hidden_layers": 27, "num_key_value_heads": 16, "kv_lora_rank": 512,
            "qk_rope_head_dim": 64, "vocab_size": 102400, "max_position_embeddings": 163840,
            "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}})
        .to_string(),
    )
    .unwrap();
    safetensors(
        &m.path().join("model.safetensors"),
        &[
            ("w".into(), "F8_E4M3", vec![16 << 20, 1024], 1),
            ("s".into(), "F32", vec![4096], 4),
        ],
    );
    let v = json_of(&plan(
        b.path(),
        m.path(),
        &["--max-model-len", "16384", "--json"],
    ));
    assert_eq!(v["kv_bytes_per_token"], 27 * 576 * 2);
    assert_eq!(v["weights_bytes"], (16u64 << 30) + 4096 * 4);
    assert_eq!(v["model"]["quantization"], "fp8");
    let f = json_of(&plan(
        b.path(),
        m.path(),
        &[
            "--max-model-len",
            "16384",
            "--kv-cache-dtype",
            "fp8",
            "--json",
        ],
    ));
    assert_eq!(f["kv_bytes_per_token"], 27 * 576);
    assert!(f["kv_tokens"].as_u64() > v["kv_tokens"].as_u64());
}

fn refused(boxdir: &Path, model: &Path, want: &[&str]) {
    let o = plan(boxdir, model, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    for w in want {
        assert!(e.contains(w), "want {w:?} in {e}");
    }
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_model_directories_are_one_line_errors_naming_the_file() {
    let b = fresh_box("h100");
    let m = tempfile::tempdir().unwrap();
    refused(b.path(), m.path(), &["config.json"]);
    llama_8b(m.path());
    // A shard cut short (an interrupted download).
    let shard = m.path().join("model-00002-of-00004.safetensors");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    refused(
        b.path(),
        m.path(),
        &["model-00002-of-00004.safetensors", "truncated"],
    );
    // A header length beyond the format's limit.
    std::fs::write(&shard, u64::MAX.to_le_bytes()).unwrap();
    refused(
        b.path(),
        m.path(),
        &["model-00002-of-00004.safetensors", "limit"],
    );
    // A shard the index names is missing.
    std::fs::remove_file(&shard).unwrap();
    refused(
        b.path(),
        m.path(),
        &["model.safetensors.index.json", "model-00002-of-00004"],
    );
    // A config without what memory needs.
    std::fs::write(m.path().join("config.json"), r#"{"model_type":"llama"}"#).unwrap();
    refused(b.path(), m.path(), &["config.json", "num_hidden_layers"]);
    std::fs::write(m.path().join("config.json"), "{").unwrap();
    refused(b.path(), m.path(), &["config.json", "not JSON"]);
    // No weights at all.
    let empty = tempfile::tempdir().unwrap();
    std::fs::copy(
        m.path().join("model.safetensors.index.json"),
        empty.path().join("x.json"),
    )
    .unwrap();
    llama_8b(empty.path());
    for e in std::fs::read_dir(empty.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            std::fs::remove_file(p).unwrap();
        }
    }
    std::fs::remove_file(empty.path().join("model.safetensors.index.json")).unwrap();
    refused(b.path(), empty.path(), &["no *.safetensors files"]);
    // Flags.
    let o = plan(b.path(), empty.path(), &["--gpu-memory-utilization", "1.5"]);
    assert_eq!(o.status.code(), Some(2));
    let o = plan(b.path(), empty.path(), &["--vllm-version", "ten"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("MAJOR.MINOR"));
}

/// One utilisation convention (`diagnose::vllm_utilization`, docs/plan.md): `plan vllm`
/// suggests the utilisation that `scan`'s headroom gives the same GPU. A 59808 MiB holder
/// (and its 448 MiB context) on an H100 leaves 20269 MiB beside vramdoc's 512 MiB context
/// reserve: 0.2501 of CUDA's 81037 MiB total, which vLLM multiplies (0.25), but 0.2485 of
/// NVML's 81559 MiB, which scan divided by before (0.24).
#[test]
fn plan_and_scan_suggest_one_utilisation_beside_a_neighbour() {
    let (b, m, _h) = h100_beside_a_server("59808MiB");
    let v = json_of(&plan(
        b.path(),
        m.path(),
        &["--max-model-len", "8192", "--json"],
    ));
    let u = v["suggested"]["gpu_memory_utilization"].as_f64();
    assert_eq!(u, Some(0.25), "{v}");
    let scan = on_box(b.path()).args(["scan", "--json"]).output().unwrap();
    let s = json_of(&scan);
    assert_eq!(
        s["scan"]["headroom"][0]["max_gpu_memory_utilization"].as_f64(),
        u,
        "{}",
        s["scan"]["headroom"]
    );
}

#[test]
fn a_vllm_start_up_refused_under_run_names_a_plan_that_passes_the_check() {
    let (b, m, _h) = h100_beside_a_server("60GiB");
    // The line vLLM's start-up check prints on this box (its figures, as `plan` sees them).
    let v = json_of(&plan(b.path(), m.path(), &["--json"]));
    let d = &v["devices"][0];
    let gib = |k: &str| d[k].as_u64().unwrap() as f64 / (1u64 << 30) as f64;
    let line = format!(
        "ValueError: Free memory on device cuda:0 ({:.2}/{:.2} GiB) on startup is less than \
         desired GPU memory utilization (0.9, {:.2} GiB). Decrease GPU memory utilization or \
         reduce GPU memory used by other processes.",
        gib("free_at_startup"),
        gib("total"),
        gib("budget")
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run.json");
    let o = on_box(b.path())
        .args(["run", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", &format!("echo '{line}' >&2; exit 1")])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let f = r["run"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "out-of-memory")
        .unwrap_or_else(|| panic!("{r}"));
    let fix = f["fix"].as_str().unwrap();
    let key = "`vramdoc plan vllm MODEL_DIR ";
    let at = fix.find(key).unwrap_or_else(|| panic!("{fix}")) + key.len();
    let flags: Vec<&str> = fix[at..][..fix[at..].find('`').unwrap()]
        .split_whitespace()
        .collect();
    assert_eq!(flags[0], "--gpu-memory-utilization", "{fix}");
    // That plan passes vLLM's start-up check beside the neighbour ...
    let p = json_of(&plan(
        b.path(),
        m.path(),
        &[&flags[..], &["--json"]].concat(),
    ));
    let d = &p["devices"][0];
    assert!(d["budget"].as_u64() <= d["free_at_startup"].as_u64(), "{p}");
    assert!(
        !p["reason"].as_str().unwrap().contains("refuses to start"),
        "{p}"
    );
    // ... and what it suggests starts.
    let s: Vec<String> = p["suggested"]["flags"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    let s: Vec<&str> = s.iter().map(String::as_str).collect();
    let again = plan(b.path(), m.path(), &s);
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
}

#[test]
fn pipeline_parallelism_places_layers_embeddings_and_head_on_their_stages() {
    let b = fresh_box("4xh100");
    let m = tempfile::tempdir().unwrap();
    // Llama-3.1-70B's shapes: 80 layers, over 2 stages of 2 tensor-parallel GPUs.
    let weights = llama(m.path(), 80, 8192, 28672, 8, 30);
    let o = plan(
        b.path(),
        m.path(),
        &[
            "--tp",
            "2",
            "--pp",
            "2",
            "--max-model-len",
            "8192",
            "--json",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v = json_of(&o);
    let d = v["devices"].as_array().unwrap();
    assert_eq!(d.len(), 4);
    assert_eq!(v["options"]["pipeline_parallel_size"], 2);
    let (vocab, hidden) = (128_256u64, 8192u64);
    let embed = vocab * hidden * 2;
    let layer = |i: usize| d[i]["weights_bytes"].as_u64().unwrap();
    // Each GPU: 40 layers, half of every matrix; KV: 40 layers x 4 of the 8 KV heads.
    for g in d {
        assert_eq!(g["layers"], 40);
        assert_eq!(g["kv_bytes_per_token"], 40 * 2 * 4 * 128 * 2);
    }
    assert_eq!(layer(0), layer(1));
    assert_eq!(layer(2), layer(3));
    // The first stage has the embeddings, the last the LM head and the final norm: the
    // stages differ by the norm only, and all four together hold every byte once per
    // tensor-parallel rank (matrices halved, vectors on both).
    assert_eq!(layer(2) - layer(0), hidden * 2);
    let vectors = (80 * 2 + 1) * hidden * 2;
    assert_eq!(
        layer(0) + layer(2),
        (weights - vectors) / 2 + vectors,
        "{v}"
    );
    assert!(layer(0) > embed / 2);
    // vLLM gives every worker the fewest blocks of any.
    let fewest = d.iter().map(|g| g["kv_tokens"].as_u64().unwrap()).min();
    assert_eq!(v["kv_tokens"].as_u64(), fewest);
    assert!(v["suggested"]["flags"]
        .as_str()
        .unwrap()
        .contains("--pipeline-parallel-size 2"));
    // Four GPUs are needed; two are a usage error naming both sizes.
    let o = plan(
        b.path(),
        m.path(),
        &["--tp", "2", "--pp", "2", "--gpus", "0,1"],
    );
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--tp 2 --pp 2 needs 4 GPUs; 2 selected"), "{e}");
}
