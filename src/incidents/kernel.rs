//! The kernel log as failure evidence: NVIDIA's `NVRM: Xid` lines (the driver's error
//! reports, printed by NVIDIA/open-gpu-kernel-modules `src/nvidia/src/kernel/gpu/rc/kernel_rc.c`
//! as `NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u GPU-CI:%02u]): %d, [pid=%s, name=%s, ]<message>`;
//! the meanings below are NVIDIA's Xid catalogue,
//! <https://docs.nvidia.com/deploy/xid-errors/index.html>) and the OOM killer's `Killed
//! process PID (NAME)` lines (linux `mm/oom_kill.c` `__oom_kill_process`). Read from
//! `/dev/kmsg` (a character device: one record per `read`, non-blocking, from the end at
//! start; linux `Documentation/ABI/testing/dev-kmsg`) or from a file such as
//! `/var/log/kern.log`, followed as [`super::tail`] follows any log.

use super::tail::LogTail;
use regex::Regex;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Bytes read from the kernel log per poll at most.
pub const POLL_BUDGET: usize = 256 * 1024;

/// An `NVRM: Xid` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Xid {
    /// The GPU's PCI address as the driver prints it (`0000:3b:00`).
    pub pci: String,
    pub code: u32,
    pub pid: Option<u32>,
    /// The MIG instance the Xid belongs to (`GPU-I:01 GPU-CI:00`): GPU and compute
    /// instance ids; `None` for a whole-GPU Xid.
    pub mig: Option<(u32, Option<u32>)>,
    /// Xid 154: the recovery action the driver now asks for (`Drain and Reset`).
    pub recovery_action: Option<String>,
    /// Xid 45 on R580 drivers: the Xid it follows (`caused by previous Xid N`).
    pub caused_by: Option<u32>,
    pub line: String,
}

/// An OOM-killer line.
#[derive(Debug, Clone, PartialEq)]
pub struct OomKill {
    pub pid: u32,
    pub name: String,
    pub line: String,
}

/// What one kernel log line says.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelEvent {
    Xid(Xid),
    OomKill(OomKill),
}

fn xid_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?(?: GPU-I:(\d+))?(?: GPU-CI:(\d+))?\): (\d+),")
            .unwrap_or_else(|_| unreachable_regex())
    })
}

fn oom_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"Killed process (\d+) \(([^)]{0,64})\)").unwrap_or_else(|_| unreachable_regex())
    })
}

/// The patterns above are constants checked by the tests; a regex that matches nothing
/// stands in should one ever fail to compile.
fn unreachable_regex() -> Regex {
    Regex::new(r"[^\s\S]").unwrap_or_else(|_| std::process::abort())
}

/// Parse one kernel log line (a `/dev/kmsg` record, or a syslog line with its prefix).
pub fn parse(line: &str) -> Option<KernelEvent> {
    let text = line
        .split_once(';')
        .filter(|(h, _)| is_kmsg_header(h))
        .map_or(line, |(_, t)| t);
    if let Some(c) = xid_re().captures(text) {
        let pid = text
            .split_once("pid=")
            .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok());
        let num = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
        let code: u32 = c[4].parse().ok()?;
        let rest = &text[c.get(0).map_or(0, |m| m.end())..];
        return Some(KernelEvent::Xid(Xid {
            pci: normalise_pci(&c[1])?,
            code,
            pid,
            mig: num(2).map(|gi| (gi, num(3))),
            recovery_action: (code == 154).then(|| recovery_action(rest)).flatten(),
            caused_by: rest
                .split_once("caused by previous Xid ")
                .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()),
            line: text.trim().to_string(),
        }));
    }
    if let Some(c) = oom_re().captures(text) {
        return Some(KernelEvent::OomKill(OomKill {
            pid: c[1].parse().ok()?,
            name: c[2].to_string(),
            line: text.trim().to_string(),
        }));
    }
    None
}

/// Xid 154's `GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)`: the
/// action named after `to` (NVML's `nvmlDeviceGpuRecoveryAction_t`).
fn recovery_action(rest: &str) -> Option<String> {
    let (_, to) = rest.split_once(" to 0x")?;
    let (_, name) = to.split_once('(')?;
    let name = name.split(')').next()?.trim();
    (!name.is_empty() && name.len() <= 40).then(|| name.to_string())
}

/// `6,1234,5678901,-` (priority, sequence, microseconds, flags).
fn is_kmsg_header(h: &str) -> bool {
    let parts: Vec<&str> = h.split(',').collect();
    parts.len() >= 3
        && parts[..3]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A PCI address as `dddd:bb:dd` (lowercase): `0000:3B:00`, `00000000:3B:00.0` (NVML's form)
/// and `0000:3b:00.0` are the same GPU.
pub fn normalise_pci(s: &str) -> Option<String> {
    let mut it = s.split(':');
    let (dom, bus, dev) = (it.next()?, it.next()?, it.next()?);
    let dev = dev.split('.').next()?;
    let dom = u32::from_str_radix(dom, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    Some(format!("{:04x}:{bus:02x}:{dev:02x}", dom & 0xffff))
}

/// What NVIDIA's Xid catalogue says an Xid means, with its immediate action, for the ones
/// that fail jobs or GPUs (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>,
/// the "Description" and "Resolution Bucket (Immediate Action)" columns, and the row's
/// notes; docs/fleet.md "The Xid catalogue" has the table this follows, row by row).
pub fn xid_meaning(code: u32) -> &'static str {
    match code {
        13 => "Graphics Engine Exception (an application fault: out-of-range access, illegal instruction; restart the application)",
        31 => "GPU memory page fault (an illegal address: usually the application; restart it)",
        43 => "GPU stopped processing (a user application fault; the GPU continues: nothing to do)",
        45 => "Preemptive cleanup, due to previous errors (follows the Xid that caused it)",
        46 => "GPU stopped processing (drain the GPU and reset it)",
        48 => "Double Bit ECC Error (uncorrectable memory error: drain and reset the GPU)",
        61 => "Internal micro-controller breakpoint/warning (unused since Ampere; older GPUs: reset the GPU)",
        62 => "Internal micro-controller halt (reset the GPU)",
        63 => "ECC page retirement or row remapping recorded (nothing to do now; applied at the next reset)",
        64 => "ECC page retirement or row remapping failure (reset the GPU; replace it if it recurs)",
        74 => "NVLink error (check the links; reset the GPU)",
        79 => "GPU has fallen off the bus (reboot the node: the catalogue's action is a restart of the machine, not a GPU reset; look for the PCIe link failure in the kernel and system event logs)",
        92 => "High single-bit ECC error rate (corrected: nothing to do now)",
        94 => "Contained ECC error (only the affected application was stopped; restart it)",
        95 => "Uncontained ECC error (every application on the GPU was affected: reset the GPU)",
        119 | 120 => "GSP firmware error (reset the GPU)",
        109 => "Context Switch Timeout Error (reset the GPU; if it recurs, contact NVIDIA support)",
        110 => "Security Fault Error (uncommon unless the hardware failed: reset the GPU; if it persists, undo recent hardware changes, cold-reset the system and contact the hardware vendor)",
        136 => "Link Training Failed (NVLink training, H100: reset the GPU; then check the links' signal integrity)",
        140 => "ECC Unrecovered Error (uncorrectable memory errors the driver could not mark for page offlining or row remapping: reset the GPU; if it persists, contact the hardware vendor)",
        143 => "GPU Initialization Error (reset the GPU; if it persists, contact NVIDIA support)",
        144..=150 => "NVLink error (NVLink5, Blackwell B100/B200 and GB200: ignore, reset the GPU or follow the driver's Xid 154, by the line's error status)",
        154 => "GPU recovery action changed (the driver's own verdict on the Xids before it: None, Drain P2P, Drain and Reset, GPU Reset Required or Node Reboot Required; do what it names)",
        155 => "NVLink SW Defined Error (a link taken down on purpose, sleep included: reset the GPU; then find what took the link down)",
        156 => "Resource Retirement Event (reset the GPU to complete the retirement)",
        158 => "GPU Fatal Timeout (reset the GPU; if it recurs, contact NVIDIA support)",
        _ => "see NVIDIA's Xid catalogue",
    }
}

/// Whether an Xid opens an incident, as NVIDIA's catalogue has it: 43, 63 and 92 are
/// "ignore" there; 45 follows another Xid (R580: `caused by previous Xid N`, one per
/// channel) and opens none of its own.
pub fn xid_is_critical(code: u32) -> bool {
    matches!(
        code,
        13 | 31
            | 46
            | 48
            | 61
            | 62
            | 64
            | 74
            | 79
            | 94
            | 95
            | 109
            | 110
            | 119
            | 120
            | 136
            | 140
            | 143..=150 | 154 | 155 | 156 | 158
    )
}

/// Xids that follow another and join its incident without opening one: 45 (preemptive
/// cleanup after a previous error) and the catalogue's "ignore" ones, 43, 63 and 92.
pub fn xid_follows(code: u32) -> bool {
    matches!(code, 43 | 45 | 63 | 92)
}

/// The kernel log being followed.
#[derive(Debug)]
pub enum KernelLog {
    /// `/dev/kmsg`, opened non-blocking and positioned at its end.
    Kmsg(File),
    File(LogTail),
}

impl KernelLog {
    /// Open `path`: a character device is read as `/dev/kmsg`, a file is followed from its
    /// end. An error says why it cannot be read (the watcher is off then).
    pub fn open(path: &Path) -> Result<KernelLog, String> {
        if !path.exists() && !path.starts_with("/dev") {
            // A log file not written yet (a fresh node, a box's kern.log): read from its
            // start once it appears.
            return Ok(KernelLog::File(LogTail::at_end(path)));
        }
        let m = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if m.file_type().is_char_device() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            // SAFETY: lseek on a descriptor this function owns; /dev/kmsg's SEEK_END moves
            // past every record logged so far.
            unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&f), 0, libc::SEEK_END) };
            return Ok(KernelLog::Kmsg(f));
        }
        if !m.is_file() {
            return Err(format!("{}: neither /dev/kmsg nor a file", path.display()));
        }
        std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(KernelLog::File(LogTail::at_end(&PathBuf::from(path))))
    }

    /// The events logged since the last poll.
    pub fn poll(&mut self) -> Vec<KernelEvent> {
        let lines = match self {
            KernelLog::File(t) => t.poll(POLL_BUDGET),
            KernelLog::Kmsg(f) => {
                let mut out = Vec::new();
                let mut buf = vec![0u8; 8192];
                let mut total = 0;
                while total < POLL_BUDGET {
                    match f.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            total += n;
                            out.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string());
                        }
                        // EPIPE: records were overwritten before being read; go on.
                        Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                        Err(_) => break,
                    }
                }
                out
            }
        };
        lines.iter().filter_map(|l| parse(l)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_and_oom_lines_of_every_shape_are_parsed() {
        let kmsg = "4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.";
        let Some(KernelEvent::Xid(x)) = parse(kmsg) else {
            panic!("{kmsg}")
        };
        assert_eq!(
            (x.pci.as_str(), x.code, x.pid),
            ("0000:3b:00", 79, Some(4242))
        );
        assert!(x.line.starts_with("NVRM: Xid"), "{}", x.line);
        let syslog = "Nov 27 21:00:00 gpu-1 kernel: [123.4] NVRM: Xid (PCI:0000:17:00): 31, pid='<unknown>', name=<unknown>, Ch 00000008, intr 00000000. MMU Fault";
        let Some(KernelEvent::Xid(x)) = parse(syslog) else {
            panic!("{syslog}")
        };
        assert_eq!((x.code, x.pid), (31, None));
        let mig =
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 43, pid=9, name=python, Ch 00000008";
        assert!(
            matches!(parse(mig), Some(KernelEvent::Xid(Xid { code: 43, .. }))),
            "{mig}"
        );
        let oom = "Out of memory: Killed process 777 (python3) total-vm:1kB, anon-rss:1kB";
        assert_eq!(
            parse(oom),
            Some(KernelEvent::OomKill(OomKill {
                pid: 777,
                name: "python3".into(),
                line: oom.into()
            }))
        );
        assert_eq!(
            parse("NVRM: loading NVIDIA UNIX x86_64 Kernel Module"),
            None
        );
        assert_eq!(
            normalise_pci("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00")
        );
        assert!(xid_is_critical(79) && !xid_is_critical(999));
    }

    /// Issue 37 item 2: each Xid's text is the catalogue's description with its immediate
    /// action (analyzing-xid-catalog.html): RESET_GPU for 109, 110, 136, 140, 143, 155,
    /// 156 and 158; RESTART_BM (the machine) for 79, never a GPU reset.
    #[test]
    fn each_xid_says_what_the_catalogue_says() {
        for (code, description) in [
            (109, "Context Switch Timeout Error"),
            (110, "Security Fault Error"),
            (136, "Link Training Failed"),
            (140, "ECC Unrecovered Error"),
            (143, "GPU Initialization Error"),
            (155, "NVLink SW Defined Error"),
            (156, "Resource Retirement Event"),
            (158, "GPU Fatal Timeout"),
        ] {
            let m = xid_meaning(code);
            assert!(m.starts_with(description), "{code}: {m}");
            assert!(m.contains("reset the GPU"), "{code}: {m}");
            assert!(!m.contains("catalogue lists"), "{code}: {m}");
        }
        let lost = xid_meaning(79);
        assert!(lost.contains("reboot the node"), "{lost}");
        assert!(!lost.contains("reset the GPU;"), "{lost}");
        for v in ["Drain P2P", "Drain and Reset", "Node Reboot Required"] {
            assert!(xid_meaning(154).contains(v), "{v}");
        }
    }

    /// Issue 37: the catalogue's "ignore" Xids open nothing, the new ones do; MIG Xids name
    /// their instance; the old form without `PCI:` parses; Xid 154 carries its action and
    /// R580's Xid 45 its cause.
    #[test]
    fn the_xid_catalogue_as_nvidia_publishes_it() {
        for c in [43, 45, 63, 92] {
            assert!(!xid_is_critical(c), "{c}");
        }
        for c in [46, 109, 110, 136, 140, 143, 147, 150, 154, 155, 156, 158] {
            assert!(xid_is_critical(c), "{c}");
        }
        let mig =
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=9, name=python, Ch 00000008";
        let Some(KernelEvent::Xid(x)) = parse(mig) else {
            panic!("{mig}")
        };
        assert_eq!(x.mig, Some((1, Some(2))));
        let old = "NVRM: Xid (0000:01:00): 79, GPU has fallen off the bus.";
        let Some(KernelEvent::Xid(x)) = parse(old) else {
            panic!("{old}")
        };
        assert_eq!((x.pci.as_str(), x.code, x.mig), ("0000:01:00", 79, None));
        let rec = "NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)";
        let Some(KernelEvent::Xid(x)) = parse(rec) else {
            panic!("{rec}")
        };
        assert_eq!(x.recovery_action.as_deref(), Some("Drain and Reset"));
        let r580 = "NVRM: Xid (PCI:0000:9b:00): 45, pid=77, name=python, Ch 0000000a, caused by previous Xid 48";
        let Some(KernelEvent::Xid(x)) = parse(r580) else {
            panic!("{r580}")
        };
        assert_eq!((x.code, x.caused_by), (45, Some(48)));
    }
}
