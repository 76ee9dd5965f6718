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
use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};

/// Width every table is laid out for.
pub const WIDTH: u16 = 100;

pub fn run(session: &Session, args: &ScanArgs) -> Result<i32> {
    crate::report::write::check_outputs(&args.out, args.force)?;
    if let Some(p) = &args.prom {
        check_prom_path(p)?;
    }
    let pidns = inventory::detect_pid_namespace()?;
    let monitor = session.monitor()?;
    let sim_spec = session.sim_spec();
    let started = std::time::Instant::now();
    let inv = inventory::collect(monitor.as_ref(), sim_spec, pidns)?;
    let report = build_report(&inv, &Thresholds::default());
    if let Some(path) = &args.prom {
        let collection = crate::report::prom::Collection {
            success: true,
            duration_seconds: started.elapsed().as_secs_f64(),
            timestamp_seconds: report.created_unix_ms as f64 / 1000.0,
            backend: monitor.backend().to_string(),
        };
        let opts = crate::report::prom::PromOptions {
            per_process: args.per_process,
        };
        let text = crate::report::prom::render(report.scan.as_ref(), &collection, opts)?;
        // Always replaced: the textfile collector reads the latest file, written atomically.
        crate::report::write::write_atomic(path, text.as_bytes(), true)?;
    }

    let bytes = if args.json {
        render(&report, Format::Json)?
    } else if args.markdown {
        render(&report, Format::Markdown)?
    } else {
        render_table(&report).into_bytes()
    };
    crate::report::write::write_reports(&report, &args.out, args.force)?;
    let text = String::from_utf8_lossy(&bytes);
    if args.json {
        crate::term::print_json(&text)?;
    } else {
        crate::term::write_stdout(crate::term::clean_text(&text).as_bytes())?;
    }

    let worst = report
        .scan
        .as_ref()
        .and_then(|s| s.findings.iter().map(|f| f.severity).max());
    Ok(match (args.fail_on, worst) {
        (Some(level), Some(w)) if w >= level => crate::exit::FINDINGS,
        _ => crate::exit::OK,
    })
}

/// node_exporter's textfile collector reads `*.prom` files only.
fn check_prom_path(path: &std::path::Path) -> Result<(), crate::exit::UsageError> {
    if path.extension().and_then(|e| e.to_str()) == Some("prom") {
        Ok(())
    } else {
        Err(crate::exit::UsageError(format!(
            "--prom {}: name the file *.prom (node_exporter's textfile collector reads only those)",
            path.display()
        )))
    }
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
    // The same redaction pass as every file format, so the table and the files agree; then
    // every field a process or a file controls is made terminal-safe (crate::term::clean).
    let report = &crate::report::text::sanitized(report);
    let c = crate::term::clean;
    let env = &report.environment;
    let mut s = String::new();
    let Some(scan) = &report.scan else {
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
        if !d.status.is_ok() {
            // A device the driver would not answer for: its status instead of numbers.
            let status = match &d.status {
                crate::gpu::DeviceStatus::Lost => "LOST".to_string(),
                crate::gpu::DeviceStatus::NoPermission => "no permission".to_string(),
                crate::gpu::DeviceStatus::Error { .. } => "error".to_string(),
                crate::gpu::DeviceStatus::Ok => String::new(),
            };
            let mut row = vec![d.index.to_string(), d.name.clone(), status];
            row.extend(std::iter::repeat_n("-".to_string(), 6));
            t.add_row(row);
            continue;
        }
        t.add_row(vec![
            d.index.to_string(),
            c(&d.name),
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
            let mut name = p.name.as_deref().map(c).unwrap_or_else(|| "-".into());
            if !p.visible {
                name = "(not visible)".into();
            }
            if let Some(cont) = &p.container {
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

    if scan.findings.is_empty() {
        s.push_str("No findings.\n");
    } else {
        let mut t = table(vec!["severity", "finding"]);
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
            status: Default::default(),
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
            details: Default::default(),
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

    #[test]
    fn prometheus_exposition_of_a_scan() {
        use crate::report::prom::{render, Collection, PromOptions};
        let report = build_report(&inv(), &Thresholds::default());
        let c = Collection {
            success: true,
            duration_seconds: 0.01,
            timestamp_seconds: 1.0,
            backend: "sim".into(),
        };
        let text = render(report.scan.as_ref(), &c, PromOptions { per_process: true }).unwrap();
        let u0 = "uuid=\"GPU-00000000-0000-0000-0000-000000000000\"";
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} missing in {text}"))
                .to_string()
        };
        let used = (448 * MIB + 70 * GIB) as f64;
        assert_eq!(
            line("vramdoc_gpu_memory_used_bytes{gpu=\"0\""),
            format!("vramdoc_gpu_memory_used_bytes{{gpu=\"0\",{u0}}} {used}")
        );
        // PID 77 does not exist in the (host) namespace: its 70 GiB have no live owner.
        assert_eq!(
            line("vramdoc_gpu_memory_unattributed_bytes{gpu=\"0\""),
            format!(
                "vramdoc_gpu_memory_unattributed_bytes{{gpu=\"0\",{u0}}} {}",
                (70 * GIB) as f64
            )
        );
        assert!(text.contains("vramdoc_findings{rule=\"no-live-owner\",severity=\"error\"} 1"));
        assert!(text.contains("vramdoc_gpu_info{gpu=\"1\",name=\"NVIDIA H100 80GB HBM3 with"));
        assert!(
            text.contains("comm=\"python3\",gpu=\"1\",pid=\"4242\""),
            "{text}"
        );
        assert!(
            text.contains("comm=\"unknown\",gpu=\"0\",pid=\"77\""),
            "{text}"
        );
        assert!(!text.contains("vllm.entrypoints"), "never the command line");
        let h = &report.scan.as_ref().unwrap().headroom[1];
        assert!(text.contains(&format!(
            "vramdoc_vllm_max_safe_gpu_memory_utilization_ratio{{gpu=\"1\",uuid=\"GPU-00000001-0000-0000-0000-000000000000\"}} {}",
            h.max_gpu_memory_utilization
        )));
        let without = render(report.scan.as_ref(), &c, PromOptions::default()).unwrap();
        assert!(!without.contains("vramdoc_process_gpu_memory_bytes"));
    }
}
