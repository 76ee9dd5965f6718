//! Running a function of the test binary in a child process, with an environment of the
//! test's choosing, and collecting what it returned.
//!
//! Some things can only be tested in a fresh process: the dynamic loader reads
//! `LD_LIBRARY_PATH` once, at process start, so a test that wants cudarc or nvml-wrapper to
//! load the simulated `libcuda.so` by name (or to find no library at all) must do that in a
//! process started with the variable set; a process that holds GPU memory until it is
//! killed is another. The child is this test binary again, run on one entry:
//!
//! ```ignore
//! use crate::common::child;
//!
//! child::entry! {
//!     /// Opens the CUDA driver by name; returns the number of devices it sees.
//!     fn count_devices(expect_at_least: u32) -> u32 {
//!         let n = CudaDriver::open().unwrap().device_count().unwrap();
//!         assert!(n >= expect_at_least);
//!         n
//!     }
//! }
//!
//! #[test]
//! fn finds_the_simulated_driver() {
//!     let n: u32 = child::of!(count_devices)
//!         .simgpu()                       // LD_LIBRARY_PATH = the simulated libraries
//!         .env("VRAMDOC_SIM_DIR", dir.path())
//!         .input(&1u32)                   // the entry's argument (any serde type)
//!         .run();                         // its return value (any serde type)
//!     assert_eq!(n, 2);
//! }
//! ```
//!
//! - [`entry!`] declares the function as an `#[ignore]`d test of the binary (so libtest can
//!   start it by name); it does nothing unless started by [`of!`], and it is listed as
//!   ignored in a normal run.
//! - The child starts without the GPU-selecting variables of this process
//!   (`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`,
//!   `VRAMDOC_SIM_DIR`, `VRAMDOC_PIDNS`, `LD_LIBRARY_PATH`); set what it needs with
//!   [`Child::env`], [`Child::simgpu`], or [`Child::inherit`].
//! - [`Child::run`] waits for it: a panic in the child fails the test with the child's output;
//!   [`Child::command`] gives the `Command` to spawn it yourself (a long-running child).

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::ffi::OsStr;
use std::process::Command;

/// Set in the child to the entry it runs.
const ENTRY_VAR: &str = "VRAMDOC_TEST_CHILD";
/// The entry's input, as JSON.
const INPUT_VAR: &str = "VRAMDOC_TEST_CHILD_INPUT";
/// Prefix of the line carrying the entry's return value (JSON) on the child's stdout.
const RESULT: &str = "VRAMDOC-CHILD-RESULT ";

/// Variables a child never inherits from the test process.
const CLEARED: [&str; 6] = [
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "VRAMDOC_SIM_DIR",
    "VRAMDOC_PIDNS",
    "LD_LIBRARY_PATH",
];

/// A child process of this test binary that runs one [`entry!`].
pub struct Child {
    entry: &'static str,
    cmd: Command,
}

/// The libtest name of an entry from its `module_path!()`-based path (the binary's crate
/// name dropped).
fn test_name(path: &'static str) -> &'static str {
    path.split_once("::").map_or(path, |(_, rest)| rest)
}

impl Child {
    /// Use [`of!`], which checks at compile time that the entry exists.
    pub fn new(path: &'static str) -> Child {
        let entry = test_name(path);
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", entry, "--ignored", "--nocapture", "--quiet"])
            .args(["--test-threads", "1"])
            .env(ENTRY_VAR, entry)
            .env_remove(INPUT_VAR);
        for k in CLEARED {
            cmd.env_remove(k);
        }
        Child { entry, cmd }
    }

    /// Set `key` in the child's environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Child {
        self.cmd.env(key, value);
        self
    }

    /// Pass on this process's value of each of `keys` (where it has one).
    pub fn inherit(mut self, keys: &[&str]) -> Child {
        for k in keys {
            if let Some(v) = std::env::var_os(k) {
                self.cmd.env(k, v);
            }
        }
        self
    }

    /// `LD_LIBRARY_PATH` = the simulated libraries (libcuda.so, libnvidia-ml.so.1).
    pub fn simgpu(self) -> Child {
        self.env("LD_LIBRARY_PATH", super::simgpu_lib_dir())
    }

    /// The entry's argument.
    pub fn input(mut self, value: &impl Serialize) -> Child {
        let json = serde_json::to_string(value).expect("serialise the child's input");
        self.cmd.env(INPUT_VAR, json);
        self
    }

    /// Start the child under a wrapper command (e.g. `vramdoc sim run --gpus 1 --` or
    /// `unshare --pid --fork`): `wrap` then this test binary with the child's arguments.
    /// The environment set so far is kept; the wrapper must pass it on.
    pub fn wrapped(mut self, wrap: &[&str]) -> Child {
        let Some((first, rest)) = wrap.split_first() else {
            return self;
        };
        let mut c = Command::new(first);
        c.args(rest)
            .arg(self.cmd.get_program())
            .args(self.cmd.get_args());
        for (k, v) in self.cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        self.cmd = c;
        self
    }

    /// The command that starts the child (to spawn it yourself).
    pub fn command(self) -> Command {
        self.cmd
    }

    /// Run the child to its end and return what the entry returned; panics with the child's
    /// output if it failed or returned nothing.
    pub fn run<T: DeserializeOwned>(mut self) -> T {
        let entry = self.entry;
        let out = self
            .cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot start the child process for {entry}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "child process {entry} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            out.status
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once(RESULT).map(|(_, json)| json))
            .unwrap_or_else(|| {
                panic!(
                    "child process {entry} returned nothing (did its entry run?):\n--- stdout\n\
                     {stdout}\n--- stderr\n{stderr}"
                )
            });
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("child process {entry} returned {line:?}: {e}"))
    }
}

/// The entry's side: run `f` if this process was started for `path`, and print its result
/// for the parent; otherwise (a run with `--ignored`) say what the entry is and do nothing.
pub fn serve<I: DeserializeOwned, T: Serialize>(path: &'static str, f: impl FnOnce(I) -> T) {
    let entry = test_name(path);
    if std::env::var(ENTRY_VAR).as_deref() != Ok(entry) {
        eprintln!("{entry} is a child-process entry: tests start it (tests/it/common/child.rs)");
        return;
    }
    let input = std::env::var(INPUT_VAR).unwrap_or_else(|_| "null".into());
    let input: I =
        serde_json::from_str(&input).unwrap_or_else(|e| panic!("{entry}: input {input:?}: {e}"));
    let value = f(input);
    let json = serde_json::to_string(&value).expect("serialise the child's result");
    println!("\n{RESULT}{json}");
}

/// Declares a function that tests run in a child process with [`of!`]:
/// `entry! { fn name(arg: In) -> Out { ... } }` (argument and return type optional; both
/// are serde types).
macro_rules! entry {
    ($(#[$meta:meta])* fn $name:ident() $(-> $ret:ty)? { $($body:tt)* }) => {
        $(#[$meta])*
        #[test]
        #[ignore = "child-process entry, started by tests (tests/it/common/child.rs)"]
        fn $name() {
            $crate::common::child::serve(
                concat!(module_path!(), "::", stringify!($name)),
                |(): ()| $(-> $ret)? { $($body)* },
            );
        }
    };
    ($(#[$meta:meta])* fn $name:ident($arg:ident : $ty:ty) $(-> $ret:ty)? { $($body:tt)* }) => {
        $(#[$meta])*
        #[test]
        #[ignore = "child-process entry, started by tests (tests/it/common/child.rs)"]
        fn $name() {
            $crate::common::child::serve(
                concat!(module_path!(), "::", stringify!($name)),
                |$arg: $ty| $(-> $ret)? { $($body)* },
            );
        }
    };
}
pub(crate) use entry;

/// `of!(entry)`: a [`Child`] that runs `entry` (an [`entry!`] of the calling module).
macro_rules! of {
    ($name:ident) => {{
        let _: fn() = $name;
        $crate::common::child::Child::new(concat!(module_path!(), "::", stringify!($name)))
    }};
}
pub(crate) use of;
