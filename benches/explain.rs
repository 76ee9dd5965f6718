//! `vramdoc explain` on a large snapshot: time and peak memory (goal: a 1 GB snapshot in
//! at most 15 s and under 1.5x the file's size, on 2 cores, and at most 0.25x the time of
//! PyTorch's own `_memory_viz.py stats` on the same file). Prints numbers, asserts nothing.
//!
//! The snapshot is generated here, into a temporary directory, the way Python's pickler
//! writes `torch.cuda.memory._dump_snapshot`'s dict (protocol 4: every container and string
//! memoized, shared frame dicts referenced through the memo, items in batches of 1000):
//! 2,000 segments of 40 blocks, then `device_traces` entries with 24-frame Python stacks
//! until the file reaches `VRAMDOC_BENCH_EXPLAIN_BYTES` (default 1,000,000,000). The
//! release binary then explains it (`--json`), and the child's peak RSS is read from
//! `getrusage(RUSAGE_CHILDREN)`.
//!
//! When `VRAMDOC_BENCH_PYTHON` names a Python with torch installed, the same file is then
//! read by `python torch/cuda/_memory_viz.py stats FILE` (PyTorch's pickle load and its
//! per-segment summary) and its time is printed beside vramdoc's.
//! `VRAMDOC_BENCH_EXPLAIN_FILE`: keep the snapshot at that path (and reuse it when it is
//! there); `VRAMDOC_BENCH_BIN`: the vramdoc binary to run (another build, for before/after).
//!
//! cargo bench --bench explain

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::time::Instant;

struct W<F: Write> {
    out: F,
    bytes: u64,
    memo: u32,
    strs: HashMap<String, u32>,
}

impl<F: Write> W<F> {
    fn raw(&mut self, b: &[u8]) {
        self.out.write_all(b).expect("write the snapshot");
        self.bytes += b.len() as u64;
    }
    fn memoize(&mut self) -> u32 {
        self.raw(&[0x94]);
        self.memo += 1;
        self.memo - 1
    }
    fn get(&mut self, id: u32) {
        if id < 256 {
            self.raw(&[b'h', id as u8]);
        } else {
            let mut b = vec![b'j'];
            b.extend_from_slice(&id.to_le_bytes());
            self.raw(&b);
        }
    }
    fn str(&mut self, s: &str) {
        if let Some(id) = self.strs.get(s).copied() {
            return self.get(id);
        }
        let mut b = vec![0x8c, s.len() as u8];
        b.extend_from_slice(s.as_bytes());
        self.raw(&b);
        let id = self.memoize();
        self.strs.insert(s.to_string(), id);
    }
    fn int(&mut self, v: i64) {
        if (0..256).contains(&v) {
            self.raw(&[b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            let mut b = vec![b'M'];
            b.extend_from_slice(&(v as u16).to_le_bytes());
            self.raw(&b);
        } else if i32::try_from(v).is_ok() {
            let mut b = vec![b'J'];
            b.extend_from_slice(&(v as i32).to_le_bytes());
            self.raw(&b);
        } else {
            let le = v.to_le_bytes();
            let mut n = 8;
            while n > 1 && le[n - 1] == 0 && le[n - 2] & 0x80 == 0 {
                n -= 1;
            }
            let mut b = vec![0x8a, n as u8];
            b.extend_from_slice(&le[..n]);
            self.raw(&b);
        }
    }
    /// A dict of `(key, writer)` entries.
    fn dict_open(&mut self) {
        self.raw(b"}");
        self.memoize();
        self.raw(b"(");
    }
    fn dict_close(&mut self) {
        self.raw(b"u");
    }
    fn list_of_refs(&mut self, ids: &[u32]) {
        self.raw(b"]");
        self.memoize();
        if !ids.is_empty() {
            self.raw(b"(");
            for id in ids {
                self.get(*id);
            }
            self.raw(b"e");
        }
    }
}

fn main() {
    let target: u64 = std::env::var("VRAMDOC_BENCH_EXPLAIN_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = std::env::var_os("VRAMDOC_BENCH_EXPLAIN_FILE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("snapshot.pickle"));
    if path.exists() {
        let bytes = std::fs::metadata(&path).expect("the kept snapshot").len();
        println!("explain: reusing {} ({bytes} bytes)", path.display());
        measure(&path, bytes);
        return;
    }
    let t0 = Instant::now();
    let file = std::fs::File::create(&path).expect("create the snapshot");
    let mut w = W {
        out: BufWriter::with_capacity(1 << 20, file),
        bytes: 0,
        memo: 0,
        strs: HashMap::new(),
    };
    w.raw(&[0x80, 4]);
    w.dict_open();
    // 2,000 distinct frames, written once each, then referenced.
    let mut frames = Vec::new();
    for i in 0..2000u32 {
        let id = w.memo;
        w.dict_open();
        w.str("filename");
        w.str(&format!("/srv/app/models/module_{}.py", i % 97));
        w.str("line");
        w.int(i as i64 * 7 % 3000);
        w.str("name");
        w.str(&format!("fn_{}", i % 311));
        w.dict_close();
        frames.push(id);
    }
    // Those dicts sit on the stack: drop them (a real dump writes each where first used;
    // the references that follow are the same).
    w.raw(b"0".repeat(2000).as_slice());
    let stack = |k: u64| -> Vec<u32> {
        (0..24)
            .map(|j| frames[((k * 31 + j * 17) % 2000) as usize])
            .collect()
    };
    w.str("segments");
    w.raw(b"]");
    w.memoize();
    let mut addr: i64 = 0x7f10_0000_0000;
    let mut k = 0u64;
    for batch in 0..2 {
        w.raw(b"(");
        for _ in 0..1000 {
            w.dict_open();
            for (key, v) in [
                ("device", 0i64),
                ("address", addr),
                ("total_size", 40 << 21),
            ] {
                w.str(key);
                w.int(v);
            }
            w.str("stream");
            w.int(0);
            w.str("segment_type");
            w.str("large");
            w.str("blocks");
            w.raw(b"]");
            w.memoize();
            w.raw(b"(");
            for b in 0..40i64 {
                w.dict_open();
                w.str("address");
                w.int(addr + b * (2 << 20));
                w.str("size");
                w.int(2 << 20);
                w.str("requested_size");
                w.int(2 << 20);
                w.str("state");
                w.str(if b % 3 == 0 {
                    "inactive"
                } else {
                    "active_allocated"
                });
                w.str("frames");
                k += 1;
                w.list_of_refs(&stack(k));
                w.dict_close();
            }
            w.raw(b"e");
            w.dict_close();
            addr += 1 << 30;
        }
        w.raw(b"e");
        let _ = batch;
    }
    w.str("device_traces");
    w.raw(b"]");
    w.memoize();
    w.raw(b"]");
    w.memoize();
    let mut n = 0u64;
    let mut t_us: i64 = 1_700_000_000_000_000;
    while w.bytes < target {
        w.raw(b"(");
        for _ in 0..1000 {
            n += 1;
            t_us += 137;
            let action = ["alloc", "free_requested", "free_completed"][(n % 3) as usize];
            w.dict_open();
            w.str("action");
            w.str(action);
            w.str("addr");
            w.int(0x7f20_0000_0000 + ((n / 3) as i64) * 4096);
            w.str("frames");
            w.list_of_refs(&stack(n / 3));
            w.str("size");
            w.int(((n / 3) % 4096 + 1) as i64 * 512);
            w.str("stream");
            w.int(0);
            w.str("time_us");
            w.int(t_us);
            w.dict_close();
        }
        w.raw(b"e");
    }
    w.raw(b"a");
    w.dict_close();
    w.raw(b".");
    w.out.flush().expect("flush the snapshot");
    let bytes = w.bytes;
    drop(w);
    println!(
        "explain: generated {bytes} bytes ({n} history entries, 80,000 blocks) in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    measure(&path, bytes);
}

fn measure(path: &std::path::Path, bytes: u64) {
    let bin = std::env::var_os("VRAMDOC_BENCH_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_vramdoc").into());
    let t = Instant::now();
    let o = std::process::Command::new(bin)
        .arg("explain")
        .arg(path)
        .args(["--json", "--max-size", "4GiB"])
        .output()
        .expect("run vramdoc explain");
    let secs = t.elapsed().as_secs_f64();
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let peak = ru.ru_maxrss as u64 * 1024;
    let cpu = ru.ru_utime.tv_sec as f64
        + ru.ru_utime.tv_usec as f64 / 1e6
        + ru.ru_stime.tv_sec as f64
        + ru.ru_stime.tv_usec as f64 / 1e6;
    let ok = o.status.success();
    let cause = serde_json::from_slice::<serde_json::Value>(&o.stdout)
        .ok()
        .and_then(|x| x["devices"][0]["cause"].as_str().map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned());
    println!(
        "explain: {bytes} bytes in {secs:.2} s wall, {cpu:.2} s CPU (goal <= 15 s), peak RSS {:.0} MiB = {:.2}x the file (goal < 1.5x); exit ok: {ok}; cause: {cause}",
        peak as f64 / (1u64 << 20) as f64,
        peak as f64 / bytes as f64
    );
    let Some(python) = std::env::var_os("VRAMDOC_BENCH_PYTHON") else {
        println!("explain: set VRAMDOC_BENCH_PYTHON to a python with torch for the paired _memory_viz.py stats time");
        return;
    };
    // The script itself (it imports no torch), located without importing torch.
    let script = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.util as u, os; \
             print(os.path.join(u.find_spec('torch').submodule_search_locations[0], 'cuda', '_memory_viz.py'))",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let t = Instant::now();
    let o = std::process::Command::new(&python)
        .arg(&script)
        .arg("stats")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .output()
        .expect("run python _memory_viz.py stats");
    let viz = t.elapsed().as_secs_f64();
    println!(
        "explain: _memory_viz.py stats on the same file: {viz:.2} s wall (exit ok: {}); vramdoc/_memory_viz = {:.2}x (goal <= 0.25x){}",
        o.status.success(),
        secs / viz,
        if o.status.success() {
            String::new()
        } else {
            format!(": {}", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or(""))
        }
    );
}
