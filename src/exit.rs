//! Exit codes, the contract with scripts and CI (documented in docs/exit-codes.md):
//! 0 ok; 1 findings at or above `--fail-on`, or a replay that did not behave as expected;
//! 2 usage or bad input (flags, scenario files, reports); 3 environment (no driver library,
//! no device, no simulated box).

use crate::gpu::GpuError;

pub const OK: i32 = 0;
pub const FINDINGS: i32 = 1;
pub const USAGE: i32 = 2;
pub const ENVIRONMENT: i32 = 3;
/// `vramdoc run`: vramdoc itself failed (bad flags, no GPU, report not writable). As GNU
/// `timeout`, so it cannot be mistaken for the command's own status.
pub const RUN_FAILED: i32 = 125;
/// `vramdoc run`: the command was found but could not be executed.
pub const CANNOT_EXECUTE: i32 = 126;
/// `vramdoc run`: the command was not found.
pub const NOT_FOUND: i32 = 127;

/// An error that carries its own exit code (`vramdoc run`'s 125/126/127).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CodedError {
    pub code: i32,
    pub message: String,
}

/// Bad input from the user: a flag value, a file that cannot be read or parsed. Exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A problem with the machine vramdoc runs on. Exit 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EnvironmentError(pub String);

/// The exit code for an error that reached the command edge.
pub fn code_for(err: &anyhow::Error) -> i32 {
    for cause in err.chain() {
        if let Some(c) = cause.downcast_ref::<CodedError>() {
            return c.code;
        }
        if let Some(g) = cause.downcast_ref::<GpuError>() {
            return if g.is_environment() {
                ENVIRONMENT
            } else {
                FINDINGS
            };
        }
        if cause.downcast_ref::<EnvironmentError>().is_some()
            || cause.downcast_ref::<crate::term::OutputError>().is_some()
        {
            return ENVIRONMENT;
        }
        // The simulator's errors: mapped beside the in-process backend.
        match crate::backend::error_class(cause) {
            Some(crate::backend::ErrorClass::Environment) => return ENVIRONMENT,
            Some(crate::backend::ErrorClass::Usage) => return USAGE,
            None => {}
        }
        if cause.downcast_ref::<UsageError>().is_some()
            || cause.downcast_ref::<crate::units::SizeError>().is_some()
        {
            return USAGE;
        }
    }
    USAGE
}
