//! The report reader on arbitrary bytes; whatever parses is rendered in every format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramdoc::report::write::{render, Format};

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.json");
    if let Ok(text) = vramdoc::input::text_of(path, data.to_vec()) {
        if let Ok(report) = vramdoc::report::read::parse_report(&text, path) {
            for f in [Format::Json, Format::Markdown, Format::Html] {
                let _ = render(&report, f);
            }
        }
    }
});
