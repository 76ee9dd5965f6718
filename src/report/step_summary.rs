//! GitHub Actions job summaries: the Markdown report, cut to fit GitHub's limit. GitHub
//! shows the file named by `GITHUB_STEP_SUMMARY` on the run's page and refuses a step's
//! summary over 1 MiB; we append (other steps may have written there already) and keep the
//! whole file under [`LIMIT`], ending a cut summary with a pointer to the full report. Pure;
//! the append itself is `report::write::append_step_summary`.

/// The environment variable GitHub Actions sets to the summary file of the current step.
pub const STEP_SUMMARY_ENV: &str = "GITHUB_STEP_SUMMARY";

/// GitHub's limit on one step's summary (1 MiB).
pub const LIMIT: usize = 1024 * 1024;

/// The text to append to a summary file that already holds `existing` bytes so that the file
/// stays within [`LIMIT`]: `markdown` itself when it fits, else its first lines with a note
/// pointing at `full_report` (a path or URL); `None` when not even the note fits.
pub fn fit(markdown: &str, existing: u64, full_report: Option<&str>) -> Option<String> {
    let room = LIMIT.saturating_sub(usize::try_from(existing).unwrap_or(usize::MAX));
    let mut md = markdown.to_string();
    if !md.ends_with('\n') {
        md.push('\n');
    }
    if md.len() <= room {
        return Some(md);
    }
    let pointer = match full_report {
        Some(p) => format!("full report: `{}`", p.replace('`', "'")),
        None => "write the full report with `--out report.html`".to_string(),
    };
    let note =
        format!("\n> **Summary truncated** to fit GitHub's 1 MiB job-summary limit; {pointer}.\n");
    // Room for the note and a closing code fence.
    let budget = room.checked_sub(note.len() + 4)?;
    let mut cut = budget.min(md.len());
    while !md.is_char_boundary(cut) {
        cut -= 1;
    }
    let kept = &md[..cut];
    let kept = match kept.rfind('\n') {
        Some(i) => &kept[..=i],
        None => "",
    };
    let mut out = kept.to_string();
    let fences = out
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count();
    if fences % 2 == 1 {
        out.push_str("```\n");
    }
    out.push_str(&note);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_summary_is_kept_whole() {
        assert_eq!(fit("# hi", 0, None).as_deref(), Some("# hi\n"));
    }

    #[test]
    fn big_summary_is_cut_at_a_line_with_a_pointer_and_fits() {
        let mut md = String::from("# replay\n```\n");
        while md.len() < 3 * LIMIT {
            md.push_str("| stray-cuda0 | bug | reproduced | é |\n");
        }
        for existing in [0u64, 1000, (LIMIT - 5000) as u64] {
            let out = fit(&md, existing, Some("out/replay.html")).unwrap();
            assert!(out.len() as u64 + existing <= LIMIT as u64, "{existing}");
            assert!(
                out.len() as u64 + existing > LIMIT as u64 - 200,
                "uses the room"
            );
            assert!(out.contains("full report: `out/replay.html`"));
            assert_eq!(out.matches("```").count() % 2, 0, "code fence closed");
            assert!(out.ends_with(".\n"));
        }
        assert!(fit(&md, LIMIT as u64 - 10, None).is_none());
        assert!(fit(&md, LIMIT as u64 + 10, None).is_none());
    }
}
