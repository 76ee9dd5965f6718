//! Scenario files shared by integration tests.

use std::path::{Path, PathBuf};

/// Write the scenario file `dir/name` with `body`; returns its path.
pub fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write scenario file");
    p
}

/// Scenario `wrong`: one allocation on GPU 0 and a "fix" variant whose expectation (no
/// worker memory on GPU 0) cannot hold, so replaying it is an unexpected result (exit 1).
pub const WRONG_FIX: &str = r#"
id = "wrong"
title = "w"
description = "d"
source = "s"
devices = 1
[[steps]]
op = "alloc"
tag = "a"
device = 0
size = "10%"
[[variants]]
name = "fix-claims-nothing"
[[variants.expect]]
check = "worker_on_device"
device = 0
max = "0"
"#;
