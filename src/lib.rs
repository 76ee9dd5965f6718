//! vramdoc: diagnose and reproduce GPU memory (VRAM) failures.
//!
//! Layers, bottom to top (docs/architecture.md; `architecture_tests` keeps them): the
//! foundations [`units`], [`term`], [`redact`], [`input`], [`host`] (every /proc read) and
//! [`gpu`] (the only boundary with CUDA and NVML, and the per-GPU deadline of every NVML
//! call); the report [`model`], [`exit`] codes and [`backend`] (real, or the simulated
//! machine of `vramdoc-sim` in-process); the stages [`inventory`], [`pods`] and [`record`],
//! then [`diagnose`], [`job`], [`explain`] and the [`session`] every command builds once
//! (backend, private box, hang-guarded monitor); then [`scenario`], [`scan`], [`preflight`]
//! and the [`report`] renderers with the one output sink; then [`replay`], [`repro`],
//! [`serve`] and [`incidents`]; on top, `cli` and [`commands`].

pub mod backend;
pub mod cli;
pub mod commands;
pub mod diagnose;
pub mod exit;
pub mod explain;
pub mod gpu;
pub mod host;
pub mod incidents;
pub mod input;
pub mod inventory;
pub mod job;
pub mod model;
pub mod pods;
pub mod preflight;
pub mod record;
pub mod redact;
pub mod replay;
pub mod report;
pub mod repro;
pub mod scan;
pub mod scenario;
pub mod serve;
pub mod session;
pub mod term;
pub mod units;
pub mod watch;

#[cfg(test)]
mod architecture_tests;
