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

/// Issue 19, item 10: variables that name a file, a directory, a socket or a library (or make
/// the driver write a core dump) are refused under any allowed prefix, by rule.
#[test]
fn env_naming_a_path_is_refused_under_any_prefix() {
    for bad in [
        "CUDA_COREDUMP_FILE",
        "CUDA_ENABLE_COREDUMP_ON_EXCEPTION",
        "CUDA_ENABLE_USER_TRIGGERED_COREDUMP",
        "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_MPS_LOG_DIRECTORY",
        "CUDA_LOG_FILE",
        "CUDA_CACHE_PATH",
        "NCCL_DEBUG_FILE",
        "NCCL_TOPO_FILE",
        "NCCL_TOPO_DUMP_FILE",
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_CONF_FILE",
        "TORCH_EXTENSIONS_DIR",
        "TORCH_COMPILE_DEBUG_DIR",
        "TORCH_HOME",
        "TORCH_TRACE",
        "TORCH_LOGS_OUT",
        "VLLM_CACHE_ROOT",
        "VLLM_RPC_BASE_PATH",
        "JAX_COMPILATION_CACHE_DIR",
        "TF_CUDA_LIBS",
        "XLA_SOME_LIBRARY_PATHS",
        "CUDA_MPS_CONTROL_SOCKET",
        "CUDA_LD_PRELOAD",
        "TF_TMPDIR",
    ] {
        let why = env_refusal(bad).unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(why.contains(bad) && !why.contains('\n'), "{bad}: {why}");
    }
    for ok in [
        "NCCL_SOCKET_IFNAME",
        "NCCL_P2P_DIRECT_DISABLE",
        "NCCL_DEBUG",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_MODULE_LOADING",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "CUDA_DEVICE_MAX_CONNECTIONS",
    ] {
        assert_eq!(env_refusal(ok), None, "{ok}");
    }
    // One line naming the file, the line and the variable.
    let text = MINIMAL.replacen(
        "[[steps]]",
        "[env]\nCUDA_COREDUMP_FILE = \"/tmp/core\"\n\n[[steps]]",
        1,
    );
    let e = parse_scenario("ticket.toml", &text)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("ticket.toml:") && e.contains("CUDA_COREDUMP_FILE") && !e.contains('\n'),
        "{e}"
    );
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
