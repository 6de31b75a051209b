#!/usr/bin/env python3
"""python_frames_check.py WORK_DIR FAKE_DIR LIBLUMA LUMA CHECK_MEMVIZ SANITIZE

Python call sites (docs/trace-format.md, python_stack_def): python_frames_prog.py runs under
libluma.so on the stand-in driver with LUMA_TRACE and LUMA_TRACE_STACKS, in every CPython
3.10 to 3.13 this machine has (python_versions.py finds them; the Python running this test
at least), in two modes:

  pydll  ctypes.PyDLL keeps the GIL during the foreign call;
  cdll   ctypes.CDLL releases it: luma reads the frames without it.

In both, `luma stats --json` lists each marked line (file, line, function: the qualified
name from 3.11, the plain name in 3.10, which has no co_qualname) with its allocations,
bytes and peak live bytes, and nothing else of the program's file. Under the Python running
the test also: the text output names each line, and the memviz export starts each alloc's
frames with those Python frames (the caller next) and ends them with native frames, and
passes check_memviz's schema and replay checks. A run must end normally (no crash, no hang:
a time limit).

An interpreter luma has no layout for (3.9, when the machine has it): the run ends
normally with exactly one log line naming the version, and records native call sites only.

A sanitizer build skips (python is not instrumented).
"""
import json
import os
import re
import shutil
import subprocess
import sys

import python_versions

TEST = "python_frames"
RUN_LIMIT_S = 60
HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "python_frames_prog.py")
MIB = 1 << 20
READ_MINORS = (10, 11, 12, 13)  # the versions luma reads (shim/python/python_layouts.h)
UNREAD_MINOR = 9  # a version it does not


def fail(message):
    print(TEST + ": FAILED: " + message)
    sys.exit(1)


def marked_lines():
    lines = {}
    for n, text in enumerate(open(PROG, encoding="utf-8"), start=1):
        m = re.search(r"# LINE: (\w+)", text)
        if m:
            lines[m.group(1)] = n
    return lines


def run(cmd, env=None):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        fail("%s ran over %d s (a hang)" % (cmd, RUN_LIMIT_S))
    if p.returncode != 0:
        fail("%s exited %d\n%s%s" % (cmd, p.returncode, p.stdout[-2000:], p.stderr[-4000:]))
    return p


def record(work, fake_dir, libluma, python, mode):
    """Runs the program; its trace path and stderr (luma's log lines)."""
    trace = os.path.join(work, "%s-%s.trace" % (os.path.basename(python), mode))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMA_") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (fake_dir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    env.update(LD_PRELOAD=libluma, LUMA_TRACE=trace, LUMA_TRACE_STACKS="8", LUMA_STATS="off")
    p = run([python, PROG, mode], env)
    if "done" not in p.stdout:
        fail("%s %s: the program did not finish: %s" % (python, mode, p.stdout))
    return trace, p.stderr


def memviz(luma, check_memviz, trace):
    out = trace + ".pickle"
    run([luma, "export", trace, "--format", "memviz", "-o", out])
    sys.path.insert(0, os.path.dirname(check_memviz))
    import check_memviz as cm
    return cm.check(out)


def allocs(snap):
    return [e for t in snap["device_traces"] for e in t if e["action"] == "alloc"]


def expected(minor):
    """(function, line) -> (allocations, bytes, peak live bytes); the callers' names."""
    lines = marked_lines()
    worker = "Worker." if minor >= 11 else ""  # 3.10 has no co_qualname
    want = {
        ("allocate_small", lines["small"]): (4, 4 * MIB, 4 * MIB),
        ("allocate_large", lines["large"]): (1, 4 * MIB, 4 * MIB),
        (worker + "allocate_in_thread", lines["thread"]): (2, 4 * MIB, 4 * MIB),
    }
    callers = {"allocate_small": "main", worker + "allocate_in_thread": worker + "run"}
    return want, callers


def check_lines(luma, trace, label, minor, text_too):
    want, _ = expected(minor)
    stats = json.loads(run([luma, "stats", "--json", trace]).stdout)["runs"][0]
    got = {}
    for l in stats.get("top_python_lines", []):
        if l["file"] == PROG:
            got[(l["function"], l["line"])] = (l["allocations"], l["bytes"], l["peak_live_bytes"])
    if got != want:
        fail("%s: top_python_lines of %s: %s, expected %s" % (label, PROG, got, want))
    if text_too:
        text = run([luma, "stats", trace]).stdout
        if "top allocating Python lines" not in text:
            fail("%s: `luma stats` has no Python lines section:\n%s" % (label, text))
        for (function, line) in want:
            if "%s:%d %s:" % (PROG, line, function) not in text:
                fail("%s: `luma stats` does not list %s:%d %s:\n%s" % (label, PROG, line, function, text))


def check_memviz_frames(luma, check_memviz, trace, label, minor):
    want, callers = expected(minor)
    seen = set()
    for e in allocs(memviz(luma, check_memviz, trace)):
        frames = e["frames"]
        py = [f for f in frames if f["filename"].endswith(".py")]
        if not py or frames[:len(py)] != py:
            fail("%s: alloc frames do not start with the Python frames: %s" % (label, frames))
        if len(frames) == len(py):
            fail("%s: alloc frames have no native frames after the Python ones: %s" % (label, frames))
        top = frames[0]
        if top["filename"] != PROG or (top["name"], top["line"]) not in want:
            fail("%s: innermost frame %s is none of the marked lines" % (label, top))
        seen.add((top["name"], top["line"]))
        caller = callers.get(top["name"])
        if caller and frames[1]["name"] != caller:
            fail("%s: %s's caller is %s, expected %s" % (label, top["name"], frames[1], caller))
    if seen != set(want):
        fail("%s: memviz allocs name %s, expected %s" % (label, sorted(seen), sorted(want)))


def check_unread_version(work, fake_dir, libluma, luma, python):
    for mode in ("pydll", "cdll"):
        label = "CPython 3.%d %s" % (UNREAD_MINOR, mode)
        trace, log = record(work, fake_dir, libluma, python, mode)
        lines = [l for l in log.splitlines() if "Python frames" in l]
        if len(lines) != 1 or "CPython 3.%d " % UNREAD_MINOR not in lines[0] \
                or "native frames only" not in lines[0]:
            fail("%s: expected one log line naming the version, got %s" % (label, lines))
        stats = json.loads(run([luma, "stats", "--json", trace]).stdout)["runs"][0]
        device = stats["devices"][0]
        if "top_python_lines" in stats or device["allocations"] != 7 \
                or not device["top_callsites_total"]:
            fail("%s: %d allocations, Python lines %s, call sites %s (expected 7 with native "
                 "call sites only)" % (label, device["allocations"], stats.get("top_python_lines"),
                                       device["top_callsites_total"]))
    print("%s: CPython 3.%d (no layout): one log line, native call sites only" % (TEST, UNREAD_MINOR))


def main():
    work, fake_dir, libluma, luma, check_memviz, sanitize = sys.argv[1:7]
    if sanitize not in ("", "none"):
        print(TEST + ": SKIP: sanitizer build (b_sanitize=%s): python is not instrumented" % sanitize)
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    pythons = python_versions.find(READ_MINORS + (UNREAD_MINOR,))
    ran = []
    for minor in READ_MINORS:
        python = pythons.get(minor)
        if python is None:
            continue
        for mode in ("pydll", "cdll"):
            label = "CPython 3.%d %s" % (minor, mode)
            trace, log = record(work, fake_dir, libluma, python, mode)
            if "Python frames" in log:
                fail("%s: luma logged about Python frames:\n%s" % (label, log))
            check_lines(luma, trace, label, minor, text_too=python == sys.executable)
            if python == sys.executable:
                check_memviz_frames(luma, check_memviz, trace, label, minor)
        ran.append("3.%d" % minor)
    if not ran:
        fail("no CPython 3.10-3.13 found (this test runs under %s)" % sys.version.split()[0])
    print("%s: Python lines with and without the GIL under CPython %s (not found here: %s)"
          % (TEST, ", ".join(ran),
             ", ".join("3.%d" % m for m in READ_MINORS if m not in pythons) or "none"))
    if UNREAD_MINOR in pythons:
        check_unread_version(work, fake_dir, libluma, luma, pythons[UNREAD_MINOR])
    else:
        print("%s: no CPython 3.%d here: the unknown-version path is not run" % (TEST, UNREAD_MINOR))
    print(TEST + ": ok")


if __name__ == "__main__":
    main()
