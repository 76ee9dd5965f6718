//! `vramdoc preflight`: the GPUs a job was given are refused with a foreign process or a
//! dead process's memory on them, or too little free memory, and accepted when clean; exit
//! 0 ok / 1 problem / 2 unknown, one line (Slurm prolog, Node Problem Detector).

use crate::common::hold::Holder;
use crate::common::{fresh_box, on_box, sim_fault};
use std::path::Path;
use std::process::Output;

fn preflight(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = on_box(dir);
    c.arg("preflight").args(args);
    for k in [
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
        "GPU_DEVICE_ORDINAL",
        "NVIDIA_VISIBLE_DEVICES",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run vramdoc preflight")
}

fn line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn a_clean_gpu_is_accepted_and_a_foreign_process_refused() {
    let b = fresh_box("2x16GiB");
    let o = preflight(b.path(), &["--gpus", "0,1"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
    assert!(line(&o).starts_with("ok: GPU 0,1"), "{}", line(&o));
    assert_eq!(line(&o).lines().count(), 1);

    let h = Holder::start(b.path(), &[], &["--device", "1", "--size", "2GiB"]);
    let o = preflight(b.path(), &["--gpus", "1"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", line(&o));
    let l = line(&o);
    assert!(l.starts_with("problem: GPU 1: PID "), "{l}");
    assert!(
        l.contains(&h.pid().to_string()) && l.contains("holds"),
        "{l}"
    );
    assert_eq!(l.lines().count(), 1);
    // The other GPU is still clean.
    let o = preflight(b.path(), &["--gpus", "0"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
    // --json carries the same verdict.
    let o = preflight(b.path(), &["--gpus", "1", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["problems"][0]["kind"], "foreign-process");
    assert_eq!(v["problems"][0]["device"], 1);
}

#[test]
fn a_dead_process_s_memory_is_refused() {
    let b = fresh_box("2x16GiB");
    sim_fault(b.path(), &["--keep-dead"]);
    let h = Holder::start(b.path(), &[], &["--device", "1", "--size", "6GiB"]);
    h.kill();
    let o = preflight(b.path(), &["--gpus", "1", "--json"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let kinds: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"dead-process-memory"), "{v}");
    let o = preflight(b.path(), &["--gpus", "0"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
}

#[test]
fn need_refuses_a_gpu_with_too_little_free_memory() {
    let b = fresh_box("16GiB");
    assert_eq!(
        preflight(b.path(), &["--need", "8GiB"], &[]).status.code(),
        Some(0)
    );
    let o = preflight(b.path(), &["--need", "20GiB"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(line(&o).contains("20.00 GiB needed"), "{}", line(&o));
}

#[test]
fn the_gpus_come_from_slurm_or_cuda_variables_and_bad_lists_are_unknown() {
    let b = fresh_box("2x16GiB");
    let _h = Holder::start(b.path(), &[], &["--device", "1", "--size", "2GiB"]);
    let o = preflight(b.path(), &[], &[("SLURM_JOB_GPUS", "1")]);
    assert_eq!(o.status.code(), Some(1), "{}", line(&o));
    let o = preflight(b.path(), &[], &[("CUDA_VISIBLE_DEVICES", "0")]);
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
    assert!(line(&o).contains("CUDA_VISIBLE_DEVICES"), "{}", line(&o));
    // Slurm's variable wins over CUDA_VISIBLE_DEVICES.
    let o = preflight(
        b.path(),
        &[],
        &[("SLURM_STEP_GPUS", "1"), ("CUDA_VISIBLE_DEVICES", "0")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", line(&o));
    // A list naming no GPU here: unknown (2), one line naming the variable.
    let o = preflight(b.path(), &["--gpus", "5"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--gpus=5") && err.contains("names no GPU"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Issue 28: with no job context (no GPU named: Node Problem Detector's node check) a live
/// process is no problem, a dead process's memory is; for a job on a GPU the scheduler
/// shares (`SLURM_SHARDS_ON_NODE`), another job's process is no problem either.
#[test]
fn without_a_job_only_memory_without_a_live_owner_is_refused() {
    let b = fresh_box("1x16GiB");
    let h = Holder::start(b.path(), &[], &["--device", "0", "--size", "2GiB"]);
    let o = preflight(b.path(), &[], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
    let o = preflight(
        b.path(),
        &["--grace", "0s"],
        &[("SLURM_JOB_GPUS", "0"), ("SLURM_SHARDS_ON_NODE", "4")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
    let o = preflight(b.path(), &["--grace", "0s"], &[("SLURM_JOB_GPUS", "0")]);
    assert_eq!(o.status.code(), Some(1), "{}", line(&o));
    sim_fault(b.path(), &["--keep-dead"]);
    h.kill();
    let o = preflight(b.path(), &[], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", line(&o));
    assert!(line(&o).starts_with("problem: GPU 0:"), "{}", line(&o));
}

/// Issue 39 item 5: a hung GPU was described with Rust's debug text (`(Error { message:
/// "NVML failed: hung: hung: …" })`): one plain sentence.
#[test]
fn a_hung_gpu_is_one_plain_sentence() {
    let b = fresh_box("2x16GiB");
    sim_fault(
        b.path(),
        &["--nvml-hang", "--device", "1", "--hang-limit", "20s"],
    );
    let o = preflight(b.path(), &["--gpus", "1"], &[]);
    let l = line(&o);
    assert_eq!(o.status.code(), Some(1), "{l}");
    assert!(
        l.starts_with(
            "problem: GPU 1: the driver does not answer for it: no answer from NVML within"
        ),
        "{l}"
    );
    for debug in ["Error {", "message:", "hung:", "\\\""] {
        assert!(!l.contains(debug), "{debug} in {l}");
    }
    assert_eq!(l.lines().count(), 1);
    sim_fault(b.path(), &["--clear"]);
}

/// Issue 37 item 4: a GPU whose only other client is a graphics client (a display server:
/// NVML's graphics list only, no CUDA context) passes a job's check with a note, on both
/// backends; `--strict-graphics` refuses it (at once: a display server does not go away);
/// a process with a CUDA context and a graphics context (`C+G`) is refused as any other.
#[test]
fn a_graphics_client_passes_with_a_note_unless_strict() {
    let b = fresh_box("2x16GiB");
    let x = Holder::start(b.path(), &[], &["--graphics", "--size", "20MiB"]);
    let lib = crate::common::simgpu_lib_dir()
        .to_string_lossy()
        .to_string();
    for backend in ["sim", "real"] {
        let env: &[(&str, &str)] = match backend {
            "real" => &[("LD_LIBRARY_PATH", lib.as_str())],
            _ => &[],
        };
        let args = ["--backend", backend, "--gpus", "0", "--grace", "0s"];
        let o = preflight(b.path(), &args, env);
        let l = line(&o);
        assert_eq!(o.status.code(), Some(0), "{backend}: {l}");
        assert!(l.starts_with("ok: GPU 0 (--gpus) clean"), "{backend}: {l}");
        assert!(
            l.contains(&format!("note: GPU 0: PID {}", x.pid()))
                && l.contains("graphics client")
                && l.contains("--strict-graphics"),
            "{backend}: {l}"
        );
        assert_eq!(l.lines().count(), 1);
        let o = preflight(b.path(), &[&args[..], &["--strict-graphics"]].concat(), env);
        let l = line(&o);
        assert_eq!(o.status.code(), Some(1), "{backend}: {l}");
        assert!(l.starts_with("problem: GPU 0: PID "), "{backend}: {l}");
    }
    let o = preflight(b.path(), &["--gpus", "0", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["notes"][0]["kind"], "graphics-client", "{v}");
    assert!(
        v["problems"].as_array().is_some_and(|p| p.is_empty()),
        "{v}"
    );
    // Without a job (a node check), strictness refuses no live process.
    let o = preflight(b.path(), &["--strict-graphics"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
    // C+G: a CUDA context, refused.
    let _cg = Holder::start(
        b.path(),
        &[],
        &["--device", "1", "--also-graphics", "--size", "64MiB"],
    );
    let o = preflight(b.path(), &["--gpus", "1", "--grace", "0s"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", line(&o));
    assert!(!line(&o).contains("note:"), "{}", line(&o));
}

/// Slurm's Prolog gets no SLURM_SHARDS_ON_NODE (gres/shard sets it for the job's steps and
/// tasks only): `--shared` says the site shares the GPUs.
#[test]
fn shared_says_the_site_shares_the_gpus() {
    let b = fresh_box("1x16GiB");
    let _h = Holder::start(b.path(), &[], &["--device", "0", "--size", "2GiB"]);
    let job = [("SLURM_JOB_GPUS", "0")];
    let o = preflight(b.path(), &["--grace", "0s"], &job);
    assert_eq!(o.status.code(), Some(1), "{}", line(&o));
    let o = preflight(b.path(), &["--grace", "0s", "--shared"], &job);
    assert_eq!(o.status.code(), Some(0), "{}", line(&o));
}
