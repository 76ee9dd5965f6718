//! Which of the job's live processes hold the driver's device files open, noted after the
//! command ended (issue 25, item 9): a forked worker that inherited the CUDA context's
//! descriptors keeps its parent's memory allocated after the parent exited, while NVML lists
//! the exited parent (older drivers, the simulator) or nobody. Read through
//! [`crate::host::held_nodes`], the reader scan's node holders use too, with each holder's
//! maps ([`crate::host::device_maps`]): whether it has a CUDA context, which a forked worker
//! does (it inherits the context's `nvidiactl` mappings) and an NVML client does not.

use super::recording::DeviceFileHolder;
use super::tree::TreeProcess;
use std::path::PathBuf;

/// The members of `live` holding one of `nodes` (canonical: `host::canonical_nodes`) open
/// at `t_ms`. A process gone or reused meanwhile (its start time changed), or whose
/// descriptors are not ours to read, is left out.
pub fn device_file_holders(
    live: &[TreeProcess],
    nodes: &[PathBuf],
    t_ms: f64,
) -> Vec<DeviceFileHolder> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<DeviceFileHolder> = live
        .iter()
        .filter_map(|p| {
            let held = crate::host::held_nodes(p.pid, nodes).ok()?;
            if held.is_empty() {
                return None;
            }
            let maps = crate::host::device_maps(p.pid);
            // Read after the descriptors and maps: a PID that names another process by now
            // is not it.
            if !crate::host::is_alive(p.pid, p.start_time) {
                return None;
            }
            let mut devices: Vec<u32> = held
                .iter()
                .filter_map(|n| crate::host::node_index(n))
                .collect();
            devices.sort_unstable();
            devices.dedup();
            Some(DeviceFileHolder {
                pid: p.pid,
                t_ms,
                nodes: held.iter().map(|n| n.display().to_string()).collect(),
                devices,
                context: maps.map(|m| m.has_context()),
            })
        })
        .collect();
    out.sort_by_key(|h| h.pid);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(pid: u32) -> TreeProcess {
        TreeProcess {
            start_time: crate::host::start_time(pid).unwrap_or(0),
            ..TreeProcess::bare(pid)
        }
    }

    #[test]
    fn a_member_holding_a_device_file_is_noted_with_its_device_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let (gpu1, ctl) = (dir.path().join("nvidia1"), dir.path().join("nvidiactl"));
        std::fs::write(&gpu1, b"").unwrap();
        std::fs::write(&ctl, b"").unwrap();
        let nodes = crate::host::canonical_nodes(&[gpu1.clone(), ctl]);
        let mut holder = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::fs::File::open(&gpu1).unwrap())
            .spawn()
            .unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let members = [member(holder.id()), member(other.id())];
        let found = device_file_holders(&members, &nodes, 12.5);
        for c in [&mut holder, &mut other] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, holder.id());
        assert_eq!(found[0].t_ms, 12.5);
        assert_eq!(found[0].devices, [1]);
        assert!(found[0].nodes[0].ends_with("/nvidia1"), "{found:?}");
        // A descriptor and no mapping of the files: no CUDA context (an NVML client's shape).
        assert_eq!(found[0].context, Some(false), "{found:?}");
        // Gone now: nothing.
        assert!(device_file_holders(&members, &nodes, 13.0).is_empty());
        assert!(device_file_holders(&members, &[], 13.0).is_empty());
    }
}
