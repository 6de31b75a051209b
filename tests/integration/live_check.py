#!/usr/bin/env python3
"""live_check.py MODE WORK_DIR FAKE_DIR LIBLUMA LUMA PROG [VENV]

The live view end to end (docs/live-record.md): two programs under libluma.so on the
stand-in driver (PROG's `hold` mode: K blocks of CHUNK bytes, held until stdin closes),
members of one limit_group, publish their live records in a directory of their own.

  top       `luma top --once --bytes` and `--json` show exactly what each holds (allocated
            K x CHUNK; reserved, peak, the limit, the group and its budget, no OOMs), the
            largest reserved first; the reserved bytes are the ones the program's exit
            statistics report; a damaged file, files another user owns or others may write,
            and a link in the directory are each skipped with one line (once, however many
            refreshes); a program killed with SIGKILL is gone from the table within a
            few seconds (a zombie first, then reaped) and its record removed; one that exits
            removes its own; one that exec'd another program after allocating (same pid and
            start time) is not listed, its old record removed.
  exporter  `luma exporter --listen 127.0.0.1:0` serves the same figures at /metrics, parsed
            with prometheus_client's parser (PyPI, in the venv VENV; skipped when PyPI cannot
            be reached); the skipped files are one line each over several scrapes; the
            killed program's series are gone from the next scrape.
"""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_bindings_venv as venvs  # noqa: E402  (the shared venv helper)

MiB = 1 << 20
LIMIT = 256 * MiB
# CHUNK, K: B holds more and reserves more under any placement (its 12 MiB blocks get
# segments of their own), so it is listed first.
HOLDERS = {"a": (4 * MiB, 3), "b": (12 * MiB, 5)}
GONE_WITHIN_S = 5.0
RUN_LIMIT_S = 60
PROMETHEUS_CLIENT = "prometheus-client==0.26.0"
# Names a record could have but no process can (pids stop at 2^22, Linux's PID_MAX_LIMIT).
NO_PID = 1 << 22

TEST = "live"


def fail(message):
    print("%s: FAILED: %s" % (TEST, message))
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def read_line(proc, what, limit_s=RUN_LIMIT_S):
    """One line of proc's stdout, within limit_s."""
    ready, _, _ = select.select([proc.stdout], [], [], limit_s)
    if not ready:
        fail("%s: no output within %d s" % (what, limit_s))
    return proc.stdout.readline()


def run(cmd, env=None):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        fail("%s ran over %d s" % (cmd, RUN_LIMIT_S))
    if p.returncode != 0:
        fail("%s exited %d\n%s%s" % (cmd, p.returncode, p.stdout[-2000:], p.stderr[-3000:]))
    return p


class Setup:
    def __init__(self, mode, work, fake_dir, libluma, luma, prog):
        self.work = os.path.join(work, mode)
        shutil.rmtree(self.work, ignore_errors=True)
        self.live = os.path.join(self.work, "live")
        os.makedirs(self.live, mode=0o700)
        self.luma = luma
        self.prog = prog
        self.uid = os.geteuid()
        self.group = "livetest%d" % os.getpid()
        self.env = venvs.stand_in_env(fake_dir)
        self.env.update(LD_PRELOAD=libluma, LUMA_LIVE_DIR=self.live, LUMA_STATS="json",
                        LUMA_STATS_FILE=os.path.join(self.work, "stats.%p.json"),
                        LUMA_CONF="memory_limit:%d,limit_group:%s" % (LIMIT, self.group))
        self.procs = {}
        for name, (chunk, k) in HOLDERS.items():
            self.procs[name] = subprocess.Popen(
                [prog, "hold", str(chunk), str(k), "1", "0"], env=self.env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, (chunk, k) in HOLDERS.items():
            line = read_line(self.procs[name], "hold %s" % name)
            check(line.strip() == str(k), "hold %s held %r blocks, not %d" % (name, line, k))

    def pid(self, name):
        return self.procs[name].pid

    def record(self, name):
        return os.path.join(self.live, "luma-live.%d.%d" % (self.uid, self.pid(name)))

    def top(self, *args):
        return run([self.luma, "top", "--once", "--dir", self.live] + list(args))

    def top_json(self):
        return json.loads(self.top("--json").stdout)

    def plant(self):
        """Files a reader must skip, each with one line: {path: phrase of its line}."""
        planted = {}
        damaged = os.path.join(self.live, "luma-live.%d.%d" % (self.uid, NO_PID + 1))
        with open(damaged, "wb") as f:
            f.write(b"\x7fnot a record" * 8)
        planted[damaged] = "holds 104 bytes, less than a record's header (512); skipped"
        writable = os.path.join(self.live, "luma-live.%d.%d" % (self.uid, NO_PID + 2))
        shutil.copyfile(self.record("a"), writable)  # a real record's bytes: the mode alone is wrong
        os.chmod(writable, 0o666)
        planted[writable] = "is writable by others (mode 0666); skipped"
        link = os.path.join(self.live, "luma-live.%d.%d" % (self.uid, NO_PID + 3))
        os.symlink(self.record("a"), link)
        planted[link] = "is a symbolic link; skipped"
        if self.uid == 0:  # only root can give a file to another user
            foreign = os.path.join(self.live, "luma-live.%d.%d" % (self.uid, NO_PID + 4))
            shutil.copyfile(self.record("a"), foreign)
            os.chmod(foreign, 0o600)
            os.chown(foreign, 65534, 65534)
            planted[foreign] = "is owned by uid 65534, not 0; skipped"
        # Another user's record (by its name) is not this user's business: not even a line.
        other = os.path.join(self.live, "luma-live.%d.%d" % (self.uid + 1, NO_PID + 5))
        with open(other, "wb") as f:
            f.write(b"x")
        return planted

    def finish(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()


def expected_allocated(name):
    chunk, k = HOLDERS[name]
    return chunk * k


def exit_stats(setup, pid):
    path = os.path.join(setup.work, "stats.%d.json" % pid)
    with open(path) as f:
        return json.load(f)


def table_rows(text):
    """The rows of `luma top --bytes`: {pid: [command, dev, allocated, reserved, peak,
    pending, limit, group, ooms]}, and the group lines."""
    lines = text.splitlines()
    head = [i for i, l in enumerate(lines) if l.split()[:3] == ["PID", "COMMAND", "DEV"]]
    check(len(head) == 1, "no header line in:\n" + text)
    rows, order, groups = {}, [], []
    for line in lines[head[0] + 1:]:
        if line.startswith("group "):
            groups.append(line)
            continue
        f = line.split()
        check(len(f) == 10, "a row of 10 columns expected: %r" % line)
        rows[int(f[0])] = f[1:]
        order.append(int(f[0]))
    return rows, order, groups


def skipped_lines(stderr, planted):
    """For each planted file, how many lines of stderr name it (with the right phrase)."""
    counts = {}
    for path, phrase in planted.items():
        counts[path] = sum(1 for l in stderr.splitlines() if path + " " + phrase in l)
    return counts


def check_top(setup):
    a, b = setup.pid("a"), setup.pid("b")
    for name in HOLDERS:
        st = os.stat(setup.record(name))
        check(st.st_mode & 0o777 == 0o600, "record mode %o" % (st.st_mode & 0o777))
        check(st.st_uid == setup.uid, "record owner %d" % st.st_uid)

    p = setup.top("--bytes")
    check(p.stderr == "", "a clean directory gives no line: %r" % p.stderr)
    rows, order, groups = table_rows(p.stdout)
    check(set(rows) == {a, b}, "rows for %s, expected %s\n%s" % (sorted(rows), [a, b], p.stdout))
    check(order == [b, a], "largest reserved first: %s\n%s" % (order, p.stdout))
    reserved = {}
    for name, pid in (("a", a), ("b", b)):
        command, dev, alloc, res, peak, pending, limit, group, ooms = rows[pid]
        check(command == "prog_driver" and dev == "0", "row %s" % rows[pid])
        check(int(alloc) == expected_allocated(name),
              "%s allocated %s, holds %d" % (name, alloc, expected_allocated(name)))
        check(int(res) >= int(alloc) and int(peak) == int(res), "%s reserved %s peak %s" % (name, res, peak))
        check(pending == "0" and ooms == "0", "%s pending %s ooms %s" % (name, pending, ooms))
        check(int(limit) == LIMIT and group == setup.group, "%s limit %s group %s" % (name, limit, group))
        reserved[name] = int(res)
    expected_group = "group %s on device 0: %d reserved of its %d budget by 2 processes" % (
        setup.group, reserved["a"] + reserved["b"], LIMIT)
    check(groups == [expected_group], "group lines %s, expected %r" % (groups, expected_group))

    j = setup.top_json()
    check(j["processes"] == 2 and j["skipped"] == [], "json: %s" % j)
    check([r["pid"] for r in j["rows"]] == [b, a], "json order: %s" % j["rows"])
    for r in j["rows"]:
        name = "a" if r["pid"] == a else "b"
        want = {"device": 0, "exe": "prog_driver", "allocated_bytes": expected_allocated(name),
                "reserved_bytes": reserved[name], "peak_reserved_bytes": reserved[name],
                "pending_free_bytes": 0, "limit_bytes": LIMIT, "group": setup.group,
                "group_limit": True, "oom_count": 0}
        got = {k: r[k] for k in want}
        check(got == want, "json row %s, expected %s" % (got, want))
        check(r["command"] == " ".join(setup.procs[name].args), "command %r" % r["command"])
    check(j["groups"] == [{"group": setup.group, "device": 0, "budget_bytes": LIMIT,
                           "reserved_bytes": reserved["a"] + reserved["b"], "members": 2}],
          "json groups %s" % j["groups"])

    # Damaged and foreign files: one line each, the processes still listed.
    planted = setup.plant()
    p = setup.top("--bytes")
    counts = skipped_lines(p.stderr, planted)
    check(all(n == 1 for n in counts.values()), "one line per skipped file: %s\n%s" % (counts, p.stderr))
    check(len(p.stderr.splitlines()) == len(planted), "nothing else said: %r" % p.stderr)
    check(set(table_rows(p.stdout)[0]) == {a, b}, "rows with the skipped files:\n" + p.stdout)
    j = setup.top_json()
    check(sorted(s["path"] for s in j["skipped"]) == sorted(planted), "json skipped: %s" % j["skipped"])
    # Refreshing: still one line per file, not one per refresh.
    refreshing = subprocess.Popen([setup.luma, "top", "--interval", "0.2", "--dir", setup.live],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    refreshing.send_signal(signal.SIGINT)
    out, err = refreshing.communicate(timeout=RUN_LIMIT_S)
    check(out.count("processes under luma") >= 3, "several refreshes expected:\n" + out)
    counts = skipped_lines(err, planted)
    check(all(n == 1 for n in counts.values()), "once per file over refreshes: %s\n%s" % (counts, err))
    for path in planted:
        os.remove(path)

    # The one that exits removes its record; its exit statistics hold what top showed.
    setup.procs["a"].stdin.close()
    check(setup.procs["a"].wait(timeout=RUN_LIMIT_S) == 0, "hold a failed: %s" % setup.procs["a"].stderr.read())
    check(not os.path.exists(setup.record("a")), "the exited process's record is still there")
    stats = exit_stats(setup, a)["devices"][0]
    check(stats["reserved_bytes"] == reserved["a"] and stats["peak_reserved_bytes"] == reserved["a"],
          "exit statistics reserved %d (peak %d), top showed %d" % (
              stats["reserved_bytes"], stats["peak_reserved_bytes"], reserved["a"]))

    # SIGKILL: gone within a few seconds, first as a zombie (not reaped yet), record removed.
    setup.procs["b"].send_signal(signal.SIGKILL)
    started = time.monotonic()
    while True:
        pids = [r["pid"] for r in setup.top_json()["rows"]]
        if b not in pids:
            break
        check(time.monotonic() - started < GONE_WITHIN_S,
              "the killed process is still listed after %.0f s" % GONE_WITHIN_S)
        time.sleep(0.1)
    gone_s = time.monotonic() - started
    check(not os.path.exists(setup.record("b")), "the killed process's record was not removed")
    setup.procs["b"].wait()
    check(pids == [], "nothing left: %s" % pids)
    p = setup.top("--bytes")
    check("0 processes under luma" in p.stdout, "empty table:\n" + p.stdout)
    check_exec(setup)
    print("%s: top showed exactly what each held; skipped files one line each; a killed "
          "process gone after %.2f s" % (TEST, gone_s))


def check_exec(setup):
    """A process that allocated, then exec'd another program (same pid, same start time, no
    exit handler ran): its record is left, but it no longer maps it, so it is not listed and
    its record is removed."""
    sleeper = subprocess.Popen([setup.prog, "exec-after-alloc", "4096", "/bin/sleep", "60"],
                               env=setup.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    record = os.path.join(setup.live, "luma-live.%d.%d" % (setup.uid, sleeper.pid))
    try:
        started = time.monotonic()
        while True:  # until the record is made and the exec is done
            try:
                with open("/proc/%d/comm" % sleeper.pid) as f:
                    comm = f.read().strip()
            except OSError:
                comm = ""
            if os.path.exists(record) and comm == "sleep":
                break
            if sleeper.poll() is not None:
                fail("exec-after-alloc ended: %s" % sleeper.stderr.read())
            check(time.monotonic() - started < RUN_LIMIT_S, "exec-after-alloc: no record and exec")
            time.sleep(0.05)
        rows = setup.top_json()["rows"]
        check(all(r["pid"] != sleeper.pid for r in rows),
              "the exec'd process is listed with its old record: %s" % rows)
        check(not os.path.exists(record), "the exec'd process's old record was not removed")
    finally:
        sleeper.kill()
        sleeper.wait()
    print("%s: a process that exec'd another program after allocating is not listed" % TEST)


PARSE = r"""
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type,
                "samples": [[s.name, s.labels, s.value] for s in f.samples]})
print(json.dumps(out))
"""


def scrape(python, url):
    with urllib.request.urlopen(url, timeout=RUN_LIMIT_S) as r:
        check(r.status == 200, "GET %s: %d" % (url, r.status))
        text = r.read().decode()
    p = subprocess.run([python, "-c", PARSE], input=text, capture_output=True, text=True,
                       timeout=RUN_LIMIT_S)
    check(p.returncode == 0, "prometheus_client cannot parse the scrape:\n%s\n%s" % (p.stderr[-2000:], text[-2000:]))
    return json.loads(p.stdout), text


def series(families, metric):
    """{(pid, device, command, group): value} of one metric's samples."""
    out = {}
    for f in families:
        for name, labels, value in f["samples"]:
            if name == metric:
                key = (int(labels["pid"]), labels["device"], labels["command"], labels["group"])
                out[key] = value
    return out


def check_exporter(setup, python):
    a, b = setup.pid("a"), setup.pid("b")
    exporter = subprocess.Popen([setup.luma, "exporter", "--listen", "127.0.0.1:0", "--dir", setup.live],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = read_line(exporter, "luma exporter")
        m = re.search(r"serving (http://127\.0\.0\.1:(\d+)/metrics)", line)
        check(m is not None and int(m.group(2)) > 0, "the exporter's first line: %r" % line)
        url = m.group(1)
        top = {r["pid"]: r for r in setup.top_json()["rows"]}
        families, text = scrape(python, url)
        types = {f["name"]: f["type"] for f in families}
        for gauge in ("luma_allocated_bytes", "luma_reserved_bytes", "luma_peak_reserved_bytes",
                      "luma_pending_free_bytes", "luma_limit_bytes"):
            check(types.get(gauge) == "gauge", "%s is %s" % (gauge, types.get(gauge)))
        check(types.get("luma_oom") == "counter", "luma_oom_total is %s" % types.get("luma_oom"))
        for name, pid in (("a", a), ("b", b)):
            key = (pid, "0", "prog_driver", setup.group)
            want = {"luma_allocated_bytes": expected_allocated(name),
                    "luma_reserved_bytes": top[pid]["reserved_bytes"],
                    "luma_peak_reserved_bytes": top[pid]["peak_reserved_bytes"],
                    "luma_pending_free_bytes": 0, "luma_limit_bytes": LIMIT, "luma_oom_total": 0}
            for metric, value in want.items():
                got = series(families, metric)
                check(got.get(key) == value, "%s%s = %s, expected %s\n%s" % (metric, key, got.get(key), value, text))
        check(set(k[0] for k in series(families, "luma_reserved_bytes")) == {a, b}, "series:\n" + text)

        planted = setup.plant()
        scrape(python, url)
        scrape(python, url)
        # The SIGKILLed process: no series in the next scrapes, within a few seconds.
        setup.procs["b"].send_signal(signal.SIGKILL)
        setup.procs["b"].wait()
        started = time.monotonic()
        while b in {k[0] for k in series(scrape(python, url)[0], "luma_reserved_bytes")}:
            check(time.monotonic() - started < GONE_WITHIN_S, "the killed process's series remain")
            time.sleep(0.1)
        families, text = scrape(python, url)
        check(set(k[0] for k in series(families, "luma_allocated_bytes")) == {a}, "after the kill:\n" + text)
    finally:
        exporter.send_signal(signal.SIGTERM)
        out, err = exporter.communicate(timeout=RUN_LIMIT_S)
    check(exporter.returncode == 0, "the exporter ended with %d on SIGTERM: %s" % (exporter.returncode, err))
    counts = skipped_lines(err, planted)
    check(all(n == 1 for n in counts.values()), "one line per skipped file over 4 scrapes: %s\n%s" % (counts, err))
    print("%s: the scrape (parsed by %s) showed exactly what each held; a killed process's "
          "series gone" % (TEST, PROMETHEUS_CLIENT))


def main():
    global TEST
    if len(sys.argv) < 7:
        print(__doc__)
        return 2
    mode, work, fake_dir, libluma, luma, prog = sys.argv[1:7]
    TEST = "live_" + mode
    python = None
    if mode == "exporter":
        help_run = subprocess.run([luma, "exporter", "--help"], capture_output=True, text=True)
        if help_run.returncode != 0:
            venvs.skip(TEST, "this luma was built without prometheus-cpp (no `luma exporter`)")
        python = venvs.ensure_package(TEST, sys.argv[7], PROMETHEUS_CLIENT)
    setup = Setup(mode, work, fake_dir, libluma, luma, prog)
    try:
        if mode == "top":
            check_top(setup)
        elif mode == "exporter":
            check_exporter(setup, python)
        else:
            fail("unknown mode " + mode)
    finally:
        setup.finish()
        try:
            os.remove("/dev/shm/luma.%s.%d" % (setup.group, os.getuid()))
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
