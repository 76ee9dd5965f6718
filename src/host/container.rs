//! What a process's container holds in its own mount namespace, read from the host through
//! `/proc/PID/root` (needs the same permission as reading its environment: same user or
//! CAP_SYS_PTRACE). Used for the device list the NVIDIA device plugin's `volume-mounts`
//! strategy mounts into a container (`NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`,
//! one entry per device, named by its ID).

use std::path::{Path, PathBuf};

use super::HostError;

type Result<T> = std::result::Result<T, HostError>;

/// The names of the entries of directory `dir` (an absolute path as the process sees it)
/// inside `pid`'s mount namespace, sorted. `/var/run/...` is also tried as `/run/...`: on
/// most images `/var/run` is an absolute link to `/run`, which the kernel would resolve
/// against the reader's root, not the container's; an empty directory at the first
/// spelling does not hide entries at the second.
pub fn dir_entries(pid: u32, dir: &str) -> Result<Vec<String>> {
    let rel = dir.trim_start_matches('/');
    let mut candidates = vec![rel.to_string()];
    if let Some(rest) = rel.strip_prefix("var/run/") {
        candidates.push(format!("run/{rest}"));
    }
    let mut last = None;
    for c in candidates {
        let path = PathBuf::from(format!("/proc/{pid}/root")).join(Path::new(&c));
        match std::fs::read_dir(&path) {
            Ok(rd) => {
                let mut names: Vec<String> = rd
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                // An empty directory at the first spelling may hide the mount at the second
                // (a real `/var/run` directory beside the `/run` the runtime mounted into).
                if !names.is_empty() {
                    return Ok(names);
                }
                last = None;
            }
            Err(e) => last = Some(HostError::from_io(Some(pid), path, e)),
        }
    }
    match last {
        Some(e) => Err(e),
        None => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_a_directory_of_our_own_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in ["GPU-b", "GPU-a"] {
            std::fs::write(dir.path().join(n), b"").expect("write");
        }
        let got = dir_entries(std::process::id(), &dir.path().to_string_lossy());
        assert_eq!(
            got.expect("read"),
            vec!["GPU-a".to_string(), "GPU-b".to_string()]
        );
    }

    #[test]
    fn a_missing_directory_is_an_error_not_an_empty_list() {
        assert!(dir_entries(std::process::id(), "/var/run/vramdoc-no-such-dir").is_err());
    }
}
