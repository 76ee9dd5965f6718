//! The one way a test waits for something another process does: [`eventually`].
//!
//! Every wait is bounded and names what it waited for, so a hang is a failure that says
//! what never happened, never a test that runs forever or sleeps a fixed time and hopes.

use std::time::{Duration, Instant};

/// What a polled closure may return: `bool` (done or not), `Option<T>` (the value once
/// there), or `Result<T, E>` (the value, or why not yet: the last `E` is in the failure
/// message).
pub trait Ready {
    /// What [`eventually`] returns once the condition holds.
    type Value;
    /// The value, or why it is not there yet.
    fn check(self) -> Result<Self::Value, Option<String>>;
}

impl Ready for bool {
    type Value = ();
    fn check(self) -> Result<(), Option<String>> {
        if self {
            Ok(())
        } else {
            Err(None)
        }
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn check(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: std::fmt::Display> Ready for Result<T, E> {
    type Value = T;
    fn check(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// Calls `f` until it is ready (polling every 10 ms at first, backing off to 100 ms) and
/// returns its value; panics after `timeout` with "timed out after …: waiting for `what`"
/// (and the last reason `f` gave, if it returns a `Result`).
///
/// ```ignore
/// eventually(SECS_10, "the holder's memory is returned", || monitor.used(0) == 0);
/// let pid = eventually(SECS_10, "sleep in the samples", || sleep_pid(&samples));
/// ```
pub fn eventually<R: Ready>(timeout: Duration, what: &str, mut f: impl FnMut() -> R) -> R::Value {
    let start = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let why = match f().check() {
            Ok(v) => return v,
            Err(why) => why,
        };
        if start.elapsed() >= timeout {
            match why {
                Some(why) => panic!("timed out after {timeout:?} waiting for {what}; last: {why}"),
                None => panic!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// The usual bound for something another process does within moments.
pub const SECS_10: Duration = Duration::from_secs(10);
