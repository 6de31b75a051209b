#!/usr/bin/env python3
"""live_view.py - `luma top` and `luma exporter` beside a running job, for scripts/gpu-check.

Starts JOB (a command that runs under libluma.so: its environment carries LD_PRELOAD), and
while it runs asks `luma top --once --json` until the job's row shows allocated bytes (or
--wait seconds pass), then starts `luma exporter --listen 127.0.0.1:PORT`, fetches
http://127.0.0.1:PORT/metrics (urllib) and keeps the series of the job's pid. Then it stops
the exporter (SIGTERM) and the job (SIGINT, SIGTERM, then SIGKILL), asks luma top once more
(the job's row must be gone), and writes what it saw to one JSON file (--out): the job's
pid, top's row for it, the metric lines naming it, each command's exit and output. The
luma tool runs with --tool-libs on LD_LIBRARY_PATH (its bundled shared libraries); the job
never does. A luma without the `top` (or `exporter`) subcommand is
recorded as "not in this build" and the job is not started.
The job must exec its program, not fork it: its pid is the one looked for.
Exit 0 both views saw the job with allocated and reserved bytes > 0 and top dropped it once
it ended (or a view is not in this build), 1 otherwise (or `luma --help` failed), 2 usage.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

# The exporter's series for one process: luma_NAME{...pid="PID"...} VALUE.
SERIES = re.compile(r'^(luma_\w+)\{([^}]*)\}\s+(\S+)')


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--luma", required=True, help="the luma tool")
    p.add_argument("--tool-libs", default="", help="LD_LIBRARY_PATH for the luma tool")
    p.add_argument("--wait", type=float, default=40.0,
                   help="seconds to wait for the job's allocations to show in luma top")
    p.add_argument("--job-log", required=True, help="the job's stdout and stderr go here")
    p.add_argument("--out", required=True, help="JSON result file")
    p.add_argument("job", nargs=argparse.REMAINDER, help="-- JOB COMMAND...")
    a = p.parse_args(argv)
    if a.job and a.job[0] == "--":
        a.job = a.job[1:]
    if not a.job:
        p.error("a job command is needed after --")
    return a


def tool_env(a):
    """The luma tool's environment: its libraries first, never libluma.so preloaded."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if a.tool_libs:
        env["LD_LIBRARY_PATH"] = a.tool_libs + (":" + env["LD_LIBRARY_PATH"]
                                                if env.get("LD_LIBRARY_PATH") else "")
    return env


def tool(a, args, timeout=20):
    """Runs the luma tool; (exit, stdout, stderr); exit None when it could not run."""
    try:
        r = subprocess.run([a.luma] + args, env=tool_env(a), capture_output=True, text=True,
                           timeout=timeout, check=False)
        return r.returncode, r.stdout, r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "", repr(e)


def has_subcommand(help_text, name):
    return re.search(rf"^\s+{name}\b", help_text, re.M) is not None


def job_row(top_json, pid):
    """The job's row in `luma top --json` (the first, device 0 when there are several)."""
    try:
        rows = json.loads(top_json).get("rows", [])
    except (ValueError, AttributeError):
        return None
    mine = [r for r in rows if isinstance(r, dict) and r.get("pid") == pid]
    return min(mine, key=lambda r: r.get("device", 0)) if mine else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc, signals=(signal.SIGTERM,)):
    """Each signal in turn until it exits (5 s each), then SIGKILL; the exit status."""
    for sig in signals:
        if proc.poll() is not None:
            break
        proc.send_signal(sig)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    return proc.returncode


def watch_top(a, job, seen):
    """Asks luma top until the job's row shows allocations; fills seen["top"]."""
    deadline = time.monotonic() + a.wait
    last = (None, "", "")
    tries = 0
    while time.monotonic() < deadline and job.poll() is None:
        tries += 1
        last = tool(a, ["top", "--once", "--json"])
        row = job_row(last[1], job.pid) if last[0] == 0 else None
        if row and row.get("allocated_bytes", 0) > 0:
            break
        time.sleep(0.5)
    row = job_row(last[1], job.pid) if last[0] == 0 else None
    seen["top"] = {"exit": last[0], "tries": tries, "row": row, "stdout": last[1][-4000:],
                   "stderr": last[2][-2000:], "job_running": job.poll() is None}


def scrape(a, job, seen):
    """Starts luma exporter, fetches /metrics once it answers; fills seen["exporter"]."""
    port = free_port()
    exp = subprocess.Popen([a.luma, "exporter", "--listen", f"127.0.0.1:{port}"], env=tool_env(a),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    body, error = None, None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and exp.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode("utf-8", "replace")
            break
        except OSError as e:  # not listening yet
            error = repr(e)
            time.sleep(0.3)
    rc = stop(exp)
    out = exp.stdout.read() if exp.stdout else ""
    lines = [ln for ln in (body or "").splitlines() if f'pid="{job.pid}"' in ln]
    values = {}
    for ln in lines:
        m = SERIES.match(ln)
        if m:
            values[m.group(1)] = float(m.group(3))
    seen["exporter"] = {"port": port, "answered": body is not None, "error": None if body else error,
                        "job_lines": lines, "job_values": values, "exit_after_stop": rc,
                        "output": out[-2000:], "job_running": job.poll() is None}


def main(argv):
    a = parse_args(argv)
    seen = {"job": a.job}
    rc, help_text, err = tool(a, ["--help"])
    seen["help_exit"] = rc
    seen["top_in_build"] = has_subcommand(help_text + err, "top")
    seen["exporter_in_build"] = has_subcommand(help_text + err, "exporter")
    ok = rc == 0
    if rc != 0:  # a tool that cannot run says nothing about what is in the build
        seen["help_error"] = (err or help_text)[-2000:]
        print(f"live-view: luma --help exited {rc}: {seen['help_error'].strip()[-300:]}")
    if rc == 0 and (seen["top_in_build"] or seen["exporter_in_build"]):
        with open(a.job_log, "w", encoding="utf-8") as log:
            job = subprocess.Popen(a.job, stdout=log, stderr=subprocess.STDOUT)
            seen["job_pid"] = job.pid
            try:
                if seen["top_in_build"]:
                    watch_top(a, job, seen)
                    row = seen["top"]["row"]
                    ok &= bool(row and row.get("allocated_bytes", 0) > 0 and row.get("reserved_bytes", 0) > 0)
                if seen["exporter_in_build"]:
                    scrape(a, job, seen)
                    v = seen["exporter"]["job_values"]
                    ok &= v.get("luma_allocated_bytes", 0) > 0 and v.get("luma_reserved_bytes", 0) > 0
            finally:
                seen["job_exit"] = stop(job, (signal.SIGINT, signal.SIGTERM))
            if seen["top_in_build"]:
                # A stopped job may leave its record (no exit handler runs on a signal);
                # luma top must drop the record of a process that is gone, not list it.
                after = tool(a, ["top", "--once", "--json"])
                seen["top_after_exit"] = {"exit": after[0],
                                          "row": job_row(after[1], job.pid) if after[0] == 0 else None}
                ok &= after[0] == 0 and seen["top_after_exit"]["row"] is None
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(seen, f, indent=1)
    for name in ("top", "exporter"):
        if rc == 0 and not seen[f"{name}_in_build"]:
            print(f"live-view: luma {name}: not in this build")
    if "top" in seen:
        print(f"live-view: luma top: job pid {seen.get('job_pid')} row {seen['top']['row']}")
    if "exporter" in seen:
        print(f"live-view: luma exporter: answered {seen['exporter']['answered']}, "
              f"job series {seen['exporter']['job_values']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
