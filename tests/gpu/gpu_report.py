#!/usr/bin/env python3
"""gpu_report.py WORK_DIR OUTPUT_MD - the summary of one scripts/gpu-check run.

Reads what scripts/gpu-check left in its work directory (NAME.out / NAME.rc / NAME.sec per
step, luma's JSON statistics, torch_train.py's JSON results, the plan, the machine's facts),
decides each correctness check, and writes a markdown report ready to be copied to
docs/gpu-results.md; prints a short summary last. Exit 0 every check passed (correctness,
identical losses, every measurement made), 1 some failed or did not run, 77 the run found no GPU. It must never judge a check it has no
output for as passed: a missing file is a failure, named.
"""

import json
import os
import re
import sys

MODES = ("basic", "hazard", "threads", "meminfo", "oom")
# Modes that free and reallocate many blocks: luma must serve most from its cache, so at
# most one driver allocation per REUSE_RATIO allocations.
REUSE_MODES = {("static", "basic"), ("static", "threads"), ("shared", "basic"),
               ("shared", "threads"), ("driver", "")}
REUSE_RATIO = 10
LATENCY_TARGET = 100.0          # issue 7: luma's pair >= 100x faster ...
LATENCY_TARGET_UP_TO = 1 << 20  # ... for sizes <= 1 MiB
STEP_TIME_TOLERANCE = 0.05      # issue 7: (3) within 5% of (1) in step time
TORCH_RUNS = (("caching", "(1) torch caching allocator"),
              ("nocache", "(2) PYTORCH_NO_CUDA_MEMORY_CACHING=1"),
              ("luma", "(3) no caching + LD_PRELOAD=libluma.so"),
              ("trace", "(3t) as (3) with LUMA_TRACE, 100 steps"))


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
            "free-async-cached")


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
    if not raw:
        return ["(no latency measured: see lat-raw.out in the details tarball)"]
    rows = ["| size | raw cudaMalloc+cudaFree | luma (free_sync:event, default) | speed-up | "
            "luma (free_sync:none) | speed-up | target (>= 100x up to 1 MiB) |",
            "|---:|---:|---:|---:|---:|---:|---|"]
    for n in sorted(raw):
        r, l, s = raw[n], luma.get(n), nosync.get(n)
        up = r / l if l else None
        up2 = r / s if s else None
        target = ""
        if n <= LATENCY_TARGET_UP_TO:
            met = up is not None and up >= LATENCY_TARGET
            target = "met" if met else "MISSED"
            if not met:
                misses.append(f"latency {size_name(n)}: {up:.0f}x" if up else
                              f"latency {size_name(n)}: not measured under luma")
        rows.append(f"| {size_name(n)} | {r:,.0f} ns | "
                    f"{f'{l:,.0f} ns' if l else 'n/a'} | {f'{up:,.0f}x' if up else 'n/a'} | "
                    f"{f'{s:,.0f} ns' if s else 'n/a'} | {f'{up2:,.0f}x' if up2 else 'n/a'} | "
                    f"{target} |")
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


def streams_table(text):
    """{(streams, state): (wall_median_ns, cpu_median_ns)} from gpu_streams' output."""
    out = {}
    for ln in (text or "").splitlines():
        f = ln.split()
        if len(f) == 9 and f[0].isdigit() and f[1] in ("idle", "busy"):
            out[(int(f[0]), f[1])] = (float(f[2]), float(f[5]))
    return out


def streams(w, failures, misses):
    """Issue #20 on the real driver: the pair with N streams, plain and under luma, and
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


def torch_section(w, failures, misses):
    res = {k: w.json(f"torch-{k}.json") for k, _ in TORCH_RUNS}
    stats = {k: luma_device(w.json(f"torch-{k}.stats.json")) for k in ("luma", "trace")}
    rows = ["| run | steps | steps/s | step time vs (1) | torch max reserved | "
            "torch max allocated | luma peak reserved | luma driver allocations / allocations |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    base = res["caching"]["steps_per_second"] if res["caching"] else None
    for k, label in TORCH_RUNS:
        r = res[k]
        if r is None:
            if k != "trace" or w.exists("torch-trace.rc"):
                failures.append(f"torch {k}: no result (exit {rc_text(w.rc('torch-' + k))})")
            rows.append(f"| {label} | exit {rc_text(w.rc('torch-' + k))} | | | | | | |")
            continue
        sps = r.get("steps_per_second")
        rel = f"{base / sps:.3f}x" if sps and base else "n/a"
        d = stats.get(k)
        steps = f"{r['steps_done']}{' (stopped early)' if r['stopped_early'] else ''}"
        luma_peak = mib(d.get("peak_reserved_bytes")) if d else "n/a"
        luma_calls = f"{d.get('cuda_malloc_calls')} / {d.get('alloc_calls')}" if d else "n/a"
        rate = f"{sps:.2f}" if sps is not None else "n/a"
        # Without its cache torch keeps no reserved figure: 0 there means not tracked.
        reserved = mib(r["max_memory_reserved"])
        if r.get("torch_caching_disabled") and not r["max_memory_reserved"]:
            reserved = "not tracked"
        rows.append(f"| {label} | {steps} | {rate} | {rel} | {reserved} | "
                    f"{mib(r['max_memory_allocated'])} | {luma_peak} | {luma_calls} |")
        if k in ("luma", "trace") and d is None:
            failures.append(f"torch {k}: no luma statistics")
    # The same seed must give the same losses whatever the allocator.
    done = {k: r["losses"] for k, r in res.items() if r}
    notes = []
    if "caching" in done:
        ref = done["caching"]
        for k, losses in done.items():
            n = min(len(ref), len(losses))
            diff = next((i for i in range(n) if ref[i] != losses[i]), None)
            if diff is None:
                notes.append(f"- losses of {k}: identical to (1) over {n} steps")
            else:
                worst = max(abs(ref[i] - losses[i]) for i in range(n))
                notes.append(f"- losses of {k}: DIFFER from (1), first at step {diff} "
                             f"({ref[diff]!r} vs {losses[diff]!r}), max |diff| {worst:.3g}")
                failures.append(f"torch {k}: losses differ from the caching run at step {diff}")
        shown = ", ".join(f"{x:.6f}" for x in ref[:3]) + " ... " + \
            ", ".join(f"{x:.6f}" for x in ref[-3:])
        notes.append(f"- losses (1): {shown}")
    else:
        failures.append("torch caching: no losses to compare with")
    r1, r3, d3 = res["caching"], res["luma"], stats["luma"]
    if r1 and r3 and r1.get("steps_per_second") and r3.get("steps_per_second"):
        slow = r1["steps_per_second"] / r3["steps_per_second"] - 1
        met = slow <= STEP_TIME_TOLERANCE
        notes.append(f"- target (3) step time within 5% of (1): {'met' if met else 'MISSED'} "
                     f"({slow * 100:+.1f}%)")
        if not met:
            misses.append(f"torch step time {slow * 100:+.1f}% vs caching")
    if r1 and d3 and d3.get("peak_reserved_bytes") is not None:
        met = d3["peak_reserved_bytes"] <= r1["max_memory_reserved"]
        notes.append(f"- target (3) peak reserved not above (1): {'met' if met else 'MISSED'} "
                     f"(luma {mib(d3['peak_reserved_bytes'])}, torch "
                     f"{mib(r1['max_memory_reserved'])})")
        if not met:
            misses.append("torch peak reserved above the caching allocator's")
    return rows, notes


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
    lines = [f"`luma plan TRACE --strategy best --time-limit 20` (exit {rc_text(w.rc('plan'))}):",
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
               f"- ldd of the bundle: {(w.text('ldd-missing', '') or 'nothing missing').strip()}",
               f"- luma --version: exit {rc_text(w.rc('tool-version'))}",
               f"- py_compile torch_train.py gpu_report.py: exit {rc_text(w.rc('py-compile'))}"]
        status = 77 if nogpu and not fatal else 1
        stages = []
    else:
        stages = (w.text("stages") or "correctness,latency,torch,plan").strip().split(",")
        md += ["## Machine", ""] + machine(w)
        if stages != ["correctness", "latency", "torch", "plan"]:
            md += ["", f"Stages run: {', '.join(stages)} (--only); the others are not reported."]
    if "correctness" in stages:
        md += ["", "## 1. Correctness: tests/gpu plain and under LD_PRELOAD=libluma.so", "",
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
    if "latency" in stages:
        lat_rows = latency(w, failures, misses)
        md += ["", "## 2. Latency: one cudaMalloc+cudaFree pair (median ns, after warm-up)", "",
               "`gpu_latency`: nvcc static runtime; the same binary plain and under luma."
               " Up to 1 MiB, 16 pairs per timed sample.", ""] + lat_rows
        fc_rows = fence_costs(w, failures)
        if fc_rows:
            md += ["", "The driver calls of luma's fences (`gpu_fence_costs`, timing-free events, "
                   "a kernel running on the busy stream):", ""] + fc_rows
        st_rows = streams(w, failures, misses)
        if st_rows:
            md += ["", "The pair with many non-blocking streams (`gpu_streams`, issue #20's "
                   "workload: 8 live 4 KiB blocks; busy: a ~400 us kernel queued on each "
                   "stream before every sample of 256 pairs; medians). Idle rows are judged "
                   "by wall time, busy rows by the better of wall and CPU time (waiting for "
                   "queued work is the bound on pending memory, not a fence cost):", ""] + st_rows
    if "torch" in stages:
        t_rows, t_notes = torch_section(w, failures, misses)
        md += ["", "## 3. PyTorch: tests/gpu/torch_train.py (4-layer transformer, batch and "
               "sequence length vary per step, seed 1234, deterministic)", ""] + t_rows + \
              [""] + t_notes
    if "plan" in stages:
        md += ["", "## 4. Trace of (3t), planned", ""] + plan_section(w, failures, misses)
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
           "`scripts/gpu-check` on the device machine with build-gpu-bundle carried).", ""]
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
