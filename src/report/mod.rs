//! Reports: renderers of the model ([`crate::model::Report`]), one file per format, that are
//! pure functions from the model to bytes: `json`, the [`terminal`] (tables for people at a
//! terminal), and `markdown` and `html` (with `chart`), which write the one document of
//! [`markup`] through its primitives, sharing wording from `text`. Files are written in one
//! place, [`write`](mod@write), atomically; [`read`] loads a saved JSON report; [`schema`] is
//! its JSON Schema. For the engines users already run: [`prom`] (Prometheus exposition),
//! [`junit`] (JUnit XML) and [`step_summary`] (GitHub job summaries). Stages never import
//! this module: they build the model, and `commands/` and `serve/` render it.

pub mod chart;
pub mod csv;
pub mod explain;
pub mod explain_html;
pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod markup;
pub mod prom;
pub mod read;
pub mod schema;
pub mod sink;
pub mod step_summary;
pub mod terminal;
pub mod text;
pub mod write;
