//! `vramdoc explain SNAPSHOT` on snapshots written by tests/explain/gen_snapshot.py (PyTorch's
//! format, three generations of its fields, pickle protocols 2 to 5): each cause with its
//! numbers, top site and fix, `--json` carrying the same, the Markdown and HTML; pickles that
//! name a global refused with nothing run; bounds; a bounded fuzz of the reader. And
//! `run --torch-memory` with the stand-in `torch` package (tests/explain/fake_torch): the
//! snapshot dumped at the OOM, kept next to the report and joined with the finding; nothing
//! injected without the flag.

use crate::common;

use common::{simgpu_lib_dir, stderr, vramdoc};
use proptest::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/explain");

/// A snapshot of `case` in field set `format`, pickled with `protocol`.
fn snapshot(dir: &Path, case: &str, format: &str, protocol: u8) -> PathBuf {
    let out = dir.join(format!("{case}-{format}-p{protocol}.pickle"));
    let o = std::process::Command::new("python3")
        .arg(format!("{DIR}/gen_snapshot.py"))
        .args([case, out.to_str().unwrap(), "--format", format])
        .args(["--protocol", &protocol.to_string()])
        .output()
        .expect("python3 runs (the tests need it)");
    assert!(o.status.success(), "gen_snapshot {case}: {}", stderr(&o));
    out
}

fn explain_json(path: &Path, extra: &[&str]) -> Value {
    let o = vramdoc()
        .arg("explain")
        .arg(path)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("--json prints JSON")
}

fn explain_text(path: &Path) -> String {
    let o = vramdoc().arg("explain").arg(path).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn dev0(x: &Value) -> &Value {
    &x["devices"][0]
}

fn fix_ids(d: &Value) -> Vec<String> {
    d["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

mod causes {
    use super::*;

    #[test]
    fn fragmentation_is_enough_free_but_no_block_large_enough() {
        let tmp = tempfile::tempdir().unwrap();
        for format in ["2.1", "2.6"] {
            let x = explain_json(&snapshot(tmp.path(), "fragmentation", format, 4), &[]);
            let d = dev0(&x);
            assert_eq!(d["at"], "oom", "{format}");
            assert_eq!(d["cause"], "fragmentation", "{format}: {d}");
            let n = &d["numbers"];
            assert_eq!(n["requested"], 32 * MIB, "{format}");
            assert_eq!(n["pool_free"], 64 * MIB, "{format}");
            assert_eq!(n["pool_largest_free"], 8 * MIB, "{format}");
            assert_eq!(n["device_free"], 10 * MIB, "{format}");
            assert_eq!(n["allocated"], 6 * GIB + 8 * 12 * MIB, "{format}");
            assert_eq!(n["reserved"], 6 * GIB + 8 * 20 * MIB, "{format}");
            assert_eq!(
                d["top_sites"][0]["site"], "forward (train.py:88)",
                "{format}: the innermost frame outside torch"
            );
            assert_eq!(fix_ids(d)[0], "expandable-segments", "{format}");
        }
        // The terminal says the same.
        let text = explain_text(&snapshot(tmp.path(), "fragmentation", "2.1", 4));
        assert!(text.contains("cause: fragmentation"), "{text}");
        assert!(text.contains("largest free block was 8 MiB"), "{text}");
        assert!(text.contains("expandable_segments:True"), "{text}");
        assert!(text.contains("forward (train.py:88)"), "{text}");
    }

    #[test]
    fn a_pytorch_2_0_snapshot_gets_the_split_limit_not_expandable_segments() {
        let tmp = tempfile::tempdir().unwrap();
        let x = explain_json(&snapshot(tmp.path(), "fragmentation", "2.0", 2), &[]);
        assert_eq!(x["field_set"], "legacy");
        let d = dev0(&x);
        assert_eq!(d["cause"], "fragmentation");
        assert_eq!(d["numbers"]["pool_largest_free"], 8 * MIB);
        assert_eq!(d["top_sites"][0]["site"], "forward (train.py:88)");
        assert_eq!(fix_ids(d)[0], "max-split-size");
        assert!(d["fixes"][0]["text"]
            .as_str()
            .unwrap()
            .contains("max_split_size_mb:32"));
    }

    #[test]
    fn exhaustion_by_live_tensors_names_the_dominant_site() {
        let tmp = tempfile::tempdir().unwrap();
        for (format, protocol) in [("2.0", 2), ("2.1", 4), ("2.6", 5)] {
            let x = explain_json(&snapshot(tmp.path(), "live", format, protocol), &[]);
            let d = dev0(&x);
            assert_eq!(d["cause"], "live-tensors", "{format}: {d}");
            let n = &d["numbers"];
            assert_eq!(n["requested"], 2 * GIB);
            assert_eq!(n["allocated"], 6 * GIB + 768 * MIB, "{format}");
            assert_eq!(n["cached_free"], 64 * MIB, "{format}");
            let top = &d["top_sites"][0];
            assert_eq!(top["site"], "forward (train.py:88)", "{format}");
            assert_eq!(top["bytes"], 6 * GIB, "{format}");
            assert!(top["share"].as_f64().unwrap() > 0.85, "{format}");
            assert_eq!(top["callers"][0], "train_step (train.py:140)", "{format}");
            let ids = fix_ids(d);
            assert_eq!(ids[0], "free-references", "{format}");
            assert!(ids.contains(&"activation-checkpointing".into()), "{format}");
            assert!(d["fixes"][0]["text"]
                .as_str()
                .unwrap()
                .contains("forward (train.py:88)"));
        }
    }

    #[test]
    fn a_cache_held_by_another_stream_is_told_from_fragmentation() {
        let tmp = tempfile::tempdir().unwrap();
        for format in ["2.0", "2.1", "2.6"] {
            let x = explain_json(&snapshot(tmp.path(), "other-stream", format, 4), &[]);
            let d = dev0(&x);
            assert_eq!(d["cause"], "cache-on-other-stream", "{format}: {d}");
            let n = &d["numbers"];
            assert_eq!(n["requested"], GIB);
            assert_eq!(n["stream"], 0);
            assert_eq!(n["other_streams_free"], 3 * GIB, "{format}");
            assert_eq!(n["pool_free"], 0, "{format}");
            assert_eq!(d["top_sites"][0]["site"], "forward (train.py:88)");
            assert_eq!(fix_ids(d), vec!["empty-cache"], "{format}");
        }
    }

    #[test]
    fn a_cuda_graph_pool_holding_the_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let x = explain_json(&snapshot(tmp.path(), "private-pool", "2.6", 4), &[]);
        let d = dev0(&x);
        assert_eq!(d["cause"], "cache-in-private-pool", "{d}");
        assert_eq!(d["numbers"]["private_pools_free"], 2 * GIB);
        assert_eq!(fix_ids(d), vec!["release-graph-pool"]);
    }

    #[test]
    fn memory_growing_across_iterations_names_the_growing_site() {
        let tmp = tempfile::tempdir().unwrap();
        let x = explain_json(&snapshot(tmp.path(), "growth", "2.6", 4), &[]);
        let d = dev0(&x);
        assert_eq!(d["cause"], "growth", "{d}");
        assert_eq!(d["history"]["growing"], true);
        let g = &d["growing_sites"][0];
        assert_eq!(g["site"], "remember (train.py:61)");
        assert!(g["to"].as_u64().unwrap() >= g["from"].as_u64().unwrap() + 30 * 64 * MIB);
        assert_eq!(fix_ids(d), vec!["free-references"]);
        assert!(
            d["history"]["span_us"].is_array(),
            "2.6 entries carry time_us"
        );
    }

    #[test]
    fn memory_outside_pytorch_needs_the_device_total() {
        let tmp = tempfile::tempdir().unwrap();
        let p = snapshot(tmp.path(), "live", "2.1", 4);
        // 16 GiB card, 200 MiB free, PyTorch reserved 6.8 GiB: ~9 GiB is someone else's.
        let x = explain_json(&p, &["--device-total", "16GiB"]);
        let d = dev0(&x);
        assert_eq!(d["cause"], "outside-pytorch", "{d}");
        assert_eq!(
            d["numbers"]["outside_pytorch"],
            16 * GIB - 200 * MIB - (6 * GIB + 832 * MIB)
        );
        assert_eq!(fix_ids(d), vec!["outside-memory"]);
        // On a card it fills, the same snapshot is live tensors again.
        let x = explain_json(&p, &["--device-total", "7GiB"]);
        assert_eq!(dev0(&x)["cause"], "live-tensors");
    }

    #[test]
    fn a_snapshot_without_an_oom_is_described_at_the_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let x = explain_json(&snapshot(tmp.path(), "clean", "2.1", 4), &[]);
        let d = dev0(&x);
        assert_eq!(d["at"], "snapshot");
        assert_eq!(d["cause"], "none");
        assert_eq!(d["numbers"]["cached_free"], GIB);
        assert!(d["fixes"].as_array().unwrap().is_empty());
    }
}

#[test]
fn out_files_carry_what_json_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let p = snapshot(tmp.path(), "fragmentation", "2.6", 4);
    let (json, md, html) = (
        tmp.path().join("x.json"),
        tmp.path().join("x.md"),
        tmp.path().join("x.html"),
    );
    let o = vramdoc()
        .arg("explain")
        .arg(&p)
        .arg("--json")
        .args(["--out", json.to_str().unwrap()])
        .args(["--out", md.to_str().unwrap()])
        .args(["--out", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let printed: Value = serde_json::from_slice(&o.stdout).unwrap();
    let written: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(printed, written);
    assert_eq!(written["schema"], "vramdoc-explain/1");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("**Cause:** fragmentation: 32 MiB was requested"),
        "{md}"
    );
    assert!(md.contains("forward (train.py:88)"), "{md}");
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.contains("aria-label=\"segment map of cuda:0\""));
    assert!(html.contains("failed request: 32 MiB"));
    assert!(html.contains("data-cause=\"fragmentation\""));
    assert!(html.contains("aria-label=\"live memory timeline of cuda:0\""));
    assert!(!html.contains("<script"), "self-contained, no script");
    assert!(html.contains("default-src 'none'"));
    // The map draws every segment: 9 of them, blocks in three colours at most.
    let d = dev0(&written);
    assert_eq!(d["segment_map"].as_array().unwrap().len(), 9);
    // An existing --out is refused before reading, unless --force.
    let o = vramdoc()
        .arg("explain")
        .arg(&p)
        .args(["--out", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
}

mod untrusted {
    use super::*;

    /// A pickle whose loading would run `touch MARKER` (through `os.system`).
    fn hostile(dir: &Path, protocol: u8) -> (PathBuf, PathBuf) {
        let marker = dir.join(format!("ran-{protocol}"));
        let out = dir.join(format!("hostile-{protocol}.pickle"));
        let script = format!(
            "import os, pickle\n\
             class P:\n    def __reduce__(self):\n        return (os.system, ('touch {m}',))\n\
             pickle.dump({{'segments': [P()]}}, open('{o}', 'wb'), protocol={protocol})\n",
            m = marker.display(),
            o = out.display()
        );
        let s = std::process::Command::new("python3")
            .args(["-c", &script])
            .status()
            .unwrap();
        assert!(s.success());
        assert!(!marker.exists());
        (out, marker)
    }

    #[test]
    fn a_pickle_naming_os_system_is_refused_and_nothing_runs() {
        let tmp = tempfile::tempdir().unwrap();
        for protocol in [2u8, 4, 5] {
            let (p, marker) = hostile(tmp.path(), protocol);
            let html = tmp.path().join(format!("h{protocol}.html"));
            let o = vramdoc()
                .arg("explain")
                .arg(&p)
                .args(["--out", html.to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(
                o.status.code(),
                Some(2),
                "protocol {protocol}: {}",
                stderr(&o)
            );
            let e = stderr(&o);
            // Protocol 2 names it with GLOBAL, 4 and 5 with STACK_GLOBAL: `posix.system`.
            assert!(e.contains("posix.system"), "protocol {protocol}: {e}");
            assert!(e.contains("names a global"), "{e}");
            assert!(e.contains("byte "), "the offset: {e}");
            assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
            assert!(!marker.exists(), "nothing ran");
            assert!(!html.exists(), "nothing half-written");
        }
    }

    #[test]
    fn over_the_size_limit_names_the_flag() {
        let tmp = tempfile::tempdir().unwrap();
        let p = snapshot(tmp.path(), "live", "2.1", 4);
        let o = vramdoc()
            .arg("explain")
            .arg(&p)
            .args(["--max-size", "1KiB"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("--max-size"), "{}", stderr(&o));
        let x = explain_json(&p, &["--max-size", "1MiB"]);
        assert_eq!(dev0(&x)["cause"], "live-tensors");
    }

    #[test]
    fn truncated_and_foreign_files_are_one_line_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let p = snapshot(tmp.path(), "live", "2.1", 4);
        let bytes = std::fs::read(&p).unwrap();
        let cut = tmp.path().join("cut.pickle");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let json = tmp.path().join("r.json");
        std::fs::write(&json, b"{\"schema_version\": 1}").unwrap();
        for (f, says) in [(&cut, "truncated"), (&json, "not a pickle")] {
            let o = vramdoc().arg("explain").arg(f).output().unwrap();
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            let e = stderr(&o);
            assert!(e.contains(says) && e.contains(f.to_str().unwrap()), "{e}");
        }
        // A plain pickle that is not a snapshot says what is missing.
        let other = tmp.path().join("other.pickle");
        std::fs::write(&other, b"\x80\x04}\x94\x8c\x01a\x94K\x01s.").unwrap();
        let o = vramdoc().arg("explain").arg(&other).output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("no `segments`"), "{}", stderr(&o));
    }

    /// `explain --json FILE` with its address space capped at `limit` bytes.
    fn explain_capped(path: &Path, limit: u64) -> std::process::Output {
        use std::os::unix::process::CommandExt;
        let mut c = vramdoc();
        c.arg("explain").arg(path).arg("--json");
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            c.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c.output().unwrap()
    }

    /// A pickle `python3` writes from the expression `expr` (protocol 4).
    fn crafted(dir: &Path, name: &str, setup: &str, expr: &str) -> PathBuf {
        let out = dir.join(name);
        let script = format!(
            "import pickle\n{setup}\npickle.dump({expr}, open({o:?}, 'wb'), protocol=4)\n",
            o = out.display().to_string()
        );
        let s = std::process::Command::new("python3")
            .args(["-c", &script])
            .status()
            .unwrap();
        assert!(s.success());
        out
    }

    /// Issue 39 item 1: one segment referenced M times holding one block referenced K times
    /// (12 KB for M = K = 3000) expanded to 9 million typed blocks (359 MB); M = K = 10000
    /// (40 KB) ran into a 3 GB limit and aborted. It is refused (exit 2, one line) within a
    /// small address space.
    #[test]
    fn repeated_segments_and_blocks_are_refused_not_expanded() {
        let tmp = tempfile::tempdir().unwrap();
        let p = crafted(
            tmp.path(),
            "mk.pickle",
            "b = {'address': 0, 'size': 512, 'requested_size': 512, 'state': 'active_allocated', 'frames': []}\n\
             s = {'device': 0, 'address': 0, 'total_size': 1 << 20, 'stream': 0, 'blocks': [b] * 10000}",
            "{'segments': [s] * 10000, 'device_traces': [[]]}",
        );
        assert!(std::fs::metadata(&p).unwrap().len() < 64 * 1024);
        let o = explain_capped(&p, 1 << 30);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("repeats segments, blocks") && e.contains("mk.pickle"),
            "{e}"
        );
        assert!(
            e.contains("budget") && !e.contains("_dump_snapshot?"),
            "{e}"
        );
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(o.stdout.is_empty());
    }

    /// Issue 39 item 1: one 1 MiB file name shared by 1000 frames peaked at 1.96 GB. Shared
    /// strings are held once: it is explained within 256 MiB of address space, and the site
    /// shown is cut short.
    #[test]
    fn a_long_string_shared_by_many_frames_is_held_once() {
        let tmp = tempfile::tempdir().unwrap();
        let p = crafted(
            tmp.path(),
            "name.pickle",
            "fn = '/x/' + 'a' * (1 << 20) + '.py'\n\
             fr = [{'filename': fn, 'line': i, 'name': 'f'} for i in range(1000)]\n\
             bl = [{'address': i * 512, 'size': 512, 'requested_size': 512, 'state': 'active_allocated', 'frames': [fr[i]]} for i in range(1000)]",
            "{'segments': [{'device': 0, 'address': 0, 'total_size': 512000, 'stream': 0, 'blocks': bl}], 'device_traces': [[]]}",
        );
        let o = explain_capped(&p, 256 << 20);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let x: Value = serde_json::from_slice(&o.stdout).unwrap();
        let site = dev0(&x)["top_sites"][0]["site"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            site.starts_with("f (/x/aaaa") && site.chars().count() <= 300,
            "{site}"
        );
    }

    /// A one-segment snapshot whose allocated block has `size`, `requested` and a frame
    /// named `name` (Python expressions).
    fn small(dir: &Path, file: &str, size: &str, requested: &str, name: &str) -> PathBuf {
        crafted(
            dir,
            file,
            "",
            &format!(
                "{{'segments': [{{'device': 0, 'address': 0, 'total_size': 1024, 'stream': 0, \
                 'blocks': [{{'address': 0, 'size': {size}, 'requested_size': {requested}, \
                 'state': 'active_allocated', 'frames': [{{'filename': '/w/t.py', 'line': 1, \
                 'name': {name}}}]}}, {{'address': 512, 'size': 512, 'state': 'inactive', \
                 'frames': []}}]}}], 'device_traces': [[]]}}"
            ),
        )
    }

    /// Issue 39 item 5: `--max-size 0` was taken as the 1 GiB default.
    #[test]
    fn max_size_zero_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let p = small(tmp.path(), "s.pickle", "512", "512", "'f'");
        let o = vramdoc()
            .arg("explain")
            .arg(&p)
            .args(["--max-size", "0"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("--max-size") && e.contains("0 reads nothing"),
            "{e}"
        );
    }

    /// Issue 39 item 5: `--out x.json` wrote U+202E and U+200B raw where `--json` escaped
    /// them: both carry the same bytes now, the escapes.
    #[test]
    fn out_json_and_stdout_json_escape_alike() {
        let tmp = tempfile::tempdir().unwrap();
        let p = small(
            tmp.path(),
            "s.pickle",
            "512",
            "512",
            "'ab\\u202ecd\\u200bef'",
        );
        let out = tmp.path().join("x.json");
        let o = vramdoc()
            .arg("explain")
            .arg(&p)
            .arg("--json")
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let file = std::fs::read(&out).unwrap();
        assert_eq!(file, o.stdout, "one policy for --out and --json");
        let text = String::from_utf8(file).unwrap();
        assert!(
            !text.contains('\u{202e}') && !text.contains('\u{200b}'),
            "{text}"
        );
        assert!(text.contains("ab\\u202ecd\\u200bef"), "{text}");
        let x: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            dev0(&x)["top_sites"][0]["site"].as_str().unwrap(),
            "ab\u{202e}cd\u{200b}ef (/w/t.py:1)",
            "the same JSON value"
        );
    }

    /// Issue 39 item 5: a negative size read as 2^64 − 1 ("17179869184.00 GiB allocated"):
    /// a required one is refused naming it, an optional one left out.
    #[test]
    fn negative_sizes_are_refused_or_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        let p = small(tmp.path(), "neg.pickle", "-1", "512", "'f'");
        let o = vramdoc().arg("explain").arg(&p).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("segment 0 block 0 has a negative `size` (-1)"),
            "{}",
            stderr(&o)
        );
        let p = small(tmp.path(), "req.pickle", "512", "-5", "'f'");
        let x = explain_json(&p, &[]);
        let text = x.to_string();
        assert!(!text.contains("18446744073709551615"), "{text}");
        assert!(!explain_text(&p).contains("17179869184"), "no wrapped size");
    }

    /// Issue 39 item 7: the HTML timeline said "Peak shown: 2 MiB" beside 6 GiB live (the
    /// history window held only the small allocations): it says what the window covers.
    #[test]
    fn the_html_timeline_says_what_its_window_covers() {
        let tmp = tempfile::tempdir().unwrap();
        let p = crafted(
            tmp.path(),
            "window.pickle",
            "G = 1 << 30\n\
             t = [{'action': 'alloc', 'addr': 6 * G + i * 65536, 'size': 65536, 'stream': 0, \
             'time_us': 1000 * i, 'frames': [{'filename': '/w/t.py', 'line': 3, 'name': 'step'}]} \
             for i in range(32)]",
            "{'segments': [{'device': 0, 'address': 0, 'total_size': 8 * G, 'stream': 0, \
             'blocks': [{'address': 0, 'size': 6 * G, 'requested_size': 6 * G, \
             'state': 'active_allocated', 'frames': []}, {'address': 6 * G, 'size': 2 * G, \
             'state': 'inactive', 'frames': []}]}], 'device_traces': [t]}",
        );
        let html = tmp.path().join("w.html");
        let o = vramdoc()
            .arg("explain")
            .arg(&p)
            .arg("--out")
            .arg(&html)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = std::fs::read_to_string(&html).unwrap();
        assert!(!text.contains("Peak shown"), "the old wording");
        assert!(
            text.contains("32 history entries spanning")
                && text.contains("most recent ones")
                && text.contains("it peaks at 2 MiB"),
            "{text}"
        );
        assert!(
            text.contains("6.00 GiB is allocated at the snapshot: the other 6.00 GiB was allocated before the window began"),
            "{text}"
        );
    }

    fn cases() -> u32 {
        std::env::var("VRAMDOC_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(400)
    }

    fn seeds() -> Vec<Vec<u8>> {
        let tmp = tempfile::tempdir().unwrap();
        let mut v = Vec::new();
        for (case, format, protocol) in [
            ("fragmentation", "2.6", 4),
            ("live", "2.0", 2),
            ("growth", "2.1", 5),
        ] {
            v.push(std::fs::read(snapshot(tmp.path(), case, format, protocol)).unwrap());
        }
        v
    }

    type Read = Result<vramdoc::explain::snapshot::Snapshot, String>;

    /// `data` read as `explain` reads a file (from `dir`, the history converted as it is
    /// read), and decoded whole first.
    fn streamed_and_whole(dir: &Path, data: &[u8]) -> (Read, Read) {
        use vramdoc::explain::{pickle, snapshot, ExplainError};
        let file = dir.join("fuzz.pickle");
        std::fs::write(&file, data).unwrap();
        let streamed = vramdoc::explain::read_snapshot(&file, 0)
            .map(|(s, _)| s)
            .map_err(|e| match e {
                ExplainError::Pickle { source, .. } => source.to_string(),
                ExplainError::Format { source, .. } => source.to_string(),
                e => e.to_string(),
            });
        let whole = pickle::decode_slice(data)
            .map_err(|e| e.to_string())
            .and_then(|mut doc| snapshot::from_doc(&mut doc).map_err(|e| e.to_string()));
        (streamed, whole)
    }

    /// Found by the fuzz below (CI, 2026-12-03): a history entry's `frames` list that the file
    /// appends to after the entry was put in `device_traces` was read as it stood then (no
    /// stack) when streamed, and as the file leaves it (one frame) when read whole.
    #[test]
    fn a_frames_list_written_after_its_entry_reads_as_the_file_leaves_it() {
        // {'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 1, 'size': 512,
        // 'frames': F}]]} with F = [] at first; after the history list's APPENDS, `h\x05`
        // (F again) gets {'filename': 'a.py', 'line': 3, 'name': 'f'} appended. Python's
        // pickle.loads reads the entry with that one frame.
        let p: &[u8] =
            b"\x80\x04}\x94(\x8c\x08segments]\x94\x8c\x0ddevice_traces]\x94(]\x94(}\x94(\
            \x8c\x06action\x8c\x05alloc\x8c\x04addrK\x01\x8c\x04sizeM\x00\x02\x8c\x06frames]\x94ue\
            h\x05}\x94(\x8c\x08filename\x8c\x04a.py\x8c\x04lineK\x03\x8c\x04name\x8c\x01fua0eu.";
        let tmp = tempfile::tempdir().unwrap();
        let (streamed, whole) = streamed_and_whole(tmp.path(), p);
        for s in [streamed.unwrap(), whole.unwrap()] {
            let e = &s.traces[0][0];
            let stack = e.stack().expect("the entry has its frame");
            let frame = &s.frames[s.stacks[stack as usize][0] as usize];
            assert_eq!(
                (&*frame.filename, frame.line, &*frame.name),
                ("a.py", 3, "f")
            );
        }
    }

    /// A history entry the file writes to after putting it in `device_traces` (`h\x04`: the
    /// entry again, `size` set to 1024) was read with the size it had then when streamed.
    /// `explain` reads such a file again, whole: it says what it ends with, as Python reads it.
    #[test]
    fn a_history_entry_written_after_it_was_read_reads_as_the_file_leaves_it() {
        let p: &[u8] =
            b"\x80\x04}\x94(\x8c\x08segments]\x94\x8c\x0ddevice_traces]\x94(]\x94(}\x94(\
            \x8c\x06action\x8c\x05alloc\x8c\x04addrK\x01\x8c\x04sizeM\x00\x02\x8c\x06frames]\x94ue\
            h\x04\x8c\x04sizeM\x00\x04s0eu.";
        let tmp = tempfile::tempdir().unwrap();
        let (streamed, whole) = streamed_and_whole(tmp.path(), p);
        for s in [streamed.unwrap(), whole.unwrap()] {
            assert_eq!(s.traces[0][0].size, 1024);
        }
    }

    /// Mutated snapshots: the reader never panics, never takes more than its value budget,
    /// and whatever it accepts is explained and rendered in every format.
    #[test]
    fn bounded_fuzz_of_the_reader() {
        let seeds = seeds();
        let tmp = tempfile::tempdir().unwrap();
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: cases(),
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let strategy = (
            0..seeds.len(),
            proptest::collection::vec((0u8..3, any::<u32>(), any::<u8>()), 1..8),
        );
        runner
            .run(&strategy, |(which, edits)| {
                let mut data = seeds[which].clone();
                for (kind, at, byte) in edits {
                    let i = at as usize % data.len().max(1);
                    match kind {
                        0 => data[i] = byte,
                        1 => data.insert(i, byte),
                        _ => {
                            data.remove(i);
                        }
                    }
                    if data.is_empty() {
                        data.push(b'.');
                    }
                }
                use vramdoc::explain::{explain, pickle, snapshot};
                // Read as `explain` reads a file and whole: the same snapshot, or the same
                // refusal.
                let (streamed, whole) = streamed_and_whole(tmp.path(), &data);
                let debug = |r: Read| r.map(|s| format!("{s:?}"));
                prop_assert_eq!(debug(streamed), debug(whole));
                match pickle::decode_slice(&data) {
                    Ok(mut doc) => {
                        if let Ok(s) = snapshot::from_doc(&mut doc) {
                            let x =
                                explain(&s, "fuzz".into(), data.len() as u64, &Default::default());
                            let _ = vramdoc::report::explain::json(&x);
                            let _ = vramdoc::report::explain::markdown(&x);
                            let _ = vramdoc::report::explain::text(&x);
                            let _ = vramdoc::report::explain_html::render(&x);
                        }
                    }
                    Err(e) => {
                        let m = e.to_string();
                        prop_assert!(m.starts_with("byte ") || m.starts_with("reading"), "{}", m);
                    }
                }
                Ok(())
            })
            .unwrap();
    }
}

mod torch_memory {
    use super::*;

    /// `vramdoc run [--torch-memory] -- python3 torch_job.py 7168 oom` on a 2x16GiB box, the
    /// stand-in torch on the job's PYTHONPATH (with a sitecustomize of the job's own).
    fn run(dir: &Path, flag: bool) -> (std::process::Output, Value) {
        let out = dir.join("run.json");
        // The job waits until vramdoc's process lists have seen it hold its memory (the
        // `--samples` stream says so) before it runs out: never a race with the sampler.
        let samples = dir.join("run.jsonl");
        let mut c = vramdoc();
        c.env("LD_LIBRARY_PATH", simgpu_lib_dir())
            // The hook's directory goes under this user's private one: the test's own.
            .env("XDG_RUNTIME_DIR", dir)
            .env("PYTHONPATH", format!("{DIR}/chain:{DIR}/fake_torch"))
            .env("TORCH_JOB_WAIT_SAMPLES", &samples)
            .args(["--sim", "2x16GiB", "run", "--process-period", "100ms"])
            .args(["--period", "20ms", "--samples"])
            .arg(&samples)
            .arg("--out")
            .arg(&out);
        if flag {
            c.args(["--torch-memory", "--torch-memory-entries", "1000"]);
        }
        let o = c
            .args([
                "--",
                "python3",
                &format!("{DIR}/torch_job.py"),
                "7168",
                "oom",
            ])
            .output()
            .unwrap();
        let report = std::fs::read(&out)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        (o, report)
    }

    /// Issue 39 item 3: the job's `PYTHONPATH` pointed at `$TMPDIR/vramdoc-torch-XXXX/py`,
    /// removed when the run ended: any local user could make it again, and a survivor's
    /// next Python process would import their `sitecustomize.py`. Every path the job
    /// inherits now lies in a directory only this user can write, which outlives the run.
    #[test]
    fn the_job_inherits_no_path_another_user_can_make_again() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let runtime = tmp.path().join("runtime");
        std::fs::create_dir(&runtime).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let env_file = tmp.path().join("env");
        let o = vramdoc()
            .env("LD_LIBRARY_PATH", simgpu_lib_dir())
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("TMPDIR", tmp.path())
            .args(["--sim", "1x16GiB", "run", "--torch-memory", "--"])
            .args([
                "sh",
                "-c",
                "printf '%s\\n%s\\n' \"$PYTHONPATH\" \"$VRAMDOC_TORCH_MEMORY_DIR\" > \"$0\"",
            ])
            .arg(&env_file)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = std::fs::read_to_string(&env_file).unwrap();
        let paths: Vec<PathBuf> = text
            .lines()
            .flat_map(|l| l.split(':'))
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        assert_eq!(paths.len(), 2, "{text}");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        for p in &paths {
            assert!(!p.exists(), "{}: removed when the run ended", p.display());
            // The nearest ancestor that is still there is this user's alone.
            let kept = p.ancestors().find(|a| a.exists()).unwrap();
            assert_eq!(kept, runtime.join("vramdoc"), "{}", p.display());
            let m = std::fs::symlink_metadata(kept).unwrap();
            assert!(
                m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0,
                "{m:?}"
            );
        }
        std::fs::remove_dir(runtime.join("vramdoc")).unwrap();
    }

    fn oom_evidence(r: &Value) -> Vec<(String, String)> {
        r["run"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["id"] == "out-of-memory")
            .flat_map(|f| f["evidence"].as_array().unwrap().iter())
            .map(|e| {
                (
                    e["label"].as_str().unwrap().to_string(),
                    e["value"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn the_snapshot_is_dumped_at_the_oom_kept_and_joined_with_the_finding() {
        let tmp = tempfile::tempdir().unwrap();
        let (o, r) = run(tmp.path(), true);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        // The injected code asked for Python stacks and the bounded history.
        assert!(
            out.contains("'stacks': 'python', 'max_entries': 1000"),
            "{out}"
        );
        assert!(out.contains("dump dir set: True"), "{out}");
        // The job's own sitecustomize still ran.
        assert!(out.contains("chained: yes"), "{out}");
        let ev = oom_evidence(&r);
        let get = |label: &str| {
            ev.iter()
                .find(|(l, _)| l == label)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {label:?} in {ev:?}"))
        };
        assert!(get("PyTorch (cuda:0) cause").contains("exhaustion by live tensors"));
        assert_eq!(get("PyTorch (cuda:0) requested"), "2.00 GiB");
        assert!(
            get("PyTorch (cuda:0) top site").starts_with("forward (train.py:88) holds 6.00 GiB")
        );
        // The job holds 7 GiB through the driver plus its context; the stand-in's snapshot
        // says PyTorch reserved 6.81 GiB of it: the rest (192 MiB + the context) is outside.
        let outside = r["run"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|f| f["evidence"].as_array().unwrap().iter())
            .find(|e| {
                e["label"]
                    .as_str()
                    .unwrap()
                    .starts_with("PyTorch (cuda:0) outside PyTorch")
            })
            .and_then(|e| e["bytes"].as_u64())
            .expect("outside PyTorch, in bytes");
        assert!(outside > 192 * MIB && outside < GIB, "{outside}");
        let kept = tmp.path().join("run.torch-memory.pickle");
        assert!(kept.is_file(), "kept next to the report");
        assert_eq!(get("PyTorch snapshot file"), kept.display().to_string());
        // The kept file is the snapshot: explain reads it as such.
        let x = explain_json(&kept, &[]);
        assert_eq!(dev0(&x)["cause"], "live-tensors");
        let fix = r["run"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "out-of-memory")
            .unwrap()["fix"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(fix.contains("forward (train.py:88)"), "{fix}");
    }

    #[test]
    fn without_the_flag_nothing_is_injected() {
        let tmp = tempfile::tempdir().unwrap();
        let (o, r) = run(tmp.path(), false);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(out.contains("recording: None"), "{out}");
        assert!(out.contains("dump dir set: False"), "{out}");
        assert!(out.contains("chained: yes"), "{out}");
        assert!(oom_evidence(&r)
            .iter()
            .all(|(l, _)| !l.starts_with("PyTorch")));
        assert!(!tmp.path().join("run.torch-memory.pickle").exists());
    }
}

/// `explain | head` is quiet (exit 0) and a full disk is one line and exit 3, as for every
/// command that writes to standard output.
#[test]
fn broken_and_full_stdout_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let p = snapshot(tmp.path(), "live", "2.1", 4);
    for json in [false, true] {
        let mut c = vramdoc();
        c.arg("explain").arg(&p);
        if json {
            c.arg("--json");
        }
        let mut child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "json {json}: {}", stderr(&o));
        assert!(stderr(&o).is_empty(), "json {json}: {}", stderr(&o));
        let mut c = vramdoc();
        c.arg("explain").arg(&p);
        if json {
            c.arg("--json");
        }
        let o = c
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(3), "json {json}: {}", stderr(&o));
        assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    }
}
