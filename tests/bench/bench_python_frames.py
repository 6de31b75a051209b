#!/usr/bin/env python3
"""bench_python_frames.py LIBLUMA FAKE_DIR [--baseline OLD_LIBLUMA] [--pairs N] [--runs R]
                         [--python PYTHON] [--instructions]

The cost of Python call sites per allocation: a Python loop of N (default 100000)
cuMemAlloc/cuMemFree pairs, 11 Python frames deep, on the stand-in driver, in fresh
interpreters, through

  pydll  ctypes.PyDLL: the GIL held during the call;
  cdll   ctypes.CDLL: the GIL released around it (as cuda-bindings, PyTorch and CuPy do);

under each library given (LIBLUMA, and OLD_LIBLUMA for a comparison in the same run), with

  preload        libluma.so, no trace
  trace          LUMA_TRACE
  stacks         LUMA_TRACE + LUMA_TRACE_STACKS=16, LUMA_TRACE_PYTHON=0 (native only)
  stacks+python  LUMA_TRACE + LUMA_TRACE_STACKS=16 (and LUMA_TRACE_PYTHON=32)

Prints ns per pair for each (best of R runs, default 3; the loop is timed inside the
program, so interpreter start-up is not counted) and what Python frames add per allocation
over native stacks. With --instructions, instructions per pair instead, counted by
valgrind's callgrind (the difference of a 6,000-pair and a 1,000-pair run, so start-up
cancels): wall-clock time on a shared machine varies by 2x between runs, instruction counts
do not. A measurement, not a test: docs/performance.md records its figures.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

PROGRAM = r"""
import ctypes, sys, time
mode, n = sys.argv[1], int(sys.argv[2])
cu = {"pydll": ctypes.PyDLL, "cdll": ctypes.CDLL}[mode]("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
alloc, free, p = cu.cuMemAlloc_v2, cu.cuMemFree_v2, ctypes.c_uint64()
ref = ctypes.byref(p)
def loop(n):
    t = time.perf_counter_ns()
    for _ in range(n):
        alloc(ref, 1 << 20)
        free(p)
    return time.perf_counter_ns() - t
def nest(depth, n):
    return loop(n) if depth == 0 else nest(depth - 1, n)
loop(1000)  # warm: the cache holds the block, the call sites are defined
print(nest(8, n) / n)
"""

CASES = [
    ("preload", {}),
    ("trace", {"LUMA_TRACE": "T"}),
    ("stacks", {"LUMA_TRACE": "T", "LUMA_TRACE_STACKS": "16", "LUMA_TRACE_PYTHON": "0"}),
    ("stacks+python", {"LUMA_TRACE": "T", "LUMA_TRACE_STACKS": "16"}),
]
MODES = ["pydll", "cdll"]
CALLGRIND_PAIRS = (1000, 6000)


def environment(libluma, fake_dir, extra, work):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMA_") and k != "LD_PRELOAD"}
    # PYTHONHASHSEED: the same str hashes (dict layouts) in every run, for repeatable counts.
    env.update(LD_PRELOAD=libluma, LD_LIBRARY_PATH=fake_dir, LUMA_STATS="off", PYTHONHASHSEED="0")
    for k, v in extra.items():
        env[k] = os.path.join(work, "t.trace") if v == "T" else v
    return env


def ns_per_pair(python, prog, mode, pairs, env):
    out = subprocess.run([python, prog, mode, str(pairs)], env=env, check=True,
                         capture_output=True, text=True, timeout=600)
    return float(out.stdout)


def instructions(python, prog, mode, pairs, env):
    """Instructions of a whole run under callgrind (every thread)."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          python, prog, mode, str(pairs)], env=env, check=True,
                         capture_output=True, text=True, timeout=3600)
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if not m:
        sys.exit("no callgrind summary in:\n" + out.stderr[-2000:])
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libluma")
    ap.add_argument("fake_dir")
    ap.add_argument("--baseline", help="another libluma.so to measure in the same run")
    ap.add_argument("--pairs", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--instructions", action="store_true")
    a = ap.parse_args()
    libraries = [("new", a.libluma)] + ([("base", a.baseline)] if a.baseline else [])
    version = subprocess.run([a.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    unit = "instructions" if a.instructions else "ns"
    print("CPython %s, %s per cuMemAlloc+cuMemFree pair (%s)" % (
        version, unit, "callgrind, %d - %d pairs" % (CALLGRIND_PAIRS[1], CALLGRIND_PAIRS[0])
        if a.instructions else "best of %d runs of %d pairs" % (a.runs, a.pairs)))
    columns = [(m, lib) for m in MODES for lib, _ in libraries]
    print("%-14s" % "case" + "".join("%14s" % ("%s/%s" % c) for c in columns))
    results = {}
    with tempfile.TemporaryDirectory() as work:
        prog = os.path.join(work, "loop.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        for name, extra in CASES:
            row = "%-14s" % name
            for mode, lib in columns:
                env = environment(dict(libraries)[lib], a.fake_dir, extra, work)
                if a.instructions:
                    lo, hi = (instructions(a.python, prog, mode, n, env) for n in CALLGRIND_PAIRS)
                    value = (hi - lo) / (CALLGRIND_PAIRS[1] - CALLGRIND_PAIRS[0])
                else:
                    value = min(ns_per_pair(a.python, prog, mode, a.pairs, env)
                                for _ in range(a.runs))
                results[(name, mode, lib)] = value
                row += "%14.0f" % value
            print(row, flush=True)
    for mode, lib in columns:
        print("%s/%s: Python frames add %.0f %s per allocation over native stacks" % (
            mode, lib, results[("stacks+python", mode, lib)] - results[("stacks", mode, lib)], unit))


if __name__ == "__main__":
    main()
