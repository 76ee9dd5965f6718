//! The KV arithmetic against hand computation from published configs (values as in each
//! model's config.json on the Hub), the version facts, and the header checks.

use super::arch::{parse, Attention};
use super::safetensors::read_header;
use super::vllm::Version;
use serde_json::json;

fn llama_8b() -> serde_json::Value {
    // meta-llama/Llama-3.1-8B-Instruct
    json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16"})
}

#[test]
fn llama_gqa_kv_bytes_per_token() {
    let a = parse(&llama_8b()).unwrap();
    // 32 layers x (K + V) x 8 KV heads x 128 head_dim x 2 bytes.
    assert_eq!(a.kv_bytes_per_token(1, 2), 32 * 2 * 8 * 128 * 2);
    assert_eq!(a.kv_bytes_per_token(1, 2), 131_072);
    // fp8 KV: one byte per element.
    assert_eq!(a.kv_bytes_per_token(1, 1), 65_536);
    // TP 2: four KV heads per GPU; TP 16: fewer heads than GPUs, one replicated per GPU.
    assert_eq!(a.kv_bytes_per_token(2, 2), 65_536);
    assert_eq!(a.kv_bytes_per_token(16, 2), 32 * 2 * 128 * 2);
    assert_eq!(a.max_position_embeddings, Some(131072));
}

#[test]
fn the_rotary_cache_follows_positions_scaling_and_rotary_width() {
    // Llama-3.1-8B: 131072 positions x 128 x 2 bytes (its llama3 scaling keeps the positions).
    let mut c = llama_8b();
    assert_eq!(parse(&c).unwrap().rotary_cache_bytes(), 32 << 20);
    c["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0});
    assert_eq!(parse(&c).unwrap().rotary_cache_bytes(), 32 << 20);
    // linear x 4; yarn: original positions x factor; a partial rotary width halves it.
    c["rope_scaling"] = json!({"type": "linear", "factor": 4.0});
    assert_eq!(parse(&c).unwrap().rotary_cache_bytes(), 128 << 20);
    c["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0,
        "original_max_position_embeddings": 32768});
    assert_eq!(parse(&c).unwrap().rotary_cache_bytes(), 32 << 20);
    c["rope_scaling"] = serde_json::Value::Null;
    c["partial_rotary_factor"] = json!(0.5);
    assert_eq!(parse(&c).unwrap().rotary_cache_bytes(), 16 << 20);
    // A hostile factor is ignored, not multiplied.
    c["rope_scaling"] = json!({"type": "linear", "factor": 1e300});
    assert_eq!(parse(&c).unwrap().rotary_cache_bytes(), 16 << 20);
}

#[test]
fn v0_from_0_7_counts_no_tensor_parallel_non_torch_memory() {
    use super::vllm::non_torch_allowance;
    let v = |s| Version::parse(s).unwrap();
    assert_eq!(non_torch_allowance(v("0.6.5"), 2), 768 << 20);
    assert_eq!(non_torch_allowance(v("0.7.2"), 2), 256 << 20);
    assert_eq!(non_torch_allowance(v("0.7"), 1), 256 << 20);
    assert_eq!(non_torch_allowance(v("0.11"), 4), 768 << 20);
}

#[test]
fn head_dim_defaults_to_hidden_over_heads_and_kv_heads_to_heads() {
    // facebook/opt-style MHA config without num_key_value_heads or head_dim.
    let a = parse(
        &json!({"model_type": "x", "hidden_size": 2048, "num_attention_heads": 16,
        "num_hidden_layers": 24}),
    )
    .unwrap();
    assert_eq!(
        a.attention,
        Attention::Gqa {
            kv_heads: 16,
            head_dim: 128
        }
    );
    assert_eq!(a.kv_bytes_per_token(1, 2), 24 * 2 * 16 * 128 * 2);
}

#[test]
fn deepseek_v3_mla_latent_is_not_split_by_tp() {
    // deepseek-ai/DeepSeek-V3: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64.
    let a = parse(
        &json!({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 128,
        "num_hidden_layers": 61, "num_key_value_heads": 128, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "vocab_size": 129280, "torch_dtype": "bfloat16"}),
    )
    .unwrap();
    assert_eq!(a.kv_bytes_per_token(1, 2), 61 * (512 + 64) * 2);
    assert_eq!(a.kv_bytes_per_token(1, 2), 70_272);
    assert_eq!(a.kv_bytes_per_token(8, 2), 70_272);
}

#[test]
fn gemma2_alternates_sliding_layers() {
    // google/gemma-2-9b: 42 layers, 8 KV heads of 256, window 4096, every other layer.
    let a = parse(
        &json!({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
        "hidden_size": 3584, "intermediate_size": 14336, "num_attention_heads": 16,
        "num_hidden_layers": 42, "num_key_value_heads": 8, "head_dim": 256,
        "sliding_window": 4096, "vocab_size": 256000, "torch_dtype": "float32"}),
    )
    .unwrap();
    assert_eq!(a.sliding_layers, 21);
    let per_layer = 2 * 8 * 256 * 2;
    assert_eq!(a.kv_bytes_per_token(1, 2), 42 * per_layer);
    // 8192 tokens: full layers hold all, sliding ones the 4096-token window.
    assert_eq!(
        a.kv_bytes_for_request(8192, 1, 2),
        21 * per_layer * 8192 + 21 * per_layer * 4096
    );
    // Below the window both hold every token.
    assert_eq!(a.kv_bytes_for_request(1000, 1, 2), 42 * per_layer * 1000);
}

#[test]
fn gemma3_pattern_and_layer_types_agree() {
    // google/gemma-3-27b-it's text_config: 62 layers, window 1024, every 6th layer global.
    let text = json!({"model_type": "gemma3_text", "hidden_size": 5376,
        "intermediate_size": 21504, "num_attention_heads": 32, "num_hidden_layers": 62,
        "num_key_value_heads": 16, "head_dim": 128, "sliding_window": 1024,
        "sliding_window_pattern": 6});
    let a = parse(&json!({"architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3", "text_config": text.clone()}))
    .unwrap();
    assert_eq!(a.sliding_layers, 62 - 62 / 6);
    assert_eq!(a.kv_bytes_per_token(1, 2), 62 * 2 * 16 * 128 * 2);
    let mut listed = text;
    let types: Vec<&str> = (0..62)
        .map(|i| {
            if (i + 1) % 6 == 0 {
                "full_attention"
            } else {
                "sliding_attention"
            }
        })
        .collect();
    listed["layer_types"] = json!(types);
    assert_eq!(parse(&listed).unwrap().sliding_layers, a.sliding_layers);
}

#[test]
fn mistral_slides_every_layer_and_qwen2_ships_it_off() {
    // mistralai/Mistral-7B-v0.1: sliding_window 4096 on every layer.
    let mut c = llama_8b();
    c["sliding_window"] = json!(4096);
    let a = parse(&c).unwrap();
    assert_eq!((a.sliding_layers, a.sliding_window), (32, Some(4096)));
    assert_eq!(
        a.kv_bytes_for_request(32768, 1, 2),
        a.kv_bytes_for_request(4096, 1, 2)
    );
    // Qwen/Qwen2.5-7B-Instruct: sliding_window 131072 with use_sliding_window false.
    c["use_sliding_window"] = json!(false);
    assert_eq!(parse(&c).unwrap().sliding_layers, 0);
}

#[test]
fn configs_missing_what_memory_needs_are_refused_by_name() {
    let e = parse(&json!({"hidden_size": 1})).unwrap_err();
    assert!(e.contains("num_hidden_layers"), "{e}");
    let mut c = llama_8b();
    c["sliding_window"] = json!(4096);
    c["layer_types"] = json!(["full_attention"]);
    let e = parse(&c).unwrap_err();
    assert!(e.contains("layer_types lists 1 layers"), "{e}");
    assert!(parse(&json!([1, 2])).is_err());
}

#[test]
fn versions_parse_and_gate_what_they_have() {
    assert_eq!(
        Version::parse("v0.10.1").unwrap(),
        Version {
            major: 0,
            minor: 10
        }
    );
    assert!(Version::parse("ten").is_err());
    let v = |s| Version::parse(s).unwrap();
    assert!(!v("0.8.5").checks_free_at_startup());
    assert!(v("0.9").checks_free_at_startup());
    assert!(!v("0.10").has_kv_cache_memory_bytes());
    assert!(v("0.11").has_kv_cache_memory_bytes());
    assert!(v("1.0").graphs_in_budget());
    assert!(v("0.21").graphs_in_budget());
    // Announced for 0.19, shipped in 0.21 ("default since v0.21.0").
    assert!(!v("0.19").graphs_in_budget());
    assert!(!v("0.11").graphs_in_budget());
    assert!(v("latest").graphs_in_budget());
}

#[test]
fn v0_profiles_the_whole_longest_request_unless_chunked_prefill_turns_on() {
    use super::vllm::scheduler_defaults;
    use crate::units::GIB;
    let v = |s| Version::parse(s).unwrap();
    let h100 = 79 * GIB;
    // V0: max(max_model_len, 2048) tokens, 256 sequences.
    assert_eq!(
        scheduler_defaults(v("0.6.4"), h100, "H100", 20000),
        (20000, 256)
    );
    assert_eq!(
        scheduler_defaults(v("0.2.5"), h100, "H100", 1024),
        (2048, 256)
    );
    // Past 32768 tokens V0 chunks the prefill (0.5 on): 512, then 2048 from 0.6.
    assert_eq!(
        scheduler_defaults(v("0.6"), h100, "H100", 35000),
        (2048, 256)
    );
    assert_eq!(
        scheduler_defaults(v("0.5"), h100, "H100", 35000),
        (512, 256)
    );
    assert_eq!(
        scheduler_defaults(v("0.3"), h100, "H100", 35000),
        (35000, 256)
    );
    // V1: vllm serve's defaults by GPU, whatever the length.
    assert_eq!(
        scheduler_defaults(v("0.9"), h100, "NVIDIA H100", 131072),
        (8192, 1024)
    );
    assert_eq!(
        scheduler_defaults(v("0.9"), 44 * GIB, "NVIDIA L40S", 4096),
        (2048, 256)
    );
}

fn write(dir: &std::path::Path, name: &str, header: &[u8], data: u64) -> std::path::PathBuf {
    let p = dir.join(name);
    let f = std::fs::File::create(&p).unwrap();
    use std::io::Write;
    (&f).write_all(&(header.len() as u64).to_le_bytes())
        .unwrap();
    (&f).write_all(header).unwrap();
    f.set_len(8 + header.len() as u64 + data).unwrap();
    p
}

#[test]
fn a_header_declares_sizes_that_are_read_without_the_data() {
    let d = tempfile::tempdir().unwrap();
    // A 4096 x 4096 BF16 matrix (32 MiB of data, a sparse file) and a 4096-vector.
    let h = br#"{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[4096,4096],"data_offsets":[0,33554432]},"n":{"dtype":"F32","shape":[4096],"data_offsets":[33554432,33570816]}}"#;
    let s = read_header(&write(d.path(), "a.safetensors", h, 33_570_816)).unwrap();
    assert_eq!(s.tensor_bytes, 33_570_816);
    assert_eq!(s.shardable_bytes, 33_554_432);
    assert_eq!(s.tensors, 2);
    assert_eq!(s.header_bytes_read, 8 + h.len() as u64);
}

#[test]
fn malformed_headers_are_refused_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    let cases: &[(&[u8], u64, &str)] = &[
        (b"not json", 0, "not a JSON object"),
        (
            br#"{"w":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,30]}}"#,
            30,
            "is 32 bytes but data_offsets span 30",
        ),
        (
            br#"{"w":{"dtype":"Q9","shape":[4],"data_offsets":[0,4]}}"#,
            4,
            "unknown dtype",
        ),
        (
            br#"{"w":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}"#,
            10,
            "truncated",
        ),
        (
            br#"{"w":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,1]}}"#,
            1,
            "overflows",
        ),
        (
            br#"{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#,
            40,
            "cover 4 bytes of a 40-byte",
        ),
    ];
    for (i, (h, data, want)) in cases.iter().enumerate() {
        let p = write(d.path(), &format!("{i}.safetensors"), h, *data);
        let e = read_header(&p).unwrap_err().to_string();
        assert!(e.contains(want), "case {i}: {e}");
        assert!(e.starts_with(&p.display().to_string()), "case {i}: {e}");
    }
    // A length beyond the format's limit, and one beyond the file.
    let p = d.path().join("huge.safetensors");
    std::fs::write(&p, u64::MAX.to_le_bytes()).unwrap();
    let e = read_header(&p).unwrap_err().to_string();
    assert!(e.contains("over the format's 100000000-byte limit"), "{e}");
    std::fs::write(&p, 1000u64.to_le_bytes()).unwrap();
    let e = read_header(&p).unwrap_err().to_string();
    assert!(e.contains("runs past the end"), "{e}");
    std::fs::write(&p, [1u8, 2]).unwrap();
    let e = read_header(&p).unwrap_err().to_string();
    assert!(e.contains("shorter than the 8-byte"), "{e}");
}

#[test]
fn pipeline_stages_take_layers_as_vllm_partitions_them() {
    use super::model::pp_layers;
    // Even: 80 layers over 2 stages.
    assert_eq!(pp_layers(80, 2, 0), 0..40);
    assert_eq!(pp_layers(80, 2, 1), 40..80);
    // Uneven: the remainder goes to the stages before the last (get_pp_indices).
    assert_eq!(pp_layers(61, 4, 0), 0..15);
    assert_eq!(pp_layers(61, 4, 1), 15..30);
    assert_eq!(pp_layers(61, 4, 2), 30..46);
    assert_eq!(pp_layers(61, 4, 3), 46..61);
    assert_eq!(pp_layers(10, 4, 0), 0..2);
    assert_eq!(pp_layers(10, 4, 1), 2..5);
    assert_eq!(pp_layers(10, 4, 3), 8..10);
    // One stage: everything.
    assert_eq!(pp_layers(32, 1, 0), 0..32);
    assert_eq!(
        super::safetensors::layer_of("model.layers.17.mlp.up_proj.weight"),
        Some(17)
    );
    assert_eq!(
        super::safetensors::layer_of("language_model.model.layers.3.x"),
        Some(3)
    );
    assert_eq!(
        super::safetensors::layer_of("model.embed_tokens.weight"),
        None
    );
}

/// One GPU of 24 GiB whose neighbours leave 23 GiB free: a 0.98 budget overlaps them, and
/// the 16 GiB of weights and peaks leave 7.5 GiB of KV cache, short of a 128 Ki-token
/// request (16 GiB at 128 KiB per token).
fn overlapping_gpu() -> (super::DevicePlan, u64) {
    const GIB: u64 = 1 << 30;
    let total = 24 * GIB;
    let budget = (0.98 * total as f64).ceil() as u64;
    let fixed = 16 * GIB;
    let d = super::DevicePlan {
        index: 0,
        uuid: "GPU-0".into(),
        name: "test".into(),
        total,
        free: 23 * GIB,
        free_at_startup: 23 * GIB,
        others: vec![super::Other {
            pid: 42,
            name: Some("neighbour".into()),
            bytes: Some(GIB),
        }],
        layers: 32,
        kv_bytes_per_token: 128 << 10,
        budget,
        weights_bytes: fixed - GIB,
        rotary_cache_bytes: 0,
        non_torch_bytes: GIB / 2,
        activation_bytes: GIB / 2,
        cudagraph_bytes: GIB / 2,
        cudagraph_in_budget: false,
        kv_bytes: budget - fixed,
        kv_tokens: 0,
        short: None,
    };
    (d, 131072 * (128 << 10))
}

fn options(version: &str) -> super::VllmOptions {
    super::VllmOptions {
        vllm_version: version.into(),
        tensor_parallel_size: 1,
        pipeline_parallel_size: 1,
        max_model_len: Some(131072),
        gpu_memory_utilization: 0.98,
        kv_cache_dtype: "auto".into(),
        max_num_seqs: None,
        max_num_batched_tokens: None,
        enforce_eager: false,
        version: Version::parse(version).unwrap(),
    }
}

/// vLLM's checks in vLLM's order: from 0.9 the free-memory check at start-up refuses first;
/// before 0.9 the cache's size (blocks, then the request length) is checked before the
/// cache is allocated (`Worker.initialize_cache`), so a request too long fails there even
/// where the allocation would fail too (vllm#13061), and memory too short for the weights and
/// the profile run fails before either.
#[test]
fn shortfalls_come_in_the_order_vllm_checks_them() {
    let (d, request) = overlapping_gpu();
    let why = |d: &super::DevicePlan, v: &str| {
        super::shortfall(d, &options(v), request, 131072).unwrap_or_default()
    };
    let says = |d: &super::DevicePlan, v: &str, text: &str| {
        let w = why(d, v);
        assert!(w.contains(text), "{v}: {w}");
    };
    says(&d, "0.9", "refuses to start");
    says(&d, "0.7", "one request of max_model_len 131072");
    // A request that fits: before 0.9 the allocation is what fails.
    let fits = super::shortfall(&d, &options("0.7"), d.kv_bytes, 131072).unwrap_or_default();
    assert!(
        fits.contains("runs out of memory allocating its KV cache"),
        "{fits}"
    );
    assert!(fits.contains("PID 42 (neighbour)"), "{fits}");
    // No cache blocks at all: named before the request length.
    let none = super::DevicePlan {
        kv_bytes: 0,
        ..d.clone()
    };
    says(&none, "0.7", "no room for the KV cache");
    // Less free than the weights and the profile run: that comes first.
    let tight = super::DevicePlan {
        free_at_startup: 10 << 30,
        ..d.clone()
    };
    says(&tight, "0.7", "runs out of memory before its KV cache");
    // Enough free for the budget: graph capture after the cache, beside the budget.
    let room = super::DevicePlan {
        free_at_startup: d.budget + (d.cudagraph_bytes / 2),
        ..d.clone()
    };
    let g = super::shortfall(&room, &options("0.7"), d.kv_bytes, 131072).unwrap_or_default();
    assert!(g.contains("CUDA-graph capture"), "{g}");
}
