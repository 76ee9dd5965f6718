//! `vramdoc scan` (issue 3): collect the inventory (`crate::inventory`), decide findings
//! (`crate::diagnose`), build the report model and print it: a table that fits 100 columns,
//! `--json`, or `--markdown`; `--out FILE` through the one writer; `--fail-on LEVEL` → exit 1.

use super::Session;
use crate::cli::ScanArgs;
use crate::diagnose::{self, Thresholds};
use crate::inventory::{self, Inventory};
use crate::report::write::{render, Format};
use crate::report::{Headroom, Report, ReportKind, ScanResult, Severity, SCHEMA_VERSION};
use crate::units::format_bytes;
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use std::io::Write;

/// Width every table is laid out for.
pub const WIDTH: u16 = 100;

pub fn run(session: &Session, args: &ScanArgs) -> Result<i32> {
    crate::report::write::check_outputs(&args.out, args.force)?;
    let pidns = inventory::detect_pid_namespace()?;
    let monitor = session.monitor()?;
    let sim_spec = session.sim_spec();
    let inv = inventory::collect(monitor.as_ref(), sim_spec, pidns)?;
    let report = build_report(&inv, &Thresholds::default());

    let bytes = if args.json {
        render(&report, Format::Json)?
    } else if args.markdown {
        render(&report, Format::Markdown)?
    } else {
        render_table(&report).into_bytes()
    };
    crate::report::write::write_reports(&report, &args.out, args.force)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .context("writing to standard output")?;
    out.flush().context("writing to standard output")?;

    let worst = report
        .scan
        .as_ref()
        .and_then(|s| s.findings.iter().map(|f| f.severity).max());
    Ok(match (args.fail_on, worst) {
        (Some(level), Some(w)) if w >= level => crate::exit::FINDINGS,
        _ => crate::exit::OK,
    })
}

/// The report model for one scan (pure: inventory in, report out).
pub fn build_report(inv: &Inventory, th: &Thresholds) -> Report {
    let (findings, headroom) = diagnose::diagnose(inv, th);
    Report {
        schema_version: SCHEMA_VERSION,
        kind: ReportKind::Scan,
        environment: inv.environment.clone(),
        command: crate::report::environment::command_line(),
        created_unix_ms: crate::report::environment::now_unix_ms(),
        scan: Some(ScanResult {
            devices: inv.devices().to_vec(),
            processes: inv.processes.clone(),
            findings,
            pid_namespace: inv.pid_namespace.label().to_string(),
            headroom,
        }),
        replay: None,
        run: None,
    }
}

fn table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(WIDTH)
        .set_header(header);
    t
}

fn headroom_for(h: &[Headroom], device: u32) -> String {
    h.iter()
        .find(|h| h.device == device)
        .map(|h| format!("{:.2}", h.max_gpu_memory_utilization))
        .unwrap_or_else(|| "-".into())
}

/// The people view: header, devices, processes, findings (with evidence and fix). Every
/// line fits [`WIDTH`] columns.
pub fn render_table(report: &Report) -> String {
    let env = &report.environment;
    let mut s = String::new();
    let Some(scan) = &report.scan else {
        return "no scan in this report\n".into();
    };
    let head = format!(
        "vramdoc scan on {}: driver {}, CUDA {}, NVML {}, backend {}",
        env.hostname, env.versions.driver, env.versions.cuda, env.versions.nvml, env.backend
    );
    s.push_str(&clip(&head));
    s.push('\n');
    s.push_str(&clip(&format!("PID namespace: {}", scan.pid_namespace)));
    s.push('\n');

    let mut t = table(vec![
        "gpu",
        "name",
        "used",
        "free",
        "reserved",
        "total",
        "util",
        "temp",
        "max vLLM util",
    ]);
    for d in &scan.devices {
        let m = d.memory;
        t.add_row(vec![
            d.index.to_string(),
            d.name.clone(),
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
        let mut t = table(vec![
            "pid",
            "user",
            "name",
            "CUDA_VISIBLE_DEVICES",
            "memory",
            "command",
        ]);
        for p in &scan.processes {
            let mem: Vec<String> = p
                .devices
                .iter()
                .map(|u| match u.used {
                    Some(b) => format!("gpu {}: {}", u.device, format_bytes(b)),
                    None => format!("gpu {}: n/a", u.device),
                })
                .collect();
            let mut name = p.name.clone().unwrap_or_else(|| "-".into());
            if !p.visible {
                name = "(not visible)".into();
            }
            if let Some(c) = &p.container {
                name.push_str(&format!("\n[{c}]"));
            }
            t.add_row(vec![
                p.pid.to_string(),
                p.user.clone().unwrap_or_else(|| "-".into()),
                name,
                p.cuda_visible_devices.clone(),
                mem.join("\n"),
                p.cmdline.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        s.push_str(&t.to_string());
        s.push('\n');
    }

    if scan.findings.is_empty() {
        s.push_str("No findings.\n");
    } else {
        let mut t = table(vec!["severity", "finding"]);
        for f in &scan.findings {
            let mut body = f.title.clone();
            for e in &f.evidence {
                body.push_str(&format!("\n  {}: {}", e.label, e.value));
            }
            body.push_str(&format!("\nFix: {}", f.fix));
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

/// Cut a free-text line to [`WIDTH`] characters.
fn clip(line: &str) -> String {
    if line.chars().count() <= WIDTH as usize {
        return line.to_string();
    }
    let mut s: String = line.chars().take(WIDTH as usize - 1).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{DeviceInfo, MemoryInfo, Versions};
    use crate::inventory::PidNamespace;
    use crate::report::{Environment, ProcessDeviceUsage, ProcessInfo};
    use crate::units::{GIB, MIB};

    fn inv() -> Inventory {
        let total = 80 * GIB;
        let dev = |i: u32, used: u64| DeviceInfo {
            index: i,
            name: "NVIDIA H100 80GB HBM3 with a very long product name for wrapping".into(),
            uuid: format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x17 + i),
            memory: MemoryInfo {
                total,
                reserved: 522 * MIB,
                used,
                free: total - 522 * MIB - used,
            },
            utilization_gpu: Some(97),
            temperature_c: Some(71),
        };
        let devices = vec![dev(0, 448 * MIB + 70 * GIB), dev(1, 30 * GIB)];
        let versions = Versions {
            driver: "550.54.15".into(),
            cuda: "12.4".into(),
            nvml: "12.550.54.15".into(),
        };
        let long = "x".repeat(300);
        Inventory {
            environment: Environment {
                hostname: "a-very-long-hostname-".repeat(6),
                kernel: "6.1".into(),
                vramdoc_version: "0.1.0".into(),
                backend: "sim".into(),
                sim_spec: None,
                versions,
                devices,
            },
            processes: vec![
                ProcessInfo {
                    pid: 4242,
                    visible: true,
                    user: Some("a-user-with-a-long-name".into()),
                    name: Some("python3".into()),
                    cmdline: Some(format!(
                        "python3 -m vllm.entrypoints.openai.api_server {long}"
                    )),
                    cuda_visible_devices: "GPU-00000001-0000-0000-0000-000000000000".into(),
                    container: Some("kubepods".into()),
                    devices: vec![
                        ProcessDeviceUsage {
                            device: 0,
                            used: Some(448 * MIB),
                        },
                        ProcessDeviceUsage {
                            device: 1,
                            used: Some(30 * GIB),
                        },
                    ],
                },
                ProcessInfo {
                    pid: 77,
                    visible: false,
                    user: None,
                    name: None,
                    cmdline: None,
                    cuda_visible_devices: "unknown".into(),
                    container: None,
                    devices: vec![ProcessDeviceUsage {
                        device: 0,
                        used: Some(70 * GIB),
                    }],
                },
            ],
            pid_namespace: PidNamespace {
                host: true,
                reason: "test".into(),
            },
        }
    }

    #[test]
    fn table_fits_100_columns_and_shows_findings_with_fixes() {
        let report = build_report(&inv(), &Thresholds::default());
        let text = render_table(&report);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{} chars: {line}",
                line.chars().count()
            );
        }
        let findings = &report.scan.as_ref().unwrap().findings;
        assert!(!findings.is_empty());
        for f in findings {
            assert!(text.contains(&f.id), "{} missing", f.id);
        }
        assert!(text.contains("Fix:"));
        assert!(text.contains("4242"));
        assert!(text.contains("(not visible)"));
    }

    #[test]
    fn clean_table_says_no_findings() {
        let mut i = inv();
        i.processes.clear();
        for d in i.environment.devices.iter_mut() {
            d.memory.free += d.memory.used;
            d.memory.used = 0;
        }
        let text = render_table(&build_report(&i, &Thresholds::default()));
        assert!(text.contains("No findings."), "{text}");
        assert!(text.contains("No GPU processes."));
    }
}
