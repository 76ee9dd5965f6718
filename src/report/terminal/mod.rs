//! Terminal renderers: pure functions from the report model to the text vramdoc prints.

pub mod run;
