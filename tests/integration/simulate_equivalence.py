#!/usr/bin/env python3
"""simulate_equivalence.py LUMA LIBLUMA FAKE_DIR PROG WRITE_SEQUENCES DATA_DIR WORK_DIR [--fine]

`luma simulate` checked live against what it models: every allocation sequence of the
repository is replayed through libluma.so on the stand-in driver (PROG's `replay-rmm`
mode: cuMemAlloc_v2 / cuMemFree_v2, one OS thread per Thread value, a non-blocking stream
made where the log first names a stream of its own) and through `luma simulate` given the
same file; both must give the same peak of device memory, the same driver allocations
(cuMemAlloc + cuMemCreate) and the same driver frees (cuMemFree + cuMemRelease), byte for
byte, and the library must log the free path simulate says it took. Nothing is compared
with a figure from an earlier run.

Sequences: tests/data/torch_train.rmm.csv.gz (two threads, as PyTorch's autograd thread
makes: reuse at once, then the legacy stream's barrier), and each synthetic sequence of
tests/doubles/training_sequence.h as WRITE_SEQUENCES writes it (one thread; and two
threads for some). Each is also replayed as derived files: with one Thread value (the
at-once path throughout) and with a stream of the program's own named on its first row
(the fenced path throughout). Settings: the defaults and expandable_segments:1. Then a
scan of memory limits from peak live up to past the unlimited peak and 1.10 x peak live
(0.01 x peak live apart; with --fine, the on-demand scan, 0.0025 apart up to 1.15 x), where every limit's answer must be the same: completes, or runs out at the
same allocation.

`--repeat`: the window replayed three times in a row, as a step repeats, checked the same
way. Some of the sequences are written out repeated (repeated(): each copy's rows with
their times moved past the copy before, then a free of each block still live, in the order
they were allocated, as `luma simulate --repeat` frees a copy's survivors); libluma.so
replays that file, and its totals must equal those of `luma simulate --repeat 3` given the
original: the first copy's figures are the plain run's, checked above, so the warm copies'
(the totals less the first copy's) are checked live too.

Costs (docs/reliability.md, "CI time"): the library's replays run in parallel, two at a
time; the CI scan is coarse and on the two paths and settings a one-thread program and a
PyTorch-like one get.
"""
import concurrent.futures
import gzip
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_bindings_venv as venvs  # noqa: E402  (stand_in_env)

TEST = "simulate_equivalence"
CAPACITY = 64 << 30  # the stand-in's device: more than any sequence here holds
OWN_STREAM = "0x7f00aa000000"  # a stream of the program's own, for the fenced variants
RUN_LIMIT_S = 120


def fail(message):
    print("%s: FAILED: %s" % (TEST, message))
    sys.exit(1)


class Tools:
    def __init__(self, luma, libluma, fake_dir, prog):
        self.luma, self.libluma, self.prog = luma, libluma, prog
        self.env = venvs.stand_in_env(fake_dir)
        self.env["LUMA_FAKE_CAPACITY"] = str(CAPACITY)

    def library(self, path, conf):
        """The replay under libluma.so: its JSON line, and the free paths it logged."""
        env = dict(self.env, LD_PRELOAD=self.libluma, LUMA_CONF=conf, LUMA_LOG_LEVEL="info",
                   LUMA_STATS="off")
        p = subprocess.run([self.prog, "replay-rmm", path], env=env, capture_output=True, text=True,
                           timeout=RUN_LIMIT_S)
        if p.returncode not in (0, 4):
            fail("%s under %r: exit %d\n%s%s" % (path, conf, p.returncode, p.stdout, p.stderr))
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if len(lines) != 1:
            fail("%s under %r: expected one JSON line\n%s" % (path, conf, p.stdout))
        r = json.loads(lines[0])
        if r["completed"] != (p.returncode == 0):
            fail("%s under %r: exit %d but completed=%s" % (path, conf, p.returncode, r["completed"]))
        paths = []
        for line in p.stderr.splitlines():
            if "freed blocks are reused after a barrier on the legacy stream" in line:
                paths.append("legacy")
            elif "freed blocks are fenced from now on" in line:
                paths.append("fenced")
        return r, paths

    def simulate(self, path, conf, extra=()):
        args = [self.luma, "simulate", path, "--json"] + (["--conf", conf] if conf else []) + list(extra)
        p = subprocess.run(args, capture_output=True, text=True, timeout=RUN_LIMIT_S)
        if p.returncode != 0:
            fail("%s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
        return json.loads(p.stdout)["devices"][0]


def derived(src, dst, one_thread=False, own_stream=False):
    """A copy of an RMM log with one Thread value, or with a stream of its own on row 1."""
    with open(src) as f, open(dst, "w") as out:
        out.write(f.readline())
        thread = None
        for i, line in enumerate(f):
            fields = line.rstrip("\n").split(",")
            if len(fields) != 6:
                out.write(line)
                continue
            if thread is None:
                thread = fields[0]
            if one_thread:
                fields[0] = thread
            if own_stream and i == 0:
                fields[5] = OWN_STREAM
            out.write(",".join(fields) + "\n")
    return dst


def parse_time(text):
    h, m, rest = text.split(":")
    sec, _, frac = rest.partition(".")
    return ((int(h) * 60 + int(m)) * 60 + int(sec)) * 1000000 + int((frac + "000000")[:6])


def format_time(us):
    sec, frac = divmod(us, 1000000)
    return "%02d:%02d:%02d.%06d" % (sec // 3600, sec // 60 % 60, sec % 60, frac)


def repeated(src, dst, copies):
    """An RMM log holding the window of src `copies` times in a row (see the docstring)."""
    with open(src) as f:
        header = f.readline()
        rows = [line.rstrip("\n").split(",") for line in f if line.strip()]
    times = [parse_time(r[1]) for r in rows]
    span = times[-1] - times[0] + 1
    with open(dst, "w") as out:
        out.write(header)
        for k in range(copies):
            live = {}  # pointer -> its allocation's row, in the order allocated
            for r, t in zip(rows, times):
                out.write(",".join([r[0], format_time(t + k * span)] + r[2:]) + "\n")
                if r[2] == "allocate":
                    live[r[3]] = r
                else:
                    live.pop(r[3], None)
            if k + 1 < copies:
                end = format_time(times[-1] + k * span)
                for r in live.values():
                    out.write(",".join([r[0], end, "free", r[3], r[4], r[5]]) + "\n")
    return dst


def compare_repeated(name, lib, sim):
    """The library's totals over a repeated file against simulate --repeat's run."""
    run = sim["runs"][0]
    first, warm = run["first_copy"], run["warm_copies"]
    got = {
        "allocations served": lib["allocations_served"],
        "peak device bytes": lib["device_peak_bytes"],
        "driver allocations": lib["mem_alloc_calls"] + lib["mem_create_calls"],
        "driver frees": lib["mem_free_calls"] + lib["mem_release_calls"],
    }
    want = {
        "allocations served": first["allocations"] + warm["allocations"],
        "peak device bytes": run["peak_reserved_bytes"],
        "driver allocations": first["driver_allocations"] + warm["driver_allocations"],
        "driver frees": first["driver_frees"] + warm["driver_frees"],
    }
    return ["%s: %s: libluma.so %s, luma simulate --repeat %s" % (name, k, got[k], want[k])
            for k in got if got[k] != want[k]]


def compare(name, lib, lib_paths, sim):
    """The library's figures against the simulation's run; a list of differences."""
    run = sim["runs"][0]
    got = {
        "completed": lib["completed"],
        "allocations served": lib["allocations_served"],
        "peak device bytes": lib["device_peak_bytes"],
        "driver allocations": lib["mem_alloc_calls"] + lib["mem_create_calls"],
        "driver frees": lib["mem_free_calls"] + lib["mem_release_calls"],
        "free paths": lib_paths,
    }
    want = {
        "completed": run["completed"],
        "allocations served": run["allocations_served"],
        "peak device bytes": run["peak_reserved_bytes"],
        "driver allocations": run["driver_allocations"],
        "driver frees": run["driver_frees"],
        # The paths taken after the first (the library logs each change).
        "free paths": [p["path"] for p in run["free_paths"][1:]],
    }
    if run["free_paths"][0]["path"] != "at-once":  # fenced from the start: logged at its cause
        want["free paths"] = [run["free_paths"][0]["path"]] + want["free paths"]
    return ["%s: %s: libluma.so %s, luma simulate %s" % (name, k, got[k], want[k])
            for k in got if got[k] != want[k]]


def main():
    args = [a for a in sys.argv[1:] if a != "--fine"]
    fine = "--fine" in sys.argv[1:]
    if len(args) != 7:
        print(__doc__)
        sys.exit(2)
    luma, libluma, fake_dir, prog, write_sequences, data_dir, work = args
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tools = Tools(luma, libluma, fake_dir, prog)

    # The sequences: the shipped log, the synthetic ones, and their derived files.
    torch = os.path.join(work, "torch_train.rmm.csv")
    with gzip.open(os.path.join(data_dir, "torch_train.rmm.csv.gz"), "rb") as f, open(torch, "wb") as out:
        shutil.copyfileobj(f, out)
    synth = os.path.join(work, "synthetic")
    os.makedirs(synth)
    subprocess.run([write_sequences, synth], check=True, capture_output=True, timeout=RUN_LIMIT_S)
    files = [torch] + sorted(os.path.join(synth, n) for n in os.listdir(synth) if n.endswith(".rmm.csv"))
    if not any(".threads." in f for f in files):
        fail("no synthetic sequence with several threads was written")
    cases = []
    for f in files:
        base = os.path.basename(f)[: -len(".rmm.csv")]
        cases.append((base, f))
        if base == "torch_train" or base.endswith(".threads"):
            cases.append((base + " (one thread)", derived(f, os.path.join(work, base + ".one.csv"), one_thread=True)))
        if base in ("torch_train", "classifier-fp32"):
            cases.append((base + " (own stream)", derived(f, os.path.join(work, base + ".stream.csv"), own_stream=True)))
    confs = ["", "expandable_segments:1"]

    def one(case, conf):
        name, path = case
        label = "%s, %s" % (name, conf or "defaults")
        lib, lib_paths = tools.library(path, conf)
        sim = tools.simulate(path, conf)
        return label, sim, lib, lib_paths

    problems = []
    seen_paths = set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for label, sim, lib, lib_paths in pool.map(lambda cc: one(*cc), [(c, k) for c in cases for k in confs]):
            run = sim["runs"][0]
            seen_paths.update(p["path"] for p in run["free_paths"])
            diffs = compare(label, lib, lib_paths, sim)
            problems += diffs
            print("%-45s %-8s peak %15d (%.3f x live) driver allocs %5d frees %4d  [%s]" % (
                label, "ok" if not diffs else "DIFFERS", run["peak_reserved_bytes"],
                run["peak_reserved_over_peak_live"], run["driver_allocations"], run["driver_frees"],
                " -> ".join(p["path"] for p in run["free_paths"])))
    if seen_paths != {"at-once", "legacy", "fenced"}:
        problems.append("the sequences took the free paths %s, not all three" % sorted(seen_paths))

    # --free-path makes the model take a path the recording does not show: the one-thread
    # torch_train forced onto the fenced path is the run with a stream of its own.
    forced = tools.simulate(os.path.join(work, "torch_train.one.csv"), "", ["--free-path", "fenced"])
    lib, lib_paths = tools.library(os.path.join(work, "torch_train.stream.csv"), "")
    problems += [p for p in compare("torch_train --free-path fenced", lib, ["fenced"], forced)
                 if "free paths" not in p]

    # --repeat 3: the library replays the repeated file, simulate the original three times.
    repeats = [("torch_train", torch), ("torch_train (one thread)", os.path.join(work, "torch_train.one.csv"))]
    repeats += [(n, os.path.join(synth, n + ".rmm.csv")) for n in ("gpt2-size", "decoding", "moe-routing")]

    copies = {path: repeated(path, os.path.join(work, os.path.basename(path) + ".x3.csv"), 3)
              for _, path in repeats}

    def again(case, conf):
        name, path = case
        lib, _ = tools.library(copies[path], conf)
        sim = tools.simulate(path, conf, ["--repeat", "3"])
        return "%s, %s, --repeat 3" % (name, conf or "defaults"), lib, sim

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for label, lib, sim in pool.map(lambda cc: again(*cc), [(c, k) for c in repeats for k in confs]):
            diffs = compare_repeated(label, lib, sim)
            problems += diffs
            w = sim["runs"][0]["warm_copies"]
            print("%-45s %-8s warm copies: driver allocs %5d frees %5d per 100 allocations %.2f" % (
                label, "ok" if not diffs else "DIFFERS", w["driver_allocations"], w["driver_frees"],
                w["driver_allocations_per_100"]))

    # Memory limits: each limit's answer the same. The one-thread and the two-thread
    # torch_train, the defaults and expandable segments; a synthetic run with the defaults.
    step = 0.0025 if fine else 0.01
    scans = [("torch_train (one thread)", os.path.join(work, "torch_train.one.csv"), ""),
             ("torch_train", torch, ""),
             ("torch_train (one thread)", os.path.join(work, "torch_train.one.csv"), "expandable_segments:1"),
             ("classifier-fp32", os.path.join(synth, "classifier-fp32.rmm.csv"), "")]
    for name, path, conf in scans:
        sim = tools.simulate(path, conf)
        live = sim["peak_live_bytes"]
        # Up past the unlimited peak and 1.10 x peak live (1.15 x fine): where limits decide
        # (completing is not monotone just above the unlimited peak: docs/simulate.md).
        top = max(sim["runs"][0]["peak_reserved_bytes"], int(live * (1.15 if fine else 1.10)))
        limits = []
        k = 0
        while True:
            limit = int(live * (1 + k * step))
            limits.append(limit)
            if limit > top:
                break
            k += 1

        def at(limit, name=name, path=path, conf=conf):
            c = ",".join(x for x in (conf, "memory_limit:%d" % limit) if x)
            lib, lib_paths = tools.library(path, c)
            return limit, compare("%s, %s" % (name, c), lib, lib_paths, tools.simulate(path, c)), lib["completed"]

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            answers = list(pool.map(at, limits))
        line = "".join("#" if done else "." for _, _, done in answers)
        print("%-45s limits from 1.000 x live, %.4f apart: %s" % ("%s, %s" % (name, conf or "defaults"), step, line))
        for _, diffs, _ in answers:
            problems += diffs

    if problems:
        fail("libluma.so and luma simulate differ:\n  " + "\n  ".join(problems))
    print("%s: ok: %d sequences x %d settings, forced path, %d repeated, %d limit scans" % (
        TEST, len(cases), len(confs), len(repeats), len(scans)))


if __name__ == "__main__":
    main()
