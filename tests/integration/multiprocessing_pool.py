#!/usr/bin/env python3
"""multiprocessing_pool.py METHOD WORKERS: a Python multiprocessing pool whose workers use
the driver through NVIDIA's bindings (cuda.bindings.driver), ended by pool.terminate(),
which sends SIGTERM to every worker. Run by multiprocessing_workers.py under libluma.so.

On import this module looks up the driver (cuDriverGetVersion, as libraries do to check
it: the bindings load libcuda.so.1 and resolve every entry point with cuGetProcAddress_v2,
so luma starts) but never calls cuInit, as a program must not before a fork (the driver
refuses a child forked after cuInit). With METHOD fork the workers are forked from this
process; with forkserver from a server process that imported this module first (preloaded:
luma had started there too); with spawn they are fresh interpreters. Each worker, in a task, makes the primary context current, allocates ALLOCATIONS
buffers, frees half, reports, and stays in the task. The parent waits for every report,
terminates the pool, and prints one JSON object: the reports and each worker's exit code.
Nothing here knows about luma, except that it names the threads of the processes (the
runner looks for luma's flusher thread, which proves luma had started before the fork).
"""
import json
import multiprocessing
import os
import sys
import time
import traceback

from cuda.bindings import driver as cu

ALLOCATIONS = 6
SIZE = 1 << 20
REPORT_LIMIT_S = 60
HOLD_LIMIT_S = 90


def thread_names(pid):
    """The names of the threads of process `pid` (empty when it cannot be read)."""
    names = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                names.append(f.read().strip())
    except OSError:
        pass
    return sorted(names)


def check(call, result):
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError("%s: %s" % (call, result[0].name))
    return result[1] if len(result) == 2 else result[1:]


_reports = None  # the queue to the parent, in each worker


def keep_queue(reports):
    """The pool's initializer: a queue reaches a worker only by inheritance, not in a task."""
    global _reports
    _reports = reports


def allocate_and_hold(_):
    """One task per worker: allocate, report, then stay busy until pool.terminate() ends
    the worker. A worker idle at terminate() may instead read the pool's stop sentinel and
    exit by itself (os._exit, no signal); a busy one can only be ended by the SIGTERM."""
    report = {"pid": os.getpid(), "parent": os.getppid(),
              "parent_threads": thread_names(os.getppid()), "allocated": 0}
    try:
        check("cuInit", cu.cuInit(0))
        dev = check("cuDeviceGet", cu.cuDeviceGet(0))
        ctx = check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(dev))
        check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
        ptrs = []
        for _ in range(ALLOCATIONS):
            ptrs.append(check("cuMemAlloc", cu.cuMemAlloc(SIZE)))
            report["allocated"] += 1
        for ptr in ptrs[::2]:
            check("cuMemFree", cu.cuMemFree(ptr))
    except Exception:
        report["error"] = traceback.format_exc()[-1500:]
    report["threads"] = thread_names(os.getpid())
    _reports.put(report)
    deadline = time.monotonic() + HOLD_LIMIT_S  # ended by SIGTERM long before
    while time.monotonic() < deadline:
        time.sleep(0.05)


# At import: here, in the forkserver's server and in each spawned worker.
DRIVER_VERSION = check("cuDriverGetVersion", cu.cuDriverGetVersion())


def main():
    method, workers = sys.argv[1], int(sys.argv[2])
    out = {"method": method, "driver_version": DRIVER_VERSION, "parent": os.getpid(),
           "allocations_per_worker": ALLOCATIONS,
           "parent_threads": thread_names(os.getpid())}
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        # The server imports this module (as applications preload torch): luma starts
        # there before it forks the workers. Python 3.11's default, preloading __main__,
        # does nothing (the workers import it themselves), and the server does not get
        # this sys.path: the runner puts this directory on PYTHONPATH.
        ctx.set_forkserver_preload([os.path.splitext(os.path.basename(__file__))[0]])
    reports = ctx.Queue()
    pool = ctx.Pool(workers, initializer=keep_queue, initargs=(reports,))
    # Each worker takes one task and keeps it: `workers` tasks land on distinct workers.
    pool.map_async(allocate_and_hold, range(workers), chunksize=1)
    try:
        out["workers"] = [reports.get(timeout=REPORT_LIMIT_S) for _ in range(workers)]
    except Exception:
        out["workers_error"] = traceback.format_exc()[-1500:]
    processes = multiprocessing.active_children()  # the pool's workers, still alive
    pool.terminate()  # SIGTERM to each worker, then joins them
    out["exit_codes"] = {str(p.pid): p.exitcode for p in processes}
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
