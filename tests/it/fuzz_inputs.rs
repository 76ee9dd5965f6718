//! Bounded fuzzing of the two readers of untrusted files: the scenario parser and the report
//! reader. The corpus is seeded from the built-in scenarios (scenarios/*.toml) and from real
//! reports (the model reports of tests/common, rendered by the one JSON renderer). Each seed
//! is mutated (bytes flipped, inserted, deleted, spliced with pieces of other seeds) and
//! parsed: never a panic, and every error names a position inside the input.
//!
//! Bounded: `VRAMDOC_FUZZ_CASES` cases per target (default 400, a few seconds). For a longer,
//! coverage-guided run: `cargo +nightly fuzz run scenario` (fuzz/, see docs/security.md).

use crate::common;

use proptest::prelude::*;
use std::path::Path;
use vramdoc::report::read::{parse_report, ReadError};
use vramdoc::scenario::parse_scenario;

fn cases() -> u32 {
    std::env::var("VRAMDOC_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

fn scenario_seeds() -> Vec<Vec<u8>> {
    vramdoc::scenario::builtin::BUILTIN
        .iter()
        .map(|(_, t)| t.as_bytes().to_vec())
        .collect()
}

fn report_seeds() -> Vec<Vec<u8>> {
    let mut v = vec![
        common::reports::scan_report(),
        common::reports::replay_report(),
    ];
    v.extend(common::reports::hostile_reports());
    v.iter().map(vramdoc::report::json::render).collect()
}

/// One mutation of `seed`, driven by `ops` (kind, position, length, byte) and `other` (a
/// second seed for splicing).
fn mutate(seed: &[u8], other: &[u8], ops: &[(u8, usize, usize, u8)]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(kind, pos, len, byte) in ops {
        let at = if b.is_empty() { 0 } else { pos % (b.len() + 1) };
        match kind % 6 {
            0 => {
                if at < b.len() {
                    b[at] = byte;
                }
            }
            1 => b.insert(at, byte),
            2 => {
                let end = (at + len % 64).min(b.len());
                b.drain(at..end);
            }
            3 => {
                // Splice a piece of another seed.
                if !other.is_empty() {
                    let from = pos % other.len();
                    let end = (from + len % 256).min(other.len());
                    let piece = other[from..end].to_vec();
                    b.splice(at..at, piece);
                }
            }
            4 => {
                // Duplicate a region (repeated tables, keys, steps).
                let end = (at + len % 512).min(b.len());
                let piece = b[at..end].to_vec();
                b.splice(at..at, piece);
            }
            _ => {
                // Interesting tokens.
                const TOKENS: &[&[u8]] = &[
                    b"\"",
                    b"[[",
                    b"]]",
                    b"=",
                    b"\n",
                    b"\\u0000",
                    b"\xff",
                    b"1e308",
                    b"-1",
                    b"{",
                    b"}",
                    b"99999999999999999999",
                    b"NaN",
                    b"\"\\u001b[2J\"",
                    b"*",
                    b"%",
                    b"ctx",
                    b"null",
                    b"[]",
                ];
                let t = TOKENS[len % TOKENS.len()];
                b.splice(at..at, t.iter().copied());
            }
        }
    }
    b
}

fn ops() -> impl Strategy<Value = Vec<(u8, usize, usize, u8)>> {
    proptest::collection::vec(
        (any::<u8>(), any::<usize>(), any::<usize>(), any::<u8>()),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn scenario_parser_survives_mutations(which in any::<usize>(), other in any::<usize>(), ops in ops()) {
        let seeds = scenario_seeds();
        let bytes = mutate(&seeds[which % seeds.len()], &seeds[other % seeds.len()], &ops);
        // Bytes reach the parser the way the CLI reads them: UTF-8 checked first.
        let Ok(text) = vramdoc::input::text_of(Path::new("f.toml"), bytes) else {
            return Ok(());
        };
        if let Err(e) = parse_scenario("f.toml", &text) {
            let lines = text.split('\n').count();
            prop_assert!(e.line >= 1 && e.line <= lines, "line {} of {}: {}", e.line, lines, e);
            prop_assert!(e.col >= 1, "{}", e);
            prop_assert!(!e.message.is_empty());
        }
    }

    #[test]
    fn report_reader_survives_mutations(which in any::<usize>(), other in any::<usize>(), ops in ops()) {
        let seeds = report_seeds();
        let bytes = mutate(&seeds[which % seeds.len()], &seeds[other % seeds.len()], &ops);
        let Ok(text) = vramdoc::input::text_of(Path::new("r.json"), bytes) else {
            return Ok(());
        };
        match parse_report(&text, Path::new("r.json")) {
            Ok(report) => {
                // Whatever parses renders in every format without a panic.
                for f in [vramdoc::report::write::Format::Json, vramdoc::report::write::Format::Markdown] {
                    let _ = vramdoc::report::write::render(&report, f);
                }
            }
            Err(ReadError::Syntax { line, .. } | ReadError::Shape { line, .. }) => {
                prop_assert!(line >= 1 && line <= text.split('\n').count());
            }
            Err(_) => {}
        }
    }
}

#[test]
fn seeds_are_valid_inputs() {
    for (i, s) in scenario_seeds().iter().enumerate() {
        let (id, _) = vramdoc::scenario::builtin::BUILTIN[i];
        parse_scenario("seed.toml", std::str::from_utf8(s).unwrap())
            .unwrap_or_else(|e| panic!("scenario seed {id}: {e}"));
    }
    for (i, r) in report_seeds().iter().enumerate() {
        parse_report(std::str::from_utf8(r).unwrap(), Path::new("seed.json"))
            .unwrap_or_else(|e| panic!("report seed {i}: {e}"));
    }
}
