#!/usr/bin/env python3
"""multiprocessing_workers.py WORK_DIR FAKE_DIR LIBLUMA POOL SANITIZE

Python multiprocessing workers under libluma.so, ended by SIGTERM, must write their
statistics like any process. POOL (multiprocessing_pool.py) runs a pool of workers that
allocate through NVIDIA's bindings (cuda.bindings.driver) on the stand-in driver, then
ends it with pool.terminate(), which sends SIGTERM to each worker; once per start method:

  fork        workers forked from the parent, in which luma had started (the bindings
              looked up the driver) but nothing had been served;
  forkserver  workers forked from a server process, in which luma had started likewise;
  spawn       fresh interpreters (the control: luma starts in each as in any program).

Each worker must have written its own statistics file (LUMA_STATS=json, one per process:
stats.%p.json) with ended_by "SIGTERM" and its allocations counted, and must have died by
SIGTERM (exit code -15), as it would have without luma; no other process writes one (the
parent and the server never allocated). The run also checks that luma's flusher thread
existed in the process the workers were forked from, or the fork cases would test nothing.

The bindings come from the venv that cuda_bindings_check.py uses (cuda_bindings_venv.py:
installed once, skipped with exit 77 when PyPI cannot be reached); sanitizer builds skip.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

from cuda_bindings_venv import ensure_bindings, skip_under_sanitizer, stand_in_env

TEST = "multiprocessing_workers"
METHODS = ("fork", "forkserver", "spawn")
WORKERS = 3
RUN_LIMIT_S = 90  # one pool run (about 2 s on the stand-in)
FLUSHER = "luma-flush"  # the name of luma's flusher thread (signal_flush.cpp)


def fail(message):
    print(TEST + ": FAILED: " + message)
    sys.exit(1)


def run_pool(python, pool, env, method):
    """The pool program's JSON; fails the test when it did not give one."""
    try:
        p = subprocess.run([python, pool, method, str(WORKERS)], env=env, capture_output=True,
                           text=True, timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        fail("%s: the pool program ran over %d s" % (method, RUN_LIMIT_S))
    if p.returncode != 0:
        fail("%s: the pool program exited %d\n%s%s" % (method, p.returncode, p.stdout[-2000:],
                                                       p.stderr[-4000:]))
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail("%s: no JSON from the pool program:\n%s%s" % (method, p.stdout[-2000:],
                                                           p.stderr[-2000:]))


def check_method(method, out, stats_dir):
    """The problems found in one pool run (empty when none)."""
    problems = []
    workers = out.get("workers", [])
    if len(workers) != WORKERS:
        return ["%s: %d of %d workers reported: %s" % (method, len(workers), WORKERS,
                                                        json.dumps(out)[-2000:])]
    want = out["allocations_per_worker"]
    for w in workers:
        if "error" in w or w["allocated"] != want:
            problems.append("%s: worker %d allocated %d of %d: %s"
                            % (method, w["pid"], w["allocated"], want, w.get("error", "")))
    # The fork cases must really be forks of a process where luma had started.
    if method == "fork" and FLUSHER not in out["parent_threads"]:
        problems.append("fork: luma had not started in the parent before the fork "
                        "(threads %s)" % out["parent_threads"])
    if method == "forkserver":
        for w in workers:
            if w["parent"] == out["parent"] or FLUSHER not in w["parent_threads"]:
                problems.append("forkserver: worker %d was not forked from a server where "
                                "luma had started (parent %d, its threads %s)"
                                % (w["pid"], w["parent"], w["parent_threads"]))
    pids = sorted(w["pid"] for w in workers)
    codes = out.get("exit_codes", {})
    for pid in pids:
        if codes.get(str(pid)) != -15:
            problems.append("%s: worker %d ended with exit code %s, not -15 (SIGTERM)"
                            % (method, pid, codes.get(str(pid))))
    found = {}
    for path in glob.glob(os.path.join(stats_dir, "stats.*.json")):
        with open(path) as f:
            found[int(os.path.basename(path).split(".")[1])] = json.load(f)
    missing = [pid for pid in pids if pid not in found]
    if missing:
        problems.append("%s: no statistics from worker(s) %s (files from %s)"
                        % (method, missing, sorted(found)))
    strangers = sorted(set(found) - set(pids))
    if strangers:
        problems.append("%s: statistics from processes that are not workers: %s"
                        % (method, strangers))
    for pid in pids:
        stats = found.get(pid)
        if stats is None:
            continue
        ended_by = stats.get("ended_by")
        allocs = sum(d.get("alloc_calls", 0) for d in stats.get("devices", []))
        if ended_by != "SIGTERM" or allocs != want:
            problems.append("%s: worker %d: ended_by %r, %d allocations counted (want "
                            "\"SIGTERM\", %d)" % (method, pid, ended_by, allocs, want))
    return problems


def main():
    work, fake_dir, libluma, pool, sanitize = sys.argv[1:6]
    skip_under_sanitizer(TEST, sanitize)
    os.makedirs(work, exist_ok=True)
    python = ensure_bindings(TEST, os.path.join(work, "venv"))
    # PYTHONPATH: the forkserver's server imports the pool module by name (preloaded).
    base_env = dict(stand_in_env(fake_dir), LD_PRELOAD=libluma, LUMA_STATS="json",
                    PYTHONPATH=os.path.dirname(os.path.abspath(pool)))
    problems = []
    started = time.monotonic()
    for method in METHODS:
        stats_dir = os.path.join(work, "stats-multiprocessing-" + method)
        shutil.rmtree(stats_dir, ignore_errors=True)
        os.makedirs(stats_dir)
        env = dict(base_env, LUMA_STATS_FILE=os.path.join(stats_dir, "stats.%p.json"))
        found = check_method(method, run_pool(python, pool, env, method), stats_dir)
        print("%s: %s" % (TEST, "; ".join(found) if found else "%s: %d workers ended by "
                          "SIGTERM, each wrote its statistics" % (method, WORKERS)))
        problems += found
    elapsed = time.monotonic() - started
    if problems:
        fail("\n  ".join(["workers ended by SIGTERM:"] + problems))
    print("%s: ok: %d start methods in %.1f s" % (TEST, len(METHODS), elapsed))


if __name__ == "__main__":
    main()
