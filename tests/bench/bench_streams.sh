#!/bin/sh
# bench_streams.sh BUILD_DIR [OLD_LIBLUMA] - the alloc+free pair with 0, 16 and 256 idle and
# 16 busy non-blocking streams (tests/bench/bench_streams.cpp), with the stand-in charging
# realistic costs for cuEventRecord / cuEventQuery / cuStreamQuery / cuCtxRecordEvent
# (LUMA_FAKE_CALL_COST): the stand-in alone, under BUILD_DIR's libluma.so (with the
# stand-in as a 13.0 driver, then playing a 12.4 one, which has no cuCtxRecordEvent:
# luma's fences then go stream by stream), and under OLD_LIBLUMA when given (a libluma.so
# built from an older commit: the same benchmark binary and stand-in, so the designs meet
# the same costs). Each is run REPS times (default 3), alternating, and
# Google Benchmark's tables are printed. docs/architecture.md has the figures.
set -eu
build=${1:-build}
old=${2:-}
reps=${REPS:-3}
bench="$build/tests/bench/bench_streams"
lib="$build/shim/libluma.so"
export LD_LIBRARY_PATH="$build/tests/fake"
export LUMA_FAKE_CALL_COST=${LUMA_FAKE_CALL_COST:-realistic}
export LUMA_STATS=off
args="--benchmark_min_time=0.3 ${BENCH_ARGS:-}"
for r in $(seq "$reps"); do
  echo "== round $r: stand-in alone (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  "$bench" $args
  echo "== round $r: under $lib"
  LD_PRELOAD="$lib" "$bench" $args
  echo "== round $r: under $lib, the stand-in playing a 12.4 driver (no cuCtxRecordEvent)"
  LUMA_FAKE_DRIVER_VERSION=12040 LD_PRELOAD="$lib" "$bench" $args
  if [ -n "$old" ]; then
    echo "== round $r: under $old"
    LD_PRELOAD="$old" "$bench" $args
  fi
done
