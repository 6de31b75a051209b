#!/usr/bin/env python3
"""python_frames_bindings_check.py WORK_DIR FAKE_DIR LUMA SANITIZE

Python call sites of a program whose allocating calls release the GIL, tried as a user
would: `luma run --trace T --stacks 16 -- python python_frames_bindings_prog.py`, the
program written with NVIDIA's Python driver bindings (cuda-bindings, whose driver calls
are `nogil`), on the stand-in driver (LD_LIBRARY_PATH: the bindings load it as libcuda.so.1
and the program checks their answers and its data). `luma stats` of the trace must name
each marked line of the program - file, line and function (qualified from 3.11; the plain
name in 3.10) - with its allocations and bytes, in text and JSON, including the lines run
on a second Python thread and inside a generator, and nothing else of the program's file.

Runs under every CPython 3.10 to 3.13 this machine has (python_versions.py), each with the
bindings installed into its own virtual environment under WORK_DIR (cuda_bindings_venv.py;
the Python running this test shares the cuda_bindings test's). When PyPI cannot be reached
the test prints one line saying so and exits 77 (skipped). A sanitizer build skips too.
"""
import json
import os
import re
import subprocess
import sys

import python_versions
from cuda_bindings_venv import ensure_bindings, skip_under_sanitizer, stand_in_env

TEST = "python_frames_bindings"
RUN_LIMIT_S = 120
HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "python_frames_bindings_prog.py")
MIB = 1 << 20
READ_MINORS = (10, 11, 12, 13)


def fail(message):
    print(TEST + ": FAILED: " + message)
    sys.exit(1)


def run(cmd, env=None):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        fail("%s ran over %d s (a hang)" % (cmd, RUN_LIMIT_S))
    if p.returncode != 0:
        fail("%s exited %d\n%s%s" % (cmd, p.returncode, p.stdout[-2000:], p.stderr[-4000:]))
    return p


def marked_lines():
    lines = {}
    for n, text in enumerate(open(PROG, encoding="utf-8"), start=1):
        m = re.search(r"# LINE: (\w+)", text)
        if m:
            lines[m.group(1)] = n
    return lines


def expected(minor):
    """(function, line) -> (allocations, bytes)."""
    lines = marked_lines()
    loader = "Loader." if minor >= 11 else ""  # 3.10 has no co_qualname
    return {
        ("allocate_weights", lines["weights"]): (3, 3 * MIB),
        ("chunks", lines["generator"]): (2, 8 * MIB),
        (loader + "allocate_batch", lines["batch"]): (2, 4 * MIB),
    }


def check(python, minor, work, fake_dir, luma):
    label = "CPython 3.%d" % minor
    trace = os.path.join(work, "bindings-3.%d.trace" % minor)
    env = stand_in_env(fake_dir, dropped=("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM",))
    p = run([luma, "run", "--trace", trace, "--stacks", "16", "--stats", "off", "--",
             python, PROG], env)
    if "done" not in p.stdout:
        fail("%s: the program did not finish:\n%s%s" % (label, p.stdout, p.stderr[-2000:]))
    if "Python frames" in p.stderr:
        fail("%s: luma logged about Python frames:\n%s" % (label, p.stderr))
    want = expected(minor)
    stats = json.loads(run([luma, "stats", "--json", trace]).stdout)["runs"][0]
    got = {(l["function"], l["line"]): (l["allocations"], l["bytes"])
           for l in stats.get("top_python_lines", []) if l["file"] == PROG}
    if got != want:
        fail("%s: top_python_lines of %s: %s, expected %s\nall: %s" % (
            label, PROG, got, want, stats.get("top_python_lines")))
    text = run([luma, "stats", trace]).stdout
    for (function, line) in want:
        if "%s:%d %s:" % (PROG, line, function) not in text:
            fail("%s: `luma stats` does not list %s:%d %s:\n%s" % (label, PROG, line, function, text))
    print("%s: %s: %s" % (TEST, label, ", ".join(
        "%s:%d %s x%d" % (os.path.basename(PROG), line, fn, want[(fn, line)][0])
        for (fn, line) in sorted(want, key=lambda k: k[1]))))


def main():
    work, fake_dir, luma, sanitize = sys.argv[1:5]
    skip_under_sanitizer(TEST, sanitize)
    os.makedirs(work, exist_ok=True)
    pythons = python_versions.find(READ_MINORS)
    own = sys.version_info[1]
    ran, not_run = [], []
    # This Python's first: without PyPI it says so in one line and the test is skipped.
    for minor in sorted(READ_MINORS, key=lambda m: m != own):
        python = pythons.get(minor)
        if python is None:
            not_run.append("3.%d (not on this machine)" % minor)
            continue
        venv = os.path.join(work, "venv" if minor == own else "venv-3.%d" % minor)
        if minor == own:
            venv_python = ensure_bindings(TEST, venv)  # no PyPI: one line, exit 77
        else:
            try:
                venv_python = ensure_bindings(TEST, venv, base=python)
            except SystemExit as e:
                if e.code != 77:
                    raise
                not_run.append("3.%d (no bindings: the line above)" % minor)
                continue
        check(venv_python, minor, work, fake_dir, luma)
        ran.append("3.%d" % minor)
    if not ran:
        fail("no CPython 3.10-3.13 found (this test runs under %s)" % sys.version.split()[0])
    print("%s: ok: CPython %s%s" % (TEST, ", ".join(sorted(ran)),
                                    "; not run: " + ", ".join(not_run) if not_run else ""))


if __name__ == "__main__":
    main()
