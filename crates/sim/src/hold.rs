//! The process work of `vramdoc sim hold` (a neighbour that keeps simulated memory held):
//! naming the calling process (`prctl(PR_SET_NAME)`, as a renamed Python or CUDA worker
//! shows up in NVML), forking a child that only keeps the inherited descriptors open (a
//! parent killed without cleanup whose child still holds the driver files), and holding
//! until a duration passes or forever.

use std::ffi::OsStr;
use std::time::Duration;

/// `prctl(PR_SET_NAME, name)`: the kernel keeps the first 15 bytes, whatever they are.
pub fn set_own_name(name: &OsStr) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = [0u8; 16];
    let n = name.as_bytes().len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from `buf`, which
    // lives across the call.
    if unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Fork a child that sleeps until killed, holding every descriptor it inherited (the
/// simulated driver's files among them). Returns the child's PID in the parent. Call it
/// from a single-threaded process, with stdout flushed (nothing buffered is written twice).
pub fn fork_sleeping_child() -> std::io::Result<i32> {
    // SAFETY: fork in a single-threaded process; the child only sleeps (no allocation, no
    // locks) until killed, holding the descriptors it inherited.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        },
        child => Ok(child),
    }
}

/// Hold: sleep for `duration`, or forever when `None`.
pub fn hold_for(duration: Option<Duration>) {
    match duration {
        Some(d) => std::thread::sleep(d),
        None => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_cut_to_15_bytes_as_the_kernel_keeps_it() {
        // On a thread of its own: the name is the thread's (the test harness's threads).
        std::thread::spawn(|| {
            set_own_name(OsStr::new("vramdoc-hold-a-long-name")).unwrap();
            let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            assert_eq!(comm.trim_end(), "vramdoc-hold-a-");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_duration_ends_the_hold() {
        let t = std::time::Instant::now();
        hold_for(Some(Duration::from_millis(5)));
        assert!(t.elapsed() >= Duration::from_millis(5));
    }
}
