//! Issue 34: `scenario from` reads a `--samples` stream in bounded memory; what it keeps
//! converts as keeping every line does.

use super::*;

/// A reader that hands out at most `n` bytes per read (lines cut across reads).
struct Trickle<'a> {
    data: &'a [u8],
    n: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.n.min(buf.len()).min(self.data.len());
        buf[..k].copy_from_slice(&self.data[..k]);
        self.data = &self.data[k..];
        Ok(k)
    }
}

/// `hours` of one L4 GPU recorded every 100 ms: flat levels that step by 512 MiB every 10
/// minutes (a 1 MiB sawtooth on top), the job's process list every 500 ms, a neighbour of
/// 2 GiB from the first hour to the second, a marker every 30 minutes, an OOM and the end.
fn long_stream(hours: f64) -> String {
    let mut text = String::from(HEADER);
    text.push('\n');
    let end = (hours * 36_000.0) as u64;
    for i in 0..end {
        let t = i as f64 * 100.0;
        let level = 448 * MIB + (i / 6_000) * 512 * MIB;
        let job = level + (i % 3) * MIB;
        let theirs = if (36_000..72_000).contains(&i) {
            2 * GIB
        } else {
            0
        };
        text.push_str(&format!(
            "{{\"type\":\"memory\",\"t_ms\":{t},\"used\":[{}]}}\n",
            job + theirs
        ));
        if i.is_multiple_of(5) {
            text.push_str(&format!(
                "{{\"type\":\"process\",\"t_ms\":{t},\"device\":0,\"pid\":9,\"used\":{level},\"tree\":true}}\n"
            ));
            if theirs > 0 {
                text.push_str(&format!(
                    "{{\"type\":\"process\",\"t_ms\":{t},\"device\":0,\"pid\":{OTHER},\"used\":{theirs}}}\n"
                ));
            }
        }
        if i % 18_000 == 50 {
            text.push_str(&format!(
                "{{\"type\":\"marker\",\"t_ms\":{t},\"kind\":\"marker\",\"label\":\"phase {}\"}}\n",
                i / 18_000
            ));
        }
    }
    let t = end as f64 * 100.0;
    text.push_str(&format!(
        "{{\"type\":\"error\",\"t_ms\":{t},\"kind\":\"cuda-oom\",\"device\":0,\"requested\":{}}}\n",
        4 * GIB
    ));
    text.push_str(&format!("{{\"type\":\"end\",\"t_ms\":{t},\"status\":1}}\n"));
    text
}

#[test]
fn a_stream_read_in_small_pieces_is_the_stream_read_whole() {
    let text = long_stream(0.05);
    let whole = from_samples(&text, "run.jsonl").unwrap();
    for n in [1, 7, 4096] {
        let r = std::io::BufReader::with_capacity(
            16,
            Trickle {
                data: text.as_bytes(),
                n,
            },
        );
        let streamed = source::from_samples_reader(r, "run.jsonl").unwrap();
        assert_eq!(streamed, whole, "read {n} bytes at a time");
    }
    // Short: every sample is kept (of identical process lists, the first and last of a run)
    // and it converts as keeping every line does.
    let every = source::from_samples_whole(&text, "run.jsonl").unwrap();
    assert_eq!(whole.series, every.series);
    assert!(whole.processes.len() < every.processes.len());
    assert_eq!(
        convert_source(&whole, spec_of).unwrap().toml,
        convert_source(&every, spec_of).unwrap().toml
    );
}

/// Three hours (108,000 samples, 21,600 process lists): the bounded reading keeps a small
/// part of them and converts to the very scenario keeping every sample gives.
#[test]
fn a_long_stream_kept_bounded_converts_to_the_scenario_of_every_sample() {
    let text = long_stream(3.0);
    let bounded = from_samples(&text, "run.jsonl").unwrap();
    let whole = source::from_samples_whole(&text, "run.jsonl").unwrap();
    assert_eq!(whole.series[0].samples.len(), 108_000);
    assert!(
        bounded.series[0].samples.len() < 30_000,
        "{} samples kept",
        bounded.series[0].samples.len()
    );
    assert!(
        bounded.processes.len() < whole.processes.len() / 20,
        "{} of {} process samples kept",
        bounded.processes.len(),
        whole.processes.len()
    );
    assert_eq!(bounded.findings, whole.findings);
    let a = convert_source(&bounded, spec_of).unwrap();
    let b = convert_source(&whole, spec_of).unwrap();
    assert_eq!(a.toml, b.toml);
    assert!(a.scenario.steps.len() > 15, "{}", a.toml);
    assert_eq!(a.scenario.neighbours.len(), 1, "{}", a.toml);
}

#[test]
fn markers_errors_and_lines_are_bounded() {
    let mut text = format!("{HEADER}\n");
    text.push_str("{\"type\":\"memory\",\"t_ms\":0,\"used\":[0]}\n");
    let n = source::MAX_MARKERS + 10;
    for i in 0..n {
        text.push_str(&format!(
            "{{\"type\":\"marker\",\"t_ms\":{i},\"kind\":\"marker\",\"label\":\"{}\"}}\n",
            "m".repeat(2 * source::MAX_MARKER_LABEL)
        ));
    }
    for i in 0..source::MAX_ERRORS + 5 {
        text.push_str(&format!(
            "{{\"type\":\"error\",\"t_ms\":{i},\"kind\":\"child-failed\"}}\n"
        ));
    }
    text.push_str(&format!(
        "{{\"type\":\"error\",\"t_ms\":{n},\"kind\":\"cuda-oom\",\"device\":0}}\n"
    ));
    // Markers after the failure are kept apart: those before it stay.
    text.push_str(&format!(
        "{{\"type\":\"marker\",\"t_ms\":{},\"kind\":\"marker\",\"label\":\"after\"}}\n",
        n + 1
    ));
    let src = from_samples(&text, "x.jsonl").unwrap();
    assert_eq!(src.markers.len(), source::MAX_MARKERS + 1);
    assert_eq!(src.markers[0].t_ms, 10.0, "the oldest are dropped");
    assert!(src
        .markers
        .iter()
        .all(|m| m.label.len() <= source::MAX_MARKER_LABEL));
    assert_eq!(src.markers.last().map(|m| m.label.as_str()), Some("after"));
    assert_eq!(src.errors.len(), source::MAX_ERRORS + 1);
    assert!(src.errors.last().is_some_and(|e| e.out_of_memory));
    let long = format!(
        "{HEADER}\n{{\"type\":\"marker\",\"t_ms\":1,\"kind\":\"marker\",\"label\":\"{}\"}}\n",
        "x".repeat(source::MAX_LINE_BYTES)
    );
    let e = from_samples(&long, "x.jsonl").unwrap_err().to_string();
    assert!(
        e.starts_with("x.jsonl:2: not a line") && e.contains("longer than"),
        "{e}"
    );
}

/// Half an hour of one GPU whose neighbour is a new PID every second (so the kept process
/// lists keep growing): read with a bound of 500 process samples, the older lists are
/// thinned, the newest kept as they were, and it still converts, with its neighbours.
#[test]
fn process_lists_that_keep_changing_are_thinned_oldest_first() {
    let mut text = format!("{HEADER}\n");
    for i in 0..18_000u64 {
        let t = i as f64 * 100.0;
        let pid = 1_000 + i / 10;
        let job = 4 * GIB;
        text.push_str(&format!(
            "{{\"type\":\"memory\",\"t_ms\":{t},\"used\":[{}]}}\n",
            job + GIB
        ));
        if i.is_multiple_of(5) {
            text.push_str(&format!(
                "{{\"type\":\"process\",\"t_ms\":{t},\"device\":0,\"pid\":9,\"used\":{job},\"tree\":true}}\n\
                 {{\"type\":\"process\",\"t_ms\":{t},\"device\":0,\"pid\":{pid},\"used\":{GIB}}}\n"
            ));
        }
    }
    text.push_str("{\"type\":\"end\",\"t_ms\":1800000,\"status\":0}\n");
    let full = from_samples(&text, "run.jsonl").unwrap();
    let thin = source::from_samples_keeping(&text, "run.jsonl", 500).unwrap();
    assert!(full.processes.len() > 1_000, "{}", full.processes.len());
    assert!(thin.processes.len() <= 502, "{}", thin.processes.len());
    // The newest lists as they were.
    let tail = |s: &Source| s.processes[s.processes.len() - 100..].to_vec();
    assert_eq!(tail(&thin), tail(&full));
    // The oldest the sparsest.
    let half = 900_000.0;
    let older = thin.processes.iter().filter(|p| p.t_ms < half).count();
    assert!(
        older * 2 < thin.processes.len() - older,
        "{older} of {}",
        thin.processes.len()
    );
    assert_eq!(thin.findings, full.findings);
    let c = convert_source(&thin, spec_of).unwrap();
    assert!(!c.scenario.neighbours.is_empty(), "{}", c.toml);
}
