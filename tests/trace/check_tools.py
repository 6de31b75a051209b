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
  outputs    an export follows a link to its target, leaves a user's FILE.tmp alone, writes
             to standard output (-, /dev/stdout) and a FIFO, leaves nothing when it fails
--update rewrites the expected outputs (review the diff before committing it).
"""
import fcntl
import json
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios

import check_memviz

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
    expect_file("golden_small.stats.txt", run("stats", "golden_small.trace").stdout.encode())
    s = json.loads(run("stats", "--json", "golden_small.trace").stdout)
    d0 = s["runs"][0]["devices"][0]
    # Facts of the golden trace (make_golden.cpp), independent of the committed file.
    assert d0["peak_reserved_bytes"] == (2 << 20) + (20 << 20), d0
    assert d0["peak_allocated_bytes"] == 512 + 2048 + (12 << 20), d0
    assert d0["ooms"] == 1 and d0["segment_reserves"] == 2 and d0["allocations"] == 5, d0
    assert d0["cache_absorbed"] == 3, d0
    # Requested bytes live at once: a free takes back what its alloc asked for.
    assert d0["peak_requested_bytes"] == 500 + 2000 + (12 << 20), d0
    st = json.loads(run("stats", "--json", "golden_stacks.trace").stdout)["runs"][0]["devices"][0]
    sites = st["top_callsites_total"]
    assert len(sites) == 2 and sites[0]["bytes"] == 4 * (2 << 20), sites
    assert [f["address"] for f in sites[0]["frames"]] == [0x555555557010, 0x555555557120, 0x555555558000]
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
    # Issue #19: one 4 KiB block in its 2 MiB segment was "fragmentation 512" (peak
    # reserved / peak allocated). Its free memory is one block: no fragmentation.
    one = os.path.join(WORK, "one_block.trace")
    subprocess.run([MAKE_GOLDEN, "--one-block", one], check=True)
    at = json.loads(run("stats", "--json", one).stdout)["runs"][0]["devices"][0]["at_peak_reserved"]
    assert at["reserved_unallocated_bytes"] == (2 << 20) - 4096 and at["free_blocks"] == 1, at
    assert at["largest_free_block_bytes"] == (2 << 20) - 4096 and at["fragmentation"] == 0.0, at
    line = [l for l in run("stats", one).stdout.splitlines() if "fragmentation" in l][0]
    assert line.split()[1].startswith("0.000"), line
    # Issue #19: what an RMM log does not record (pid, host, times, segments) is not
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
    """Issue #19: a trace cut short after its header (a copy that stopped, a disk that
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


def viewer_live_bytes(snapshot_path, device=0):
    """Bytes live at the end of the device's trace as PyTorch's memory viewer replays it
    (process_alloc_data: a block is allocated at alloc and freed only at free or
    free_completed)."""
    snap = check_memviz.check(snapshot_path)
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
    trace = check_memviz.check(out)["device_traces"][0]
    actions = [e["action"] for e in trace]
    for i, a in enumerate(actions):
        if a == "free_requested":
            assert actions[i + 1] == "free_completed" and trace[i + 1]["addr"] == trace[i]["addr"], trace
    # golden_rmm.csv frees its 1024 and 4096 bytes; 512 + 65536 stay allocated.
    assert viewer_live_bytes(out) == 512 + 65536, viewer_live_bytes(out)
    final = json.loads(run("stats", "--json", "golden_rmm.csv").stdout)["runs"][0]["devices"][0]
    assert viewer_live_bytes(out) == final["final_allocated_bytes"], final
    # No block of the final state is still waiting for a completion that never comes.
    snap = check_memviz.check(out)
    states = [b["state"] for s in snap["segments"] for b in s["blocks"]]
    assert "active_pending_free" not in states, states
    # A luma trace records its own completions (one of golden_small's frees is still
    # pending at the end): none are added.
    run("export", "golden_small.trace", "-f", "memviz", "-o", os.path.join(WORK, "small.pickle"))
    small = [e["action"] for e in check_memviz.check(os.path.join(WORK, "small.pickle"))["device_traces"][0]]
    assert small.count("free_requested") == 3 and small.count("free_completed") == 2, small


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
             if e["ph"] == "M"]
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


{"golden": case_golden, "callsites": case_callsites, "stats": case_stats, "exports": case_exports,
 "allocator": case_allocator, "errors": case_errors, "truncated": case_truncated,
 "progress": case_progress,
 "no_overwrite": case_no_overwrite, "outputs": case_outputs, "rmm_frees": case_rmm_frees, "rmm_rows": case_rmm_rows, "latin1": case_latin1,
 "fifo_module": case_fifo_module}[CASE]()
print("ok:", CASE)
