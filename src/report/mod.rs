//! Reports: one model ([`model::Report`]) shared by every command, and renderers, one file
//! per format, that are pure functions from the model to bytes (`json`, ...). Files are
//! written in one place, [`write`], atomically.

pub mod environment;
pub mod json;
pub mod model;
pub mod write;

pub use model::*;
