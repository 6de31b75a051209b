#!/usr/bin/env python3
"""reliability.py - the reliability cases (tests/reliability/meson.build runs one per test).

Each case runs programs as a user would - under LD_PRELOAD=libluma.so on the stand-in
driver, or the `luma` tool on bad files - with a timeout (a hang is a failure), and judges
them by exit status, output and the statistics / stand-in counters they leave.
Exit 0: the case held; 1: it did not (the reason on stderr); 77: skipped.

Under a sanitizer build libluma.so depends on the sanitizer runtime, which must come first
in LD_PRELOAD (the runtime refuses to start otherwise); preload() finds it with ldd.
"""
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ENV = os.environ
LIB = ENV.get("LUMA_REL_LIB", "")
FAKE_DIR = ENV.get("LUMA_REL_FAKE_DIR", "")
LUMA = ENV.get("LUMA_REL_LUMA", "")
DATA = ENV.get("LUMA_REL_DATA", "")
WORK_ROOT = ENV.get("LUMA_REL_WORK", tempfile.gettempdir())
PROG = {name: ENV.get("LUMA_REL_" + name.upper(), "")
        for name in ("rel_stress", "rel_faults", "rel_badinput", "rel_signal", "rel_recorder",
                     "prog_driver")}
TIMEOUT = 240  # seconds any one program may take before it counts as hung


class Failed(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Failed(what)


def preload():
    """LD_PRELOAD for libluma.so, with a sanitizer runtime it needs first."""
    first = []
    try:
        out = subprocess.run(["ldd", LIB], capture_output=True, text=True, timeout=30).stdout
        for line in out.splitlines():
            m = re.search(r"(lib[at]san\.so[.\d]*) => (\S+)", line)
            if m:
                first.append(m.group(2))
    except (OSError, subprocess.SubprocessError):
        pass
    return ":".join(first + [LIB])


def base_env(with_luma, **extra):
    """The environment a case states: nothing inherited of LUMA_*, LD_PRELOAD."""
    env = {k: v for k, v in ENV.items()
           if not k.startswith("LUMA_") and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    env["LD_LIBRARY_PATH"] = FAKE_DIR
    if with_luma:
        env["LD_PRELOAD"] = preload()
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(argv, env, timeout=TIMEOUT, expect=None, cwd=None):
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                           errors="replace", cwd=cwd)
    except subprocess.TimeoutExpired:
        raise Failed(f"{' '.join(argv)[:200]}: no answer within {timeout} s (hang)")
    if p.returncode < 0:
        raise Failed(f"{' '.join(argv)[:200]}: killed by signal {-p.returncode}\n{p.stderr[-3000:]}")
    if expect is not None and p.returncode != expect:
        raise Failed(f"{' '.join(argv)[:200]}: exit {p.returncode}, expected {expect}\n"
                     f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-3000:]}")
    return p


def load():
    """The 1-, 5- and 15-minute load averages, for the figures (docs/reliability.md)."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def work_dir(name):
    d = os.path.join(WORK_ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def luma_stats(path):
    with open(path) as f:
        return json.load(f)


def check_consistent(stats_path, counters_path):
    """After every block was freed: luma holds nothing for the program, and what the
    driver still holds is exactly luma's segments (its cache), byte for byte."""
    stats = luma_stats(stats_path)
    with open(counters_path) as f:
        fake = {d["device"]: d for d in json.load(f)["devices"]}
    devices = stats.get("devices", [])
    check(devices, f"no devices in the statistics: {stats}")
    for d in devices:
        dev = d.get("device")
        for key in ("allocated_bytes", "live_blocks"):
            value = d.get(key)
            value = value.get("current", value) if isinstance(value, dict) else value
            check(value == 0, f"device {dev}: {key} = {value} after every block was freed")
        segs = d.get("segments")
        segs = segs.get("current", segs) if isinstance(segs, dict) else segs
        reserved = d.get("reserved_bytes")
        reserved = reserved.get("current", reserved) if isinstance(reserved, dict) else reserved
        f = fake[dev]
        check(d["cuda_malloc_calls"] - d["cuda_free_calls"] == segs,
              f"device {dev}: {d['cuda_malloc_calls']} segment reserves - {d['cuda_free_calls']} "
              f"releases != {segs} segments")
        check(f["mem_alloc_calls"] == d["cuda_malloc_calls"],
              f"device {dev}: the driver served {f['mem_alloc_calls']} allocations, luma made "
              f"{d['cuda_malloc_calls']}")
        check(f["live_allocations"] == segs,
              f"device {dev}: the driver holds {f['live_allocations']} allocations, luma {segs} segments")
        check(f["live_bytes"] == reserved,
              f"device {dev}: the driver holds {f['live_bytes']} bytes, luma reserved {reserved}")
    return stats


# ---- cases ------------------------------------------------------------------------------

def case_stress(threads, n):
    d = work_dir(f"stress-{threads}-{n}")
    stats, counters = os.path.join(d, "stats.json"), os.path.join(d, "counters.json")
    env = base_env(True, LUMA_STATS="json", LUMA_STATS_FILE=stats, LUMA_FAKE_COUNTERS=counters)
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = run([PROG["rel_stress"], threads, n], env, timeout=max(TIMEOUT, int(n) // 200), expect=0)
    took, r1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    check(" 0 errors" in p.stdout, f"stress reported errors: {p.stdout}")
    st = check_consistent(stats, counters)
    print(p.stdout.strip())
    print(f"stress: {took:.1f} s wall, {r1.ru_utime - r0.ru_utime:.1f} s user + "
          f"{r1.ru_stime - r0.ru_stime:.1f} s sys CPU, load {load()}; statistics and driver "
          "agree: " + ", ".join(f"device {d['device']}: {d.get('segments')} segments"
                               for d in st["devices"]))


def case_stress_plain(threads, n):
    """The stress program itself, without luma: its checks must pass on the bare driver."""
    p = run([PROG["rel_stress"], threads, n], base_env(False), expect=0)
    print(p.stdout.strip())


def case_faults(mode, *args):
    # One directory per case and its arguments: "faults fail-every 7" and "fail-every 2" run
    # at the same time (meson test -j), and a shared directory made one of them fail.
    d = work_dir("-".join(["faults", mode, *args]))
    stats, counters = os.path.join(d, "stats.json"), os.path.join(d, "counters.json")
    for with_luma in (False, True):  # the program's own expectations hold on the bare driver
        env = base_env(with_luma, LUMA_STATS="json", LUMA_STATS_FILE=stats,
                       LUMA_FAKE_COUNTERS=counters)
        p = run([PROG["rel_faults"], mode, *args], env, expect=0)
        print(("luma: " if with_luma else "bare: ") + p.stdout.strip())
    if mode != "lost" and mode != "lost-code":
        check_consistent(stats, counters)


def case_bad_calls():
    for with_luma in (False, True):
        p = run([PROG["rel_badinput"]], base_env(with_luma), expect=0)
        print(("luma: " if with_luma else "bare: ") + p.stdout.strip())


# Values a user may mistype, and worse. An empty value means unset (docs/settings.md).
GARBAGE = ["yaml", "1e99", "-1", "TRUE!", "text,json", "%n%s%x%p", "\t", "key:", ":value",
           "a" * 100000, "\u00e9\u00e8", "\u2603", "0x", "on off", "-", "null", "'\"`$(id)"]
CONF_GARBAGE = GARBAGE + ["free_sync:sometimes", "max_split_size_mb:-5", "max_split_size_mb:1e3",
                          "max_split_size_mb:99999999999999999999999", "caching:maybe",
                          "free_sync:event,free_sync", ",,,,", "roundup_power2_divisions:[1:2]",
                          "garbage_collection_threshold:1.5", "expandable_segments:maybe",
                          "report_cached_as_free:2"]
SETTINGS = {
    "LUMA_CONF": CONF_GARBAGE,
    "LUMA_STATS": GARBAGE,
    "LUMA_LOG_LEVEL": GARBAGE,
    "LUMA_DISABLE": GARBAGE,
    # Paths that cannot be written, or whose writes fail (/dev/full: ENOSPC).
    "LUMA_STATS_FILE": ["/proc/self/no-such-dir/stats", "/", "/proc/self/nope/x", "%", "%q%%%",
                        "%p" * 5000, "/dev/full", "/proc/version"],
    "LUMA_LOG_FILE": ["/proc/self/no-such-dir/log", "/", "/dev/full", "/proc/version"],
    # Any text is a name pattern: the ones that cannot be created or mapped, and odd ones
    # (relative names land in the case's work directory).
    "LUMA_TRACE": ["/proc/self/no-such-dir/t", "/", "/dev/full", "/dev/null", "/proc/version",
                   "%", "%q%%%", "%p" * 5000, "a" * 100000, "\t", "-", "0x", "'\"`$(id)",
                   "%e/%e/%e", "\u2603.%p"],
    # A plan that cannot be read (docs/plan-replay.md: one line, the caching allocator
    # serves the run); malformed plan files are case bad-plans.
    "LUMA_PLAN": GARBAGE + ["/", "/dev/null", "/dev/zero", "/proc/version",
                            "/proc/self/no-such-dir/plan.json"],
    "LUMA_TRACE_STACKS": GARBAGE + ["129", "-1", "99999999999999999999", "1e3", "0x10",
                                    "128abc", "4294967297"],
    # Not absolute (named by the settings), or a directory that cannot hold the live record
    # (docs/live-record.md: one line, the program runs on unpublished).
    "LUMA_LIVE_DIR": GARBAGE + ["/proc/self/no-such-dir", "/dev/null", "/proc/version",
                                "/dev/full", "/" + "a" * 5000],
}


def case_bad_settings():
    d = work_dir("bad-settings")
    tried = 0
    for name, values in SETTINGS.items():
        for value in values:
            env = base_env(True, **{name: value})
            if name == "LUMA_STATS_FILE" and value.startswith("%p"):
                env["LUMA_STATS_FILE"] = os.path.join(d, value)[:4000]
            if name == "LUMA_TRACE_STACKS":  # judged where it matters: with a trace
                env["LUMA_TRACE"] = os.path.join(d, "stacks.%p.trace")
            p = run([PROG["prog_driver"], "loop", "200", "4096"], env, timeout=60, cwd=d)
            what = f"{name}={value[:40]!r}"
            check(p.returncode == 0, f"{what}: the program exited {p.returncode}\n{p.stderr[-2000:]}")
            check("loop: 200 alloc/free pairs" in p.stdout, f"{what}: the program's output changed")
            # Log lines only: the exit statistics (their table, and with LUMA_PLAN the
            # "luma: plan replay (...)" summary, which repeats why a plan was refused) are not.
            warnings = [l for l in p.stderr.splitlines() if l.startswith("luma") and
                        ("warning" in l or "error" in l) and "statistics" not in l.lower() and
                        not l.startswith("luma: plan replay (")]
            if not value.strip():
                # Blank counts as unset (docs/settings.md): silence is right, a line is too.
                check(len(warnings) <= 1, f"{what}: more than one line for a blank value")
            elif name in ("LUMA_STATS", "LUMA_LOG_LEVEL", "LUMA_DISABLE", "LUMA_TRACE_STACKS"):
                check(len(warnings) == 1 and name in warnings[0],
                      f"{what}: expected one line naming {name}, got {warnings}")
            elif name == "LUMA_CONF":
                # Empty entries (",,,") are skipped like unset ones; anything named is judged.
                named = any(c.isalnum() for c in value)
                check(len(warnings) >= (1 if named else 0) and
                      all("LUMA_CONF" in w for w in warnings),
                      f"{what}: expected lines naming LUMA_CONF, got {warnings}")
            elif name == "LUMA_TRACE":
                # A name that cannot be recorded to: one line naming LUMA_TRACE, no trace.
                check(len(warnings) <= 1 and all("LUMA_TRACE" in w for w in warnings),
                      f"{what}: expected at most one line naming LUMA_TRACE, got {warnings}")
            elif name == "LUMA_LIVE_DIR":
                check(len(warnings) == 1 and "LUMA_LIVE_DIR" in warnings[0],
                      f"{what}: expected one line naming LUMA_LIVE_DIR, got {warnings}")
            elif name == "LUMA_PLAN":
                # No plan file can be read from any of these: one line, the caching
                # allocator serves the run (docs/plan-replay.md).
                check(len(warnings) == 1 and "LUMA_PLAN" in warnings[0],
                      f"{what}: expected one line naming LUMA_PLAN, got {warnings}")
            for line in warnings:
                # A line may quote the value (a file name: as asked and as the system's
                # error names it), and a name pattern expanded (%p: the pid).
                longest = len(value) * (8 if "%" in value else 2)
                check(len(line) < 400 + longest, f"{what}: an overlong warning line")
            tried += 1
    print(f"bad-settings: {tried} garbage values over {len(SETTINGS)} variables; the program ran "
          "on every time, each bad value named")


BAD_CSVS = {
    "empty.csv": "",
    "header-only.csv": "id,lower,upper,size\n",
    "no-header.csv": "1,0,10,100\n",
    "short-row.csv": "id,lower,upper,size\n1,0,10\n",
    "long-row.csv": "id,lower,upper,size\n1,0,10,100,256,9,9\n",
    "negative.csv": "id,lower,upper,size\n1,0,10,-100\n",
    "reversed.csv": "id,lower,upper,size\n1,10,0,100\n",
    "empty-lifetime.csv": "id,lower,upper,size\n1,5,5,100\n",
    "huge.csv": "id,lower,upper,size\n1,0,10,99999999999999999999999999\n",
    "zero-size.csv": "id,lower,upper,size\n1,0,10,0\n",
    "letters.csv": "id,lower,upper,size\n1,zero,ten,big\n",
    "bad-align.csv": "id,lower,upper,size,alignment\n1,0,10,100,3\n",
    "dup-id.csv": "id,lower,upper,size\n1,0,10,100\n1,2,12,100\n",
    "binary.csv": "id,lower,upper,size\n\x00\x01\x02\xff\n",
    "crlf-garbage.csv": "id,lower,upper,size\r\n1,0,10,100\r\n\r\n,,,\r\n",
    "quote.csv": "id,lower,upper,size\n\"1,0\",10,100\n",
    "many-cols.csv": "id,lower,upper,size" + ",x" * 10000 + "\n",
    "rmm-empty.csv": "Thread,Time,Action,Pointer,Size,Stream\n",
    "rmm-unknown-free.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,free,0x1000,100,0x0\n",
    "rmm-bad-action.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,explode,0x1000,100,0x0\n",
    "rmm-bad-pointer.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,zz,100,0x0\n",
    "rmm-bad-size.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x1000,-1,0x0\n",
    "rmm-short.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate\n",
    "rmm-double-alloc.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,8,0\n1,1,allocate,0x10,8,0\n",
    "rmm-huge.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,1" + "0" * 40 + ",0\n",
}


def judge_cli(args, what, d, usage=False):
    p = run([LUMA, *args], {"PATH": ENV.get("PATH", "/usr/bin:/bin")}, timeout=60)
    err = [l for l in p.stderr.splitlines() if l.strip()]
    if p.returncode == 0:
        return "accepted"
    # A bad command line is a usage error (CLI11: exit 2, plus a "Run with --help" line).
    want = (1, 2) if usage else (1,)
    check(p.returncode in want, f"{what}: exit {p.returncode}, expected 0 or {want}\n{p.stderr[-1500:]}")
    check(len(err) >= 1, f"{what}: exit 1 without a message")
    check(len(err) <= 2, f"{what}: expected one line naming the problem, got {len(err)}:\n"
          + "\n".join(err[:5]))
    check(len(err[0]) < 600, f"{what}: an overlong error line: {err[0][:200]}...")
    return "rejected"


def case_bad_cli_input():
    d = work_dir("bad-cli")
    verdicts = {}
    for name, text in BAD_CSVS.items():
        path = os.path.join(d, name)
        with open(path, "w", encoding="latin-1") as f:
            f.write(text)
        for args in (["plan", "--time-limit", "0.2", path], ["stats", path],
                     ["export", "--format", "csv", "-o", os.path.join(d, "out"), path]):
            v = judge_cli(args, f"luma {' '.join(args[:-1])} {name}", d)
            verdicts[v] = verdicts.get(v, 0) + 1
    for args in (["plan", os.path.join(d, "missing.csv")], ["plan", d], ["stats", "/dev/null"],
                 ["plan", "--strategy", "nope", os.path.join(d, "empty.csv")]):
        v = judge_cli(args, "luma " + " ".join(args), d, usage=True)
        check(v == "rejected", f"luma {' '.join(args)}: accepted")
    # Malformed plan requests on a good input: bad limits, devices, strategies and outputs.
    good = os.path.join(DATA, "golden_rmm.lifetimes.csv")
    plan_requests = [
        ["--time-limit", "-1"], ["--time-limit", "nan"], ["--time-limit", "inf"],
        ["--time-limit", "1e308"], ["--time-limit", "x"], ["--device", "99"],
        ["--device", "-1"], ["--device", "x"], ["--strategy", ""], ["--strategy", "best,greedy"],
        ["-o", "/proc/self/no-such-dir/plan.json"], ["-o", "/"], ["--svg", "/dev/full"],
        ["--csv", "/proc/version"], ["-o", d],
    ]
    plan_verdicts = {}
    for extra in plan_requests:
        args = ["plan", *extra, good]
        v = judge_cli(args, "luma " + " ".join(args), d, usage=True)
        plan_verdicts[v] = plan_verdicts.get(v, 0) + 1
    print(f"bad-cli-input: {len(BAD_CSVS)} malformed CSV / RMM files x 3 commands + 4 bad "
          f"invocations: {verdicts}; {len(plan_requests)} malformed plan requests: "
          f"{plan_verdicts}; never a crash, a hang or more than one line")


HEADER_BYTES = 4096  # golden_small.trace's header block


def case_bad_traces_cli():
    """The reader test (tests/trace) cuts a small trace at every byte in-process; here a
    sample of the same damage goes through the luma program: a cut inside the header is
    refused (one line, exit 1); a cut after it is read, with one warning line saying how
    much was lost (docs/trace-format.md, "Truncated files")."""
    src = os.path.join(DATA, "golden_small.trace")
    with open(src, "rb") as f:
        good = f.read()
    d = work_dir("bad-traces")
    path = os.path.join(d, "t.trace")
    rng = random.Random(7)
    cuts = sorted(set(list(range(0, 64)) + list(range(64, len(good), 97)) + [len(good) - 1]))
    tried = 0
    for cut in cuts:
        with open(path, "wb") as f:
            f.write(good[:cut])
        what = f"luma stats (cut at byte {cut})"
        v = judge_cli(["stats", path], what, d)
        if cut < HEADER_BYTES:
            check(v == "rejected", f"luma stats accepted a trace cut at byte {cut} of {len(good)}")
        else:
            check(v == "accepted", f"luma stats refused a trace cut after its header at {cut}")
            p = run([LUMA, "stats", path], {"PATH": ENV.get("PATH", "/usr/bin:/bin")}, timeout=60)
            warn = [l for l in p.stderr.splitlines() if l.strip()]
            check(len(warn) == 1 and f"{len(good) - cut} bytes" in warn[0],
                  f"{what}: expected one warning naming {len(good) - cut} lost bytes: {warn}")
        tried += 1
    for _ in range(150):
        bad = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        with open(path, "wb") as f:
            f.write(bad)
        judge_cli(["stats", path], "luma stats (corrupted)", d)
        judge_cli(["export", "--format", "csv", "-o", os.path.join(d, "o.csv"), path],
                  "luma export (corrupted)", d)
        tried += 1
    print(f"bad-traces-cli: {tried} damaged traces through luma stats/export: every one "
          "rejected or read, one line, no crash, no hang")


def plan_variants(good):
    """Malformed plan files made from a good one: (name, bytes)."""
    text = good.decode()
    plan = json.loads(text)
    rng = random.Random(11)
    out = [("empty", b""), ("null", b"null"), ("array", b"[]"), ("object", b"{}"),
           ("number", b"1e400"), ("nan", b'{"version": NaN}'), ("bom", b"\xef\xbb\xbf" + good),
           ("utf16", text.encode("utf-16")), ("trailing", good + b"}garbage"),
           ("nul", good[:100] + b"\0" + good[100:]), ("binary", bytes(range(256)) * 8),
           ("deep-array", b"[" * 100000 + b"]" * 100000),
           ("deep-object", b'{"devices":' * 100000 + b"1" + b"}" * 100000)]
    # Cut at every byte of the first 64 and at 60 points after; random byte damage.
    cuts = sorted(set(list(range(1, 64)) + list(range(64, len(good), max(1, len(good) // 60)))))
    out += [(f"cut-{c}", good[:c]) for c in cuts]
    for i in range(60):
        bad = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            bad[rng.randrange(len(bad))] = rng.choice(b'{}[]",:0123456789-.eE \n\x00\xff')
        out.append((f"damaged-{i}", bytes(bad)))

    def edit(name, fn):
        p = json.loads(text)
        fn(p)
        out.append((name, json.dumps(p).encode()))

    dev = lambda p: p["devices"][0]
    alloc = lambda p, k=1: dev(p)["allocations"][k]
    for key in list(plan.keys()):
        edit(f"no-{key}", lambda p, key=key: p.pop(key))
    for key in list(plan["devices"][0].keys()):
        edit(f"no-devices[0].{key}", lambda p, key=key: dev(p).pop(key))
    for key in list(plan["devices"][0]["allocations"][0].keys()):
        edit(f"no-allocations[1].{key}", lambda p, key=key: alloc(p).pop(key))
    for key in list(plan["fingerprint"].keys()):
        edit(f"no-fingerprint.{key}", lambda p, key=key: p["fingerprint"].pop(key))
    odd = [None, True, -1, 0.5, 1e300, 2 ** 64, 2 ** 63, -(2 ** 63) - 1, "1", [], {}]
    for i, v in enumerate(odd):
        edit(f"format={v!r}", lambda p, v=v: p.__setitem__("format", v))
        edit(f"version={v!r}", lambda p, v=v: p.__setitem__("version", v))
        edit(f"devices={v!r}", lambda p, v=v: p.__setitem__("devices", v))
        edit(f"fingerprint={v!r}", lambda p, v=v: p.__setitem__("fingerprint", v))
        edit(f"executable={v!r}", lambda p, v=v: p["fingerprint"].__setitem__("executable", v))
        edit(f"arguments={v!r}", lambda p, v=v: p["fingerprint"].__setitem__("arguments", v))
        for key in ("device", "arena", "alignment", "lower_bound", "strategy", "allocations",
                    "strategies", "periodic"):
            edit(f"devices[0].{key}={v!r}", lambda p, key=key, v=v: dev(p).__setitem__(key, v))
        for key in ("id", "name", "requested", "size", "offset", "lower", "upper"):
            edit(f"allocations[1].{key}={v!r}",
                 lambda p, key=key, v=v: alloc(p).__setitem__(key, v))
    # Values of the right type that break a rule: alignment, bounds, order, overlap, devices.
    edit("version=2", lambda p: p.__setitem__("version", 2))
    edit("format=other", lambda p: p.__setitem__("format", "luma-trace"))
    for a in (0, 1, 3, 128, 255, 257, 2 ** 31, 2 ** 62):
        edit(f"alignment={a}", lambda p, a=a: dev(p).__setitem__("alignment", a))
    for o in (1, 128, 255, 2 ** 62, 2 ** 64 - 256, dev(plan)["arena"]):
        edit(f"offset={o}", lambda p, o=o: alloc(p).__setitem__("offset", o))
    edit("size<requested", lambda p: alloc(p).__setitem__("size", alloc(p)["requested"] - 1))
    edit("size=0", lambda p: alloc(p).update(size=0, requested=0))
    edit("lower>upper", lambda p: alloc(p).update(lower=9, upper=3))
    edit("arena=0", lambda p: dev(p).__setitem__("arena", 0))
    edit("arena=2^63", lambda p: dev(p).__setitem__("arena", 2 ** 63))
    edit("device=70000", lambda p: dev(p).__setitem__("device", 70000))
    edit("device=-1", lambda p: dev(p).__setitem__("device", -1))
    edit("same-device-twice", lambda p: p["devices"].append(dev(p)))
    edit("overlap", lambda p: dev(p)["allocations"].__setitem__(
        1, dict(alloc(p), lower=alloc(p, 0)["lower"])))
    edit("no-allocations", lambda p: dev(p).__setitem__("allocations", []))
    edit("no-devices", lambda p: p.__setitem__("devices", []))
    edit("periodic-bad", lambda p: dev(p).__setitem__(
        "periodic", {"warmup": 10 ** 9, "period": 0}))
    edit("other-program", lambda p: p["fingerprint"].__setitem__("executable", "/bin/true"))
    edit("other-arguments", lambda p: p["fingerprint"].__setitem__("arguments", ["loop"]))
    edit("duplicate-keys", lambda p: None)
    out[-1] = ("duplicate-keys", good.replace(b'"version": 1', b'"version": 1, "version": 7', 1))
    return out


def case_bad_plans():
    """Malformed plan files (`luma plan -o`, core/plan/plan_file.h) given to `luma run --plan`:
    refused before the program starts with one line naming the file (exit 1), or - a
    change the reader may ignore - the program runs on it as usual. And the same files as
    LUMA_PLAN straight to libluma.so: the program always runs on, unchanged, and luma says
    one line naming LUMA_PLAN for a file luma run refused (at most one for the others)."""
    d = work_dir("bad-plans")
    prog = [PROG["prog_driver"], "loop", "200", "4096"]
    want_out = "loop: 200 alloc/free pairs"
    trace, good_path = os.path.join(d, "good.trace"), os.path.join(d, "good.json")
    env = base_env(False)
    env["PATH"] = ENV.get("PATH", "/usr/bin:/bin")
    run([LUMA, "run", "--stats", "off", "--trace", trace, "--", *prog], env, expect=0)
    run([LUMA, "plan", "--time-limit", "0.2", "-o", good_path, trace], env, expect=0)
    with open(good_path, "rb") as f:
        good = f.read()
    p = run([LUMA, "run", "--stats", "off", "--trace", trace, "--plan", good_path, "--", *prog],
            env, expect=0)
    check(want_out in p.stdout, f"the good plan: the program's output changed: {p.stdout}")
    path = os.path.join(d, "bad.json")
    variants = plan_variants(good)
    verdicts = {"refused": 0, "ran": 0}
    direct = 0
    for i, (name, data) in enumerate(variants):
        with open(path, "wb") as f:
            f.write(data)
        what = f"plan {name}"
        p = run([LUMA, "run", "--stats", "off", "--trace", trace, "--plan", path, "--", *prog],
                env, timeout=60)
        err = [l for l in p.stderr.splitlines() if l.strip()]
        refused = p.returncode != 0
        if not refused:
            check(want_out in p.stdout, f"{what}: accepted, but the program's output changed: "
                  f"{p.stdout[-500:]}")
            verdicts["ran"] += 1
        else:
            check(p.returncode == 1, f"{what}: luma run exited {p.returncode}, expected 0 or 1"
                  f"\n{p.stderr[-1500:]}")
            check(not p.stdout, f"{what}: refused, yet the program ran: {p.stdout[-500:]}")
            check(len(err) == 1, f"{what}: expected one line, got {len(err)}:\n"
                  + "\n".join(err[:5]))
            check(path in err[0] and len(err[0]) < 600,
                  f"{what}: the line does not name the file, or is overlong: {err[0][:300]}")
            verdicts["refused"] += 1
        if i % 3 == 0 or not name.startswith(("cut-", "damaged-")):
            penv = base_env(True, LUMA_PLAN=path, LUMA_STATS="off")
            p = run(prog, penv, timeout=60)
            warnings = [l for l in p.stderr.splitlines() if l.startswith("luma")]
            check(p.returncode == 0 and want_out in p.stdout,
                  f"LUMA_PLAN={name}: the program exited {p.returncode}: {p.stdout[-300:]}"
                  f"\n{p.stderr[-1500:]}")
            # A plan luma run refused is refused by libluma.so too, with one line; one it
            # took may still be refused there (the devices are checked only there).
            check((len(warnings) == 1 if refused else len(warnings) <= 1) and
                  all("LUMA_PLAN" in w for w in warnings),
                  f"LUMA_PLAN={name}: expected {'one line' if refused else 'at most one line'} "
                  f"naming LUMA_PLAN, got {warnings}")
            direct += 1
    for bad in ("/", "/dev/null", "/dev/zero", os.path.join(d, "missing.json"), d):
        p = run([LUMA, "run", "--plan", bad, "--", *prog], env, timeout=60)
        err = [l for l in p.stderr.splitlines() if l.strip()]
        check(p.returncode == 1 and not p.stdout and len(err) == 1 and bad in err[0],
              f"luma run --plan {bad}: exit {p.returncode}, {len(err)} lines: {err[:3]}")
    print(f"bad-plans: {len(variants)} malformed plan files through luma run --plan: "
          f"{verdicts['refused']} refused with one line naming the file before the program "
          f"started, {verdicts['ran']} still a usable plan (the program ran, output unchanged); "
          f"5 bad paths refused; {direct} of them as LUMA_PLAN: the program ran on every "
          "time, one line naming LUMA_PLAN for each file luma run refused, none or one for the "
          "others")


def caught(pid):
    """The signals among SIGTERM/SIGINT that the process has a handler for
    (/proc/PID/status, SigCgt): how the test sees whether luma installed one."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                mask = int(line.split()[1], 16)
                return {s for s in (signal.SIGTERM, signal.SIGINT) if mask >> (s - 1) & 1}
    raise Failed(f"no SigCgt line in /proc/{pid}/status")


class Program:
    """rel_signal MODE under luma, stopped at its "ready" line."""

    def __init__(self, mode, env):
        self.p = subprocess.Popen([PROG["rel_signal"], mode], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, errors="replace")
        self.lines = []

    def wait_for(self, prefix):
        while True:
            line = self.p.stdout.readline()
            if not line:
                self.kill()
                raise Failed(f"rel_signal ended before printing {prefix!r}: "
                             f"{self.p.stderr.read()[-2000:]}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def end(self, timeout=60):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failed(f"the program did not end within {timeout} s of the signal")
        return "".join(self.lines) + out, err

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.communicate()


def json_stats_in(stderr):
    """The statistics objects luma wrote to stderr (LUMA_STATS=json, one line each)."""
    found = []
    for line in stderr.splitlines():
        if line.startswith("{") and '"luma_version"' in line:
            found.append(json.loads(line))
    return found


def trace_summary(path):
    p = run([LUMA, "stats", "--json", path], {"PATH": ENV.get("PATH", "/usr/bin:/bin")},
            timeout=120)
    check(p.returncode == 0, f"luma stats cannot read the trace {path}: {p.stderr[-1500:]}")
    return json.loads(p.stdout)


def case_signal(which):
    """SIGTERM / SIGINT while the program holds device memory (docs/architecture.md, exit
    rules): with the default disposition luma writes the statistics once and closes the
    trace, then the program dies by the same signal; a program with its own handler keeps
    it (luma stays out, or is chained to); a process that never uses CUDA gets no handler."""
    d = work_dir(f"signal-{which}")
    trace = os.path.join(d, "run.trace")
    sigs = [signal.SIGTERM, signal.SIGINT]
    if which in ("SIGTERM", "SIGINT"):
        sigs, mode = [getattr(signal, which)], "default"
    else:
        mode = which
    for sig in sigs:
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        env = base_env(True, LUMA_STATS="json", LUMA_TRACE=trace)
        prog = Program(mode, env)
        try:
            if mode == "fork":
                child = int(prog.wait_for("child ready").split()[2])
                check(not caught(child), f"{sig.name}: the forked child kept luma's handlers "
                      f"({caught(child)})")
                os.kill(child, sig)
                ended = prog.wait_for("child ended")
                check(ended.split()[2:] == ["signal", str(int(sig))],
                      f"{sig.name}: the forked child should die by the signal, got {ended!r}")
            prog.wait_for("ready")
            pid = prog.p.pid
            handlers = caught(pid)
            if mode in ("default", "threads", "fork"):
                check(handlers == {signal.SIGTERM, signal.SIGINT},
                      f"{sig.name}: luma did not take SIGTERM and SIGINT ({handlers})")
            elif mode in ("nocuda", "ignore"):
                check(not handlers, f"{sig.name}: luma installed handlers {handlers} in a "
                      f"process that {'never used CUDA' if mode == 'nocuda' else 'ignores them'}")
            if mode == "threads":
                time.sleep(0.3)  # let the churning threads be in the middle of their calls
            os.kill(pid, sig)
            if mode == "ignore":
                time.sleep(0.5)
                check(prog.p.poll() is None, f"{sig.name}: SIG_IGN, yet the program ended "
                      f"({prog.p.returncode})")
                print(f"signal {sig.name} (ignored by the program): no handler of luma's, "
                      "the program ran on")
                continue
            out, err = prog.end()
        finally:
            prog.kill()
        rc = prog.p.returncode
        if mode in ("handler", "late-handler"):
            check(rc == 3, f"{sig.name}: the program's own handler exits 3, got {rc}\n{err[-1500:]}")
        else:
            check(rc == -sig, f"{sig.name}: the program should die by the signal (default "
                  f"disposition), got {rc}\n{err[-1500:]}")
        if mode == "chain":
            check("chained" in out, f"{sig.name}: the program's handler did not run")
        stats = json_stats_in(err)
        if mode == "nocuda":
            check(not stats and not os.path.exists(trace) and "luma" not in err,
                  f"{sig.name}: a process that never used CUDA saw luma: {err[-1500:]}")
            print(f"signal {sig.name} (never used CUDA): no handler, died by the signal, "
                  "nothing written")
            continue
        check(len(stats) == 1, f"{sig.name}: expected the statistics once, got {len(stats)}"
              f"\n{err[-2000:]}")
        st = stats[0]
        dev = st.get("devices", [{}])[0]
        check(dev.get("live_blocks", 0) >= 3 and dev.get("alloc_calls", 0) >= 100,
              f"{sig.name}: statistics without the program's blocks: {st}")
        by_signal = mode in ("default", "chain", "threads", "fork")
        if by_signal:
            check(st.get("ended_by") == sig.name, f"{sig.name}: the statistics do not say the "
                  f"signal ended the process: ended_by={st.get('ended_by')!r}")
        else:
            check("ended_by" not in st, f"{sig.name}: the program's own handler exited, yet "
                  f"the statistics say ended_by={st.get('ended_by')!r}")
        t = trace_summary(trace)
        run0 = t["runs"][0]
        check(run0["closed_cleanly"], f"{sig.name}: the trace was not closed: {run0}")
        check(run0["unwritten_slots"] == 0, f"{sig.name}: holes in the trace: {run0}")
        allocs = t["totals"]["allocations"]
        if mode == "threads":  # the threads allocate on between the statistics and the close
            check(allocs >= dev["alloc_calls"], f"{sig.name}: the trace has {allocs} "
                  f"allocations, fewer than the statistics' {dev['alloc_calls']}")
        else:
            check(allocs == dev["alloc_calls"] and t["totals"]["frees"] == dev["free_calls"],
                  f"{sig.name}: the trace has {allocs} allocations and {t['totals']['frees']} "
                  f"frees, the statistics {dev['alloc_calls']} and {dev['free_calls']}")
        print(f"signal {sig.name} ({mode}): exit {rc}; statistics written once "
              f"(ended_by={st.get('ended_by', '-')}, {dev['live_blocks']} live blocks); trace "
              f"closed with {allocs} allocations, {t['totals']['frees']} frees")


def rmm_rows(trace):
    """The trace's allocate/free rows, through `luma export --format rmm`: per thread, the
    pointers allocated and freed, in file order."""
    out = trace + ".rmm.csv"
    run([LUMA, "export", "--format", "rmm", "-o", out, trace],
        {"PATH": ENV.get("PATH", "/usr/bin:/bin")}, timeout=120, expect=0)
    per_thread = {}
    with open(out) as f:
        next(f)
        for line in f:
            thread, _, action, pointer, _, _ = line.rstrip("\n").split(",")
            a = per_thread.setdefault(int(thread), {"allocate": [], "free": []})
            if action in a:
                a[action].append(int(pointer, 16))
    return per_thread


def case_sigkill(rounds):
    """SIGKILL of a recording program at random points (a random number of completed
    pairs, or a random moment from start-up on): every trace left behind reads, and holds
    every pair the program saw complete, in each thread's order."""
    rounds = int(rounds)
    rng = random.Random(20261202)  # fixed: the same kill points every run
    d = work_dir("sigkill")
    kinds = {"after pairs": 0, "at a moment": 0, "before the first allocation": 0}
    most = 0
    for r in range(rounds):
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        trace = os.path.join(d, "k.trace")
        threads = 1 if r % 2 == 0 else 3
        env = base_env(True, LUMA_STATS="off", LUMA_TRACE=trace)
        p = subprocess.Popen([PROG["rel_recorder"], str(threads), "1000000"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        lines = []
        try:
            if r % 3 == 2:  # a random moment: start-up, initialisation, the first chunks
                time.sleep(rng.uniform(0.0, 0.03) if rng.random() < 0.5 else rng.uniform(0.03, 0.4))
            else:
                want = rng.randint(1, 5000)
                pending = b""
                while len(lines) < want:
                    chunk = os.read(p.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    pending += chunk
                    *done, pending = pending.split(b"\n")
                    lines += done
            p.kill()
            rest = p.stdout.read()  # printed before the kill: also completed pairs
            p.wait(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if r % 3 != 2:
            rest = pending + rest
        lines += [l for l in rest.split(b"\n")[:-1]]  # the last piece may be cut
        check(p.returncode == -signal.SIGKILL,
              f"round {r}: the program ended by itself ({p.returncode})")
        printed = {}
        for l in lines:
            tid, ptr, _ = l.split()
            printed.setdefault(int(tid), []).append(int(ptr, 16))
        if not os.path.exists(trace):
            check(not lines, f"round {r}: {len(lines)} pairs completed but no trace exists")
            kinds["before the first allocation"] += 1
            continue
        if os.path.getsize(trace) == 0:
            # Killed between the file's creation and its header (the first allocation was
            # under way): nothing was recorded, and nothing had completed.
            check(not lines, f"round {r}: {len(lines)} pairs completed but the trace is empty")
            st = run([LUMA, "stats", trace], base_env(False), timeout=60)
            check(st.returncode == 1 and "empty file" in st.stderr,
                  f"round {r}: luma stats on an empty trace: exit {st.returncode}: {st.stderr[-300:]}")
            kinds["before the first allocation"] += 1
            continue
        kinds["at a moment" if r % 3 == 2 else "after pairs"] += 1
        summary = trace_summary(trace)["runs"][0]
        check(not summary["closed_cleanly"], f"round {r}: a killed process closed its trace")
        rows = rmm_rows(trace)
        for tid, ptrs in printed.items():
            got = rows.get(tid, {"allocate": [], "free": []})
            for action in ("allocate", "free"):
                check(got[action][:len(ptrs)] == ptrs,
                      f"round {r}, thread {tid}: {len(ptrs)} pairs completed, but the trace's "
                      f"first {action}s differ (trace has {len(got[action])})")
        most = max(most, len(lines))
    print(f"sigkill: {rounds} kills ({kinds}); every trace read, no completed pair lost "
          f"(up to {most} pairs per kill)")


def case_context_race(rounds, threads):
    """Contexts made and destroyed while other threads allocate and free in the primary
    context (every free scans the context table): an ended context's entry is freed under
    no reader (the sanitizer passes run this; a read of a freed entry is a finding there),
    every allocation is right, and luma's own records at the end hold only the primary
    context (luma_footprint)."""
    d = work_dir(f"context-race-{rounds}-{threads}")
    env = base_env(True, LUMA_STATS="json", LUMA_STATS_FILE=os.path.join(d, "stats.json"))
    p = run([PROG["prog_driver"], "destroy-while-freeing", rounds, threads], env,
            timeout=TIMEOUT, expect=0)
    line = json.loads(p.stdout.strip().splitlines()[-1])
    end = line["end"]
    check(end["contexts_live"] == 1, f"contexts live at the end: {end}")
    check(end["contexts_made"] == int(rounds) + 1, f"contexts made: {end}")
    stats = luma_stats(os.path.join(d, "stats.json"))
    check(stats["footprint"]["contexts_made"] == int(rounds) + 1, f"exit footprint: {stats.get('footprint')}")
    print(f"context-race: {rounds} contexts destroyed while {threads} threads freed; "
          f"graveyard at the end {end['contexts_graveyard']}, thread records made "
          f"{end['thread_records_made']}")


CASES = {
    "stress": case_stress,
    "context-race": case_context_race,
    "stress-plain": case_stress_plain,
    "faults": case_faults,
    "bad-calls": case_bad_calls,
    "bad-settings": case_bad_settings,
    "bad-cli-input": case_bad_cli_input,
    "bad-traces-cli": case_bad_traces_cli,
    "bad-plans": case_bad_plans,
    "signal": case_signal,
    "sigkill": case_sigkill,
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        print(f"usage: reliability.py {{{'|'.join(CASES)}}} [ARGS]", file=sys.stderr)
        return 2
    if not LIB or not os.path.exists(LIB):
        print("reliability.py: LUMA_REL_LIB not set: skipped", file=sys.stderr)
        return 77
    try:
        CASES[sys.argv[1]](*sys.argv[2:])
    except Failed as e:
        print(f"reliability {' '.join(sys.argv[1:])}: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
