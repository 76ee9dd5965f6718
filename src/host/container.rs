//! What a process's container holds in its own mount namespace, read from the host through
//! `/proc/PID/root` (needs the same permission as reading its environment: same user or
//! CAP_SYS_PTRACE). Used for the device list the NVIDIA device plugin's `volume-mounts`
//! strategy mounts into a container (`NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`,
//! one entry per device, named by its ID).

use std::path::{Path, PathBuf};

use super::HostError;

type Result<T> = std::result::Result<T, HostError>;

/// Most entries a device list may have: a node has at most a few dozen GPUs (and MIG
/// devices); a directory with more is not the device plugin's list (the path comes from the
/// process's environment, which anyone can set), so it is refused rather than read whole.
pub const MAX_ENTRIES: usize = 1024;

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
                // Names are escaped (they may reach a terminal in a finding's evidence).
                let mut names: Vec<String> = rd
                    .flatten()
                    .take(MAX_ENTRIES + 1)
                    .map(|e| {
                        crate::term::one_line(&crate::term::escape_bytes(
                            e.file_name().as_encoded_bytes(),
                        ))
                    })
                    .collect();
                if names.len() > MAX_ENTRIES {
                    return Err(HostError::Malformed {
                        path,
                        reason: format!("more than {MAX_ENTRIES} entries: not a device list"),
                    });
                }
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
    fn a_directory_too_large_for_a_device_list_is_refused_and_names_are_escaped() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("GPU-\x1b[2Jx"), b"").expect("write");
        let got = dir_entries(std::process::id(), &dir.path().to_string_lossy()).expect("read");
        assert_eq!(got.len(), 1);
        assert!(!got[0].contains('\x1b'), "{got:?}");
        for i in 0..MAX_ENTRIES {
            std::fs::write(dir.path().join(format!("GPU-{i}")), b"").expect("write");
        }
        let e = dir_entries(std::process::id(), &dir.path().to_string_lossy())
            .expect_err("too many entries");
        assert!(e.to_string().contains("not a device list"), "{e}");
    }

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
