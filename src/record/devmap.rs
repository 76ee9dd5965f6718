//! Which physical GPU an error line means. `GPU 0` or `cuda:0` in a line is a CUDA ordinal of
//! the process that printed it, numbered through *its own* `CUDA_VISIBLE_DEVICES` and
//! `CUDA_DEVICE_ORDER` (vLLM data-parallel engines and Ray workers set their own), not
//! vramdoc's. The printer is named by the line's prefix — `(VllmWorker pid=1234)`,
//! `(EngineCore_0 pid=1234)`, `(RayWorkerWrapper pid=1234, ip=…)` — and its variables come
//! from the job's process tree (read from /proc by [`super::tree`]). The ordinal is mapped
//! by UUID, in CUDA's enumeration order (fastest first unless `PCI_BUS_ID`), with the
//! semantics of `crate::gpu::visible`. A line with no PID prefix (or `[rank0]:` from
//! torchrun, whose ranks inherit the launcher's variables) is read through the command's own
//! variables.

use crate::gpu::visible::{cuda_order, visible_devices};

/// The process a line names as its printer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    /// `(Name pid=1234)`: Ray's and vLLM's worker prefix.
    Pid(u32),
    /// `[rank3]:` (torchrun `--tee`/`--log-dir` prefixes, PyTorch's rank-prefixed errors).
    Rank(u32),
}

/// The printer a line names in its prefix, if any.
pub fn printer(line: &str) -> Option<Printer> {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('(') {
        let inner = &rest[..rest.find(')')?];
        let pid = inner
            .split([' ', ','])
            .find_map(|w| w.strip_prefix("pid="))?;
        return pid.parse().ok().map(Printer::Pid);
    }
    if let Some(rest) = t.strip_prefix("[rank") {
        let n = &rest[..rest.find(']')?];
        return n.parse().ok().map(Printer::Rank);
    }
    None
}

/// One GPU as the mapping needs it: physical (NVML) index, UUID, CUDA's speed key.
#[derive(Debug, Clone, PartialEq)]
pub struct MapDevice {
    pub index: u32,
    pub uuid: String,
    pub speed: Option<(i32, i32, i32)>,
}

/// The physical index of CUDA ordinal `ordinal` of a process with these variables; `None`
/// when the ordinal is beyond what it sees. `devices` in PCI (NVML) order.
pub fn physical(
    ordinal: u32,
    cuda_visible_devices: Option<&str>,
    cuda_device_order: Option<&str>,
    devices: &[MapDevice],
) -> Option<u32> {
    let ids: Vec<(u32, &str)> = devices.iter().map(|d| (d.index, d.uuid.as_str())).collect();
    if let Some(m) = super::mig::ordinal(ordinal, cuda_visible_devices, &ids) {
        return m;
    }
    let positions: Vec<u32> = (0..devices.len() as u32).collect();
    let order = cuda_order(&positions, cuda_device_order, |i| {
        devices
            .get(i as usize)
            .and_then(|d| d.speed)
            .unwrap_or((0, 0, 0))
    });
    let uuids: Vec<String> = order
        .iter()
        .map(|i| devices[*i as usize].uuid.clone())
        .collect();
    let visible = visible_devices(cuda_visible_devices, &uuids);
    let at = *visible.get(ordinal as usize)?;
    let position = *order.get(at as usize)?;
    devices.get(position as usize).map(|d| d.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn box_of(speeds: &[(i32, i32, i32)]) -> Vec<MapDevice> {
        speeds
            .iter()
            .enumerate()
            .map(|(i, s)| MapDevice {
                index: i as u32,
                uuid: format!("GPU-{i}aaaaaaa-0000-0000-0000-000000000000"),
                speed: Some(*s),
            })
            .collect()
    }

    #[test]
    fn prefixes_name_the_printer() {
        let p = |l: &str| printer(l);
        assert_eq!(
            p("(VllmWorker pid=1234) torch.OutOfMemoryError: CUDA out of memory."),
            Some(Printer::Pid(1234))
        );
        assert_eq!(
            p("(RayWorkerWrapper pid=77, ip=10.0.0.2) ERROR ..."),
            Some(Printer::Pid(77))
        );
        assert_eq!(p("(EngineCore_0 pid=9) x"), Some(Printer::Pid(9)));
        assert_eq!(p("(EngineCore pid=12) x"), Some(Printer::Pid(12)));
        assert_eq!(p("(VllmWorker rank=0 pid=31) x"), Some(Printer::Pid(31)));
        assert_eq!(p("(pid=4242) ERROR x"), Some(Printer::Pid(4242)));
        assert_eq!(p("[rank3]: torch.OutOfMemoryError"), Some(Printer::Rank(3)));
        assert_eq!(p("torch.OutOfMemoryError: CUDA out of memory"), None);
        assert_eq!(p("(no pid here) x"), None);
        assert_eq!(p("(pid=abc) x"), None);
    }

    #[test]
    fn ordinals_follow_the_printers_variables_by_uuid() {
        let same = box_of(&[(9, 0, 132); 4]);
        assert_eq!(physical(0, None, None, &same), Some(0));
        assert_eq!(physical(0, Some("2,3"), None, &same), Some(2));
        assert_eq!(physical(1, Some("2,3"), None, &same), Some(3));
        assert_eq!(physical(2, Some("2,3"), None, &same), None);
        assert_eq!(physical(0, Some("GPU-3"), None, &same), Some(3));
        // An A100 at PCI 0, an H100 at PCI 1: CUDA's default order puts the H100 first.
        let mixed = box_of(&[(8, 0, 108), (9, 0, 132)]);
        assert_eq!(physical(0, None, None, &mixed), Some(1));
        assert_eq!(physical(0, None, Some("PCI_BUS_ID"), &mixed), Some(0));
        assert_eq!(physical(0, Some("1"), None, &mixed), Some(0));
        assert_eq!(physical(0, Some("1"), Some("PCI_BUS_ID"), &mixed), Some(1));
    }
}
