#!/usr/bin/env python3
"""replay_rmm_check.py CASE PROGRAM FAKE_DIR DATA_DIR - the workload's replay-rmm mode run
on the stand-in driver without luma (suite 'fake', one meson test per case and flavour):
what luma's runs of the same logs are compared against.

  threads  a log of three Thread values, streams of the program's own (one named twice),
           a pointer reused after its free, a free by another thread than the allocating
           one, an `allocate failure` row and a size-0 allocation with its free (skipped),
           a buffer left live: completed, exit 0, one JSON line whose allocations_served
           and the stand-in's mem_alloc_calls / mem_free_calls are the log's allocations
           and frees (no luma: each is one driver call), device_peak_bytes at least the
           log's peak of live bytes, no cuMemCreate
  oom      the same kind of log under LUMA_FAKE_CAPACITY=1M: the fourth allocation does not
           fit; exit 4, completed false, allocations_served 3, failed_bytes its size, and
           no row after it ran (no free, no fifth allocation)
  bad      a free of a pointer the log never allocated: exit 2, the line named on stderr,
           nothing on stdout and no CUDA call made
  torch    tests/data/torch_train.rmm.csv.gz (two threads, 61,217 rows): completed with
           its 30,612 allocations, device_peak_bytes at least its peak live (911,404,800 B);
           prints the time the replay took
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def write_log(path, rows):
    """rows: (thread, action, pointer, size, stream); the Time column counts up by 1 us."""
    with open(path, "w") as f:
        f.write(HEADER)
        for i, (thread, action, pointer, size, stream) in enumerate(rows):
            f.write(f"{thread},12:00:00.{i:06d},{action},{pointer:#x},{size},{stream:#x}\n")


def expected(rows):
    """The allocations and frees a replay makes of rows, and the peak of live bytes."""
    live, allocs, frees, peak, now = {}, 0, 0, 0, 0
    for _, action, pointer, size, _ in rows:
        if action == "allocate" and size > 0:
            live[pointer] = size
            allocs += 1
            now += size
            peak = max(peak, now)
        elif action == "free" and pointer in live:
            now -= live.pop(pointer)
            frees += 1
    return allocs, frees, peak


def run(program, fake_dir, log, capacity=None):
    env = dict(os.environ, LD_LIBRARY_PATH=fake_dir)
    env.pop("LD_PRELOAD", None)  # the driver alone
    for name in ("LUMA_FAKE_CAPACITY", "LUMA_FAKE_FAIL_EVERY", "LUMA_FAKE_COUNTERS"):
        env.pop(name, None)
    if capacity is not None:
        env["LUMA_FAKE_CAPACITY"] = capacity
    start = time.monotonic()
    p = subprocess.run([program, "replay-rmm", log], env=env, capture_output=True, text=True,
                       timeout=120)
    return p, time.monotonic() - start


def one_json_line(p):
    lines = p.stdout.splitlines()
    if len(lines) != 1:
        sys.exit(f"expected one line on stdout, got {p.stdout!r} (stderr {p.stderr!r})")
    return json.loads(lines[0])


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


KEYS = ["completed", "allocations_served", "failed_bytes", "device_peak_bytes",
        "mem_alloc_calls", "mem_free_calls", "mem_create_calls", "mem_release_calls"]

MAIN, AUTOGRAD, LOADER = 140001, 140077, 140123
S1, S2 = 0x55AA00, 0x55BB00  # streams of the program's own


def case_threads(program, fake_dir, work):
    rows = [
        (MAIN, "allocate", 0x7F0000000000, 1000, 0x0),
        (MAIN, "allocate", 0x7F0000100000, 70000, 0x0),
        (MAIN, "allocate failure", 0x0, 1 << 40, 0x0),
        (MAIN, "allocate", 0x0, 0, 0x0),  # cudaMalloc(0): nothing handed out
        (AUTOGRAD, "allocate", 0x7F0000200000, 1 << 20, S1),
        (AUTOGRAD, "free", 0x7F0000000000, 1000, 0x0),  # another thread's buffer
        (AUTOGRAD, "allocate", 0x7F0000300000, 3 << 20, 0x2),
        (MAIN, "free", 0x0, 0, 0x0),  # the size-0 allocation's free
        (MAIN, "free", 0x7F0000100000, 70000, 0x0),
        (MAIN, "allocate", 0x7F0000000000, 4096, S1),  # the pointer again: a new buffer
        (LOADER, "allocate", 0x7F0000400000, 200000, S2),
        (LOADER, "free", 0x7F0000400000, 200000, S2),
        (AUTOGRAD, "free", 0x7F0000200000, 1 << 20, S1),
        (AUTOGRAD, "allocate", 0x7F0000500000, 5 << 20, 0x1),
        (MAIN, "free", 0x7F0000000000, 4096, S1),
        (MAIN, "allocate", 0x7F0000600000, 12345, 0x0),
        (AUTOGRAD, "free", 0x7F0000300000, 3 << 20, 0x2),
        (MAIN, "allocate", 0x7F0000700000, 512, 0x0),  # left live, with 0x...500000 and 600000
    ]
    log = os.path.join(work, "threads.rmm.csv")
    write_log(log, rows)
    allocs, frees, peak = expected(rows)
    p, _ = run(program, fake_dir, log)
    check(p.returncode == 0, f"exit {p.returncode}, stderr {p.stderr!r}")
    got = one_json_line(p)
    print(json.dumps(got))
    check(list(got) == KEYS, f"keys {list(got)}")
    check(got["completed"] is True, "completed")
    check(got["allocations_served"] == allocs == 9, f"allocations_served {got['allocations_served']}")
    check(got["failed_bytes"] == 0, "failed_bytes")
    check(got["mem_alloc_calls"] == allocs, f"mem_alloc_calls {got['mem_alloc_calls']} != {allocs}")
    check(got["mem_free_calls"] == frees == 6, f"mem_free_calls {got['mem_free_calls']} != {frees}")
    check(got["device_peak_bytes"] >= peak, f"device_peak_bytes {got['device_peak_bytes']} < {peak}")
    check(got["mem_create_calls"] == 0 and got["mem_release_calls"] == 0, "no cuMemCreate")


def case_oom(program, fake_dir, work):
    k = 1 << 10
    rows = [
        (MAIN, "allocate", 0x1000000, 256 * k, 0x0),
        (AUTOGRAD, "allocate", 0x2000000, 256 * k, S1),
        (MAIN, "allocate", 0x3000000, 256 * k, 0x0),
        (AUTOGRAD, "allocate", 0x4000000, 512 * k, 0x0),  # 1.25 MiB live: past 1 MiB
        (AUTOGRAD, "free", 0x1000000, 256 * k, 0x0),
        (MAIN, "allocate", 0x5000000, 1 * k, 0x0),
    ]
    log = os.path.join(work, "oom.rmm.csv")
    write_log(log, rows)
    p, _ = run(program, fake_dir, log, capacity="1M")
    check(p.returncode == 4, f"exit {p.returncode} (expected 4), stderr {p.stderr!r}")
    got = one_json_line(p)
    print(json.dumps(got))
    check(got["completed"] is False, "completed")
    check(got["allocations_served"] == 3, f"allocations_served {got['allocations_served']}")
    check(got["failed_bytes"] == 512 * k, f"failed_bytes {got['failed_bytes']}")
    check(got["mem_alloc_calls"] == 3 and got["mem_free_calls"] == 0,
          "rows after the refused allocation ran")
    check(got["device_peak_bytes"] >= 3 * 256 * k, "device_peak_bytes")


def case_bad(program, fake_dir, work):
    rows = [
        (MAIN, "allocate", 0x1000000, 4096, 0x0),
        (MAIN, "free", 0x1000000, 4096, 0x0),
        (MAIN, "free", 0x1000000, 4096, 0x0),  # line 4: freed already
    ]
    log = os.path.join(work, "bad.rmm.csv")
    write_log(log, rows)
    counters = os.path.join(work, "counters.json")
    env_counters = dict(os.environ, LUMA_FAKE_COUNTERS=counters)
    p = subprocess.run([program, "replay-rmm", log], capture_output=True, text=True, timeout=60,
                       env=dict(env_counters, LD_LIBRARY_PATH=fake_dir))
    check(p.returncode == 2, f"exit {p.returncode} (expected 2)")
    check(p.stdout == "", f"stdout {p.stdout!r}")
    check(f"{log}:4: free of unknown pointer 0x1000000" in p.stderr, f"stderr {p.stderr!r}")
    with open(counters) as f:
        devices = json.load(f)["devices"]
    check(devices[0]["mem_alloc_calls"] == 0, "the log was replayed before it was checked")
    print(p.stderr.strip())


def case_torch(program, fake_dir, work, data_dir):
    log = os.path.join(work, "torch_train.rmm.csv")
    with gzip.open(os.path.join(data_dir, "torch_train.rmm.csv.gz"), "rb") as src, \
            open(log, "wb") as dst:
        dst.write(src.read())
    p, seconds = run(program, fake_dir, log)
    check(p.returncode == 0, f"exit {p.returncode}, stderr {p.stderr!r}")
    got = one_json_line(p)
    print(json.dumps(got))
    print(f"replay-rmm torch_train: {seconds:.3f} s (the process, start to exit)")
    check(got["completed"] is True, "completed")
    check(got["allocations_served"] == 30612, f"allocations_served {got['allocations_served']}")
    check(got["mem_alloc_calls"] == 30612, "mem_alloc_calls")
    check(got["device_peak_bytes"] >= 911404800, "device_peak_bytes below the peak live")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    case, program, fake_dir, data_dir = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="replay-rmm-") as work:
        if case == "threads":
            case_threads(program, fake_dir, work)
        elif case == "oom":
            case_oom(program, fake_dir, work)
        elif case == "bad":
            case_bad(program, fake_dir, work)
        elif case == "torch":
            case_torch(program, fake_dir, work, data_dir)
        else:
            sys.exit(f"unknown case {case}")


if __name__ == "__main__":
    main()
