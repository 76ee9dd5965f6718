//! `vramdoc run`'s pass-through and fixed cost (prints them; `cargo bench --bench
//! run_passthrough`; issue 34):
//! 1. MB/s of a job writing 80-byte log lines (`yes LINE | head -c N`, N =
//!    `VRAMDOC_BENCH_PASSTHROUGH_BYTES`, default 1 GB) to a pipe this bench reads, alone and
//!    under `vramdoc --sim 1x16GiB run --` (the whole run: start, settle, report), in turn,
//!    `VRAMDOC_BENCH_ROUNDS` pairs (default 3); the median of each and of the ratio (goal:
//!    wrapped ≥ 0.8 × alone);
//! 2. the wall time of `vramdoc --sim 2xh100 run -- true` against `true`, 10 pairs, median
//!    (goal: ≤ 0.3 s added).
//!
//! Every line of the job is still read by the recogniser (`record::lines`).
//! `VRAMDOC_BENCH_BIN` runs another build of vramdoc (a before/after pair). Prints numbers;
//! asserts nothing.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LOG: &str =
    "step 1234/100000 loss=0.12345 lr=3.0e-04 grad_norm=1.234 tokens/s=12345.6 mem=12.3G";

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run `cmd`, read its stdout to the end; (bytes, wall).
fn drain(mut cmd: Command) -> (u64, Duration) {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .spawn()
        .expect("start the job");
    let mut out = child.stdout.take().expect("the job's stdout");
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading the job's output: {e}"),
        }
    }
    let _ = child.wait();
    (total, start.elapsed())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn writer(bytes: u64) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("yes '{LOG}' | head -c {bytes}"),
    ]
}

fn passthrough(exe: &str) {
    let bytes = env_num("VRAMDOC_BENCH_PASSTHROUGH_BYTES", 1_000_000_000);
    let rounds = env_num("VRAMDOC_BENCH_ROUNDS", 3).max(1);
    let job = writer(bytes);
    let (mut alone, mut wrapped, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut a = Command::new(&job[0]);
        a.args(&job[1..]);
        let (na, ta) = drain(a);
        let mut w = Command::new(exe);
        w.args(["--sim", "1x16GiB", "run", "--"])
            .args(&job)
            .env_remove("VRAMDOC_SIM_DIR");
        let (nw, tw) = drain(w);
        assert_eq!((na, nw), (bytes, bytes), "every byte passed through");
        let (ma, mw) = (
            bytes as f64 / ta.as_secs_f64() / 1e6,
            bytes as f64 / tw.as_secs_f64() / 1e6,
        );
        alone.push(ma);
        wrapped.push(mw);
        ratio.push(mw / ma);
    }
    println!(
        "{bytes} bytes of 80-byte lines to a pipe, median of {rounds} pairs: alone {:.0} MB/s, \
         under vramdoc run {:.0} MB/s = {:.2}x (goal >= 0.8x)",
        median(alone),
        median(wrapped),
        median(ratio)
    );
}

fn wall(mut cmd: Command) -> f64 {
    let start = Instant::now();
    let _ = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .status()
        .expect("run");
    start.elapsed().as_secs_f64()
}

fn fixed_cost(exe: &str) {
    let (mut wrapped, mut alone) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        alone.push(wall(Command::new("true")));
        let mut w = Command::new(exe);
        w.args(["--sim", "2xh100", "run", "--", "true"])
            .env_remove("VRAMDOC_SIM_DIR");
        wrapped.push(wall(w));
    }
    let (w, a) = (median(wrapped), median(alone));
    println!(
        "vramdoc --sim 2xh100 run -- true: wall {:.3} s against {:.3} s for true alone, {:.3} s \
         added (median of 10; goal <= 0.3 s)",
        w,
        a,
        w - a
    );
}

fn main() {
    let exe = std::env::var("VRAMDOC_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_vramdoc").to_string());
    println!("vramdoc: {exe}");
    fixed_cost(&exe);
    passthrough(&exe);
}
