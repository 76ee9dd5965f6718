//! `vramdoc scan` in the terminal: a header, the devices, the processes and the findings
//! (with evidence and fix), each a table that fits the terminal width.

use super::{clip, table, Options};
use crate::model::{Headroom, Report, Severity};
use crate::units::format_bytes;

fn headroom_for(h: &[Headroom], device: u32) -> String {
    h.iter()
        .find(|h| h.device == device)
        .map(|h| format!("{:.2}", h.max_gpu_memory_utilization))
        .unwrap_or_else(|| "-".into())
}

/// The people view: header, devices, processes, findings (with evidence and fix). Every
/// line fits [`Options::width`] columns.
pub fn render(report: &Report, opts: Options) -> String {
    // The same redaction pass as every file format, so the table and the files agree; then
    // every field a process or a file controls is made terminal-safe (crate::term::clean).
    let report = &crate::report::text::sanitized(report);
    let c = crate::term::clean;
    let env = &report.environment;
    let mut s = String::new();
    let Some(scan) = report.scan() else {
        return "no scan in this report\n".into();
    };
    let head = format!(
        "vramdoc scan on {}: driver {}, CUDA {}, NVML {}, backend {}",
        c(&env.hostname),
        c(&env.versions.driver),
        c(&env.versions.cuda),
        c(&env.versions.nvml),
        env.backend
    );
    s.push_str(&clip(&head, opts.width));
    s.push('\n');
    // Where scan stood, in one line (issue 25): what its findings could conclude from there.
    let vantage = match &scan.vantage {
        Some(v) => format!("Vantage: {}", c(&v.line())),
        None => format!("PID namespace: {}", scan.pid_namespace),
    };
    s.push_str(&clip(&vantage, opts.width));
    s.push('\n');

    let mut t = table(
        vec![
            "gpu",
            "name",
            "used",
            "free",
            "reserved",
            "total",
            "util",
            "temp",
            "max vLLM util",
        ],
        opts.width,
    );
    for d in &scan.devices {
        let m = d.memory;
        if !d.status.is_ok() {
            // A device the driver would not answer for: its status instead of numbers.
            let status = match &d.status {
                crate::gpu::DeviceStatus::Lost => "LOST".to_string(),
                crate::gpu::DeviceStatus::NoPermission => "no permission".to_string(),
                crate::gpu::DeviceStatus::Error { .. } => "error".to_string(),
                crate::gpu::DeviceStatus::Ok => String::new(),
            };
            let mut row = vec![d.label(), c(&d.name), status];
            row.extend(std::iter::repeat_n("-".to_string(), 6));
            t.add_row(row);
            continue;
        }
        if d.memory_unknown.is_some() {
            // Memory query NOT_SUPPORTED (GB10): what its processes hold, nothing invented.
            let mut row = vec![
                d.index.to_string(),
                c(&d.name),
                format!(
                    "{} by processes",
                    format_bytes(crate::report::text::process_sum(&scan.processes, d.index))
                ),
            ];
            row.extend(std::iter::repeat_n("n/a".to_string(), 3));
            row.push(
                d.utilization_gpu
                    .map(|u| format!("{u}%"))
                    .unwrap_or_else(|| "-".into()),
            );
            row.push(
                d.temperature_c
                    .map(|c| format!("{c} C"))
                    .unwrap_or_else(|| "-".into()),
            );
            row.push("-".into());
            t.add_row(row);
            continue;
        }
        t.add_row(vec![
            d.label(),
            c(&mig_name(d)),
            format_bytes(m.used),
            format_bytes(m.free),
            format_bytes(m.reserved),
            format_bytes(m.total),
            d.utilization_gpu
                .map(|u| format!("{u}%"))
                .unwrap_or_else(|| "-".into()),
            d.temperature_c
                .map(|c| format!("{c} C"))
                .unwrap_or_else(|| "-".into()),
            headroom_for(&scan.headroom, d.index),
        ]);
    }
    s.push_str(&t.to_string());
    s.push('\n');

    if scan.processes.is_empty() {
        s.push_str("No GPU processes.\n");
    } else {
        let mut t = table(
            vec![
                "pid",
                "user",
                "name",
                "CUDA_VISIBLE_DEVICES",
                "memory",
                "command",
            ],
            opts.width,
        );
        for p in &scan.processes {
            let mem: Vec<String> = p
                .devices
                .iter()
                .map(|u| match u.used {
                    Some(b) => format!(
                        "gpu {}: {}",
                        label_of(&scan.devices, u.device),
                        format_bytes(b)
                    ),
                    None => format!("gpu {}: n/a", label_of(&scan.devices, u.device)),
                })
                .collect();
            let mut name = p.name.as_deref().map(c).unwrap_or_else(|| "-".into());
            if !p.visible {
                name = "(not visible)".into();
            }
            if let Some(pod) = &p.pod {
                name.push_str(&format!("\npod {}", c(&pod.label())));
                if let Some(cont) = &pod.container {
                    name.push_str(&format!("\ncontainer {}", c(cont)));
                }
            } else if let Some(cont) = &p.container {
                name.push_str(&format!("\n[{}]", c(cont)));
            }
            t.add_row(vec![
                p.pid.to_string(),
                p.user.as_deref().map(c).unwrap_or_else(|| "-".into()),
                name,
                c(&p.cuda_visible_devices),
                mem.join("\n"),
                p.cmdline.as_deref().map(c).unwrap_or_else(|| "-".into()),
            ]);
        }
        s.push_str(&t.to_string());
        s.push('\n');
    }
    if let Some(note) = &scan.pods_note {
        s.push_str(&format!("Pods: {}\n", c(note)));
    }

    if scan.findings.is_empty() {
        s.push_str("No findings.\n");
    } else {
        let mut t = table(vec!["severity", "finding"], opts.width);
        for f in &scan.findings {
            let mut body = c(&f.title);
            for e in &f.evidence {
                body.push_str(&format!("\n  {}: {}", c(&e.label), c(&e.value)));
            }
            body.push_str(&format!("\nFix: {}", c(&f.fix)));
            t.add_row(vec![format!("{}\n{}", f.severity.as_str(), f.id), body]);
        }
        s.push_str(&t.to_string());
        s.push('\n');
        let count = |sev: Severity| scan.findings.iter().filter(|f| f.severity == sev).count();
        s.push_str(&format!(
            "{} finding(s): {} error, {} warn, {} info\n",
            scan.findings.len(),
            count(Severity::Error),
            count(Severity::Warn),
            count(Severity::Info)
        ));
    }
    s
}

/// The name column of a device: a MIG instance as `MIG 3g.40gb MIG-<uuid prefix>`, a GPU in
/// MIG mode with `(MIG mode)` after its name, any other GPU by its name.
fn mig_name(d: &crate::gpu::DeviceInfo) -> String {
    if let Some(m) = d.mig_instance() {
        let short: String = d.uuid.chars().take(12).collect();
        return format!("MIG {} {short}", m.profile);
    }
    if d.is_mig_parent() {
        return format!("{} (MIG mode)", d.name);
    }
    d.name.clone()
}

/// How device `index` is named in the process table (`0/1` for a MIG instance).
fn label_of(devices: &[crate::gpu::DeviceInfo], index: u32) -> String {
    devices
        .iter()
        .find(|d| d.index == index)
        .map_or_else(|| index.to_string(), |d| d.label())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::Thresholds;
    use crate::scan::{build_report, sample_inventory};

    #[test]
    fn table_fits_100_columns_and_shows_findings_with_fixes() {
        let report = build_report(&sample_inventory(), &Thresholds::default());
        let text = render(&report, Options::default());
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{} chars: {line}",
                line.chars().count()
            );
        }
        let findings = &report.scan().unwrap().findings;
        assert!(!findings.is_empty());
        for f in findings {
            assert!(text.contains(&f.id), "{} missing", f.id);
        }
        assert!(text.contains("Fix:"));
        assert!(text.contains("4242"));
        assert!(text.contains("(not visible)"));
    }

    #[test]
    fn a_narrower_terminal_gets_narrower_tables() {
        let report = build_report(&sample_inventory(), &Thresholds::default());
        let text = render(&report, Options { width: 72 });
        for line in text.lines() {
            assert!(line.chars().count() <= 72, "{line}");
        }
    }

    #[test]
    fn clean_table_says_no_findings() {
        let mut i = sample_inventory();
        i.processes.clear();
        for d in i.environment.devices.iter_mut() {
            d.memory.free += d.memory.used;
            d.memory.used = 0;
        }
        let text = render(
            &build_report(&i, &Thresholds::default()),
            Options::default(),
        );
        assert!(text.contains("No findings."), "{text}");
        assert!(text.contains("No GPU processes."));
    }
}
