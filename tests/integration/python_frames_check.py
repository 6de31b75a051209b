#!/usr/bin/env python3
"""python_frames_check.py WORK_DIR FAKE_DIR LIBLUMA LUMA CHECK_MEMVIZ SANITIZE

Python call sites (docs/trace-format.md, python_stack_def): python_frames_prog.py runs in
this Python under libluma.so on the stand-in driver with LUMA_TRACE and LUMA_TRACE_STACKS.

  pydll  its allocations hold the GIL: `luma stats` lists each marked line
         (file:line function) with its allocations, bytes and peak live bytes, in text
         and JSON; the memviz export starts each alloc's frames with those Python frames
         (filename, line, name; the caller next) and ends them with native frames, and
         passes check_memviz's schema and replay checks;
  cdll   ctypes.CDLL releases the GIL: the run ends normally (no crash, no hang: a time
         limit), with native call sites and no Python frames anywhere.

A sanitizer build skips (python is not instrumented).
"""
import json
import os
import pickle
import re
import shutil
import subprocess
import sys

TEST = "python_frames"
RUN_LIMIT_S = 60
HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "python_frames_prog.py")
MIB = 1 << 20


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
    return p.stdout


def record(work, fake_dir, libluma, mode):
    trace = os.path.join(work, mode + ".trace")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMA_") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (fake_dir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    env.update(LD_PRELOAD=libluma, LUMA_TRACE=trace, LUMA_TRACE_STACKS="8", LUMA_STATS="off")
    out = run([sys.executable, PROG, mode], env)
    if "done" not in out:
        fail("%s: the program did not finish: %s" % (mode, out))
    return trace


def memviz(luma, check_memviz, trace):
    out = trace + ".pickle"
    run([luma, "export", trace, "--format", "memviz", "-o", out])
    sys.path.insert(0, os.path.dirname(check_memviz))
    import check_memviz as cm
    return cm.check(out)


def allocs(snap):
    return [e for t in snap["device_traces"] for e in t if e["action"] == "alloc"]


def check_pydll(work, fake_dir, libluma, luma, check_memviz):
    trace = record(work, fake_dir, libluma, "pydll")
    lines = marked_lines()
    want = {  # function, line -> allocations, bytes, peak live bytes
        ("allocate_small", lines["small"]): (4, 4 * MIB, 4 * MIB),
        ("allocate_large", lines["large"]): (1, 4 * MIB, 4 * MIB),
        ("Worker.allocate_in_thread", lines["thread"]): (2, 4 * MIB, 4 * MIB),
    }
    stats = json.loads(run([luma, "stats", "--json", trace]))["runs"][0]
    got = {}
    for l in stats.get("top_python_lines", []):
        if l["file"] == PROG:
            got[(l["function"], l["line"])] = (l["allocations"], l["bytes"], l["peak_live_bytes"])
    if got != want:
        fail("top_python_lines of %s: %s, expected %s" % (PROG, got, want))
    text = run([luma, "stats", trace])
    if "top allocating Python lines" not in text:
        fail("`luma stats` has no Python lines section:\n" + text)
    for (function, line) in want:
        if "%s:%d %s:" % (PROG, line, function) not in text:
            fail("`luma stats` does not list %s:%d %s:\n%s" % (PROG, line, function, text))

    snap = memviz(luma, check_memviz, trace)
    seen = set()
    for e in allocs(snap):
        frames = e["frames"]
        py = [f for f in frames if f["filename"].endswith(".py")]
        if not py or frames[:len(py)] != py:
            fail("alloc frames do not start with the Python frames: %s" % frames)
        if len(frames) == len(py):
            fail("alloc frames have no native frames after the Python ones: %s" % frames)
        top = frames[0]
        if top["filename"] != PROG or (top["name"], top["line"]) not in want:
            fail("innermost frame %s is none of the marked lines" % top)
        seen.add((top["name"], top["line"]))
        if top["name"] == "allocate_small" and frames[1]["name"] != "main":
            fail("allocate_small's caller is %s, expected main" % frames[1])
        if top["name"] == "Worker.allocate_in_thread" and frames[1]["name"] != "Worker.run":
            fail("allocate_in_thread's caller is %s, expected Worker.run" % frames[1])
    if seen != set(want):
        fail("memviz allocs name %s, expected %s" % (sorted(seen), sorted(want)))


def check_cdll(work, fake_dir, libluma, luma, check_memviz):
    trace = record(work, fake_dir, libluma, "cdll")
    stats = json.loads(run([luma, "stats", "--json", trace]))["runs"][0]
    if "top_python_lines" in stats:
        fail("CDLL (GIL released) recorded Python lines: %s" % stats["top_python_lines"])
    device = stats["devices"][0]
    if device["allocations"] != 7 or not device["top_callsites_total"]:
        fail("CDLL run: %d allocations, call sites %s (expected 7 with native call sites)" % (
            device["allocations"], device["top_callsites_total"]))
    for e in allocs(memviz(luma, check_memviz, trace)):
        if not e["frames"] or any(f["filename"].endswith(".py") for f in e["frames"]):
            fail("CDLL alloc frames: %s (expected native frames only)" % e["frames"])


def main():
    work, fake_dir, libluma, luma, check_memviz, sanitize = sys.argv[1:7]
    if sanitize not in ("", "none"):
        print(TEST + ": SKIP: sanitizer build (b_sanitize=%s): python is not instrumented" % sanitize)
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check_pydll(work, fake_dir, libluma, luma, check_memviz)
    check_cdll(work, fake_dir, libluma, luma, check_memviz)
    print(TEST + ": ok")


if __name__ == "__main__":
    main()
