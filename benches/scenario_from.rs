//! `vramdoc scenario from` on large `run --samples` streams: wall time, CPU time and the
//! child's peak RSS per input size (goal: peak RSS <= 128 MiB whatever the size, time linear
//! in it). Prints numbers, asserts nothing.
//!
//! Each stream is generated here, into a temporary directory, line by line through the
//! stream's own schema (`record::stream::StreamLine`), as `vramdoc run --samples` writes a
//! long training job on 4 GPUs: memory every 100 ms (a load, then an activation sawtooth of
//! up to 384 MiB every 700 ms and a step up every 6 hours), each GPU's process list every
//! 500 ms (the job's worker and, on GPU 0, a neighbour that comes and goes every 2 hours),
//! an epoch marker every hour, and a last `cuda-oom` error and `end` line ("steady"); and in
//! the shape of scripts/bench-scenario-from ("churn": 8 GPUs, each with a neighbour that is a
//! new PID every 2 s, so process lists keep changing and PIDs grow with the input, a marker
//! every 10 s). The release binary converts it (`scenario from FILE --out FILE.toml`); its CPU time and peak RSS come
//! from `wait4`'s rusage of that child alone.
//!
//! cargo bench --bench scenario_from
//! (`VRAMDOC_BENCH_SCENARIO_BYTES`: comma-separated sizes, default
//! `10000000,100000000,1000000000`; `VRAMDOC_BENCH_SCENARIO_SHAPE`: `steady` or `churn`,
//! default both; `VRAMDOC_BENCH_BIN`: another vramdoc binary, for before/after)

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;
use vramdoc::model::{MarkerKind, RunErrorKind};
use vramdoc::record::stream::{StreamDevice, StreamLine};

const GPUS: u32 = 4;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const HOUR_MS: f64 = 3_600_000.0;

/// Write a stream of at least `target` bytes to `path`; its size and the hours it covers.
/// `churn`: the shape of scripts/bench-scenario-from instead (8 GPUs, each with a neighbour
/// that is a new PID every 2 s, so every other process list differs; a marker every 10 s).
fn generate(path: &Path, target: u64, churn: bool) -> (u64, f64) {
    let gpus = if churn { 8 } else { GPUS };
    let file = std::fs::File::create(path).expect("create the stream");
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut bytes = 0u64;
    let mut line = |out: &mut BufWriter<std::fs::File>, l: &StreamLine| {
        let mut v = serde_json::to_vec(l).expect("serialise a line");
        v.push(b'\n');
        out.write_all(&v).expect("write the stream");
        bytes += v.len() as u64;
        bytes
    };
    line(
        &mut out,
        &StreamLine::Header {
            version: 1,
            created_unix_ms: 1_700_000_000_000,
            devices: (0..gpus)
                .map(|i| StreamDevice {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    total: 80 * GIB,
                })
                .collect(),
            command: vec!["python".into(), "train.py".into()],
            period_us: 100_000,
            process_period_us: 500_000,
            hostname: Some("node7".into()),
        },
    );
    let mut i: u64 = 0;
    let mut t;
    loop {
        t = i as f64 * 100.0;
        let n = if churn {
            churn_round(&mut out, &mut line, i, t)
        } else {
            steady_round(&mut out, &mut line, i, t)
        };
        if n >= target {
            break;
        }
        i += 1;
    }
    line(
        &mut out,
        &StreamLine::Error {
            t_ms: t,
            kind: RunErrorKind::CudaOom,
            device: Some(0),
            requested: Some(2 * GIB),
            line: "torch.OutOfMemoryError: CUDA out of memory.".into(),
        },
    );
    let n = line(
        &mut out,
        &StreamLine::End {
            t_ms: t + 100.0,
            status: 1,
        },
    );
    out.flush().expect("flush the stream");
    (n, t / HOUR_MS)
}

type Line<'a> = dyn FnMut(&mut BufWriter<std::fs::File>, &StreamLine) -> u64 + 'a;

/// One 100 ms round of the steady shape (see the module's doc); the bytes so far.
fn steady_round(out: &mut BufWriter<std::fs::File>, line: &mut Line, i: u64, t: f64) -> u64 {
    let steps = (t / (6.0 * HOUR_MS)).floor() as u64;
    let saw = ((i % 7) * 64) * MIB;
    let job = 20 * GIB + steps * GIB + saw;
    let neighbour = ((t / (2.0 * HOUR_MS)).floor() as u64 % 2 == 1).then_some(3 * GIB);
    let used: Vec<Option<u64>> = (0..GPUS)
        .map(|d| Some(job + 500 * MIB + if d == 0 { neighbour.unwrap_or(0) } else { 0 }))
        .collect();
    let mut n = line(out, &StreamLine::Memory { t_ms: t, used });
    if i.is_multiple_of(5) {
        for d in 0..GPUS {
            n = line(
                out,
                &StreamLine::Process {
                    t_ms: t,
                    device: d,
                    pid: 4242 + d,
                    used: Some(20 * GIB + steps * GIB + 448 * MIB),
                    tree: true,
                },
            );
            if let (0, Some(u)) = (d, neighbour) {
                n = line(
                    out,
                    &StreamLine::Process {
                        t_ms: t,
                        device: 0,
                        pid: 777,
                        used: Some(u),
                        tree: false,
                    },
                );
            }
        }
    }
    if i % 36_000 == 10 {
        n = line(
            out,
            &StreamLine::Marker {
                t_ms: t,
                kind: MarkerKind::Marker,
                label: format!("epoch {}", i / 36_000),
            },
        );
    }
    n
}

/// One 100 ms round of scripts/bench-scenario-from's shape; the bytes so far.
fn churn_round(out: &mut BufWriter<std::fs::File>, line: &mut Line, k: u64, t: f64) -> u64 {
    let job: Vec<u64> = (0..8)
        .map(|_| 448 * MIB + ((k / 50) % 40) * GIB + (k % 7) * 3 * MIB)
        .collect();
    let nb_pid = 10_000 + (k / 20) as u32;
    let nb: Vec<u64> = (0..8).map(|g| ((k / 20 + g) % 9) * GIB).collect();
    let used = job.iter().zip(&nb).map(|(j, n)| Some(j + n)).collect();
    let mut n = line(out, &StreamLine::Memory { t_ms: t, used });
    if k.is_multiple_of(5) {
        for g in 0..8u32 {
            n = line(
                out,
                &StreamLine::Process {
                    t_ms: t,
                    device: g,
                    pid: 100,
                    used: Some(job[g as usize]),
                    tree: true,
                },
            );
            if nb[g as usize] > 0 {
                n = line(
                    out,
                    &StreamLine::Process {
                        t_ms: t,
                        device: g,
                        pid: nb_pid * 8 + g,
                        used: Some(nb[g as usize]),
                        tree: false,
                    },
                );
            }
        }
    }
    if k.is_multiple_of(100) {
        n = line(
            out,
            &StreamLine::Marker {
                t_ms: t,
                kind: MarkerKind::Marker,
                label: format!("epoch {}", k / 100),
            },
        );
    }
    n
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

// Reaped with wait4 below, which std's Child cannot do (it would lose the rusage).
#[allow(clippy::zombie_processes)]
fn convert(bin: &Path, input: &Path, out: &Path) -> (f64, f64, u64, bool) {
    let start = Instant::now();
    let child = std::process::Command::new(bin)
        .args(["scenario", "from"])
        .arg(input)
        .arg("--out")
        .arg(out)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run vramdoc scenario from");
    let mut status = 0;
    // SAFETY: wait4 on our own child with out pointers we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    let wall = start.elapsed().as_secs_f64();
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (
        wall,
        tv(ru.ru_utime) + tv(ru.ru_stime),
        ru.ru_maxrss as u64 * 1024,
        ok,
    )
}

fn main() {
    let sizes: Vec<u64> = std::env::var("VRAMDOC_BENCH_SCENARIO_BYTES")
        .unwrap_or_else(|_| "10000000,100000000,1000000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let shapes: Vec<bool> = match std::env::var("VRAMDOC_BENCH_SCENARIO_SHAPE").as_deref() {
        Ok("steady") => vec![false],
        Ok("churn") => vec![true],
        _ => vec![false, true],
    };
    let bin = std::env::var_os("VRAMDOC_BENCH_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_vramdoc").into());
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (churn, target) in shapes
        .iter()
        .flat_map(|c| sizes.iter().map(move |s| (*c, *s)))
    {
        let input = dir.path().join("run.jsonl");
        let out = dir.path().join("run.toml");
        let _ = std::fs::remove_file(&out);
        let g = Instant::now();
        let (bytes, hours) = generate(&input, target, churn);
        let gen = g.elapsed().as_secs_f64();
        let (wall, cpu, peak, ok) = convert(&bin, &input, &out);
        println!(
            "scenario from ({}): {bytes} bytes ({hours:.1} h, generated in {gen:.1} s) \
             in {wall:.2} s wall, {cpu:.2} s CPU ({:.1} MB/s of CPU), peak RSS {:.1} MiB \
             (goal <= 128 MiB) = {:.3}x the input; exit ok: {ok}",
            if churn {
                "8 GPUs, a new neighbour PID every 2 s"
            } else {
                "4 GPUs, steady process lists"
            },
            bytes as f64 / 1e6 / cpu.max(1e-9),
            peak as f64 / MIB as f64,
            peak as f64 / bytes as f64
        );
        let _ = std::fs::remove_file(&input);
    }
}
