//! The scenario parser on arbitrary bytes, read the way the CLI reads a file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.toml");
    if let Ok(text) = vramdoc::input::text_of(path, data.to_vec()) {
        if let Err(e) = vramdoc::scenario::parse_scenario("fuzz.toml", &text) {
            assert!(e.line >= 1 && e.col >= 1);
        }
    }
});
