#!/bin/sh
# ctest driver for one libFuzzer binary: fuzz for URXE_FUZZ_SECONDS (default 60) starting from the checked-in
# seeds; new inputs accumulate in WORKDIR/corpus (kept between runs), crashes land in WORKDIR/artifacts.
# Exit status is libFuzzer's: non-zero on any crash, sanitizer report, invariant abort, timeout or OOM.
set -eu
bin=$1 seeds=$2 work=$3
secs=${URXE_FUZZ_SECONDS:-60}
mkdir -p "$work/corpus"
rm -rf "$work/artifacts" && mkdir -p "$work/artifacts"
exec "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
