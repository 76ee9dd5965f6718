//! `vramdoc whatif`'s table: per box, whether the recorded failure reproduces, whether every
//! step fits, and each GPU's peak and headroom; then the smallest box it fits on. Pure.

use super::{table, WIDTH};
use crate::model::WhatIf;
use crate::term::clean;
use crate::units::format_bytes;

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The table and the verdict line.
pub fn render(w: &WhatIf) -> String {
    if w.command.is_some() {
        return render_executed(w);
    }
    let mut t = table(
        vec![
            "box",
            "reproduces",
            "fits",
            "peak per GPU",
            "headroom per GPU",
            "note",
        ],
        WIDTH,
    );
    for b in &w.boxes {
        let (peaks, headroom) = per_gpu(b);
        let note = match (&b.failed_step, &b.note) {
            (_, Some(n)) => clean(n),
            (Some(step), None) => format!("OOM at {}", clean(step)),
            (None, None) => String::new(),
        };
        let (repro, fits) = if b.verdict == "skipped" || b.verdict == "failed" {
            (b.verdict.as_str(), "-")
        } else {
            (yes(b.reproduces), yes(b.fits))
        };
        t.add_row(vec![
            clean(&b.spec),
            repro.to_string(),
            fits.to_string(),
            peaks,
            headroom,
            note,
        ]);
    }
    let verdict = verdict_line(w);
    format!("{}: what if\n{t}\n{verdict}", clean(&w.scenario))
}

/// The line under either table: the smallest box it fits on, or none.
fn verdict_line(w: &WhatIf) -> String {
    match &w.smallest_fit {
        Some(s) => format!("smallest box it fits on: {}", clean(s)),
        None => "it fits on none of these boxes".to_string(),
    }
}

/// Per GPU `index: peak (pct%)` and `index: headroom`, one line each.
fn per_gpu(b: &crate::model::BoxOutcome) -> (String, String) {
    let peaks: Vec<String> = (b.gpus.iter())
        .map(|g| {
            let pct = g.peak as f64 * 100.0 / g.total.max(1) as f64;
            format!("{}: {} ({pct:.0}%)", g.index, format_bytes(g.peak))
        })
        .collect();
    let headroom: Vec<String> = (b.gpus.iter())
        .map(|g| format!("{}: {}", g.index, format_bytes(g.headroom)))
        .collect();
    (peaks.join("\n"), headroom.join("\n"))
}

/// Characters of the job's error a row shows.
const ERROR_CHARS: usize = 140;

/// Fit by execution (`whatif -- CMD`): per box, whether the command ran to the end, its
/// peaks, and the job's own error where it did not.
fn render_executed(w: &WhatIf) -> String {
    let mut t = table(
        vec![
            "box",
            "fits",
            "peak per GPU",
            "headroom per GPU",
            "the job's error",
        ],
        WIDTH,
    );
    for b in &w.boxes {
        let (peaks, headroom) = per_gpu(b);
        let fits = match b.verdict.as_str() {
            "failed" => "failed",
            _ => yes(b.fits),
        };
        let said = b.error.as_deref().or(b.note.as_deref()).unwrap_or("");
        // A terminal row: the error's first sentences (JSON keeps the line).
        let said: String = match said.char_indices().nth(ERROR_CHARS) {
            Some((i, _)) => format!("{}…", &said[..i]),
            None => said.to_string(),
        };
        t.add_row(vec![
            clean(&b.spec),
            fits.to_string(),
            peaks,
            headroom,
            clean(&said),
        ]);
    }
    let verdict = verdict_line(w);
    let command = w.command.as_deref().unwrap_or_default();
    format!(
        "{}: what if (ran on each box)\n{t}\n{verdict}",
        clean(command)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BoxOutcome, GpuOutcome};
    use crate::repro::whatif::what_if;
    use crate::units::GIB;

    #[test]
    fn rows_say_reproduces_fits_and_the_smallest_box() {
        let gpu = |total: u64, peak: u64| GpuOutcome {
            index: 0,
            name: String::new(),
            total,
            peak,
            headroom: total - peak,
        };
        let w = what_if(
            "repro",
            vec![
                BoxOutcome {
                    spec: "t4".into(),
                    verdict: "reproduced".into(),
                    reproduces: true,
                    fits: false,
                    failed_step: Some("failed-alloc\u{1b}[2J".into()),
                    note: None,
                    error: None,
                    gpus: vec![gpu(15 * GIB, 14 * GIB)],
                },
                BoxOutcome {
                    spec: "h100".into(),
                    verdict: "unexpected".into(),
                    reproduces: false,
                    fits: true,
                    failed_step: None,
                    note: None,
                    error: None,
                    gpus: vec![gpu(80 * GIB, 20 * GIB)],
                },
                BoxOutcome::failed("2xh100", "replay exited 3"),
            ],
        );
        let out = render(&w);
        assert!(out.contains("smallest box it fits on: h100"), "{out}");
        assert!(out.contains("OOM at failed-alloc"), "{out}");
        assert!(!out.contains('\u{1b}'), "{out}");
        assert!(out.contains("replay exited 3"), "{out}");
    }

    #[test]
    fn an_executed_what_if_quotes_the_jobs_own_error() {
        let gpu = |total: u64, peak: u64| GpuOutcome {
            index: 0,
            name: String::new(),
            total,
            peak,
            headroom: total - peak,
        };
        let mut w = what_if(
            "script:train.py",
            vec![
                BoxOutcome {
                    spec: "t4".into(),
                    verdict: "out-of-memory".into(),
                    reproduces: true,
                    fits: false,
                    failed_step: None,
                    note: None,
                    error: Some("torch.OutOfMemoryError: CUDA out of memory.\u{1b}[2J".into()),
                    gpus: vec![gpu(15 * GIB, 14 * GIB)],
                },
                BoxOutcome {
                    spec: "a100-80gb".into(),
                    verdict: "fits".into(),
                    reproduces: false,
                    fits: true,
                    failed_step: None,
                    note: None,
                    error: None,
                    gpus: vec![gpu(80 * GIB, 20 * GIB)],
                },
            ],
        );
        w.command = Some("python train.py".into());
        let out = render(&w);
        assert!(
            out.starts_with("python train.py: what if (ran on each box)"),
            "{out}"
        );
        assert!(out.contains("torch.OutOfMemoryError"), "{out}");
        assert!(!out.contains('\u{1b}'), "{out}");
        assert!(out.contains("smallest box it fits on: a100-80gb"), "{out}");
        assert!(!out.contains("reproduces"), "{out}");
    }
}
