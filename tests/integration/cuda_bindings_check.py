#!/usr/bin/env python3
"""cuda_bindings_check.py WORK_DIR FAKE_DIR LIBLUMA CLIENT SANITIZE

A real client no one here wrote: NVIDIA's Python driver bindings (cuda-bindings, pinned
below) run cuda_bindings_client.py on the stand-in driver, alone and with libluma.so
preloaded. The two summaries must be equal, and luma's statistics (one JSON file per
process that allocated: the client and its IPC peer) must show allocations served from the
cache (cache_absorbed_calls > 0 in each).

The bindings are installed with pip into a virtual environment under WORK_DIR, once
(cuda_bindings_venv.py; skipped with exit 77 when PyPI cannot be reached). A sanitizer
build skips too: the preloaded, instrumented libluma.so would need its runtime loaded
first into an uninstrumented Python.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

from cuda_bindings_venv import ensure_bindings, skip_under_sanitizer, stand_in_env

TEST = "cuda_bindings"
RUN_LIMIT_S = 120  # one client run (it takes about 3 s on the stand-in)


def fail(message):
    print(TEST + ": FAILED: " + message)
    sys.exit(1)


def run_client(python, client, env, label):
    p = subprocess.run([python, client], env=env, capture_output=True, text=True,
                       timeout=RUN_LIMIT_S)
    if p.returncode != 0:
        fail("%s: the client exited %d\n%s%s" % (label, p.returncode, p.stdout[-2000:],
                                                 p.stderr[-4000:]))
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail("%s: no JSON from the client:\n%s%s" % (label, p.stdout[-2000:], p.stderr[-2000:]))


def differences(a, b, path=""):
    """The paths where two JSON values differ, for a message that names them."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k), b.get(k), path + "/" + k)
        return out
    return [] if a == b else ["%s: stand-in alone %s, under luma %s" % (path or "/", a, b)]


# How the bindings resolve their entry points: the default, and with
# CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM set (every cuGetProcAddress_v2 call asks
# for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: the _ptsz/_ptds variants).
BINDING_MODES = {"default": {}, "ptds": {"CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM": "1"}}


def compare(name, python, client, env, libluma, stats_dir):
    """Runs the client alone and under luma; the problems found (empty when none)."""
    alone = run_client(python, client, env, name + ", stand-in alone")
    shutil.rmtree(stats_dir, ignore_errors=True)
    os.makedirs(stats_dir)
    luma_env = dict(env, LD_PRELOAD=libluma, LUMA_STATS="json",
                    LUMA_STATS_FILE=os.path.join(stats_dir, "luma.%p.json"))
    under = run_client(python, client, luma_env, name + ", under luma")

    problems = ["%s: %s" % (name, d) for d in differences(alone["summary"], under["summary"])]
    # The stand-in alone must itself have passed every check, or equality proves nothing.
    s = alone["summary"]
    if s["errors"] or s["alloc_loop"]["data_mismatches"] or s["pointer_queries"]["disagreements"] \
            or s["capture"]["launches_with_right_data"] != s["capture"]["launches"] \
            or not s["ipc"]["peer_data_seen_here"] \
            or not s["ipc"]["peer"].get("exporter_data_seen_here") \
            or s["contexts"]["data_right"] != s["contexts"]["rounds"] \
            or s["threads"]["errors"] \
            or s["threads"]["buffers_checked_right"] != s["threads"]["buffers"]:
        problems.append("%s: the stand-in alone failed its own checks: %s" % (name, json.dumps(s)))

    files = sorted(glob.glob(os.path.join(stats_dir, "luma.*.json")))
    absorbed = []
    for path in files:
        with open(path) as f:
            stats = json.load(f)
        absorbed.append(sum(d["cache_absorbed_calls"] for d in stats["devices"]))
    # The client and its IPC peer both allocate, so both write statistics.
    if len(files) != 2:
        problems.append("%s: expected luma statistics from 2 processes, got %d: %s"
                        % (name, len(files), files))
    elif min(absorbed) <= 0:
        problems.append("%s: luma's cache absorbed no allocation in some process: %s"
                        % (name, absorbed))
    print("cuda_bindings: %s: luma absorbed %s calls (one number per process); not compared: "
          "alone %s, under luma %s" % (name, absorbed, alone["facts"], under["facts"]))
    if not problems:
        print("cuda_bindings: %s: summaries equal: %s" % (name, json.dumps(s, sort_keys=True)))
    return problems


def main():
    work, fake_dir, libluma, client, sanitize = sys.argv[1:6]
    skip_under_sanitizer(TEST, sanitize)
    os.makedirs(work, exist_ok=True)
    python = ensure_bindings(TEST, os.path.join(work, "venv"))
    base_env = stand_in_env(fake_dir, dropped=("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM",))
    problems = []
    started = time.monotonic()
    for name, extra in BINDING_MODES.items():
        problems += compare(name, python, client, dict(base_env, **extra), libluma,
                            os.path.join(work, "stats-" + name))
    elapsed = time.monotonic() - started
    if problems:
        fail("\n  ".join(["results differ under luma:"] + problems))
    print("cuda_bindings: ok: %d runs in %.1f s" % (2 * len(BINDING_MODES), elapsed))


if __name__ == "__main__":
    main()
