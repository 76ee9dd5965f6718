//! vramdoc: diagnose and reproduce GPU memory (VRAM) failures.
//!
//! Stages, one module each: [`gpu`] (the only boundary with CUDA and NVML), [`backend`] (which
//! implementation of its traits: the real one, or the simulated machine of the `vramdoc-sim`
//! crate in-process), [`commands`] (one file per subcommand), with `cli` for argument parsing.
//! See docs/architecture.md.

pub mod backend;
pub mod cli;
pub mod commands;
pub mod diagnose;
pub mod exit;
pub mod gpu;
pub mod host;
pub mod input;
pub mod inventory;
pub mod job;
pub mod model;
pub mod record;
pub mod redact;
pub mod replay;
pub mod report;
pub mod scan;
pub mod scenario;
pub mod serve;
pub mod term;
pub mod units;

#[cfg(test)]
mod architecture_tests;
