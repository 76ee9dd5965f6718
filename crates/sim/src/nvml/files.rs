//! The device files an NVML session holds open, as real NVML does from `nvmlInit` to
//! `nvmlShutdown`: `nvidiactl`, the `nvidia<minor>` file of every device the session sees and
//! `nvidia-uvm` twice, none of them mapped. Observed on an H200, driver 580.159.04,
//! 2026-11-28 (an NVML-only ctypes client and `nvidia-smi -l 1`: `/dev/nvidiactl` ×1,
//! `/dev/nvidia0` ×3–4, `/dev/nvidia-uvm` ×2, `/dev/nvidia-caps/nvidia-cap1` and `-cap2`
//! ×1 each, and no `/dev/nvidia*` mapping; docs/simulator.md, "Who holds memory through the
//! device files"). So an NVML monitor (nvidia-smi, dcgm-exporter, nvitop, vramdoc) holds the
//! files a CUDA process holds, and only the maps tell them apart. The caps files are not
//! modelled (a box has no `nvidia-caps` directory).

use crate::SimBox;
use std::fs::File;

/// `nvidia-uvm` descriptors a session holds (2, as observed).
const UVM_OPENS: usize = 2;

/// The open files of one session; closed when the last clone of the session is dropped
/// (`nvmlShutdown`).
#[derive(Debug, Default)]
pub struct NvmlFiles {
    _files: Vec<File>,
}

impl NvmlFiles {
    /// Open the files of `sim` a session seeing the physical devices `mounted` holds. A file
    /// the box does not have (an older box's `nvidia-uvm`, a device not mounted into this
    /// view) is skipped: opening never creates one.
    pub fn open(sim: &SimBox, mounted: &[u32]) -> NvmlFiles {
        let dev = sim.dir().join(crate::DEV_DIR);
        let mut paths = vec![dev.join("nvidiactl")];
        paths.extend(mounted.iter().filter_map(|i| sim.node_path(*i).ok()));
        paths.extend(std::iter::repeat_n(dev.join(crate::UVM_NODE), UVM_OPENS));
        NvmlFiles {
            _files: paths.iter().filter_map(|p| File::open(p).ok()).collect(),
        }
    }

    /// How many files are open.
    pub fn len(&self) -> usize {
        self._files.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self._files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use crate::nvml::SimNvml;
    use crate::{InitOptions, SimBox};

    /// Descriptors of this process naming `path` (links in /proc/self/fd).
    fn held(path: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path))
            .count()
    }

    /// Bytes of `path` this process maps.
    fn mapped(path: &std::path::Path) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter(|l| l.ends_with(path.to_str().unwrap()))
            .count()
    }

    #[test]
    fn a_session_holds_the_files_and_maps_none_until_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let b = SimBox::create(dir.path(), "2x24GiB", &InitOptions::default()).unwrap();
        let dev = std::fs::canonicalize(dir.path())
            .unwrap()
            .join(crate::DEV_DIR);
        let files = [
            dev.join("nvidiactl"),
            dev.join(crate::UVM_NODE),
            std::fs::canonicalize(b.node_path(0).unwrap()).unwrap(),
            std::fs::canonicalize(b.node_path(1).unwrap()).unwrap(),
        ];
        let nvml = SimNvml::init(b.clone()).unwrap();
        let copy = nvml.clone();
        assert_eq!(
            files.iter().map(|f| held(f)).collect::<Vec<_>>(),
            [1, 2, 1, 1]
        );
        assert_eq!(files.iter().map(|f| mapped(f)).sum::<usize>(), 0);
        drop(nvml);
        assert_eq!(held(&files[0]), 1, "the session lives while a clone does");
        drop(copy);
        assert_eq!(files.iter().map(|f| held(f)).sum::<usize>(), 0);
    }
}
