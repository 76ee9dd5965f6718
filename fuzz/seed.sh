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
mkdir -p fuzz/corpus/snapshot
for c in fragmentation live other-stream private-pool growth; do
    python3 tests/explain/gen_snapshot.py "$c" "fuzz/corpus/snapshot/$c.pickle" --format 2.6
done
python3 tests/explain/gen_snapshot.py live fuzz/corpus/snapshot/live-2.0.pickle --format 2.0 --protocol 2
echo "corpora in fuzz/corpus/{scenario,report,snapshot}"
