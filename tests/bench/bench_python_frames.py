#!/usr/bin/env python3
"""bench_python_frames.py LIBLUMA FAKE_DIR [PAIRS] - the cost of Python call sites per
allocation: a Python loop of PAIRS (default 100000) cuMemAlloc/cuMemFree pairs through
ctypes.PyDLL (the GIL held, so luma can read the Python frames), made 10 Python frames
deep, on the stand-in driver, in fresh interpreters:

  preload        libluma.so, no trace
  trace          LUMA_TRACE
  stacks         LUMA_TRACE + LUMA_TRACE_STACKS=16, LUMA_TRACE_PYTHON=0 (native only)
  stacks+python  LUMA_TRACE + LUMA_TRACE_STACKS=16 (and LUMA_TRACE_PYTHON=32)

Prints ns per pair for each (best of 3 runs; the loop is timed inside the program, so
interpreter start-up is not counted) and the difference python frames add. A measurement,
not a test: docs/performance.md records its figures.
"""
import os
import subprocess
import sys
import tempfile

PROGRAM = r"""
import ctypes, sys, time
cu = ctypes.PyDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
alloc, free, p, ref = cu.cuMemAlloc_v2, cu.cuMemFree_v2, ctypes.c_uint64(), None
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
print(nest(8, int(sys.argv[1])) / int(sys.argv[1]))
"""

CASES = [
    ("preload", {}),
    ("trace", {"LUMA_TRACE": "T"}),
    ("stacks", {"LUMA_TRACE": "T", "LUMA_TRACE_STACKS": "16", "LUMA_TRACE_PYTHON": "0"}),
    ("stacks+python", {"LUMA_TRACE": "T", "LUMA_TRACE_STACKS": "16"}),
]


def main():
    libluma, fake_dir = sys.argv[1:3]
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
    results = {}
    with tempfile.TemporaryDirectory() as work:
        prog = os.path.join(work, "loop.py")
        open(prog, "w").write(PROGRAM)
        for name, extra in CASES:
            env = {k: v for k, v in os.environ.items() if not k.startswith("LUMA_")}
            env.update(LD_PRELOAD=libluma, LD_LIBRARY_PATH=fake_dir, LUMA_STATS="off")
            for k, v in extra.items():
                env[k] = os.path.join(work, "t.trace") if v == "T" else v
            best = min(float(subprocess.run([sys.executable, prog, str(pairs)], env=env,
                                            check=True, capture_output=True, text=True,
                                            timeout=600).stdout) for _ in range(3))
            results[name] = best
            print("%-14s %8.0f ns per pair" % (name, best))
    print("python frames add %.0f ns per allocation over native stacks" %
          (results["stacks+python"] - results["stacks"]))


if __name__ == "__main__":
    main()
