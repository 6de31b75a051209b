#!/usr/bin/env python3
"""gpu_report.py WORK_DIR OUTPUT_MD - the summary of one scripts/gpu-check run.

Reads what scripts/gpu-check left in its work directory (NAME.out / NAME.rc / NAME.sec per
step, luma's JSON statistics, the JSON results of the tests/gpu Python scripts, the plan,
the machine's facts), decides each check, and writes a markdown report with a table per
case, ready to be copied to docs/gpu-results.md; prints a short summary last.
Exit 0 every check passed (correctness, identical losses, every measurement made), 1 some
failed or did not run, 77 the run found no GPU. It must never judge a check it has no
output for as passed: a missing file is a failure, named. A target missed (speed, memory,
a tool's findings under luma) is listed apart and does not fail the run.
"""

import glob
import json
import os
import re
import sys

ALL_STAGES = ("correctness", "graphs", "ipc", "sanitizer", "latency", "costs", "torch", "limits",
              "live", "plan")
MODES = ("basic", "hazard", "threads", "meminfo", "oom")
# Modes that free and reallocate many blocks: luma must serve most from its cache, so at
# most one driver allocation per REUSE_RATIO allocations.
REUSE_MODES = {("static", "basic"), ("static", "threads"), ("shared", "basic"),
               ("shared", "threads"), ("driver", "")}
REUSE_RATIO = 10
LATENCY_TARGET = 100.0          # luma's pair >= 100x faster than the driver's ...
LATENCY_TARGET_UP_TO = 1 << 20  # ... for sizes <= 1 MiB
LATENCY_TARGET_NS = 150.0       # and at most 150 ns at every size, default settings
LATENCY_LARGEST = 256 << 20     # the table must reach this size
STEPS_TOLERANCE = 0.03          # luma's steps/s at most 3% below PyTorch caching's (noise)
# The allocators of the torch and limits stages, as scripts/gpu-check names them.
ALLOCATORS = (("caching", "PyTorch caching allocator"),
              ("expandable", "PyTorch expandable segments"),
              ("luma", "luma (PYTORCH_NO_CUDA_MEMORY_CACHING=1, LD_PRELOAD)"),
              ("luma-exp", "luma expandable segments (LUMA_CONF=expandable_segments:1)"),
              ("luma-keep", "luma, segments kept (LUMA_CONF=release_free_segments:false; "
                            "costs stage, a shorter run)"))
LUMA_ALLOCATORS = ("luma", "luma-exp", "luma-keep")
# The allocators of the torch stage (its targets, the limits grid); luma-keep's runs are
# the costs stage's, shorter, beside them in the same table.
TORCH_STAGE_ALLOCATORS = ("caching", "expandable", "luma", "luma-exp")
KEEP_SETTING = "release_free_segments:false"
# (step name prefix, model, title) of the torch stage's runs.
MODELS = (("torch", "small", "small: tests/gpu/torch_train.py --model small, 300 steps"),
          ("gpt", "gpt", "gpt: tests/gpu/torch_train.py --model gpt (GPT-2-like), 50 steps"))
EXIT_OOM = 3  # torch_train.py ran out of memory under its limit
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # the source tree


class Work:
    def __init__(self, path):
        self.path = path

    def text(self, name, default=None):
        try:
            with open(os.path.join(self.path, name), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return default

    def exists(self, name):
        return os.path.exists(os.path.join(self.path, name))

    def rc(self, step):
        t = self.text(step + ".rc")
        return int(t) if t and t.strip().lstrip("-").isdigit() else None

    def json(self, name):
        t = self.text(name)
        if t is None:
            return None
        try:
            return json.loads(t)
        except ValueError:
            return None


def luma_device(stats):
    """Device 0's figures from luma's JSON statistics (None when absent)."""
    if not stats or not stats.get("devices"):
        return None
    return stats["devices"][0]


def normalised(text):
    """A program's output with numbers masked: free memory and counts differ run to run."""
    lines = [ln for ln in (text or "").splitlines() if not ln.startswith("luma:")]
    return re.sub(r"\d+", "#", "\n".join(lines)).strip()


def mib(n):
    return "n/a" if n is None else f"{n / (1 << 20):.1f} MiB"


def size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def rc_text(rc):
    return {None: "missing", 124: "TIMEOUT", 137: "KILLED", 125: "SKIPPED"}.get(rc, str(rc))


def correctness(w, failures):
    rows = ["| program | mode | plain exit | luma exit | same output | alloc_calls | "
            "cuda_malloc_calls | verdict |", "|---|---|---|---|---|---|---|---|"]
    cases = [(p, m) for p in ("static", "shared") for m in MODES] + [("driver", "")]
    for p, m in cases:
        name = f"corr-{p}-{m}" if m else f"corr-{p}"
        rp, rl = w.rc(name + "-plain"), w.rc(name + "-luma")
        same = normalised(w.text(name + "-plain.out")) == normalised(w.text(name + "-luma.out"))
        dev = luma_device(w.json(name + "-luma.stats.json"))
        calls = dev.get("alloc_calls") if dev else None
        mallocs = dev.get("cuda_malloc_calls") if dev else None
        why = []
        if rp != 0:
            why.append(f"plain exit {rc_text(rp)}")
        if rl != rp:
            why.append(f"luma exit {rc_text(rl)} != plain")
        if not same:
            why.append("output differs")
        if dev is None:
            why.append("no luma statistics")
        elif not calls:
            why.append("luma saw no allocation")
        elif (p, m) in REUSE_MODES and mallocs * REUSE_RATIO > calls:
            why.append(f"cache reuse low ({mallocs} driver allocations for {calls})")
        verdict = "pass" if not why else "FAIL: " + "; ".join(why)
        if why:
            failures.append(f"{name}: " + "; ".join(why))
        rows.append(f"| gpu_{p} | {m or '-'} | {rc_text(rp)} | {rc_text(rl)} | "
                    f"{'yes' if same else 'NO'} | {calls if calls is not None else 'n/a'} | "
                    f"{mallocs if mallocs is not None else 'n/a'} | {verdict} |")
    return rows


# prog_driver modes run by scripts/gpu-check's stage 1 (the patterns of real programs).
PATTERNS = ("ipc-ranges", "ipc-simple", "graph-pattern", "capture-global", "capture-free-async",
            "capture-other-threads", "capture-invalidated-free", "capture-blocking",
            "capture-to-graph", "free-async-cached")


def patterns(w, failures):
    """The real-program patterns on the real driver: plain must pass (else the stand-in,
    which these checks were written against, differs from the driver), under luma the
    same exit and output."""
    rows = ["| prog_driver mode | plain exit | luma exit | same output | verdict |",
            "|---|---|---|---|---|"]
    for m in PATTERNS:
        name = f"pat-{m}"
        if not w.exists(name + "-plain.rc"):
            continue
        rp, rl = w.rc(name + "-plain"), w.rc(name + "-luma")
        same = normalised(w.text(name + "-plain.out")) == normalised(w.text(name + "-luma.out"))
        why = []
        if rp not in (0, 77):
            why.append(f"plain exit {rc_text(rp)} (the stand-in differs from the driver)")
        if rl != rp:
            why.append(f"luma exit {rc_text(rl)} != plain")
        if not same:
            why.append("output differs")
        if why:
            failures.append(f"{name}: " + "; ".join(why))
        rows.append(f"| {m} | {rc_text(rp)} | {rc_text(rl)} | {'yes' if same else 'NO'} | "
                    f"{'pass' if not why else 'FAIL: ' + '; '.join(why)} |")
    return rows if len(rows) > 2 else []


def answers(w, failures):
    """driver_answers on the real driver: each probe's code beside the stand-in's (a
    DIFFERS line is a stand-in choice the GPU contradicts: correct the stand-in); under
    luma the same lines (luma's hooks answer as the driver)."""
    if not w.exists("answers-plain.rc"):
        return []
    plain, luma = w.text("answers-plain.out") or "", w.text("answers-luma.out") or ""
    rows = ["| probe | the driver answers | the stand-in answers | under luma |",
            "|---|---:|---:|---|"]
    luma_lines = {ln.split(" got ")[0].strip(): ln for ln in luma.splitlines() if " got " in ln}
    for ln in plain.splitlines():
        m = re.match(r"(.*?)\s+got (-?\d+)\s+expected (-?\d+)\s+(ok|DIFFERS)", ln)
        if not m:
            continue
        name, got, want, verdict = m.groups()
        other = luma_lines.get(name.strip())
        same = other is not None and other.strip() == ln.strip()
        if verdict == "DIFFERS":
            failures.append(f"answers: {name.strip()}: the driver answers {got}, "
                            f"the stand-in {want} (correct the stand-in)")
        if not same:
            failures.append(f"answers: {name.strip()}: luma answers otherwise: "
                            f"{(other or 'nothing').strip()}")
        rows.append(f"| {name.strip()} | {got} | {want}{'' if verdict == 'ok' else ' (DIFFERS)'}"
                    f" | {'same' if same else 'OTHERWISE'} |")
    if len(rows) == 2:
        failures.append(f"answers: nothing probed (exit {rc_text(w.rc('answers-plain'))})")
        return []
    return rows


def latency_table(text):
    """{bytes: median_ns} from gpu_latency's output."""
    out = {}
    for ln in (text or "").splitlines():
        f = ln.split()
        if len(f) == 6 and f[0].isdigit():
            out[int(f[0])] = float(f[1])
    return out


def latency(w, failures, misses):
    names = ("lat-raw", "lat-luma", "lat-luma-nosync")
    raw, luma, nosync = (latency_table(w.text(n + ".out")) for n in names)
    for n, table in zip(names, (raw, luma, nosync)):
        if not table:
            failures.append(f"{n}: no latency measured (exit {rc_text(w.rc(n))})")
        elif max(table) < LATENCY_LARGEST:
            failures.append(f"{n}: sizes measured only up to {size_name(max(table))}, "
                            f"not {size_name(LATENCY_LARGEST)}")
    if not raw:
        return ["(no latency measured: see lat-raw.out in the details tarball)"]
    rows = ["| size | raw cudaMalloc+cudaFree | luma (free_sync:event, default) | speed-up | "
            "luma (free_sync:none) | speed-up | target >= 100x up to 1 MiB | "
            f"target <= {LATENCY_TARGET_NS:.0f} ns with default settings |",
            "|---:|---:|---:|---:|---:|---:|---|---|"]
    slow = []
    for n in sorted(set(raw) | set(luma)):
        r, l, s = raw.get(n), luma.get(n), nosync.get(n)
        up = r / l if r and l else None
        up2 = r / s if r and s else None
        target = ""
        if n <= LATENCY_TARGET_UP_TO:
            met = up is not None and up >= LATENCY_TARGET
            target = "met" if met else "MISSED"
            if not met:
                misses.append(f"latency {size_name(n)}: {up:.0f}x" if up else
                              f"latency {size_name(n)}: not measured under luma")
        ns_met = l is not None and l <= LATENCY_TARGET_NS
        if not ns_met:
            slow.append(f"{size_name(n)} {l:,.0f} ns" if l else f"{size_name(n)} not measured")
        rows.append(f"| {size_name(n)} | {f'{r:,.0f} ns' if r else 'n/a'} | "
                    f"{f'{l:,.0f} ns' if l else 'n/a'} | {f'{up:,.0f}x' if up else 'n/a'} | "
                    f"{f'{s:,.0f} ns' if s else 'n/a'} | {f'{up2:,.0f}x' if up2 else 'n/a'} | "
                    f"{target} | {'met' if ns_met else 'MISSED'} |")
    if slow:
        misses.append(f"latency above {LATENCY_TARGET_NS:.0f} ns (default settings): " +
                      ", ".join(slow))
    return rows


# What the stand-in assumes for the calls of luma's fences (tests/fake/README.md, "Call
# costs"); the GPU's figures replace them.
FENCE_COST_ASSUMED_NS = {"cuEventRecord": 1000, "cuEventQuery": 300, "cuStreamQuery": 300,
                         "cuCtxRecordEvent": 1000}
# cuCtxRecordEvent: 1000 ns plus this much per stream of the context (its rows say
# "idle:N" / "busy:N", N streams with the legacy one).
CTX_RECORD_PER_STREAM_NS = 100


def assumed_ns(call, state):
    ns = FENCE_COST_ASSUMED_NS[call]
    if call == "cuCtxRecordEvent" and ":" in state:
        ns += CTX_RECORD_PER_STREAM_NS * int(state.split(":", 1)[1])
    return ns


def fence_costs(w, failures):
    """Rows of gpu_fence_costs: call, stream state, median ns, and the stand-in's figure."""
    rows = []
    for ln in (w.text("fence-costs.out") or "").splitlines():
        f = ln.split()
        if len(f) == 5 and f[0] in FENCE_COST_ASSUMED_NS:
            rows.append(f"| {f[0]} | {f[1]} | {float(f[2]):,.0f} ns | {float(f[3]):,.0f} - "
                        f"{float(f[4]):,.0f} ns | {assumed_ns(f[0], f[1]):,} ns |")
    if not rows:
        failures.append(f"fence-costs: nothing measured (exit {rc_text(w.rc('fence-costs'))})")
        return []
    return ["| call | stream | median | p10 - p90 | the stand-in assumes |",
            "|---|---|---:|---:|---:|"] + rows


# luma simulate's table of per-call driver costs, read from its source (nothing duplicated
# here): the rows `DriverCost{C::CALL, N * UNIT, NS, MEASURED, SOURCE}`, the names of
# driver_call_name, and the source strings.
DRIVER_COSTS_CPP = os.path.join("core", "simulate", "driver_costs.cpp")
COST_ROW = re.compile(r"DriverCost\{\s*C::(\w+)\s*,\s*(\d+)\s*\*\s*(KiB|MiB|GiB)\s*,\s*"
                      r"([\d']+)\s*,\s*(true|false)\s*,\s*(\w+)\s*\}")
COST_NAME = re.compile(r'case\s+C::(\w+)\s*:\s*return\s+"([^"]+)"\s*;')
COST_SOURCE = re.compile(r'constexpr\s+std::string_view\s+(\w+)\s*=\s*((?:"[^"]*"\s*)+);')
UNIT_SHIFT = {"KiB": 10, "MiB": 20, "GiB": 30}
# The calls gpu_driver_costs times, in its order; cuMemMap and cuMemSetAccess are one row
# of the table (its cuMemMap+cuMemSetAccess), so their sum is set beside it.
DRIVER_COST_CALLS = ("cuMemAlloc", "cuMemFree", "cuMemCreate", "cuMemAddressReserve", "cuMemMap",
                     "cuMemSetAccess", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree")
DRIVER_COST_SIZES = tuple(m << 20 for m in (2, 8, 32, 128, 512, 1024))
MAP_PAIR = ("cuMemMap", "cuMemSetAccess")


def simulate_cost_table(path):
    """{call name: [(bytes, ns, measured, source text)] by size} from driver_costs.cpp, or
    None when the file cannot be read or holds no row."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    names = dict(COST_NAME.findall(text))
    sources = {k: "".join(re.findall(r'"([^"]*)"', v)) for k, v in COST_SOURCE.findall(text)}
    table = {}
    for call, n, unit, ns, measured, source in COST_ROW.findall(text):
        table.setdefault(names.get(call, call), []).append(
            (int(n) << UNIT_SHIFT[unit], int(ns.replace("'", "")), measured == "true",
             sources.get(source, source)))
    for rows in table.values():
        rows.sort()
    return table or None


def table_ns(rows, n):
    """(ns, measured) the table gives a call of n bytes: driver_call_ns's rule (linear
    between two rows, the nearest row's below the first and above the last)."""
    below = None
    for r in rows:
        if r[0] >= n:
            if below is None or r[0] == n:
                return r[1], r[2]
            f = (n - below[0]) / (r[0] - below[0])
            return below[1] + f * (r[1] - below[1]), below[2] and r[2]
        below = r
    return below[1], below[2]


def driver_costs_table(text):
    """{(call, bytes): (median, p10, p90, samples)} from gpu_driver_costs' output."""
    out = {}
    for ln in (text or "").splitlines():
        f = ln.split()
        if len(f) == 6 and f[0] in DRIVER_COST_CALLS and f[1].isdigit():
            try:
                out[(f[0], int(f[1]))] = (float(f[2]), float(f[3]), float(f[4]), int(f[5]))
            except ValueError:
                continue
    return out


def us(ns):
    return f"{ns / 1000:,.1f} µs"


def driver_costs_section(w, failures, root):
    """gpu_driver_costs' rows beside the figures luma simulate's table uses now."""
    measured = driver_costs_table(w.text("driver-costs.out"))
    rc = w.rc("driver-costs")
    if not measured:
        failures.append(f"driver-costs: nothing measured (exit {rc_text(rc)})"
                        f"{last_line(w, 'driver-costs')}")
        return [f"Not measured: gpu_driver_costs exited {rc_text(rc)}"
                f"{last_line(w, 'driver-costs')}."]
    if rc != 0:
        failures.append(f"driver-costs: exit {rc_text(rc)}{last_line(w, 'driver-costs')}")
    table = simulate_cost_table(os.path.join(root, DRIVER_COSTS_CPP))
    lines = []
    if table is None:
        lines += [f"({DRIVER_COSTS_CPP} could not be read: the table's figures are not shown.)",
                  ""]
    lines += ["| call | size | median | p10 - p90 | samples | luma simulate's table now | "
              "measured / table |", "|---|---:|---:|---:|---:|---:|---:|"]
    missing = []
    sources = {}

    def beside(name, n, median):
        rows = (table or {}).get(name)
        if not rows:
            return "not in the table" if table is not None else "n/a", ""
        ns, was_measured = table_ns(rows, n)
        exact = any(r[0] == n for r in rows)
        for r in rows:
            sources.setdefault(r[3], set()).add(name)
        kind = "measured" if was_measured else "estimate"
        how = "" if exact else ", interpolated" if rows[0][0] < n < rows[-1][0] else ", nearest row"
        return f"{us(ns)} ({kind}{how})", f"{median / ns:.2f}x" if ns else ""

    for n in DRIVER_COST_SIZES:
        for call in DRIVER_COST_CALLS:
            got = next((v for (c, b), v in measured.items() if c == call and b >= n and
                        b - n < (2 << 20)), None)
            if got is None:
                missing.append(f"{call} {size_name(n)}")
                lines.append(f"| {call} | {size_name(n)} | not measured | | | | |")
                continue
            med, p10, p90, samples = got
            if call in MAP_PAIR:
                fig, ratio = "in cuMemMap+cuMemSetAccess", ""
            else:
                fig, ratio = beside(call, n, med)
            lines.append(f"| {call} | {size_name(n)} | {us(med)} | {us(p10)} - {us(p90)} | "
                         f"{samples} | {fig} | {ratio} |")
            if call == MAP_PAIR[1]:
                pair = [next((v for (c, b), v in measured.items() if c == x and b >= n and
                              b - n < (2 << 20)), None) for x in MAP_PAIR]
                if all(pair):
                    total = pair[0][0] + pair[1][0]
                    fig, ratio = beside("+".join(MAP_PAIR), n, total)
                    lines.append(f"| cuMemMap+cuMemSetAccess | {size_name(n)} | {us(total)} "
                                 f"(sum of medians) | | | {fig} | {ratio} |")
    if missing:
        failures.append("driver-costs: not measured: " + ", ".join(missing))
    if sources:
        lines += ["", f"Where the table's figures come from ({DRIVER_COSTS_CPP}; an estimate is "
                  "what these measurements replace):", ""]
        lines += [f"- {', '.join(sorted(calls))}: {src}" for src, calls in sorted(sources.items())]
    return lines


def streams_table(text):
    """{(streams, state): (wall_median_ns, cpu_median_ns)} from gpu_streams' output."""
    out = {}
    for ln in (text or "").splitlines():
        f = ln.split()
        if len(f) == 9 and f[0].isdigit() and f[1] in ("idle", "busy"):
            out[(int(f[0]), f[1])] = (float(f[2]), float(f[5]))
    return out


def streams(w, failures, misses):
    """The pair while the program holds N non-blocking streams, plain and under luma, and
    luma's pair against its own pair with no streams (target: at most 2x)."""
    raw, luma = (streams_table(w.text(n + ".out")) for n in ("streams-raw", "streams-luma"))
    for n, table in (("streams-raw", raw), ("streams-luma", luma)):
        if not table:
            failures.append(f"{n}: nothing measured (exit {rc_text(w.rc(n))})")
    if not luma:
        return []
    base = luma.get((0, "idle"))
    rows = ["| streams | plain: wall / CPU per pair | luma: wall / CPU per pair | "
            "luma / luma with none (wall, CPU) | target (<= 2x) |",
            "|---|---:|---:|---:|---|"]
    for key in sorted(luma, key=lambda k: (k[1] == "busy", k[0])):
        r, l = raw.get(key), luma[key]
        ratio, target = "", ""
        if base and key != (0, "idle"):
            rw, rc = l[0] / base[0], l[1] / base[1]
            ratio = f"{rw:.2f}x, {rc:.2f}x"
            met = rw <= 2.0 if key[1] == "idle" else min(rw, rc) <= 2.0
            target = "met" if met else "MISSED"
            if not met:
                misses.append(f"streams {key[0]} {key[1]}: {rw:.2f}x wall, {rc:.2f}x CPU")
        plain = f"{r[0]:,.0f} / {r[1]:,.0f} ns" if r else "n/a"
        rows.append(f"| {key[0]} {key[1]} | {plain} | {l[0]:,.0f} / {l[1]:,.0f} ns | "
                    f"{ratio} | {target} |")
    return rows


def graphs_section(w, failures):
    """torch_graphs.py plain and under luma: every replay equal to the eager step."""
    rows = ["| run | exit | replays | equal to eager (rtol, atol) | bitwise equal | max abs diff | "
            "verdict |", "|---|---|---:|---:|---:|---:|---|"]
    for k, label in (("plain", "plain"), ("luma", "LD_PRELOAD=libluma.so")):
        name = f"torch-graphs-{k}"
        rc, r = w.rc(name), w.json(name + ".json")
        why = []
        if rc != 0:
            why.append(f"exit {rc_text(rc)}")
        if r is None:
            why.append("no result" + last_line(w, name))
            rows.append(f"| {label} | {rc_text(rc)} | | | | | FAIL: {'; '.join(why)} |")
        else:
            if r["equal"] != r["replays"]:
                why.append(f"{r['replays'] - r['equal']} of {r['replays']} replays differ from eager")
            rows.append(f"| {label} | {rc_text(rc)} | {r['replays']} | {r['equal']} "
                        f"({r['rtol']:g}, {r['atol']:g}) | {r['exact']} | {r['max_abs_diff']:.3g} | "
                        f"{'pass' if not why else 'FAIL: ' + '; '.join(why)} |")
        if why:
            failures.append(f"{name}: " + "; ".join(why))
    return rows


def last_line(w, step):
    """': LAST LINE' of a step's output (its error, usually), or ''."""
    lines = [ln.strip() for ln in (w.text(step + ".out") or "").splitlines() if ln.strip()]
    return f": {lines[-1][:200]}" if lines else ""


def ipc_section(w, failures):
    """torch_ipc.py and prog_torch_ipc, plain and under luma: no tensor wrong either way."""
    rows = ["| run | exit | tensors (bytes) | PyTorch segments (tensors sharing one) | "
            "received by the peer | wrong in the peer | replies wrong | verdict |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    for k, label in (("plain", "torch.multiprocessing, plain"),
                     ("luma", "torch.multiprocessing, LD_PRELOAD=libluma.so")):
        name = f"torch-ipc-{k}"
        rc, r = w.rc(name), w.json(name + ".json")
        why = []
        if rc != 0:
            why.append(f"exit {rc_text(rc)}")
        if r is None:
            why.append("no result" + last_line(w, name))
            rows.append(f"| {label} | {rc_text(rc)} | | | | | | FAIL: {'; '.join(why)} |")
        else:
            wrong = r.get("wrong_in_peer")
            if wrong is None:
                why.append("the peer gave no answer: " + str(r.get("peer_answer", {}).get("error", "?")))
            elif wrong:
                why.append(f"{len(wrong)} of {r['tensors']} tensors wrong in the peer")
            if r.get("wrong_replies"):
                why.append(f"{len(r['wrong_replies'])} replies wrong")
            segs = "n/a" if r.get("segments") is None else \
                f"{r['segments']} ({r['tensors_sharing_a_segment']})"
            rows.append(f"| {label} | {rc_text(rc)} | {r['tensors']} ({r['bytes']:,}) | {segs} | "
                        f"{r.get('received_by_peer')} | {len(wrong) if wrong is not None else 'n/a'} | "
                        f"{len(r.get('wrong_replies') or [])} | "
                        f"{'pass' if not why else 'FAIL: ' + '; '.join(why)} |")
        if why:
            failures.append(f"{name}: " + "; ".join(why))
    if w.exists("prog-torch-ipc-plain.rc"):
        rp, rl = w.rc("prog-torch-ipc-plain"), w.rc("prog-torch-ipc-luma")
        same = normalised(w.text("prog-torch-ipc-plain.out")) == \
            normalised(w.text("prog-torch-ipc-luma.out"))
        for k, rc in (("plain", rp), ("luma", rl)):
            why = []
            if rc != 0:
                why.append(f"exit {rc_text(rc)}" + last_line(w, f"prog-torch-ipc-{k}"))
            if k == "luma" and not same:
                why.append("output differs from plain")
            if why:
                failures.append(f"prog-torch-ipc-{k}: " + "; ".join(why))
            rows.append(f"| prog_torch_ipc 40 2, {'plain' if k == 'plain' else 'LD_PRELOAD=libluma.so'}"
                        f" | {rc_text(rc)} | 40 x 2 rounds | | | | | "
                        f"{'pass' if not why else 'FAIL: ' + '; '.join(why)} |")
    else:
        failures.append("prog-torch-ipc: not run (no prog_torch_ipc in the bundle?)")
    return rows


SAN_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
SAN_ACCESS = re.compile(r"^=+\s+Invalid __\w+__ \w+ of size", re.M)


def sanitizer_counts(text):
    """(invalid accesses reported, ERROR SUMMARY count) from compute-sanitizer's output."""
    m = SAN_SUMMARY.search(text or "")
    return len(SAN_ACCESS.findall(text or "")), int(m.group(1)) if m else None


def sanitizer_section(w, failures, misses):
    """memcheck on gpu_overflow: plain must find the 16 writes (else the check is broken);
    under luma, the target: as many as plain, and more than none."""
    if w.exists("sanitizer-missing"):
        failures.append("sanitizer: " + w.text("sanitizer-missing").strip())
        return [f"Not run: {w.text('sanitizer-missing').strip()}."]
    version = (w.text("sanitizer-version.txt") or "").strip().splitlines()
    lines = [f"`{(w.text('sanitizer-command') or '?').strip()} gpu_overflow MODE`"
             f" ({version[-1] if version else 'version unknown'}); under luma the program runs"
             " as `sh -c 'LD_PRELOAD=libluma.so... exec gpu_overflow MODE'`. Invalid accesses:"
             " memcheck's error reports for the overflow; ERROR SUMMARY also counts the CUDA"
             " calls refused after it.", "",
             "| mode | plain: invalid accesses / ERROR SUMMARY | luma: invalid accesses / "
             "ERROR SUMMARY | libluma.so in the sanitized process | NVTX tool announced | "
             "luma describes its memory (its log) | target: luma finds them all (> 0, = plain) |",
             "|---|---:|---:|---|---|---|---|"]
    for mode in ("alone", "neighbour"):
        plain, luma = w.text(f"san-{mode}-plain.out"), w.text(f"san-{mode}-luma.out")
        (pa, ps), (la, ls) = sanitizer_counts(plain), sanitizer_counts(luma)
        mapped = re.search(r"libluma\.so mapped: (\w+)", luma or "")
        nvtx = re.search(r"NVTX tool announced[^:]*: (\w+)", luma or "")
        for k in ("plain", "luma"):
            rc = w.rc(f"san-{mode}-{k}")
            if rc not in (0, None):
                failures.append(f"san-{mode}-{k}: exit {rc_text(rc)}{last_line(w, f'san-{mode}-{k}')}")
        if plain is None or ps is None:
            failures.append(f"san-{mode}-plain: no memcheck summary (exit "
                            f"{rc_text(w.rc(f'san-{mode}-plain'))}){last_line(w, f'san-{mode}-plain')}")
        elif pa == 0:
            failures.append(f"san-{mode}-plain: memcheck found no invalid access: the planted "
                            "overflow is not seen, the check is broken")
        if luma is None or ls is None:
            failures.append(f"san-{mode}-luma: no memcheck summary (exit "
                            f"{rc_text(w.rc(f'san-{mode}-luma'))}){last_line(w, f'san-{mode}-luma')}")
        elif not mapped or mapped.group(1) != "yes":
            failures.append(f"san-{mode}-luma: libluma.so was not in the sanitized process")
        met = pa > 0 and la == pa and ls is not None
        if not met and ls is not None:
            misses.append(f"compute-sanitizer {mode}: luma {la} invalid accesses, plain {pa}")
        rows_luma = f"{la} / {ls}" if ls is not None else "n/a"
        rows_plain = f"{pa} / {ps}" if ps is not None else "n/a"
        layouts = [re.search(r"layout: (.*)", t or "") for t in (plain, luma)]
        described = "yes" if "an NVTX tool is present" in (luma or "") else "no"
        lines.append(f"| {mode} | {rows_plain} | {rows_luma} | "
                     f"{mapped.group(1) if mapped else 'n/a'} | {nvtx.group(1) if nvtx else 'n/a'} | "
                     f"{described} | {'met' if met else 'MISSED'} |")
        if any(layouts):
            lp, ll = (m.group(1) if m else "n/a" for m in layouts)
            lines.append(f"| | plain: {lp} | luma: {ll} | | | | |")
    return lines


def torch_result(w, name, alloc):
    """One training run: (torch_train JSON, luma's device statistics or None)."""
    r = w.json(name + ".json")
    d = luma_device(w.json(name + ".stats.json")) if alloc in LUMA_ALLOCATORS else None
    return r, d


def peaks(r, d):
    """(peak reserved, peak live) of a run: luma's figures for a luma run, PyTorch's else."""
    if d is not None:
        return d.get("peak_reserved_bytes"), d.get("peak_bytes")
    if r is None or r.get("torch_caching_disabled"):
        return None, None
    return r.get("max_memory_reserved"), r.get("max_memory_allocated")


def torch_section(w, failures, misses, notes_out, shown=None):
    """Per model: each allocator's steps/s, peak reserved and peak live; identical losses;
    the targets against PyTorch's caching allocator. `shown`: the allocators whose runs were
    made (the torch stage's, luma-keep's of the costs stage); default all."""
    shown = set(shown if shown is not None else (a for a, _ in ALLOCATORS))
    md = []
    for prefix, model, title in MODELS:
        rows = ["| allocator | steps | steps/s | vs caching | peak reserved | peak live | "
                "reserved / live | luma driver allocations / allocations |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        res = {}
        unsupported = set()
        for alloc, label in ALLOCATORS:
            if alloc not in shown:
                continue
            name = f"{prefix}-{alloc}"
            r, d = torch_result(w, name, alloc)
            # The first run that names the key unknown stands for the build (the script
            # then skips the later ones).
            if alloc == "luma-exp" and (luma_lacks_expandable(w, name) or
                                        luma_lacks_expandable(w, "torch-luma-exp")):
                unsupported.add(alloc)
                rows.append(f"| {label} | not supported by this build (luma names "
                            "expandable_segments an unknown key) | | | | | | |")
                continue
            res[alloc] = (r, d)
            if r is None or r.get("out_of_memory"):
                why = "out of memory" if r else f"no result (exit {rc_text(w.rc(name))})"
                failures.append(f"{name}: {why}{last_line(w, name) if not r else ''}")
                rows.append(f"| {label} | {why} | | | | | | |")
                continue
            if alloc in LUMA_ALLOCATORS and d is None:
                failures.append(f"{name}: no luma statistics")
            if alloc == "luma-keep" and d is not None:
                settings = (w.json(name + ".stats.json") or {}).get("settings", "")
                if KEEP_SETTING not in settings.split(","):
                    failures.append(f"{name}: luma did not apply {KEEP_SETTING} "
                                    f"(settings: {settings})")
            base = res.get("caching", (None, None))[0]
            sps = r.get("steps_per_second")
            base_sps = base.get("steps_per_second") if base else None
            rel = f"{sps / base_sps:.3f}x" if sps and base_sps else "n/a"
            reserved, live = peaks(r, d)
            ratio = f"{reserved / live:.2f}" if reserved and live else "n/a"
            calls = f"{d.get('cuda_malloc_calls')} / {d.get('alloc_calls')}" if d else ""
            steps = f"{r['steps_done']}{' (stopped early)' if r.get('stopped_early') else ''}"
            rows.append(f"| {label} | {steps} | {f'{sps:.2f}' if sps else 'n/a'} | {rel} | "
                        f"{mib(reserved)} | {mib(live)} | {ratio} | {calls} |")
        notes = []
        if "luma-keep" in shown:
            notes.append("- luma-keep: the costs stage's shorter run (small 150 steps, gpt 30, "
                         "each within a time cap): steps/s after the same 10 warm-up steps; its "
                         "peaks are those of the steps it ran; not judged against the targets")
        # Under PYTORCH_NO_CUDA_MEMORY_CACHING=1 luma serves PyTorch's every allocation: which
        # free path it took (core/free_path; autograd's thread makes it legacy) decides the
        # peak and the steps/s above.
        for alloc, _ in ALLOCATORS:
            if alloc in LUMA_ALLOCATORS and alloc in shown and alloc not in unsupported:
                stats = w.json(f"{prefix}-{alloc}.stats.json") or {}
                notes.append(f"- free path of {alloc}: {stats.get('free_path', 'not reported')}")
        # The same seed must give the same losses whatever the allocator.
        done = {k: r["losses"] for k, (r, _) in res.items() if r and not r.get("out_of_memory")}
        if "caching" in done:
            ref = done["caching"]
            for k, losses in done.items():
                if k == "caching":
                    continue
                n = min(len(ref), len(losses))
                diff = next((i for i in range(n) if ref[i] != losses[i]), None)
                if diff is None:
                    notes.append(f"- losses of {k}: identical to caching over {n} steps")
                else:
                    worst = max(abs(ref[i] - losses[i]) for i in range(n))
                    notes.append(f"- losses of {k}: DIFFER from caching, first at step {diff} "
                                 f"({ref[diff]!r} vs {losses[diff]!r}), max |diff| {worst:.3g}")
                    failures.append(f"{prefix}-{k}: losses differ from the caching run at step {diff}")
            if ref:
                notes.append("- losses (caching): " + ", ".join(f"{x:.6f}" for x in ref[:3]) +
                             " ... " + ", ".join(f"{x:.6f}" for x in ref[-3:]))
        # Targets: luma against PyTorch's caching allocator, each luma configuration.
        base_r, _ = res.get("caching", (None, None))
        target_rows = []
        for alloc in LUMA_ALLOCATORS:
            if alloc not in TORCH_STAGE_ALLOCATORS:
                continue  # luma-keep: a shorter run, shown beside the others, not judged
            if alloc in unsupported or alloc not in res or base_r is None:
                continue
            r, d = res[alloc]
            if r is None or r.get("out_of_memory"):
                continue
            reserved, _ = peaks(r, d)
            base_reserved = base_r.get("max_memory_reserved")
            if reserved is not None and base_reserved:
                met = reserved <= base_reserved
                target_rows.append(f"| {model} | {alloc} | peak reserved <= PyTorch caching's | "
                                   f"{mib(reserved)} vs {mib(base_reserved)} | "
                                   f"{'met' if met else 'MISSED'} |")
                if not met:
                    misses.append(f"{model} {alloc}: peak reserved {mib(reserved)} above "
                                  f"PyTorch caching's {mib(base_reserved)}")
            sps, base_sps = r.get("steps_per_second"), base_r.get("steps_per_second")
            if sps and base_sps:
                loss = 1 - sps / base_sps
                met = loss <= STEPS_TOLERANCE
                target_rows.append(f"| {model} | {alloc} | steps/s no lower than PyTorch caching's"
                                   f" (within {STEPS_TOLERANCE:.0%}) | {sps:.2f} vs {base_sps:.2f} "
                                   f"({-loss:+.1%}) | {'met' if met else 'MISSED'} |")
                if not met:
                    misses.append(f"{model} {alloc}: {sps:.2f} steps/s, {-loss:+.1%} vs PyTorch caching")
        notes_out.extend(target_rows)
        md += ["", f"### {title}", ""] + rows + [""] + notes
    return md


def luma_lacks_expandable(w, step):
    """Whether luma named expandable_segments an unknown key in that run's log."""
    return re.search(r"unknown key '?expandable_segments", w.text(step + ".out") or "") is not None


def limit_bytes(unit, factor):
    """The limit scripts/gpu-check gives for a factor (awk's printf "%.0f" of the product)."""
    return int(round(unit * factor))


def limit_runs(w, alloc):
    """{factor: (outcome, json, luma device)} of one allocator's limit grid; outcome is
    'completed', 'ran out' or 'FAILED (...)'."""
    out = {}
    for path in glob.glob(os.path.join(w.path, f"limit-{alloc}-*.rc")):
        name = os.path.basename(path)[:-3]
        m = re.fullmatch(rf"limit-{re.escape(alloc)}-(\d+\.\d+)", name)
        if not m:
            continue
        rc, r = w.rc(name), w.json(name + ".json")
        d = luma_device(w.json(name + ".stats.json")) if alloc in LUMA_ALLOCATORS else None
        if rc == 0 and r and not r.get("out_of_memory") and not r.get("stopped_early"):
            outcome = "completed"
        elif rc == EXIT_OOM and r and r.get("out_of_memory"):
            outcome = "ran out"
        elif rc == 125:
            outcome = "FAILED (skipped: time budget spent)"
        else:
            outcome = f"FAILED (exit {rc_text(rc)}{last_line(w, name)})"
        out[float(m.group(1))] = (outcome, r, d, name)
    return out


def limits_section(w, failures, misses):
    """The smallest memory each allocator completes the 30-step run in."""
    if w.exists("limits-skipped"):
        failures.append("limits: " + w.text("limits-skipped").strip())
        return [f"Not run: {w.text('limits-skipped').strip()}."]
    unit_text = (w.text("limits-unit") or "").strip()
    if not unit_text.isdigit():
        failures.append("limits: no unit (limits-unit missing)")
        return ["Not run: no unit."]
    unit = int(unit_text)
    rows = [f"Unit: the peak live bytes of the 30-step run, {unit:,} B (PyTorch's "
            "max_memory_allocated after step 30 of the caching run). PyTorch is limited with "
            "torch.cuda.set_per_process_memory_fraction, luma with LUMA_CONF=memory_limit "
            "(PyTorch's cache off); each limit is a run of its own.", "",
            "| allocator | completes at | runs out at | smallest completing, bytes | "
            "each limit tried |", "|---|---:|---:|---:|---|"]
    smallest = {}
    for alloc, label in ALLOCATORS:
        if alloc not in TORCH_STAGE_ALLOCATORS:
            continue
        runs = limit_runs(w, alloc)
        if not runs:
            if alloc == "luma-exp" and luma_lacks_expandable(w, "torch-luma-exp"):
                rows.append(f"| {label} | not supported by this build | | | |")
            else:
                failures.append(f"limits {alloc}: no run")
                rows.append(f"| {label} | not run | | | |")
            continue
        ok = sorted(f for f, (o, *_rest) in runs.items() if o == "completed")
        out = sorted(f for f, (o, *_rest) in runs.items() if o == "ran out")
        for f, (o, _r, d, name) in sorted(runs.items()):
            if o.startswith("FAILED"):
                failures.append(f"{name}: {o}")
            if alloc in LUMA_ALLOCATORS and not o.startswith("FAILED") and d is not None:
                settings = (w.json(name + ".stats.json") or {}).get("settings", "")
                want = f"memory_limit:{limit_bytes(unit, f)}"
                if want not in settings.split(","):
                    failures.append(f"{name}: luma did not apply {want} (settings: {settings})")
        if ok and out and max(out) > min(ok):
            misses.append(f"limits {alloc}: not monotonic (ran out at {max(out):.2f}, "
                          f"completed at {min(ok):.2f})")
        smallest[alloc] = min(ok) if ok else None
        tried = ", ".join(f"{f:.2f} {'ok' if o == 'completed' else 'out' if o == 'ran out' else 'FAILED'}"
                          for f, (o, *_rest) in sorted(runs.items()))
        done = f"{min(ok):.2f}" if ok else f"none up to {max(out):.2f}" if out else "not measured"
        below = [f for f in out if not ok or f < min(ok)]
        ran_out = f"{max(below):.2f}" if below else "-"
        rows.append(f"| {label} | {done} | {ran_out} | "
                    f"{f'{limit_bytes(unit, min(ok)):,}' if ok else 'n/a'} | {tried} |")
    base = smallest.get("caching")
    targets = []
    for alloc in LUMA_ALLOCATORS:
        if alloc not in smallest:
            continue
        mine = smallest[alloc]
        if mine is None or base is None:
            targets.append(f"- target: {alloc} fits in no more memory than PyTorch caching: "
                           "not judged (a run did not complete at any limit tried)")
            continue
        met = mine <= base
        targets.append(f"- target: {alloc} fits in no more memory than PyTorch caching: "
                       f"{'met' if met else 'MISSED'} ({mine:.2f} vs {base:.2f})")
        if not met:
            misses.append(f"limits {alloc}: completes at {mine:.2f}, PyTorch caching at {base:.2f}")
    return rows + [""] + targets


def live_section(w, failures):
    """luma top and luma exporter beside a running job."""
    r = w.json("live-view.json")
    if r is None:
        failures.append(f"live-view: no result (exit {rc_text(w.rc('live-view'))})"
                        f"{last_line(w, 'live-view')}")
        return ["Not run: no result from tests/gpu/live_view.py."]
    if "help_exit" in r and r["help_exit"] != 0:  # None: it could not be started
        failures.append(f"live-view: luma --help exited {r['help_exit']}: "
                        f"{(r.get('help_error') or '').strip()[-200:]}")
        return [f"Not run: `luma --help` exited {r['help_exit']}."]
    rows = ["| view | in this build | the job's pid seen | allocated | reserved | "
            "gone once the job ended | verdict |", "|---|---|---|---:|---:|---|---|"]
    pid = r.get("job_pid")
    top = r.get("top") or {}
    row = top.get("row")
    if not r.get("top_in_build"):
        rows.append("| `luma top --once --json` | not in this build | | | | | |")
    else:
        ok = bool(row and row.get("allocated_bytes", 0) > 0 and row.get("reserved_bytes", 0) > 0)
        if not ok:
            failures.append(f"live-view: luma top did not show job pid {pid} with allocations "
                            f"(exit {top.get('exit')}, {top.get('tries')} tries)")
        after = r.get("top_after_exit") or {}
        gone = after.get("exit") == 0 and after.get("row") is None
        if not gone:
            failures.append(f"live-view: luma top still listed job pid {pid} after it ended "
                            f"(exit {after.get('exit')})")
        rows.append(f"| `luma top --once --json` | yes | {'yes' if row else 'NO'} ({pid}) | "
                    f"{mib(row.get('allocated_bytes')) if row else 'n/a'} | "
                    f"{mib(row.get('reserved_bytes')) if row else 'n/a'} | "
                    f"{'yes' if gone else 'NO'} | {'pass' if ok and gone else 'FAIL'} |")
    exp = r.get("exporter") or {}
    if not r.get("exporter_in_build"):
        rows.append("| `luma exporter` /metrics | not in this build | | | | | |")
    else:
        v = exp.get("job_values") or {}
        ok = v.get("luma_allocated_bytes", 0) > 0 and v.get("luma_reserved_bytes", 0) > 0
        if not ok:
            failures.append(f"live-view: luma exporter's /metrics had no series of job pid {pid} "
                            f"with allocations (answered {exp.get('answered')}, {exp.get('error')})")
        rows.append(f"| `luma exporter` /metrics | yes | {'yes' if exp.get('job_lines') else 'NO'} "
                    f"({pid}) | {mib(v.get('luma_allocated_bytes'))} | "
                    f"{mib(v.get('luma_reserved_bytes'))} | | {'pass' if ok else 'FAIL'} |")
    return rows


def trace_run(w, failures):
    """The traced run (small model, 100 steps, PyTorch's cache off, LUMA_TRACE): its losses
    must be the caching run's first ones."""
    r, d = w.json("torch-trace.json"), luma_device(w.json("torch-trace.stats.json"))
    if r is None:
        failures.append(f"torch-trace: no result (exit {rc_text(w.rc('torch-trace'))})")
        return ["The traced run left no result.", ""]
    ref = (w.json("torch-caching.json") or {}).get("losses")
    n = min(len(ref or []), len(r["losses"]))
    same = ref is not None and n > 0 and ref[:n] == r["losses"][:n]
    if ref is not None and not same:
        failures.append("torch-trace: losses differ from the caching run's")
    sps = r.get("steps_per_second")
    return [f"The traced run (torch_train.py --model small --steps 100, PyTorch's cache off, "
            f"LUMA_TRACE): {r['steps_done']} steps, {f'{sps:.2f}' if sps else 'n/a'} steps/s, "
            f"luma peak reserved {mib(d.get('peak_reserved_bytes') if d else None)}; losses "
            + ("identical to the caching run's first " + str(n) if same else
               "not compared (no caching run)" if ref is None else "DIFFER from the caching run's")
            + ".", ""]


def plan_section(w, failures, misses):
    if w.exists("trace-unsupported"):
        misses.append("no trace planned: the bundled libluma.so has no LUMA_TRACE")
        return ["Not run: the bundled libluma.so has no LUMA_TRACE."]
    if not w.exists("plan.out"):
        why = "no trace was written" if w.exists("torch-trace.out") else "the trace run did not run"
        failures.append(f"plan: {why}")
        return [f"Not run: {why}."]
    if w.rc("plan") != 0:
        failures.append(f"plan: luma plan exit {rc_text(w.rc('plan'))}")
    lines = trace_run(w, failures) + [
        f"`luma plan TRACE --strategy best --time-limit 10` (exit {rc_text(w.rc('plan'))}):",
        "", "```", w.text("plan.out", "").rstrip(), "```"]
    if w.exists("trace-stats.out"):
        lines += ["", f"`luma stats TRACE` (exit {rc_text(w.rc('trace-stats'))}):", "", "```",
                  w.text("trace-stats.out", "").rstrip()[:4000], "```"]
    return lines


def machine(w):
    gpu = (w.text("gpu.csv") or "").strip().splitlines()
    smi = w.text("nvidia-smi.txt") or ""
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", smi)
    fields = [f.strip() for f in gpu[0].split(",")] if gpu else []
    manifest = w.text("manifest", "")
    built = re.search(r"^source_digest: (\S+)", manifest, re.M)
    here = re.search(r"^source_digest_here: (\S+)", manifest, re.M)
    stale = "" if not (built and here) or built.group(1) == here.group(1) else \
        " — STALE: built from other sources than the tree it ran beside"
    head = re.search(r"^git_head: (\S+)", manifest, re.M)
    nvcc = re.search(r"release ([\d.]+), V([\d.]+)", w.text("nvcc.txt", ""))
    return [
        "| | |", "|---|---|",
        f"| GPU | {fields[0] if fields else 'none found'}"
        f"{' (' + fields[2] + ')' if len(fields) > 2 else ''} |",
        f"| driver | {fields[1] if len(fields) > 1 else 'n/a'} |",
        f"| CUDA (driver) | {cuda.group(1) if cuda else 'n/a'} |",
        f"| nvcc there | {nvcc.group(2) if nvcc else 'n/a'} |",
        f"| torch | {(w.text('torch.txt', 'n/a').strip().splitlines() or ['n/a'])[-1]} |",
        f"| kernel, CPUs | {' / '.join((w.text('uname', 'n/a')).split(chr(10))[:2])} |",
        f"| date (UTC) | {w.text('date', 'n/a').strip()} |",
        f"| command | `{w.text('command', 'n/a').strip()}` |",
        f"| bundle | git {head.group(1)[:12] if head else '?'}, sources "
        f"{built.group(1) if built else '?'}{stale} |",
    ]


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    w, out_md = Work(argv[0]), argv[1]
    failures, misses = [], []
    md = ["# luma on a real GPU: results", ""]
    nogpu = w.exists("nogpu")
    fatal = w.text("fatal")
    if fatal or nogpu:
        md += ["**No measurement was made in this run**: " +
               (f"{fatal.strip()}." if fatal else "no GPU was found on the machine it ran on."),
               "", "## Machine", ""] + machine(w)
        md += ["", "## Checks that ran without a GPU", "",
               f"- bundle: {fatal.strip() if fatal else 'present, SHA256SUMS match'}",
               "- ldd of the bundle: " + ("; ".join((w.text("ldd-missing") or "").split("\n")).strip("; ")
                                          or "nothing missing"),
               f"- luma --version: exit {rc_text(w.rc('tool-version'))}",
               f"- py_compile tests/gpu/*.py: exit {rc_text(w.rc('py-compile'))}"]
        status = 77 if nogpu and not fatal else 1
        stages = []
    else:
        stages = [x for x in (w.text("stages") or ",".join(ALL_STAGES)).strip().split(",") if x]
        md += ["## Machine", ""] + machine(w)
        if tuple(stages) != ALL_STAGES:
            md += ["", f"Stages run: {', '.join(stages)} (--only); the others are not reported."]
    if "correctness" in stages:
        md += ["", "## Correctness: tests/gpu plain and under LD_PRELOAD=libluma.so", "",
               "Exit codes and output (numbers masked) must be the same; luma's JSON statistics "
               "must show the allocations (alloc_calls) and, where blocks are reused, at most "
               f"one driver allocation per {REUSE_RATIO}.", ""] + correctness(w, failures)
        pat_rows = patterns(w, failures)
        if pat_rows:
            md += ["", "Patterns of real programs (tests/programs' prog_driver, written for the "
                   "stand-in): IPC the UCX way and simpleIPC, PyTorch's graph pattern, captures "
                   "in each mode, a stream-ordered free of a cached block.", ""] + pat_rows
        ans_rows = answers(w, failures)
        if ans_rows:
            md += ["", "What the driver answers where the stand-in had to choose "
                   "(tests/programs/driver_answers.cpp; codes are CUresult values, the "
                   "granularity is bytes):", ""] + ans_rows
    if "graphs" in stages:
        md += ["", "## CUDA graphs in PyTorch: tests/gpu/torch_graphs.py", "",
               "`torch.cuda.graph` capture of an MLP's forward, loss and backward, PyTorch's "
               "caching allocator on; 20 replays on new inputs, each compared with the same step "
               "run eagerly on a copy of the model; tensors of 1 KiB to 48 MiB allocated and "
               "freed between replays.", ""] + graphs_section(w, failures)
    if "ipc" in stages:
        md += ["", "## PyTorch's IPC: tests/gpu/torch_ipc.py and prog_torch_ipc", "",
               "40 CUDA tensors of mixed sizes and dtypes (PyTorch's caching allocator on, many "
               "in one of its segments) put on a torch.multiprocessing queue to a spawned "
               "process, which checks each and adds 1 in place; the parent checks the replies. "
               "Under luma no setting is given. prog_torch_ipc: the same exchange over the "
               "stand-in of PyTorch's allocator (libc10_cuda.so), 40 tensors, 2 rounds.", ""] + \
            ipc_section(w, failures)
    if "sanitizer" in stages:
        md += ["", "## compute-sanitizer memcheck on a planted overflow (gpu_overflow)", "",
               "A kernel writes 16 floats past a 1,000-float cudaMalloc allocation (neighbour: "
               "a second allocation made right after it). Plain, memcheck must report the 16 "
               "writes; under luma, which describes its segments and blocks through the NVTX "
               "memory API when a tool is present, the target is the same count.", ""] + \
            sanitizer_section(w, failures, misses)
    if "latency" in stages:
        lat_rows = latency(w, failures, misses)
        md += ["", "## Latency: one cudaMalloc+cudaFree pair (median ns, after warm-up)", "",
               "`gpu_latency`: nvcc static runtime; the same binary plain and under luma."
               " Up to 1 MiB, 16 pairs per timed sample.", ""] + lat_rows
        fc_rows = fence_costs(w, failures)
        if fc_rows:
            md += ["", "The driver calls of luma's fences (`gpu_fence_costs`, timing-free events, "
                   "a kernel running on the busy stream):", ""] + fc_rows
        st_rows = streams(w, failures, misses)
        if st_rows:
            md += ["", "The pair with many non-blocking streams (`gpu_streams`, the workload of "
                   "tests/bench/bench_streams.cpp: 8 live 4 KiB blocks; busy: a ~400 us kernel "
                   "queued on each stream before every sample of 256 pairs; medians). Idle rows "
                   "are judged by wall time, busy rows by the better of wall and CPU time "
                   "(waiting for queued work is the bound on pending memory, not a fence cost):",
                   ""] + st_rows
    if "costs" in stages:
        md += ["", "## Driver costs: each memory call timed alone (gpu_driver_costs)", "",
               "cuMemAlloc and cuMemFree apart, and the virtual-memory calls of an expandable "
               "segment (pinned device memory, the size rounded up to the granularity; "
               "cuMemSetAccess read-write for device 0), median of up to 201 calls after "
               "warm-up, beside the figure `luma simulate` charges for the call now "
               f"({DRIVER_COSTS_CPP}, interpolated in the size as it does). When recorded, "
               "these figures replace the table's estimates.", ""] + \
            driver_costs_section(w, failures, ROOT)
    shown = [a for a in TORCH_STAGE_ALLOCATORS if "torch" in stages] + \
        (["luma-keep"] if "costs" in stages else [])
    if shown:
        target_rows = []
        t_md = torch_section(w, failures, misses, target_rows, shown)
        md += ["", "## Training loops: speed and memory per allocator", "",
               "tests/gpu/torch_train.py: batch size and sequence length drawn per step, seed "
               "1234, deterministic mode, TF32 off. Peak reserved and peak live: PyTorch's "
               "max_memory_reserved / max_memory_allocated for PyTorch's allocators, luma's "
               "peak_reserved_bytes / peak_bytes (its JSON statistics) for luma's."] + t_md
        if target_rows:
            md += ["", "Targets (luma against PyTorch's caching allocator):", "",
                   "| model | luma | target | measured | verdict |", "|---|---|---|---|---|"] + \
                target_rows
    if "limits" in stages:
        md += ["", "## The smallest memory a run completes in (small model, 30 steps)", ""] + \
            limits_section(w, failures, misses)
    if "live" in stages:
        md += ["", "## luma top and luma exporter beside a running job", "",
               "A torch_train.py run under luma (PyTorch's cache off) in the background; "
               "`luma top --once --json` asked until the job's row shows allocations, then "
               "`luma exporter --listen 127.0.0.1:PORT` scraped once (/metrics).", ""] + \
            live_section(w, failures)
    if "plan" in stages:
        md += ["", "## Trace of a luma run, planned", ""] + plan_section(w, failures, misses)
    if stages:
        status = 0 if not failures else 1
    verdict = ("NO GPU: nothing measured" if status == 77 else
               f"NOT RUN: {fatal.strip()}" if fatal else
               "PASS: every correctness check passed" if status == 0 else
               f"FAIL: {len(failures)} check(s) failed or did not run")
    md[2:2] = [f"**{verdict}**" + (f"; targets missed: {len(misses)}" if misses else ""), ""]
    if failures:
        md += ["", "## Failures", ""] + [f"- {f}" for f in failures]
    if misses:
        md += ["", "## Targets missed", ""] + [f"- {m}" for m in misses]
    md += ["", "Reproduce: see docs/gpu-results.md (`scripts/gpu-check --prepare` here, then "
           "`scripts/gpu-check` on the GPU machine with build-gpu-bundle copied beside it).", ""]
    with open(out_md, "w", encoding="utf-8") as f:
        f.write("\n".join(md))
    print(f"gpu_report: {verdict}; wrote {out_md}")
    for f in failures:
        print(f"  failed: {f}")
    for m in misses:
        print(f"  target missed: {m}")
    return status


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # a report that cannot be made must still say so, not pass
        print(f"gpu_report: could not make the report: {e!r}", file=sys.stderr)
        sys.exit(2)
