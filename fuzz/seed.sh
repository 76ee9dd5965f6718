#!/bin/sh
# Seed the cargo-fuzz corpora: the built-in scenarios, and real reports written by a replay
# and a scan on a simulated box. Run from the repository root.
set -eu
mkdir -p fuzz/corpus/scenario fuzz/corpus/report
cp scenarios/*.toml fuzz/corpus/scenario/
cargo build --quiet
bin=target/debug/vramdoc
$bin --sim 2x16GiB scan --out fuzz/corpus/report/scan.json --force >/dev/null
$bin --sim 2x16GiB replay stray-cuda0 --period 50ms \
    --out fuzz/corpus/report/replay.json --force >/dev/null 2>&1 || true
echo "corpora in fuzz/corpus/{scenario,report}"
