#!/usr/bin/env python3
"""check_tools.py CASE LUMA MAKE_GOLDEN RECORD_ALLOCATOR DATA_DIR WORK_DIR [--update]

End-to-end checks of `luma stats` and `luma export` (one CASE per meson test):
  golden     make_golden reproduces tests/data/*.trace byte for byte
  stats      `luma stats --json` of the golden traces (one, and two side by side) and of
             an RMM log equal the committed expected outputs; the cache at the peak of
             reserved (fragmentation); what an RMM log lacks is null / "n/a"
  exports    every export format of the golden traces equals its committed output; the
             memviz pickle also passes check_memviz; the chrome JSON parses
  allocator  a trace recorded from the real CachingAllocator gives the allocator's own
             peaks and counts
  callsites  a program's own stacks, recorded with its mappings, are named by libdw
  progress   reading a large trace with stderr on a pseudo-terminal draws a progress bar
             that fits the terminal and is erased at the end; none with stderr in a file,
             none for a small trace
  errors     exit statuses and messages: usage 2, bad input 1 with the byte offset
  truncated  a trace cut after its header is read up to the cut, with one warning line
             saying how much was lost (and in `stats --json`); `luma plan` refuses it
  rmm_frees  the memviz snapshot of an RMM log (no completion events) frees its blocks the
             way PyTorch's viewer replays them: at free_completed; a trace's are its own
  no_overwrite  an export refuses an output that is its input (a link, a hard link, another
             spelling), before writing anything
  rmm_rows   an RMM log's free on its last row and its allocate failure rows survive
             `luma stats` and an export to RMM and back
  latin1     a trace whose program name and module paths are not UTF-8 (byte 0xE9) gives
             valid JSON from `stats --json` and `export -f chrome`, and a pickle that loads,
             with U+FFFD in place of the bad bytes
  fifo_module  a trace whose mappings name a FIFO (or a directory) is symbolized without
             opening it: luma stats does not hang
  memviz_viewer  the memviz exports of the golden traces, an RMM log and a recorded run
             load and replay in a JavaScript engine the way PyTorch's viewer page does
             (memviz_viewer.mjs under node; skipped, saying so, without node)
  memviz_fields  what PyTorch's snapshot has and luma's lacked: oom device_free, frees
             pending at the end completed there, time_us since 1970, requested sizes and
             frames on every entry, frame lists shared, typed allocator_settings
  memviz_window  --last N keeps each device's last N entries, --from/--to a time window
             with the segments as they were at its end; both still replay in the viewer;
             the chrome export's --last N keeps the run's last N events
  expandable a run with expandable segments (record_allocator --expandable): `luma stats`
             counts pages mapped, not segments, and its free blocks at the peak add up
             to reserved less allocated (a free block spans pages); in the memviz export
             each contiguous mapped range is one segment with is_expandable, holding the
             blocks that span its pages, whose entries are segment_map / segment_unmap;
             the viewer (memviz_viewer.mjs, when node is here) replays it
  chrome_story  the chrome JSON tells the memviz timeline's story: its active_requested
             counter is the timeline's total at every step (down at completion), its
             allocated `luma stats`' (down at the free request); thread names,
             categories and one allocation slice per alloc
  torch_stats  `luma stats` of PyTorch snapshots (tests/torch_snapshot/data/training_p4.pickle,
             and the recordings of ../shared/data/torch-snapshots when there): each site's
             first frame is the program's, not the recorder's or the allocator's; --frames N
             and native; the header names the file, the device and the window (no "pid
             n/a"); the peak's stage and the peaks per stage (text and JSON); --full adds
             the histogram, the largest allocations and every site; a bad --frames is one
             line and exit 2
  svg        `luma simulate --svg` and `luma stats --svg`: valid SVG, one line per series (live,
             PyTorch's recorded reserved, one per --conf), each series' peak marked at the
             peak the text and JSON report, a snapshot's stages shaded, at most 2000 points a
             line with the peak kept; a bad output path is one line and exit 1 with nothing
             written, one picture of several runs or copies is refused (exit 2)
  compare    `luma stats A B --compare`: the peaks' difference (B - A, bytes and %) equal to
             what `luma stats --json` gives each run; with --full --json the call-site rows
             and the stage rows each sum to the difference of the peaks of allocated (and
             A's and B's bytes to their peaks), largest difference first, 10 rows by default;
             on two RMM logs written here, two snapshots of tests/torch_snapshot/data, a run
             against itself, and gpt-medium_128_training against 256 (../shared, skipped
             with one line when absent); one file or three: one line and exit 2
  outputs    an export follows a link to its target, leaves a user's FILE.tmp alone, writes
             to standard output (-, /dev/stdout) and a FIFO, leaves nothing when it fails
--update rewrites the expected outputs (review the diff before committing it).
"""
import copy
import fcntl
import json
import os
import pickle
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios

import check_memviz

GOLDEN_START_US = 1700000000000000  # make_golden's and record_allocator's header start
# The memviz checks and the viewer stand-in live with the code that writes memviz (tests/io/).
VIEWER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "memviz_viewer.mjs")

CASE, LUMA, MAKE_GOLDEN, RECORD, DATA, WORK = sys.argv[1:7]
UPDATE = "--update" in sys.argv[7:]
os.makedirs(WORK, exist_ok=True)


def run(*args, expect=0, cwd=DATA):
    p = subprocess.run([LUMA, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if p.returncode != expect:
        sys.exit("luma %s: exit %d (expected %d)\nstdout: %s\nstderr: %s" % (
            " ".join(args), p.returncode, expect, p.stdout[-2000:], p.stderr[-2000:]))
    return p


def expect_file(name, produced_bytes):
    path = os.path.join(DATA, name)
    if UPDATE:
        open(path, "wb").write(produced_bytes)
        return
    want = open(path, "rb").read()
    if want != produced_bytes:
        bad = os.path.join(WORK, name)
        open(bad, "wb").write(produced_bytes)
        sys.exit("%s differs from the committed output; produced: %s" % (name, bad))


def case_golden():
    out = os.path.join(WORK, "golden")
    os.makedirs(out, exist_ok=True)
    subprocess.run([MAKE_GOLDEN, out], check=True)
    for name in ("golden_small.trace", "golden_stacks.trace"):
        expect_file(name, open(os.path.join(out, name), "rb").read())


def case_stats():
    expect_file("golden_small.stats.json", run("stats", "--json", "golden_small.trace").stdout.encode())
    expect_file("golden_two.stats.json",
                run("stats", "--json", "golden_small.trace", "golden_stacks.trace").stdout.encode())
    expect_file("golden_rmm.stats.json", run("stats", "--json", "golden_rmm.csv").stdout.encode())
    expect_file("golden_small.stats.txt", run("stats", "--full", "golden_small.trace").stdout.encode())
    # The default text leaves the histogram and the largest allocations to --full.
    short = run("stats", "golden_small.trace").stdout
    assert "size histogram" not in short and "largest allocations" not in short, short
    assert "peak reserved      22.00 MiB" in short and "fragmentation      0.200" in short, short
    s = json.loads(run("stats", "--json", "golden_small.trace").stdout)
    d0 = s["runs"][0]["devices"][0]
    # Facts of the golden trace (make_golden.cpp), independent of the committed file.
    assert d0["peak_reserved_bytes"] == (2 << 20) + (20 << 20), d0
    assert d0["peak_allocated_bytes"] == 512 + 2048 + (12 << 20), d0
    assert d0["ooms"] == 1 and d0["segment_reserves"] == 2 and d0["allocations"] == 5, d0
    assert d0["cache_absorbed"] == 3, d0
    # Requested bytes live at once: a free takes back what its alloc asked for.
    assert d0["peak_requested_bytes"] == 500 + 2000 + (12 << 20), d0
    # A trace of format version 1 (before forwarded-call records) still reads, to the same
    # statistics: golden_small.v1.trace is golden_small.trace as luma wrote it then.
    # Version 1 could not record forwarded calls (null: not recorded); version 2 records
    # them, and luma's allocator tests forward none.
    v1 = json.loads(run("stats", "--json", "golden_small.v1.trace").stdout)
    assert v1["runs"][0].pop("forwarded_calls") is None, v1
    assert s["runs"][0]["forwarded_calls"] == [], s
    v2 = json.loads(run("stats", "--json", "golden_small.trace").stdout)
    del v2["runs"][0]["forwarded_calls"]
    v1["runs"][0]["file"] = v2["runs"][0]["file"]
    assert v1 == v2, (v1, v2)
    rmm = json.loads(run("stats", "--json", "golden_rmm.csv").stdout)
    assert rmm["runs"][0]["forwarded_calls"] is None, rmm
    st = json.loads(run("stats", "--json", "--frames", "3", "golden_stacks.trace").stdout)["runs"][0]["devices"][0]
    sites = st["top_callsites_total"]
    assert len(sites) == 2 and sites[0]["bytes"] == 4 * (2 << 20), sites
    assert [f["address"] for f in sites[0]["frames"]] == [0x555555557010, 0x555555557120, 0x555555558000]
    # Two frames a site by default (--frames).
    st2 = json.loads(run("stats", "--json", "golden_stacks.trace").stdout)["runs"][0]["devices"][0]
    assert [f["address"] for f in st2["top_callsites_total"][0]["frames"]] == [0x555555557010, 0x555555557120], st2
    assert st["top_callsites_at_peak"][0]["count"] == 4, st["top_callsites_at_peak"]
    # The cache at the peak of reserved (docs/trace-format.md, "luma stats"): device 0 of
    # the small trace holds a 2 MiB segment with 2.5 KiB in use and a 20 MiB one with
    # 12 MiB in use, so two free blocks of 2 MiB - 2.5 KiB and 8 MiB.
    at = d0["at_peak_reserved"]
    assert at["event_index"] == 9 and at["reserved_bytes"] == 22 << 20, at
    assert at["allocated_bytes"] == (12 << 20) + 2560, at
    assert at["reserved_unallocated_bytes"] == (10 << 20) - 2560, at
    assert at["free_blocks"] == 2 and at["largest_free_block_bytes"] == 8 << 20, at
    assert abs(at["fragmentation"] - (1 - (8 << 20) / ((10 << 20) - 2560))) < 1e-12, at
    # The stacks trace: 12 MiB in 8 blocks of a 20 MiB segment, free 1+1+1+5 MiB.
    at = st["at_peak_reserved"]
    assert at["free_blocks"] == 4 and at["largest_free_block_bytes"] == 5 << 20, at
    assert at["reserved_unallocated_bytes"] == 8 << 20 and at["fragmentation"] == 0.375, at
    # Regression: one 4 KiB block in its 2 MiB segment was "fragmentation 512" (peak
    # reserved / peak allocated). Its free memory is one block: no fragmentation.
    one = os.path.join(WORK, "one_block.trace")
    subprocess.run([MAKE_GOLDEN, "--one-block", one], check=True)
    at = json.loads(run("stats", "--json", one).stdout)["runs"][0]["devices"][0]["at_peak_reserved"]
    assert at["reserved_unallocated_bytes"] == (2 << 20) - 4096 and at["free_blocks"] == 1, at
    assert at["largest_free_block_bytes"] == (2 << 20) - 4096 and at["fragmentation"] == 0.0, at
    line = [l for l in run("stats", one).stdout.splitlines() if "fragmentation" in l][0]
    assert line.split()[1].startswith("0.000"), line
    # Regression: what an RMM log does not record (pid, host, times, segments) is not
    # available (null, "n/a"), not "pid 0", "0.000 s", "peak reserved 0 B".
    r = json.loads(run("stats", "--json", "golden_rmm.csv").stdout)["runs"][0]
    assert r["pid"] is None and r["host"] is None and r["duration_ns"] is None, r
    rd = r["devices"][0]
    for k in ("peak_reserved_bytes", "at_peak_reserved", "segment_reserves", "cache_absorbed",
              "final_reserved_bytes"):
        assert rd[k] is None, (k, rd[k])
    assert rd["peak_allocated_bytes"] == 66048 and rd["allocations"] == 4, rd
    text = run("stats", "golden_rmm.csv").stdout
    assert "pid n/a" in text and "pid 0" not in text and " s\n" not in text, text
    assert "peak reserved      n/a" in text and "fragmentation      n/a" in text, text


# Frames that are never a site's first: the recorder's, the allocator's, the dispatcher's,
# CPython's, nn.Module's call wrappers (tools/report/call_sites.cpp has the whole table).
NOT_FIRST = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "CUDACachingAllocator",
             "at::detail::empty_", "empty_strided_cuda", "c10::impl::", "c10::Dispatcher", "at::_ops::",
             "_PyEval_", "PyObject_", "__libc_start_main")


def first_frames(devices):
    for d in devices:
        for key in ("top_callsites_at_peak", "top_callsites_total"):
            for site in d[key]:
                if site["frames"]:
                    yield site["frames"][0]


def check_first_frames(label, devices):
    n = 0
    for f in first_frames(devices):
        n += 1
        assert not any(x in f["function"] for x in NOT_FIRST), (label, f)
        assert not f["file"].endswith("torch/cuda/memory.py"), (label, f)
        assert not (f["file"].endswith("torch/nn/modules/module.py") and "_call_impl" in f["function"]), (label, f)
    return n


def case_torch_stats():
    snap = os.path.join(DATA, "..", "torch_snapshot", "data", "training_p4.pickle")
    j = json.loads(run("stats", "--json", snap).stdout)["runs"][0]
    d = j["devices"][0]
    assert check_first_frames("training_p4", j["devices"]) > 0
    by_first = {}
    for site in d["top_callsites_total"]:
        by_first.setdefault((site["frames"][0]["file"].split("/")[-1], site["frames"][0]["line"]), site)
    # The program's innermost frames, Python first, two by default: nn.Module's wrappers,
    # CPython's and the allocator's frames gone; torch/cuda/memory.py gone.
    fwd = by_first[("linear.py", 125)]
    assert [(f["file"], f["line"]) for f in fwd["frames"]] == [
        ("/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", 125), ("model.py", 30)], fwd
    assert [(f["file"], f["function"]) for f in by_first[("train.py", 20)]["frames"]] == [
        ("train.py", "setup"), ("train.py", "<module>")], by_first
    # The autograd thread's allocation has no Python frame: its C++ frames, past the allocator's.
    bwd = [s for s in d["top_callsites_total"] if s["frames"][0]["function"].startswith("torch::autograd::generated::")]
    assert len(bwd) == 1 and bwd[0]["bytes"] == 10 << 20, d["top_callsites_total"]
    # Sites are their frames: the two 10 MiB allocations of adamw.py:180 are one site.
    step = by_first[("adamw.py", 180)]
    assert step["bytes"] == 20 << 20 and step["count"] == 2, step
    # --frames N; --frames native keeps the C++ frames after the Python ones.
    j3 = json.loads(run("stats", "--json", "--frames", "3", snap).stdout)["runs"][0]["devices"][0]
    fwd3 = [s for s in j3["top_callsites_total"] if s["frames"][0]["line"] == 125 and s["frames"][1]["line"] == 30]
    assert [f["line"] for f in fwd3[0]["frames"]] == [125, 30, 50], fwd3
    j1 = json.loads(run("stats", "--frames", "1", snap, "--json").stdout)["runs"][0]["devices"][0]  # options on both sides
    assert all(len(s["frames"]) == 1 for s in j1["top_callsites_total"]), j1["top_callsites_total"]
    # One frame each: linear.py:125 from model.py:30 and :31 is one site of 40 MiB.
    assert any(s["bytes"] == 40 << 20 and s["count"] == 2 for s in j1["top_callsites_total"]), j1
    jn = json.loads(run("stats", "--json", "--frames", "native", snap).stdout)["runs"][0]["devices"][0]
    fwdn = [s for s in jn["top_callsites_total"] if s["frames"][0]["line"] == 125][0]
    assert [f["function"] for f in fwdn["frames"]][2:] == [
        "torch::autograd::THPVariable_mm(_object*, _object*, _object*)"], fwdn
    check_first_frames("training_p4 --frames native", [jn])
    text = run("stats", "--frames", "native", "--frames", "4", snap).stdout
    assert "      torch::autograd::THPVariable_mm(" in text and "      train.py:90 <module>" in text, text
    # The header: the file, its device, the window's time range; never "pid n/a".
    text = run("stats", snap).stdout
    lines = text.splitlines()
    assert lines[0] == snap + " (PyTorch memory snapshot): device 0", lines[0]
    assert lines[1] == "  window 0.051 s, 2023-11-14 22:13:20.001 to 22:13:20.052 UTC: 35 events", lines[1]
    assert "n/a" not in lines[0] and "pid" not in text, text
    assert j["window"] == {"first_time_us": 1700000000001000, "last_time_us": 1700000000052000}, j["window"]
    # A window shorter than 10 ms in microseconds.
    w = run("stats", os.path.join(os.path.dirname(snap), "window_p4.pickle")).stdout.splitlines()
    assert w[1].startswith("  window 7 us, 2023-11-14 22:13:20.000 to 22:13:20.000 UTC: "), w[:2]
    # Stages: the peak (70 MiB, the step's temporary) in Optimizer.step; the peaks per stage.
    assert "  peak in stage      Optimizer.step#AdamW.step\n" in text, text
    assert d["stages_at_peak"] == ["Optimizer.step#AdamW.step"], d["stages_at_peak"]
    stages = {st["name"]: st for st in d["stages"]}
    assert list(stages) == ["Optimizer.zero_grad#AdamW.zero_grad", "forward", "backward",
                            "Optimizer.step#AdamW.step"], list(stages)
    assert stages["Optimizer.zero_grad#AdamW.zero_grad"]["peak_allocated_bytes"] is None, stages
    assert [stages[n]["peak_allocated_bytes"] >> 20 for n in ("forward", "backward", "Optimizer.step#AdamW.step")] == \
        [50, 60, 70], stages
    assert all(stages[n]["peak_reserved_bytes"] == 100 << 20 for n in ("forward", "backward")), stages
    assert "    backward        " in text and "60.00 MiB      100.00 MiB" in text, text
    # --full: the histogram, the largest allocations and every site (13 over the run).
    assert "size histogram" not in text and "largest allocations" not in text, text
    assert text.count(" in 1 allocations\n") + text.count(" in 2 allocations\n") <= 20, text
    full = run("stats", "--full", snap).stdout
    assert "size histogram (requested):" in full and "largest allocations:" in full, full
    over = full.split("  call sites over the run:\n")[1].split("top allocating")[0]
    assert over.count(" allocations\n") == 18, over
    jf = json.loads(run("stats", "--json", "--full", snap).stdout)["runs"][0]["devices"][0]
    assert len(jf["top_callsites_total"]) == 18 and len(d["top_callsites_total"]) == 10, jf
    # A bad --frames: one line, exit 2.
    for bad in ("0", "x", "3x", "native2"):
        p = run("stats", "--frames", bad, snap, expect=2)
        assert p.stderr.count("\n") == 1 and "--frames " + bad + ":" in p.stderr, (bad, p.stderr)
    # luma's own traces: the same depth on their symbolized native stacks.
    trace = os.path.join(WORK, "stacks.trace")
    subprocess.run([os.path.join(os.path.dirname(RECORD), "record_stacks"), trace], check=True)
    site = json.loads(run("stats", "--json", "--frames", "1", trace).stdout)["runs"][0]["devices"][0]["top_callsites_total"][0]
    assert len(site["frames"]) == 1 and "luma_test_allocating_function" in site["frames"][0]["function"], site

    # The recordings of ../shared (skipped where absent): first frames, the training step's stage.
    shared = os.path.join(DATA, "..", "..", "..", "shared", "data", "torch-snapshots")
    if not os.path.isdir(shared):
        print("skipped the shared recordings: no " + os.path.normpath(shared))
        return
    import gzip
    for name in sorted(os.listdir(shared)):
        if not name.endswith(".pickle.gz"):
            continue
        path = os.path.join(WORK, name[:-3])
        with gzip.open(os.path.join(shared, name)) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        r = json.loads(run("stats", "--json", path).stdout)["runs"][0]
        n = check_first_frames(name, r["devices"])
        text = run("stats", path).stdout
        assert "pid" not in text.splitlines()[0] and "n/a on n/a" not in text, text[:400]
        assert text.splitlines()[0].endswith("(PyTorch memory snapshot): device 0" if name != "state-only.pickle.gz"
                                             else "(PyTorch memory snapshot): device 1"), text[:400]
        if "training" in name:
            # The optimizer's step is the one stage recorded; the peak falls in it at
            # context 128 (AdamW's state made on the first step), in the forward and
            # backward passes (outside every stage) at 256 to 1024.
            dev = r["devices"][0]
            at_peak = ["Optimizer.step#AdamW.step"] if name.startswith("gpt-medium_128_") else []
            assert dev["stages_at_peak"] == at_peak, (name, dev["stages_at_peak"])
            assert dev["stages"][0]["peak_allocated_bytes"] <= dev["peak_allocated_bytes"], dev["stages"]
            assert [s["name"] for s in dev["stages"]] == ["Optimizer.step#AdamW.step"], (name, dev["stages"])
            assert " window 0." in text.splitlines()[1] and " UTC: " in text.splitlines()[1], text[:400]
        print("%s: %d lines, %d first frames checked" % (name, len(text.splitlines()), n))
        os.unlink(path)


def case_exports():
    for fmt, name, extra in (("memviz", "golden_small.memviz.pickle", []),
                             ("memviz", "golden_stacks.memviz.pickle", []),
                             ("chrome", "golden_small.chrome.json", []),
                             ("rmm", "golden_small.rmm.csv", []),
                             ("csv", "golden_small.device0.csv", ["--device", "0"]),
                             ("csv", "golden_rmm.lifetimes.csv", [])):
        src = "golden_rmm.csv" if name.startswith("golden_rmm") else name.split(".")[0] + ".trace"
        out = os.path.join(WORK, name)
        run("export", src, "--format", fmt, "-o", out, *extra)
        produced = open(out, "rb").read()
        expect_file(name, produced)
        if fmt == "memviz":
            snap = check_memviz.check(out)
            assert len(snap["device_traces"]) == 2  # the header names devices 0 and 1
        if fmt == "chrome":
            doc = json.loads(produced)
            phases = {e["ph"] for e in doc["traceEvents"]}
            assert {"C", "i", "M"} <= phases, phases
    # The RMM export reads back as an RMM log, giving the same lifetimes.
    run("export", os.path.join(WORK, "golden_small.rmm.csv"), "--format", "csv", "-o",
        os.path.join(WORK, "roundtrip.csv"))


def case_allocator():
    trace = os.path.join(WORK, "allocator.trace")
    p = subprocess.run([RECORD, trace], capture_output=True, text=True, check=True)
    want = json.loads(p.stdout)
    got = json.loads(run("stats", "--json", trace).stdout)["runs"][0]["devices"][0]
    for k, v in want.items():
        assert got[k] == v, "%s: allocator says %d, luma stats says %d" % (k, v, got[k])
    for fmt in ("memviz", "chrome", "rmm", "csv"):
        run("export", trace, "--format", fmt, "-o", os.path.join(WORK, "allocator." + fmt))
    check_memviz.check(os.path.join(WORK, "allocator.memviz"))


def case_errors():
    run(expect=2)
    run("stats", expect=2)
    run("export", "golden_small.trace", "--format", "bogus", "-o", "/dev/null", expect=2)
    p = run("stats", "/nonexistent.trace", expect=1)
    assert "/nonexistent.trace" in p.stderr, p.stderr
    bad = os.path.join(WORK, "cut.trace")
    data = open(os.path.join(DATA, "golden_small.trace"), "rb").read()
    # A header cut short is an error naming the offset (a trace cut after it is read:
    # case truncated).
    open(bad, "wb").write(data[:4000])
    p = run("stats", bad, expect=1)
    assert "at byte 4000" in p.stderr and "header" in p.stderr, p.stderr
    flipped = bytearray(data)
    flipped[4096 + 24 * 3 + 2] ^= 0x40
    open(bad, "wb").write(bytes(flipped))
    p = run("export", bad, "--format", "chrome", "-o", os.path.join(WORK, "x.json"), expect=1)
    assert "at byte %d" % (4096 + 24 * 3) in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(WORK, "x.json")), "a failed export left its file"
    # A directory, a FIFO: said so, not "empty file" or "read error".
    p = run("stats", WORK, expect=1)
    assert WORK + ": is a directory" in p.stderr, p.stderr
    fifo = os.path.join(WORK, "in.fifo")
    if os.path.lexists(fifo):
        os.remove(fifo)
    os.mkfifo(fifo)
    p = run("export", fifo, "-f", "rmm", "-o", os.path.join(WORK, "z.csv"), expect=1)
    assert fifo + ": not a regular file" in p.stderr, p.stderr
    p = run("export", "golden_small.trace", "--format", "csv", "-o", os.path.join(WORK, "y.csv"),
            expect=1)
    assert "--device" in p.stderr, p.stderr
    for sub in ("stats", "export"):
        assert "Usage" in run(sub, "--help").stdout


def case_truncated():
    """Regression: a trace cut short after its header (a copy that stopped, a disk that
    filled) was refused outright; it is read up to the cut, saying how much was lost."""
    data = open(os.path.join(DATA, "golden_small.trace"), "rb").read()
    whole = json.loads(run("stats", "--json", "golden_small.trace").stdout)["runs"][0]
    assert whole["truncated"] is None and whole["events"] == 20, whole
    cut = os.path.join(WORK, "cut5.trace")
    open(cut, "wb").write(data[:len(data) - 5])  # the last slot (an event) loses 5 bytes
    p = run("stats", cut)
    warn = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(warn) == 1 and "truncated" in warn[0] and "5 bytes (1 slots" in warn[0], p.stderr
    assert "warning: truncated" in p.stdout, p.stdout
    r = json.loads(run("stats", "--json", cut).stdout)["runs"][0]
    t = r["truncated"]
    assert t["missing_bytes"] == 5 and t["lost_slots"] == 1 and t["exact"] is True, t
    assert t["file_bytes"] == len(data) - 5 and t["expected_bytes"] == len(data), t
    assert r["events"] == 19, r["events"]
    # Every command that reads it says so once; an export holds what was read.
    out = os.path.join(WORK, "cut5.csv")
    p = run("export", cut, "-f", "rmm", "-o", out)
    assert sum("truncated" in l for l in p.stderr.splitlines()) == 1, p.stderr
    assert len(open(out).read().splitlines()) > 1
    # A plan needs the whole run: luma plan refuses it, saying why.
    p = run("plan", cut, expect=1)
    assert "truncated" in p.stderr and "whole run" in p.stderr, p.stderr
    # Cut right after the header: no events, everything lost.
    open(cut, "wb").write(data[:4096])
    r = json.loads(run("stats", "--json", cut).stdout)["runs"][0]
    assert r["events"] == 0 and r["truncated"]["missing_bytes"] == len(data) - 4096, r


def case_callsites():
    trace = os.path.join(WORK, "stacks.trace")
    subprocess.run([os.path.join(os.path.dirname(RECORD), "record_stacks"), trace], check=True)
    dev = json.loads(run("stats", "--json", trace).stdout)["runs"][0]["devices"][0]
    names = [f["function"] for f in dev["top_callsites_total"][0]["frames"]]
    assert any("luma_test_allocating_function" in n for n in names), names
    assert any(n == "main" for n in names), names
    files = [f["file"] for f in dev["top_callsites_total"][0]["frames"]]
    assert any(f.endswith("record_stacks.cpp") for f in files), files
    run("export", trace, "--format", "memviz", "-o", os.path.join(WORK, "stacks.pickle"))
    snap = check_memviz.check(os.path.join(WORK, "stacks.pickle"))
    frames = snap["device_traces"][0][0]["frames"]
    assert any("luma_test_allocating_function" in f["name"] for f in frames), frames


def run_on_pty(args, columns):
    """Runs luma with stdin and stderr on a pseudo-terminal `columns` wide and stdout in a
    file. Returns (exit status, the bytes the terminal received, stdout)."""
    out_path = os.path.join(WORK, "pty.stdout")
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdin/stdout/stderr are the terminal
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
            out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.chdir(DATA)
            os.execv(LUMA, [LUMA, *args])
        finally:
            os._exit(127)
    signal.alarm(110)  # never hang the suite
    got = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child's side of the terminal is closed
            break
        if not data:
            break
        got.append(data)
    _, status = os.waitpid(pid, 0)
    signal.alarm(0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), b"".join(got), open(out_path, "rb").read()


def case_progress():
    big = os.path.join(WORK, "big.trace")
    subprocess.run([MAKE_GOLDEN, "--events", "1000000", big], check=True)
    assert os.path.getsize(big) >= 16 << 20, "the large trace is smaller than the bar's threshold"
    plain = run("stats", big).stdout.encode()

    columns = 60
    status, tty, out = run_on_pty(["stats", big], columns)
    assert status == 0, (status, tty[-500:])
    assert out == plain, "stdout differs when stderr is a terminal"
    draws = [d for d in tty.split(b"\r") if d.strip()]
    assert draws, "no progress bar on a terminal: %r" % tty[-500:]
    assert all(b"big.trace [" in d and d.rstrip().endswith(b"%") for d in draws), draws[:3]
    assert draws[0].rstrip().endswith(b" 0%") and draws[-1].rstrip().endswith(b" 100%"), draws
    assert all(len(d) <= columns - 1 for d in draws), [len(d) for d in draws]
    # Erased at the end: the last thing written is a line of spaces between two returns.
    assert tty.endswith(b"\r") and tty.rstrip(b"\r").split(b"\r")[-1].strip() == b"", tty[-200:]

    # A long path on a narrow terminal: shortened from the left, never wrapped.
    status, tty, _ = run_on_pty(["export", big, "--format", "csv", "-o",
                                 os.path.join(WORK, "big.csv"), "--device", "0"], 40)
    draws = [d for d in tty.split(b"\r") if d.strip()]
    assert status == 0 and draws and all(len(d) <= 39 for d in draws), draws[:3]
    assert all(d.startswith(b"...") for d in draws), draws[:3]

    # stderr in a file: no bar (and nothing else) there.
    with open(os.path.join(WORK, "stderr.txt"), "wb") as err:
        p = subprocess.run([LUMA, "stats", big], stdout=subprocess.PIPE, stderr=err, timeout=120)
    assert p.returncode == 0 and p.stdout == plain
    assert open(os.path.join(WORK, "stderr.txt"), "rb").read() == b"", "stderr is not empty"

    # A small trace reads in a blink: no bar even on a terminal.
    status, tty, _ = run_on_pty(["stats", "golden_small.trace"], columns)
    assert status == 0 and b"[" not in tty and b"%" not in tty, tty


def case_no_overwrite():
    golden = open(os.path.join(DATA, "golden_small.trace"), "rb").read()
    same = os.path.join(WORK, "same.trace")
    open(same, "wb").write(golden)
    link = os.path.join(WORK, "same-link.trace")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(same, link)
    hard = os.path.join(WORK, "same-hard.trace")
    if os.path.lexists(hard):
        os.remove(hard)
    os.link(same, hard)
    spelt = os.path.join(WORK, ".", "..", os.path.basename(WORK), "same.trace")
    for out in (same, link, hard, spelt):
        p = run("export", same, "-f", "csv", "--device", "0", "-o", out, expect=1)
        assert "the output %s is the input %s" % (out, same) in p.stderr, p.stderr
        assert open(same, "rb").read() == golden, "the input was written over through " + out
    assert os.path.islink(link)


def case_outputs():
    want = run("export", "golden_small.trace", "-f", "csv", "--device", "0", "-o", "-").stdout
    assert want.startswith("id,lower,upper,size"), want
    assert run("export", "golden_small.trace", "-f", "csv", "--device", "0",
               "-o", "/dev/stdout").stdout == want

    # A link as the output: its target gets the export, the link stays a link.
    target = os.path.join(WORK, "target.csv")
    open(target, "w").write("old")
    out_link = os.path.join(WORK, "out-link.csv")
    if os.path.lexists(out_link):
        os.remove(out_link)
    os.symlink(target, out_link)
    # The user's own OUTPUT.tmp is not the exporter's scratch space.
    mine = out_link + ".tmp"
    open(mine, "w").write("mine")
    run("export", "golden_small.trace", "-f", "csv", "--device", "0", "-o", out_link)
    assert os.path.islink(out_link), "the link was replaced by a file"
    assert open(target).read() == want
    assert open(mine).read() == "mine", "the user's .tmp file was overwritten"

    # A FIFO is written, not replaced.
    fifo = os.path.join(WORK, "out.fifo")
    if os.path.lexists(fifo):
        os.remove(fifo)
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", fifo], stdout=subprocess.PIPE, text=True)
    run("export", "golden_small.trace", "-f", "csv", "--device", "0", "-o", fifo)
    assert reader.communicate(timeout=60)[0] == want
    assert os.path.exists(fifo) and not os.path.isfile(fifo)

    # A failed export leaves no temporary behind, and the old output as it was.
    old = os.path.join(WORK, "kept.csv")
    open(old, "w").write("kept")
    run("export", "golden_small.trace", "-f", "csv", "-o", old, expect=1)  # two devices
    assert open(old).read() == "kept"
    # (Only this export's: other cases run at the same time in the same directory.)
    left = [n for n in os.listdir(WORK) if n.startswith(".kept.csv.tmp-")]
    assert not left, left
    p = run("export", "golden_small.trace", "-f", "csv", "--device", "0", "-o", WORK, expect=1)
    assert "is a directory" in p.stderr, p.stderr


def viewer_live_bytes(snapshot_path, device=0, wall_clock=True):
    """Bytes live at the end of the device's trace as PyTorch's memory viewer replays it
    (process_alloc_data: a block is allocated at alloc and freed only at free or
    free_completed)."""
    snap = check_memviz.check(snapshot_path, wall_clock=wall_clock)
    live = {}
    for e in snap["device_traces"][device]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] in ("free", "free_completed"):
            live.pop(e["addr"], None)
    return sum(live.values())


def case_rmm_frees():
    out = os.path.join(WORK, "rmm.pickle")
    run("export", "golden_rmm.csv", "-f", "memviz", "-o", out)
    trace = check_memviz.check(out, wall_clock=False)["device_traces"][0]
    actions = [e["action"] for e in trace]
    for i, a in enumerate(actions):
        if a == "free_requested":
            assert actions[i + 1] == "free_completed" and trace[i + 1]["addr"] == trace[i]["addr"], trace
    # golden_rmm.csv frees its 1024 and 4096 bytes; 512 + 65536 stay allocated.
    assert viewer_live_bytes(out, wall_clock=False) == 512 + 65536
    final = json.loads(run("stats", "--json", "golden_rmm.csv").stdout)["runs"][0]["devices"][0]
    assert viewer_live_bytes(out, wall_clock=False) == final["final_allocated_bytes"], final
    # No block of the final state is still waiting for a completion that never comes, and
    # each buffer has a segment to be drawn in.
    snap = check_memviz.check(out, wall_clock=False)
    states = [b["state"] for s in snap["segments"] for b in s["blocks"]]
    assert states.count("active_allocated") == 2 and "active_pending_free" not in states, states
    # A luma trace records its own completions; the one free still pending when
    # golden_small ends completes at its last event (the process exited), no other is added.
    run("export", "golden_small.trace", "-f", "memviz", "-o", os.path.join(WORK, "small.pickle"))
    small = check_memviz.check(os.path.join(WORK, "small.pickle"))["device_traces"][0]
    actions = [e["action"] for e in small]
    assert actions.count("free_requested") == 3 and actions.count("free_completed") == 3, actions
    assert actions[-1] == "free_completed" and small[-1]["time_us"] == max(
        e["time_us"] for t in check_memviz.check(os.path.join(WORK, "small.pickle"))["device_traces"]
        for e in t), small[-1]


def timeline(trace):
    """The viewer's Active Memory Timeline total after each entry (alloc adds its size,
    free_completed takes it away), as a list."""
    live, total, out = {}, 0, []
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            total += e["size"]
        elif e["action"] == "free_completed" and e["addr"] in live:
            total -= live.pop(e["addr"])
        out.append(total)
    return out


def viewer(path, *flags):
    """Runs memviz_viewer.mjs on the snapshot; returns False when there is no node."""
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        return False
    p = subprocess.run([node, VIEWER, path, *flags], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return True


def case_memviz_viewer():
    exports = [("golden_small.trace", []), ("golden_stacks.trace", []),
               ("golden_rmm.csv", ["--no-wall-clock"])]
    trace = os.path.join(WORK, "viewer-allocator.trace")
    subprocess.run([RECORD, trace], capture_output=True, check=True)
    exports.append((trace, []))
    have_node = True
    for src, flags in exports:
        out = os.path.join(WORK, "viewer-" + os.path.basename(src) + ".pickle")
        run("export", src, "-f", "memviz", "-o", out)
        check_memviz.check(out, wall_clock=not flags)
        have_node = viewer(out, *flags)
    # Both checkers fail where the page would: an oom without device_free (the earlier
    # export), times from the process's start (January 1970), a free_requested whose
    # block the page cannot find walking back (its completion dropped, the final state
    # saying the block is free).
    good = pickle.load(open(os.path.join(WORK, "viewer-golden_small.trace.pickle"), "rb"))
    for name, spoil, needle in (
            ("no-device-free", lambda s: [e.pop("device_free") for t in s["device_traces"] for e in t
                                          if e["action"] == "oom"], "device_free"),
            ("1970", lambda s: [e.update(time_us=e["time_us"] - 1700000000000000)
                                for t in s["device_traces"] for e in t], "time_us"),
            ("lost-completion", lambda s: [t.remove(e) for t in s["device_traces"] for e in list(t)
                                           if e["action"] == "free_completed" and e is t[-1]],
             "no block")):
        bad = copy.deepcopy(good)
        spoil(bad)
        path = os.path.join(WORK, "viewer-%s.pickle" % name)
        pickle.dump(bad, open(path, "wb"), protocol=2)
        try:
            check_memviz.check(path)
            sys.exit("check_memviz accepted the snapshot with " + name)
        except SystemExit as e:
            assert needle in str(e.code), e.code
        if have_node:
            p = subprocess.run([shutil.which("node") or shutil.which("nodejs"), VIEWER, path],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 1 and needle in p.stdout, (name, p.stdout)
    if not have_node:
        print("skipped: no node (JavaScript engine) to load the snapshots as the viewer does")
        sys.exit(77)


def case_memviz_fields():
    out = os.path.join(WORK, "fields.pickle")
    run("export", "golden_small.trace", "-f", "memviz", "-o", out)
    snap = check_memviz.check(out)
    t0 = snap["device_traces"][0]
    oom = [e for e in t0 if e["action"] == "oom"][0]
    # 80 GiB device (the header), 2 MiB reserved at the time: the rest was free.
    assert oom["device_free"] == (80 << 30) - (2 << 20) and "addr" not in oom, oom
    assert oom["size"] == 100 << 30, oom
    # time_us: the header's start (1.7e9 s since 1970) plus the event's time.
    assert all(1700000000000000 <= e["time_us"] < 1700000001000000 for e in t0), t0
    # Requested sizes: the 1048476-byte request sits in a 1 MiB block.
    sizes = [e["size"] for e in t0 if e["action"] in ("alloc", "free_requested", "free_completed")]
    assert 1048476 in sizes and 1048576 not in sizes, sizes
    # The block that was still waiting at the end completes there: none is left waiting.
    assert all(b["state"] != "active_pending_free" for s in snap["segments"] for b in s["blocks"])
    assert snap["segments"][0]["requested_size"] == 500 + 2000, snap["segments"][0]
    assert snap["segments"][0]["is_expandable"] is False
    st = snap["allocator_settings"]
    assert st["luma"]["alignment"] == 256 and st["luma"]["release_on_oom"] is True, st
    assert st["expandable_segments"] is False and st["max_split_size"] == -1, st
    # Frames on every entry; a free's are its alloc's; one list per stack, shared.
    path = os.path.join(WORK, "fields-stacks.pickle")
    run("export", "golden_stacks.trace", "-f", "memviz", "-o", path)
    snap = check_memviz.check(path)
    t0 = snap["device_traces"][0]
    by_addr = {}
    for e in t0:
        if e["action"] == "alloc":
            assert e["frames"], e
            by_addr[e["addr"]] = e["frames"]
        elif e["action"].startswith("free"):
            assert e["frames"] is by_addr[e["addr"]], e
    segs = [e for e in t0 if e["action"] == "segment_alloc"]
    assert segs and all(e["frames"] for e in segs), segs
    lists = {id(e["frames"]) for e in t0 if e["frames"]}
    stacks = {tuple((f["filename"], f["line"], f["name"]) for f in e["frames"]) for e in t0 if e["frames"]}
    assert len(lists) == len(stacks), (len(lists), len(stacks))


def case_memviz_window():
    big = os.path.join(WORK, "window.trace")  # the real allocator: 4,553 events
    subprocess.run([RECORD, big], capture_output=True, check=True)
    full = os.path.join(WORK, "window-full.pickle")
    run("export", big, "-f", "memviz", "-o", full)
    whole = check_memviz.check(full)
    n = sum(len(t) for t in whole["device_traces"])
    last = os.path.join(WORK, "window-last.pickle")
    run("export", big, "-f", "memviz", "--last", "100", "-o", last)
    part = check_memviz.check(last, partial=True)
    for d, t in enumerate(part["device_traces"]):
        assert t == whole["device_traces"][d][-100:], "device %d: not the last 100 entries" % d
    assert part["segments"] == whole["segments"]
    assert os.path.getsize(last) < os.path.getsize(full) / 5, (os.path.getsize(last), os.path.getsize(full))
    viewer(last)
    # A time window: the entries inside it, the segments as they were at its end.
    # (--from/--to are seconds after the trace started: record_allocator's header start.)
    times = sorted(e["time_us"] for t in whole["device_traces"] for e in t)
    lo, hi = times[len(times) // 4], times[len(times) // 2]
    win = os.path.join(WORK, "window-time.pickle")
    run("export", big, "-f", "memviz", "--from", "%.6f" % ((lo - GOLDEN_START_US) / 1e6),
        "--to", "%.6f" % ((hi - GOLDEN_START_US) / 1e6), "-o", win)
    part = check_memviz.check(win, partial=True)
    kept = [e for t in part["device_traces"] for e in t]
    assert kept and all(lo <= e["time_us"] <= hi for e in kept), (lo, hi)
    want = [e for t in whole["device_traces"] for e in t if lo <= e["time_us"] <= hi]
    assert len(kept) == len(want), (len(kept), len(want))
    viewer(win)
    p = run("export", big, "-f", "rmm", "--last", "5", "-o", os.path.join(WORK, "x.csv"), expect=1)
    assert "memviz and chrome only" in p.stderr, p.stderr
    # The chrome export keeps the run's last N events: its counters end where the whole
    # export's end, its slices are those of the allocations in the window.
    whole_json = os.path.join(WORK, "window-full.json")
    last_json = os.path.join(WORK, "window-last.json")
    run("export", big, "-f", "chrome", "-o", whole_json)
    run("export", big, "-f", "chrome", "--last", "100", "-o", last_json)
    w = json.loads(open(whole_json, "rb").read())["traceEvents"]
    l = json.loads(open(last_json, "rb").read())["traceEvents"]
    wc = [e for e in w if e["ph"] == "C"]
    lc = [e for e in l if e["ph"] == "C"]
    assert 0 < len(lc) <= 100 and lc == wc[-len(lc):], (len(lc), len(wc))
    begins = {e["id"] for e in l if e["ph"] == "b"}
    assert {e["id"] for e in l if e["ph"] == "e"} <= begins
    assert os.path.getsize(last_json) < os.path.getsize(whole_json) / 5


def case_chrome_story():
    for src, flags in (("golden_small.trace", True), ("golden_rmm.csv", False)):
        mv = os.path.join(WORK, "story.pickle")
        cj = os.path.join(WORK, "story.json")
        run("export", src, "-f", "memviz", "-o", mv)
        run("export", src, "-f", "chrome", "-o", cj)
        snap = check_memviz.check(mv, wall_clock=flags)
        doc = json.loads(open(cj, "rb").read())
        ev = doc["traceEvents"]
        for d, trace in enumerate(snap["device_traces"]):
            counters = [e["args"] for e in ev if e["ph"] == "C" and e["name"] == "device %d memory" % d]
            # The viewer's timeline and the counter reach the same totals, step for step
            # (the counter is written where the total or the reservation changes).
            steps = [x for i, x in enumerate(timeline(trace)) if i == 0 or x != timeline(trace)[i - 1]]
            got = [c["active_requested"] for i, c in enumerate(counters)
                   if i == 0 or c["active_requested"] != counters[i - 1]["active_requested"]]
            assert [x for x in steps if x] == [x for x in got if x], (d, steps, got)
            if counters:
                assert counters[-1]["active_requested"] == timeline(trace)[-1], (counters[-1], timeline(trace)[-1])
            # allocated is luma stats' (down at the free request), never above active.
            assert all(c["allocated"] <= c["active"] for c in counters), counters
        assert all("cat" in e for e in ev if e["ph"] != "M"), "an event without a category"
        begins = [e for e in ev if e["ph"] == "b"]
        ends = [e for e in ev if e["ph"] == "e"]
        allocs = sum(1 for t in snap["device_traces"] for e in t if e["action"] == "alloc")
        assert len(begins) == allocs and {e["id"] for e in ends} <= {e["id"] for e in begins}
        tids = {e["tid"] for e in ev if "tid" in e and e["ph"] != "M"}
        named = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
        assert tids <= named, (tids, named)


def case_rmm_rows():
    log = os.path.join(WORK, "last_free.csv")
    open(log, "w").write("Thread,Time,Action,Pointer,Size,Stream\n"
                         "1,00:00:00.000001,allocate,0x1000,4096,0x0\n"
                         "1,00:00:00.000002,free,0x1000,4096,0x0\n")
    d = json.loads(run("stats", "--json", log).stdout)["runs"][0]["devices"][0]
    assert d["frees"] == 1 and d["final_allocated_bytes"] == 0, d
    # A trace with an out-of-memory event and frees, through an RMM log and back.
    want = json.loads(run("stats", "--json", "golden_small.trace").stdout)["runs"][0]["devices"]
    rmm = os.path.join(WORK, "small.rmm.csv")
    run("export", "golden_small.trace", "-f", "rmm", "-o", rmm)
    got = json.loads(run("stats", "--json", rmm).stdout)["runs"][0]["devices"][0]
    for key in ("ooms", "allocations", "frees", "allocated_bytes_total", "final_allocated_bytes"):
        assert got[key] == sum(w[key] for w in want), (key, got[key], want)
    assert got["ooms"] == 1, got
    again = os.path.join(WORK, "small.rmm2.csv")
    run("export", rmm, "-f", "rmm", "-o", again)
    rows = lambda p: [line.split(",")[2] for line in open(p).read().splitlines()[1:]]
    assert rows(again) == rows(rmm), (rows(rmm), rows(again))


def case_latin1():
    trace = os.path.join(WORK, "latin1.trace")
    subprocess.run([MAKE_GOLDEN, "--latin1", trace], check=True)
    p = subprocess.run([LUMA, "stats", "--json", trace], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout.decode("utf-8"))  # strict: raises on invalid UTF-8
    run0 = doc["runs"][0]
    assert run0["command_line"] == ["./prog_\ufffd", "caf\ufffd", "\ufffd\ufffd\ufffd"], run0["command_line"]
    files = [f["file"] for s in run0["devices"][0]["top_callsites_total"] for f in s["frames"]]
    assert "/nonexistent/r\ufffdpertoire/app" in files, files
    chrome = os.path.join(WORK, "latin1.json")
    run("export", trace, "-f", "chrome", "-o", chrome)
    names = [e["args"]["name"] for e in json.loads(open(chrome, "rb").read().decode("utf-8"))["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"]
    assert names == ["./prog_\ufffd (luma)"], names
    pickle_path = os.path.join(WORK, "latin1.pickle")
    run("export", trace, "-f", "memviz", "-o", pickle_path)
    snap = check_memviz.check(pickle_path)  # pickle.loads: raises on invalid UTF-8
    frames = [f["filename"] for e in snap["device_traces"][0] for f in e["frames"]]
    assert "/nonexistent/r\ufffdpertoire/app" in frames, frames[:4]


def case_fifo_module():
    for kind in ("fifo", "dir"):
        module = os.path.join(WORK, "module." + kind)
        if os.path.isdir(module):
            os.rmdir(module)
        elif os.path.lexists(module):
            os.remove(module)
        if kind == "fifo":
            os.mkfifo(module)  # nobody writes it: opening it for reading would block
        else:
            os.mkdir(module)
        trace = os.path.join(WORK, "module-%s.trace" % kind)
        subprocess.run([MAKE_GOLDEN, "--module", module, trace], check=True)
        try:
            p = subprocess.run([LUMA, "stats", "--json", trace], capture_output=True, text=True,
                               timeout=30)
        except subprocess.TimeoutExpired:
            sys.exit("luma stats hung on a trace whose mappings name a " + kind)
        assert p.returncode == 0, p.stderr
        frames = json.loads(p.stdout)["runs"][0]["devices"][0]["top_callsites_total"][0]["frames"]
        assert frames[0]["file"] == module, frames


def case_expandable():
    trace = os.path.join(WORK, "expandable.trace")
    subprocess.run([RECORD, trace, "--expandable"], capture_output=True, check=True)
    d = json.loads(run("stats", "--json", trace).stdout)["runs"][0]["devices"][0]
    assert d["segment_reserves"] == 0 and d["pages_mapped"] > 0 and d["pages_unmapped"] > 0, d
    assert 0 < d["page_growths"] <= d["pages_mapped"], d
    assert d["cache_absorbed"] == d["allocations"] - d["page_growths"], d
    text = run("stats", trace).stdout
    line = [l for l in text.splitlines() if "largest free block" in l][0]
    unallocated = [l for l in text.splitlines() if "unallocated" in l][0]
    # "... of X MiB free in N blocks" is the "unallocated X MiB of it" figure: nothing more.
    assert line.split(" of ")[1].split(" free")[0] == unallocated.split()[1] + " " + unallocated.split()[2], \
        (line, unallocated)
    out = os.path.join(WORK, "expandable.pickle")
    run("export", trace, "-f", "memviz", "-o", out)
    snap = check_memviz.check(out)  # every block inside one segment, at every step
    page = 2 << 20
    segs = snap["segments"]
    assert segs and all(s["is_expandable"] for s in segs), segs
    # The ranges are merged: no two segments touch (the pages of one range are one).
    ends = {s["address"] + s["total_size"] for s in segs}
    assert not any(s["address"] in ends for s in segs), [(hex(s["address"]), s["total_size"]) for s in segs]
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert "segment_alloc" not in actions and "segment_free" not in actions, set(actions)
    maps, unmaps = actions.count("segment_map"), actions.count("segment_unmap")
    assert maps > 0 and unmaps > 0, (maps, unmaps)  # empty_cache at the end unmaps
    assert all(e["size"] == page for e in snap["device_traces"][0] if e["action"].startswith("segment")), \
        "a page per entry"
    # Blocks larger than a page were allocated (they span pages: one segment holds each).
    assert any(e["action"] == "alloc" and e["size"] > page for e in snap["device_traces"][0])
    assert snap["allocator_settings"]["expandable_segments"] is True, snap["allocator_settings"]
    if not viewer(out):
        print("skipped: no node (JavaScript engine) to replay the snapshot as the viewer does")
        sys.exit(77)


SVG = "{http://www.w3.org/2000/svg}"


def svg_of(path):
    """The picture's series, peaks and stage bands (xml.etree: the file must be valid XML)."""
    import xml.etree.ElementTree as ET
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg", root.tag
    lines = [(p.get("data-series"), [tuple(map(float, xy.split(","))) for xy in p.get("points").split()])
             for p in root.iter(SVG + "polyline") if p.get("class") == "series"]
    peaks = {c.get("data-series"): int(c.get("data-bytes")) for c in root.iter(SVG + "circle")
             if c.get("class") == "peak"}
    stages = [r.get("data-stage") for r in root.iter(SVG + "rect") if r.get("class") == "stage"]
    texts = "".join("".join(t.itertext()) + "\n" for t in root.iter(SVG + "text"))
    return lines, peaks, stages, texts


def case_svg():
    snap = os.path.join(DATA, "..", "torch_snapshot", "data", "training_p4.pickle")
    out = os.path.join(WORK, "svg")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    # simulate: live, PyTorch's recorded reserved, one line per --conf.
    pic = os.path.join(out, "sim.svg")
    confs = ["", "expandable_segments:true", "max_split_size:64M"]
    args = [a for c in confs for a in ("--conf", c)]
    j = json.loads(run("simulate", snap, "--json", "--svg", pic, *args).stdout)["devices"][0]
    lines, peaks, stages, texts = svg_of(pic)
    names = [n for n, _ in lines]
    assert names == ["live (requested bytes)", "PyTorch's reserved (recorded)"] + \
        ["luma's reserved (%s)" % (c or "default") for c in confs], names
    assert set(peaks) == set(names), (peaks, names)
    assert peaks["live (requested bytes)"] == j["peak_live_bytes"], (peaks, j["peak_live_bytes"])
    assert peaks["PyTorch's reserved (recorded)"] == j["recorded_peak_reserved_bytes"], peaks
    for c, r in zip(confs, j["runs"]):
        assert peaks["luma's reserved (%s)" % (c or "default")] == r["peak_reserved_bytes"], (c, peaks, r)
    assert stages and {"Optimizer.zero_grad#AdamW.zero_grad", "Optimizer.step#AdamW.step"} & set(stages), stages
    assert "time (s, recorded clock)" in texts and "MiB" in texts, texts
    # The same picture with and without --svg: the replay is not changed by drawing it.
    plain = json.loads(run("simulate", snap, "--json", *args).stdout)["devices"][0]
    assert plain == j, "simulate --svg changed the replay"
    # stats: allocated and PyTorch's reserved, at the peaks stats reports; the stages shaded.
    pic = os.path.join(out, "stats.svg")
    d = json.loads(run("stats", snap, "--json", "--svg", pic).stdout)["runs"][0]["devices"][0]
    lines, peaks, stages, texts = svg_of(pic)
    assert [n for n, _ in lines] == ["allocated (live bytes)", "PyTorch's reserved (recorded)"], lines
    assert peaks == {"allocated (live bytes)": d["peak_allocated_bytes"],
                     "PyTorch's reserved (recorded)": d["peak_reserved_bytes"]}, (peaks, d)
    assert len(stages) >= len(d["stages"]), (stages, d["stages"])
    # An RMM log: no segments, no clock: the allocated line only, over the allocation number.
    pic = os.path.join(out, "rmm.svg")
    d = json.loads(run("stats", "golden_rmm.csv", "--json", "--svg", pic).stdout)["runs"][0]["devices"][0]
    lines, peaks, stages, texts = svg_of(pic)
    assert [n for n, _ in lines] == ["allocated (live bytes)"] and not stages, lines
    assert peaks["allocated (live bytes)"] == d["peak_allocated_bytes"], (peaks, d)
    assert "allocation number" in texts, texts
    # Many events: at most 2000 points a line, the peak still drawn at its height. A planner
    # CSV of 30,000 lifetimes, a sawtooth whose one tallest tooth is in the middle.
    csv = os.path.join(out, "many.csv")
    with open(csv, "w") as f:
        f.write("id,lower,upper,size\n")
        for i in range(30000):
            f.write("%d,%d,%d,%d\n" % (i, 2 * i, 2 * i + 3, (5 << 20) if i == 15001 else (1 << 20) + (i % 7) * 4096))
    pic = os.path.join(out, "many.svg")
    j = json.loads(run("simulate", csv, "--json", "--svg", pic).stdout)["devices"][0]
    lines, peaks, stages, texts = svg_of(pic)
    assert [n for n, _ in lines] == ["live (requested bytes)", "luma's reserved (default)"], lines
    assert all(len(pts) <= 2000 for _, pts in lines), [len(p) for _, p in lines]
    assert peaks["live (requested bytes)"] == j["peak_live_bytes"], (peaks, j["peak_live_bytes"])
    live_pts = lines[0][1]
    top = min(y for _, y in live_pts)  # SVG's y grows downwards: the peak is the least y
    assert sum(1 for _, y in live_pts if y == top) == 1, "the peak's bucket kept its maximum"
    assert "allocation number" in texts, texts
    # A bad output: one line, exit 1, nothing written (nor a temporary left behind).
    for bad in (os.path.join(out, "missing", "x.svg"), out):
        for cmd in (["simulate", snap], ["stats", snap]):
            before = sorted(os.listdir(out))
            p = run(*cmd, "--svg", bad, expect=1)
            assert len(p.stderr.strip().splitlines()) == 1 and "luma " + cmd[0] + ":" in p.stderr, p.stderr
            assert sorted(os.listdir(out)) == before, (before, os.listdir(out))
            assert p.stdout == "", p.stdout
    # One picture: of one run, one device, one copy of the window.
    p = run("stats", snap, snap, "--svg", os.path.join(out, "two.svg"), expect=2)
    assert "--svg draws one run" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run("simulate", snap, "--repeat", "2", "--svg", os.path.join(out, "rep.svg"), expect=2)
    assert "--repeat" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not os.path.exists(os.path.join(out, "two.svg")) and not os.path.exists(os.path.join(out, "rep.svg"))


def check_comparison(a, b):
    """--compare --json --full of a and b: every sum as it must be; returns its devices."""
    j = json.loads(run("stats", a, b, "--compare", "--json", "--full").stdout)
    assert j["a"]["file"] == a and j["b"]["file"] == b, (j["a"], j["b"])
    sa = {d["device"]: d for d in json.loads(run("stats", "--json", a).stdout)["runs"][0]["devices"]}
    sb = {d["device"]: d for d in json.loads(run("stats", "--json", b).stdout)["runs"][0]["devices"]}
    assert [d["device"] for d in j["devices"]] == sorted(set(sa) | set(sb)), (j["devices"], sa.keys(), sb.keys())
    for d in j["devices"]:
        n, peak = d["device"], d["peak_allocated"]
        pa = sa[n]["peak_allocated_bytes"] if n in sa else 0
        pb = sb[n]["peak_allocated_bytes"] if n in sb else 0
        assert (peak["a_bytes"], peak["b_bytes"]) == (pa, pb), (n, peak, pa, pb)
        assert peak["difference_bytes"] == pb - pa, peak
        assert peak["difference_percent"] == (None if pa == 0 else 100.0 * (pb - pa) / pa), peak
        if d["peak_reserved"] is not None:
            ra = sa[n]["peak_reserved_bytes"] if n in sa else 0
            rb = sb[n]["peak_reserved_bytes"] if n in sb else 0
            assert (d["peak_reserved"]["a_bytes"], d["peak_reserved"]["b_bytes"]) == (ra, rb), d["peak_reserved"]
        rows = d["sites_at_peak"]
        assert len(rows) == d["sites"], d
        assert sum(r["difference_bytes"] for r in rows) == peak["difference_bytes"], (n, rows, peak)
        assert sum(r["a_bytes"] for r in rows) == pa and sum(r["b_bytes"] for r in rows) == pb, (n, rows)
        assert all(r["difference_bytes"] == r["b_bytes"] - r["a_bytes"] for r in rows), rows
        mags = [abs(r["difference_bytes"]) for r in rows]
        assert mags == sorted(mags, reverse=True), mags
        if d["stages_at_peak"] is not None:
            st = d["stages_at_peak"]
            assert sum(r["difference_bytes"] for r in st) == peak["difference_bytes"], (n, st, peak)
            assert sum(r["a_bytes"] for r in st) == pa and sum(r["b_bytes"] for r in st) == pb, (n, st)
    # Without --full: the top 10 sites, the same first rows.
    top = json.loads(run("stats", a, b, "--compare", "--json").stdout)
    for d, full in zip(top["devices"], j["devices"]):
        assert d["sites_at_peak"] == full["sites_at_peak"][:10], (d["sites_at_peak"], full["sites_at_peak"][:10])
    text = run("stats", a, b, "--compare").stdout
    assert "peak allocated" in text and "B - A" in text, text
    return j["devices"]


def case_compare():
    out = os.path.join(WORK, "compare")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    # Two RMM logs: A peaks at 300 bytes live, B at 600; no call sites: one row of all.
    logs = {"a.csv": [("allocate", 0x1000, 100), ("allocate", 0x2000, 200), ("free", 0x1000, 100),
                      ("allocate", 0x3000, 50)],
            "b.csv": [("allocate", 0x1000, 100), ("allocate", 0x2000, 500), ("free", 0x2000, 500)]}
    for name, rows in logs.items():
        with open(os.path.join(out, name), "w") as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n")
            for i, (action, ptr, size) in enumerate(rows):
                f.write("1,10:00:00.%06d,%s,0x%x,%d,0x0\n" % (i + 1, action, ptr, size))
    a, b = os.path.join(out, "a.csv"), os.path.join(out, "b.csv")
    (d,) = check_comparison(a, b)
    assert d["peak_allocated"] == {"a_bytes": 300, "b_bytes": 600, "difference_bytes": 300,
                                   "difference_percent": 100.0}, d
    assert d["peak_reserved"] is None and d["stages_at_peak"] is None, d  # an RMM log records neither
    assert [(r["frames"], r["difference_bytes"]) for r in d["sites_at_peak"]] == [(None, 300)], d
    (d,) = check_comparison(b, a)
    assert d["peak_allocated"]["difference_bytes"] == -300 and d["peak_allocated"]["difference_percent"] == -50.0, d
    # Two snapshots with sites and stages, and a snapshot against itself: no difference anywhere.
    data = os.path.join(DATA, "..", "torch_snapshot", "data")
    training, full = os.path.join(data, "training_p4.pickle"), os.path.join(data, "full_p4.pickle")
    devices = check_comparison(training, full)
    assert any(d["stages_at_peak"] for d in devices), devices
    assert any(r["frames"] for d in devices for r in d["sites_at_peak"]), devices
    for d in check_comparison(training, training):
        assert d["peak_allocated"]["difference_bytes"] == 0 and d["peak_reserved"]["difference_bytes"] == 0, d
        assert all(r["difference_bytes"] == 0 for r in d["sites_at_peak"] + (d["stages_at_peak"] or [])), d
    # Bad use: one run or three, one line and exit 2; --compare draws no picture.
    for args in ([training], [training, full, training]):
        p = run("stats", *args, "--compare", expect=2)
        assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "--compare takes two runs" in p.stderr and "%d given" % len(args) in p.stderr, p.stderr
    p = run("stats", training, full, "--compare", "--svg", os.path.join(out, "x.svg"), expect=2)
    assert len(p.stderr.strip().splitlines()) == 1 and not os.path.exists(os.path.join(out, "x.svg")), p.stderr
    # Two shared recordings, sequence length 128 against 256.
    shared = os.path.join(DATA, "..", "..", "..", "shared", "data", "torch-snapshots")
    names = ["gpt-medium_128_training", "gpt-medium_256_training"]
    if not all(os.path.exists(os.path.join(shared, n + ".pickle.gz")) for n in names):
        print("skipped the shared recordings: %s not here" % os.path.normpath(shared))
        return
    import gzip
    paths = []
    for n in names:
        path = os.path.join(out, n + ".pickle")
        with gzip.open(os.path.join(shared, n + ".pickle.gz")) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        paths.append(path)
    (d,) = check_comparison(*paths)
    assert d["peak_allocated"]["difference_bytes"] > 0 and d["peak_reserved"]["difference_bytes"] > 0, d
    assert d["stages_at_peak"], d


def case_window_notes():
    """A snapshot that is not a whole device's says what its figures are made of: a MemPool
    snapshot's pool, a skip_actions window's gaps, in every command's text and JSON; a whole
    window says nothing."""
    data = os.path.join(DATA, "..", "torch_snapshot", "data")
    want = {"mempool_traces_p4": "reserved from pool (1,0)'s segments only",
            "skip_actions_p4": "window lacks free_requested"}
    for name, phrase in want.items():
        snap = os.path.join(data, name + ".pickle")
        for cmd in (["simulate"], ["stats"], ["plan", "--strategy", "greedy"]):
            p = run(*cmd, snap)
            assert phrase in p.stdout + p.stderr, (cmd, name, p.stdout[-1500:], p.stderr[-1500:])
        sim = json.loads(run("simulate", "--json", snap).stdout)["devices"][0]
        assert any(phrase in n for n in sim["window_notes"]), sim["window_notes"]
        st = json.loads(run("stats", "--json", snap).stdout)["runs"][0]["devices"][0]
        assert any(phrase in n for n in st["window_notes"]), st["window_notes"]
    whole = os.path.join(data, "training_p4.pickle")
    assert json.loads(run("simulate", "--json", whole).stdout)["devices"][0]["window_notes"] == []
    # simulate's "at the peak" names the recorded stage luma's peak falls in; luma stats names
    # the one of the recorded peak: in this recording both are the optimizer step's.
    stats_stage = json.loads(run("stats", "--json", whole).stdout)["runs"][0]["devices"][0]["stages_at_peak"]
    for conf in ([], ["--conf", "expandable_segments:1"]):
        sim = json.loads(run("simulate", "--json", whole, *conf).stdout)["devices"][0]["runs"][0]
        assert sim["at_peak"]["stages"] == stats_stage == ["Optimizer.step#AdamW.step"], (conf, sim["at_peak"])
    p = run("simulate", whole)
    assert any(l.split() == ["in", "stage", "Optimizer.step#AdamW.step"] for l in p.stdout.splitlines()), p.stdout
    # Without recorded stages there is no such row, and no key.
    rmm = os.path.join(DATA, "torch_train.rmm.csv.gz")
    if os.path.exists(rmm):
        import gzip
        plain = os.path.join(WORK, "torch_train.rmm.csv")
        with gzip.open(rmm) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        sim = json.loads(run("simulate", "--json", plain).stdout)["devices"][0]["runs"][0]
        assert "stages" not in sim["at_peak"], sim["at_peak"]
        assert "in stage" not in run("simulate", plain).stdout
    p = run("simulate", whole)
    assert "segments only" not in p.stdout and "window lacks" not in p.stdout, p.stdout


{"golden": case_golden, "callsites": case_callsites, "stats": case_stats, "exports": case_exports,
 "allocator": case_allocator, "errors": case_errors, "truncated": case_truncated,
 "progress": case_progress,
 "no_overwrite": case_no_overwrite, "outputs": case_outputs, "rmm_frees": case_rmm_frees, "rmm_rows": case_rmm_rows, "latin1": case_latin1,
 "fifo_module": case_fifo_module, "memviz_viewer": case_memviz_viewer,
 "memviz_fields": case_memviz_fields, "memviz_window": case_memviz_window,
 "expandable": case_expandable, "chrome_story": case_chrome_story,
 "torch_stats": case_torch_stats, "svg": case_svg, "compare": case_compare,
 "window_notes": case_window_notes}[CASE]()
print("ok:", CASE)
