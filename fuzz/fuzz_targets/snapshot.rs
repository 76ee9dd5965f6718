//! The restricted pickle reader and the snapshot reader on arbitrary bytes; whatever parses
//! is explained and rendered in every format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramdoc::explain::{explain, pickle, snapshot};

fuzz_target!(|data: &[u8]| {
    if let Ok(mut doc) = pickle::decode_slice(data) {
        if let Ok(s) = snapshot::from_doc(&mut doc) {
            let x = explain(&s, "fuzz".into(), data.len() as u64, &Default::default());
            let _ = vramdoc::report::explain::json(&x);
            let _ = vramdoc::report::explain::markdown(&x);
            let _ = vramdoc::report::explain::text(&x);
            let _ = vramdoc::report::explain_html::render(&x);
        }
    }
});
