#!/usr/bin/env python3
"""gpu_report_test.py - gpu_report.py on made-up work directories, and scripts/gpu-check's
usage paths, without a GPU.

Each test writes what scripts/gpu-check leaves in its work directory (NAME.out / .rc / .sec,
luma's JSON statistics, the Python scripts' JSON, in the formats those programs write) for
a run where everything passes, changes one thing, and checks the report's verdict: its exit
(0 pass, 1 a check failed or did not run, 77 no GPU), the table of that case, and where the
finding is listed (Failures, or Targets missed). Meson suite 'gpu-report'.
Usage: gpu_report_test.py SOURCE_ROOT
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
sys.dont_write_bytecode = True  # nothing written into the source tree
import gpu_report  # noqa: E402  (after the path is set)

UNIT = 800_000_000  # the made-up 30-step run's peak live bytes
LOSSES = [4.3376, 4.4545, 4.2658, 4.1, 3.9]


def luma_stats(alloc_calls=1000, mallocs=10, peak_reserved=1_000_000_000, peak=850_000_000,
               settings="caching:true,memory_limit:0"):
    return {"settings": settings, "devices": [{
        "device": 0, "alloc_calls": alloc_calls, "cuda_malloc_calls": mallocs,
        "peak_reserved_bytes": peak_reserved, "peak_bytes": peak}]}


def train_result(label, sps=60.0, reserved=1_200_000_000, allocated=800_000_000, caching_off=False,
                 oom=False, losses=None, limit=0):
    return {"label": label, "steps_done": len(losses or LOSSES), "stopped_early": False,
            "out_of_memory": oom, "error": "CUDA out of memory" if oom else None,
            "memory_limit": limit, "steps_per_second": None if oom else sps,
            "losses": list(losses or LOSSES),
            "max_memory_allocated": 0 if caching_off else allocated,
            "max_memory_reserved": 0 if caching_off else reserved,
            "peak_at_step": {"steps": 30, "max_memory_allocated": UNIT,
                             "max_memory_reserved": UNIT * 2},
            "torch_caching_disabled": caching_off}


SAN_PLAIN = """========= COMPUTE-SANITIZER
libluma.so mapped: no
NVTX tool announced (NVTX_INJECTION64_PATH): yes
""" + "".join(f"""========= Invalid __global__ write of size 4 bytes
=========     at overflow_kernel(float *, int)+0x70 in overflow.cu:31
=========     by thread ({1000 + i},0,0) in block (0,0,0)
=========     Address 0x7f0000000fa0 is out of bounds
""" for i in range(16)) + """overflow: 16 floats written past a 1000-float allocation; launch 0, synchronize 719
========= Program hit cudaErrorLaunchFailure (error 719) on CUDA API call to cudaDeviceSynchronize.
========= ERROR SUMMARY: 17 errors
"""


def driver_costs_out(skip=()):
    """gpu_driver_costs' output: each call at each size, median 10 us + 1 us per MiB (the
    calls in `skip` left out)."""
    text = ("# driver calls that change device memory, ns per call, each call timed alone "
            "(granularity 2097152 B)\n"
            "# call                        bytes    median_ns       p10_ns       p90_ns  samples\n")
    for n in gpu_report.DRIVER_COST_SIZES:
        for call in gpu_report.DRIVER_COST_CALLS:
            if (call, n) in skip:
                continue
            ns = 10_000 + 1_000 * (n >> 20)
            text += f"  {call:<20} {n:12d} {ns:12d} {ns - 500:12d} {ns + 500:12d}      201\n"
    return text


class Work:
    """A made-up work directory of a passing run; set() / drop() change it."""

    def __init__(self, path):
        self.path = path
        self.make()

    def set(self, name, text):
        with open(os.path.join(self.path, name), "w", encoding="utf-8") as f:
            f.write(text if isinstance(text, str) else json.dumps(text))

    def get(self, name):
        with open(os.path.join(self.path, name), encoding="utf-8") as f:
            return json.load(f)

    def drop(self, name):
        os.remove(os.path.join(self.path, name))

    def step(self, name, out, rc=0, sec=1):
        self.set(name + ".out", out)
        self.set(name + ".rc", f"{rc}\n")
        self.set(name + ".sec", f"{sec}\n")

    def make(self):
        self.set("stages", ",".join(gpu_report.ALL_STAGES) + "\n")
        self.set("gpu.csv", "NVIDIA H200, 580.159.04, 143771 MiB, 00000000:00:06.0\n")
        self.set("nvidia-smi.txt", "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |\n")
        self.set("torch.txt", "2.11.0+cu130 13.0 True\n")
        self.set("manifest", "git_head: 0123456789abcdef\nsource_digest: aaaa\nsource_digest_here: aaaa\n")
        self.set("command", "scripts/gpu-check\n")
        self.set("date", "2026-12-05T00:00:00Z\n")
        self.set("uname", "Linux 6.18 x86_64\n16\n")
        for p in ("static", "shared"):
            for m in gpu_report.MODES:
                for k in ("plain", "luma"):
                    self.step(f"corr-{p}-{m}-{k}", f"{m}: 1000 rounds ok\n")
                self.set(f"corr-{p}-{m}-luma.stats.json", luma_stats())
        for k in ("plain", "luma"):
            self.step(f"corr-driver-{k}", "driver: 1800 rounds ok\n")
        self.set("corr-driver-luma.stats.json", luma_stats())
        for m in gpu_report.PATTERNS:
            for k in ("plain", "luma"):
                self.step(f"pat-{m}-{k}", f"{m}: checked\n")
        answers = ("cuMemFree(0)                     got 0         expected 0         ok\n"
                   "cuMemFree twice                  got 1         expected 1         ok\n")
        for k in ("plain", "luma"):
            self.step(f"answers-{k}", answers)
        for k in ("plain", "luma"):
            self.step(f"torch-graphs-{k}", f"{k}: 20 replays, 20 equal to eager\n")
            self.set(f"torch-graphs-{k}.json", {"replays": 20, "equal": 20, "exact": 20,
                                                "max_abs_diff": 0.0, "rtol": 1e-5, "atol": 1e-6})
            self.step(f"torch-ipc-{k}", f"{k}: 40 tensors shared\n")
            self.set(f"torch-ipc-{k}.json", {"tensors": 40, "bytes": 123456, "segments": 9,
                                             "tensors_sharing_a_segment": 30, "peer_exit": 0,
                                             "peer_answer": {"received": 40, "wrong": []},
                                             "wrong_in_peer": [], "received_by_peer": 40,
                                             "wrong_replies": []})
            self.step(f"prog-torch-ipc-{k}", "torch-ipc: 2 rounds of 40 tensors shared\n")
        self.set("sanitizer-path", "/usr/local/cuda/bin/compute-sanitizer\n")
        self.set("sanitizer-command", "/usr/local/cuda/bin/compute-sanitizer --tool memcheck --nvtx yes\n")
        self.set("sanitizer-version.txt", "Version 2025.3.0\n")
        for mode in ("alone", "neighbour"):
            layout = "" if mode == "alone" else \
                "layout: second allocation at first + 4096 bytes; the overflow writes bytes [4000, 4064)\n"
            self.step(f"san-{mode}-plain", layout + SAN_PLAIN)
            self.step(f"san-{mode}-luma", layout + SAN_PLAIN.replace("mapped: no", "mapped: yes") +
                      "luma: an NVTX tool is present: luma's segments and blocks are described\n")
        lat = "# cudaMalloc+cudaFree pair latency\n"
        for k, ns in (("raw", 90000), ("luma", 140), ("luma-nosync", 120)):
            rows = "".join(f"{1024 * 4 ** i:14d} {ns:12d} {ns:12d} {ns:12d}      301     16\n"
                           for i in range(10))
            self.step(f"lat-{k}", lat + rows)
        self.step("fence-costs", "  cuEventRecord    idle            273        261        283\n")
        streams = "".join(f"  {n:<8} {st:<7} {ns:>8} {ns:>8} {ns:>8} {ns:>8} {ns:>8} {ns:>8}      201\n"
                          for n, st, ns in ((0, "idle", 200), (16, "idle", 210), (256, "idle", 220),
                                            (16, "busy", 300)))
        self.step("streams-raw", streams)
        self.step("streams-luma", streams)
        self.step("driver-costs", driver_costs_out())
        for prefix in ("torch", "gpt"):
            for alloc in ("caching", "expandable", "luma", "luma-exp", "luma-keep"):
                name = f"{prefix}-{alloc}"
                luma = alloc.startswith("luma")
                self.step(name, f"{name}: done\n")
                self.set(name + ".json", train_result(name, caching_off=luma,
                                                      reserved=1_000_000_000 if alloc == "expandable"
                                                      else 1_200_000_000))
                if alloc == "luma-keep":
                    self.set(name + ".stats.json", luma_stats(
                        peak_reserved=1_300_000_000,
                        settings="caching:true,release_free_segments:false"))
                elif luma:
                    self.set(name + ".stats.json", luma_stats(peak_reserved=1_100_000_000))
        self.set("limits-unit", f"{UNIT}\n")
        for alloc, first_ok in (("caching", 1.10), ("expandable", 1.05), ("luma", 1.05),
                                ("luma-exp", 1.05)):
            for f in (1.00, 1.05, 1.10, 1.15, 1.20, 1.30, 1.45, 1.65):
                self.limit(alloc, f, f >= first_ok)
        self.set("live-view.json", {"help_exit": 0, "top_in_build": True, "exporter_in_build": True, "job_pid": 4242,
                                    "top": {"exit": 0, "tries": 3, "row": {
                                        "pid": 4242, "allocated_bytes": 5 << 20,
                                        "reserved_bytes": 20 << 20}},
                                    "top_after_exit": {"exit": 0, "row": None},
                                    "exporter": {"answered": True, "job_lines": [
                                        'luma_allocated_bytes{pid="4242"} 5242880'],
                                        "job_values": {"luma_allocated_bytes": 5242880.0,
                                                       "luma_reserved_bytes": 20971520.0}}})
        self.step("live-view", "live-view: ok\n")
        self.step("torch-trace", "trace: done\n")
        self.set("torch-trace.json", train_result("trace", caching_off=True))
        self.set("torch-trace.stats.json", luma_stats())
        self.step("plan", "device 0: 30612 buffers\n")
        self.step("trace-stats", "device 0:\n")

    def limit(self, alloc, f, completes):
        name = f"limit-{alloc}-{f:.2f}"
        luma = alloc.startswith("luma")
        self.step(name, "done\n" if completes else "out of memory at step 12\n",
                  rc=0 if completes else gpu_report.EXIT_OOM)
        self.set(name + ".json", train_result(name, caching_off=luma, oom=not completes,
                                              limit=round(UNIT * f)))
        if luma:
            self.set(name + ".stats.json",
                     luma_stats(settings=f"caching:true,memory_limit:{round(UNIT * f)}"))


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.work = Work(os.path.join(self.tmp.name))
        self.md = os.path.join(self.tmp.name, "report.md")

    def tearDown(self):
        self.tmp.cleanup()

    def report(self):
        """(exit, markdown text)."""
        with open(os.devnull, "w", encoding="utf-8") as null:
            old, sys.stdout = sys.stdout, null
            try:
                status = gpu_report.main([self.work.path, self.md])
            finally:
                sys.stdout = old
        with open(self.md, encoding="utf-8") as f:
            return status, f.read()

    @staticmethod
    def section(md, title):
        """The lines of the report under `## TITLE...` up to the next `## `."""
        start = md.index("## " + title)
        end = md.find("\n## ", start + 1)
        return md[start:end if end >= 0 else len(md)]

    def test_a_run_where_everything_passes_passes_with_a_table_per_case(self):
        status, md = self.report()
        self.assertEqual(status, 0, md)
        self.assertIn("**PASS", md)
        self.assertNotIn("## Failures", md)
        for title in ("Correctness", "CUDA graphs in PyTorch", "PyTorch's IPC",
                      "compute-sanitizer memcheck", "Latency", "Training loops",
                      "The smallest memory", "luma top and luma exporter"):
            self.assertIn("|---", self.section(md, title), title)
        self.assertIn("```", self.section(md, "Trace of a luma run"))

    def test_no_gpu_exits_77(self):
        self.work.set("nogpu", "no GPU\n")
        status, md = self.report()
        self.assertEqual(status, 77)
        self.assertIn("No measurement was made", md)

    def test_graph_replays_that_differ_under_luma_fail(self):
        self.work.set("torch-graphs-luma.json", {"replays": 20, "equal": 18, "exact": 18,
                                                 "max_abs_diff": 0.5, "rtol": 1e-5, "atol": 1e-6})
        self.work.set("torch-graphs-luma.rc", "1\n")
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("torch-graphs-luma: exit 1; 2 of 20 replays differ from eager",
                      self.section(md, "Failures"))

    def test_a_graphs_run_without_result_fails_with_its_last_line(self):
        self.work.drop("torch-graphs-luma.json")
        self.work.step("torch-graphs-luma", "Traceback\nRuntimeError: capture_begin failed\n", rc=1)
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("no result: RuntimeError: capture_begin failed", self.section(md, "Failures"))

    def test_ipc_tensors_wrong_in_the_peer_fail(self):
        r = self.work.get("torch-ipc-luma.json")
        r["wrong_in_peer"] = list(range(24))
        self.work.set("torch-ipc-luma.json", r)
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("24 of 40 tensors wrong in the peer", self.section(md, "PyTorch's IPC"))

    def test_prog_torch_ipc_failing_under_luma_fails(self):
        self.work.step("prog-torch-ipc-luma", "prog_torch_ipc: 3 of 80 tensors wrong\n", rc=1)
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("prog-torch-ipc-luma: exit 1", self.section(md, "Failures"))

    def test_memcheck_finding_nothing_under_luma_is_a_target_missed(self):
        self.work.step("san-neighbour-luma", "libluma.so mapped: yes\n========= ERROR SUMMARY: 0 errors\n")
        status, md = self.report()
        self.assertEqual(status, 0)
        table = self.section(md, "compute-sanitizer")
        self.assertIn("| neighbour | 16 / 17 | 0 / 0 | yes | n/a | no | MISSED |", table)
        self.assertIn("MISSED", table)
        self.assertIn("compute-sanitizer neighbour: luma 0 invalid accesses, plain 16",
                      self.section(md, "Targets missed"))

    def test_memcheck_finding_them_all_under_luma_meets_the_target(self):
        _, md = self.report()
        self.assertIn("| alone | 16 / 17 | 16 / 17 | yes | yes | yes | met |", md)
        self.assertIn("| | plain: second allocation at first + 4096 bytes; the overflow writes "
                      "bytes [4000, 4064) | luma: second allocation at first + 4096 bytes", md)

    def test_memcheck_finding_nothing_plain_means_the_check_is_broken(self):
        self.work.step("san-alone-plain", "========= ERROR SUMMARY: 0 errors\n")
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("the check is broken", self.section(md, "Failures"))

    def test_memcheck_run_without_luma_in_the_process_fails(self):
        self.work.step("san-alone-luma", SAN_PLAIN)  # "libluma.so mapped: no"
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("libluma.so was not in the sanitized process", self.section(md, "Failures"))

    def test_no_compute_sanitizer_is_a_check_not_run(self):
        self.work.set("sanitizer-missing", "compute-sanitizer not found (PATH)\n")
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("sanitizer: compute-sanitizer not found", self.section(md, "Failures"))

    def test_latency_has_a_150_ns_target_column_up_to_256_mib(self):
        status, md = self.report()
        self.assertEqual(status, 0)
        table = self.section(md, "Latency")
        self.assertIn("target <= 150 ns with default settings", table)
        self.assertIn("| 256 MiB | 90,000 ns | 140 ns |", table)
        self.work.set("lat-luma.out", "".join(f"{1024 * 4 ** i:14d} 281 281 281 301 16\n"
                                              for i in range(10)))
        _, md = self.report()
        self.assertIn("latency above 150 ns (default settings): 1 KiB 281 ns",
                      self.section(md, "Targets missed"))

    def test_latency_that_stops_before_256_mib_fails(self):
        self.work.set("lat-luma.out", "".join(f"{1024 * 4 ** i:14d} 140 140 140 301 16\n"
                                              for i in range(6)))
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("lat-luma: sizes measured only up to 1 MiB, not 256 MiB",
                      self.section(md, "Failures"))

    def test_driver_costs_are_set_beside_the_simulate_table(self):
        status, md = self.report()
        self.assertEqual(status, 0, md)
        table = self.section(md, "Driver costs")
        # 2 MiB: 12 us measured; the table's cuMemAlloc between its 1 and 4 MiB rows.
        self.assertIn("| cuMemAlloc | 2 MiB | 12.0 µs | 11.5 µs - 12.5 µs | 201 | "
                      "47.0 µs (estimate, interpolated) | 0.26x |", table)
        self.assertIn("| cuMemCreate | 1 GiB | 1,034.0 µs | 1,033.5 µs - 1,034.5 µs | 201 | "
                      "373.3 µs (estimate) | 2.77x |", table)
        self.assertIn("| cuMemAddressReserve | 8 MiB | 18.0 µs |", table)
        self.assertIn("5.0 µs (estimate, nearest row)", table)
        self.assertIn("| cuMemMap | 32 MiB | 42.0 µs | 41.5 µs - 42.5 µs | 201 | "
                      "in cuMemMap+cuMemSetAccess |  |", table)
        self.assertIn("| cuMemMap+cuMemSetAccess | 2 MiB | 24.0 µs (sum of medians) | | | "
                      "10.0 µs (estimate) | 2.40x |", table)
        for call in gpu_report.DRIVER_COST_CALLS:
            for n in gpu_report.DRIVER_COST_SIZES:
                self.assertIn(f"| {call} | {gpu_report.size_name(n)} | ", table)
        self.assertIn("not measured: an estimate", table)  # the table's sources, named

    def test_the_simulate_table_is_read_from_its_source(self):
        t = gpu_report.simulate_cost_table(os.path.join(ROOT, gpu_report.DRIVER_COSTS_CPP))
        self.assertIsNotNone(t)
        for name in ("cuMemAlloc", "cuMemFree", "cuMemCreate", "cuMemRelease",
                     "cuMemMap+cuMemSetAccess", "cuMemUnmap", "cuMemAddressReserve",
                     "cuMemAddressFree"):
            self.assertIn(name, t)
            self.assertEqual(t[name], sorted(t[name]))
        self.assertIsNone(gpu_report.simulate_cost_table(os.path.join(self.tmp.name, "none.cpp")))

    def test_a_missing_driver_costs_output_is_named(self):
        for ext in (".out", ".rc", ".sec"):
            self.work.drop("driver-costs" + ext)
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("Not measured: gpu_driver_costs exited missing.",
                      self.section(md, "Driver costs"))
        self.assertIn("driver-costs: nothing measured (exit missing)", self.section(md, "Failures"))

    def test_a_failed_driver_call_is_named(self):
        out = driver_costs_out(skip={(c, n) for c in gpu_report.DRIVER_COST_CALLS[2:]
                                     for n in gpu_report.DRIVER_COST_SIZES[5:]})
        self.work.step("driver-costs", out + "driver_costs: cuMemCreate(&h, n, &prop, 0) failed: "
                       "2 CUDA_ERROR_OUT_OF_MEMORY (driver_costs.cu:88)\n", rc=1)
        status, md = self.report()
        self.assertEqual(status, 1)
        failures = self.section(md, "Failures")
        self.assertIn("driver-costs: exit 1: driver_costs: cuMemCreate(&h, n, &prop, 0) failed: "
                      "2 CUDA_ERROR_OUT_OF_MEMORY", failures)
        self.assertIn("driver-costs: not measured: cuMemCreate 1 GiB, cuMemAddressReserve 1 GiB",
                      failures)
        table = self.section(md, "Driver costs")
        self.assertIn("| cuMemCreate | 1 GiB | not measured |", table)
        self.assertIn("| cuMemFree | 1 GiB | 1,034.0 µs |", table)

    def test_the_simulate_table_unreadable_is_said_and_not_a_crash(self):
        old = gpu_report.ROOT
        gpu_report.ROOT = self.tmp.name
        try:
            status, md = self.report()
        finally:
            gpu_report.ROOT = old
        self.assertEqual(status, 0, md)
        table = self.section(md, "Driver costs")
        self.assertIn("could not be read", table)
        self.assertIn("| cuMemAlloc | 2 MiB | 12.0 µs | 11.5 µs - 12.5 µs | 201 | n/a |  |", table)

    def test_luma_keep_is_in_the_torch_table_beside_the_others(self):
        status, md = self.report()
        self.assertEqual(status, 0, md)
        table = self.section(md, "Training loops")
        for _, label in gpu_report.ALLOCATORS:
            self.assertEqual(table.count(f"| {label} | 5 | 60.00 | 1.000x |"), 2, label)
        self.assertIn("| luma, segments kept (LUMA_CONF=release_free_segments:false; costs stage, "
                      "a shorter run) | 5 | 60.00 | 1.000x | 1239.8 MiB | 810.6 MiB | 1.53 |", table)
        self.assertIn("- losses of luma-keep: identical to caching over 5 steps", table)
        # Not judged against the targets (its peak is above caching's here).
        self.assertNotIn("luma-keep", self.section(md, "Training loops").split("Targets")[-1])

    def test_a_luma_keep_run_missing_or_without_the_setting_fails(self):
        self.work.drop("gpt-luma-keep.json")
        self.work.step("gpt-luma-keep", "Traceback\nRuntimeError: CUDA error\n", rc=1)
        self.work.set("torch-luma-keep.stats.json", luma_stats(settings="caching:true"))
        status, md = self.report()
        self.assertEqual(status, 1)
        failures = self.section(md, "Failures")
        self.assertIn("gpt-luma-keep: no result (exit 1): RuntimeError: CUDA error", failures)
        self.assertIn("torch-luma-keep: luma did not apply release_free_segments:false", failures)

    def test_costs_alone_reports_luma_keep_without_the_torch_stage(self):
        self.work.set("stages", "costs\n")
        status, md = self.report()
        self.assertEqual(status, 0, md)
        table = self.section(md, "Training loops")
        self.assertIn("| luma, segments kept", table)
        self.assertNotIn("| PyTorch caching allocator |", table)
        self.assertNotIn("## The smallest memory", md)

    def test_luma_without_expandable_segments_says_not_supported(self):
        self.work.step("torch-luma-exp", "luma: LUMA_CONF: unknown key 'expandable_segments'\n")
        for ext in (".out", ".rc", ".sec", ".json", ".stats.json"):  # the script skips it
            self.work.drop(f"gpt-luma-exp{ext}")
        for f in (1.00, 1.05, 1.10, 1.15, 1.20, 1.30, 1.45, 1.65):
            for ext in (".out", ".rc", ".sec", ".json", ".stats.json"):
                self.work.drop(f"limit-luma-exp-{f:.2f}{ext}")
        status, md = self.report()
        self.assertEqual(status, 0, md)
        self.assertEqual(self.section(md, "Training loops").count("not supported by this build"), 2)
        self.assertIn("| luma expandable segments (LUMA_CONF=expandable_segments:1) | "
                      "not supported by this build |", self.section(md, "The smallest memory"))

    def test_peak_reserved_above_pytorch_caching_is_a_target_missed(self):
        self.work.set("torch-luma.stats.json", luma_stats(peak_reserved=1_400_000_000))
        status, md = self.report()
        self.assertEqual(status, 0)
        self.assertIn("small luma: peak reserved 1335.1 MiB above PyTorch caching's 1144.4 MiB",
                      self.section(md, "Targets missed"))

    def test_steps_per_second_within_3_percent_meet_the_target_and_below_miss_it(self):
        self.work.set("gpt-luma.json", train_result("gpt-luma", sps=58.5, caching_off=True))
        self.work.set("gpt-luma-exp.json", train_result("gpt-luma-exp", sps=57.0, caching_off=True))
        _, md = self.report()
        missed = self.section(md, "Targets missed")
        self.assertNotIn("gpt luma: ", missed)
        self.assertIn("gpt luma-exp: 57.00 steps/s, -5.0% vs PyTorch caching", missed)

    def test_losses_that_differ_fail(self):
        self.work.set("gpt-expandable.json",
                      train_result("x", losses=LOSSES[:2] + [9.0] + LOSSES[3:]))
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("gpt-expandable: losses differ from the caching run at step 2",
                      self.section(md, "Failures"))

    def test_smallest_memory_per_allocator_and_the_fits_target(self):
        status, md = self.report()
        self.assertEqual(status, 0)
        table = self.section(md, "The smallest memory")
        self.assertIn("| PyTorch caching allocator | 1.10 | 1.05 | 880,000,000 |", table)
        self.assertIn("target: luma fits in no more memory than PyTorch caching: met (1.05 vs 1.10)",
                      table)
        for f in (1.05, 1.10):
            self.work.limit("luma", f, False)
        _, md = self.report()
        self.assertIn("limits luma: completes at 1.15, PyTorch caching at 1.10",
                      self.section(md, "Targets missed"))

    def test_a_limit_luma_did_not_apply_fails(self):
        self.work.set("limit-luma-1.30.stats.json", luma_stats(settings="caching:true,memory_limit:0"))
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("limit-luma-1.30: luma did not apply memory_limit:1040000000",
                      self.section(md, "Failures"))

    def test_a_limit_run_that_crashed_fails(self):
        self.work.step("limit-caching-1.20", "Segmentation fault\n", rc=139)
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("limit-caching-1.20: FAILED (exit 139: Segmentation fault)",
                      self.section(md, "Failures"))

    def test_live_views_not_in_this_build_are_said_so_and_pass(self):
        self.work.set("live-view.json", {"top_in_build": False, "exporter_in_build": False})
        status, md = self.report()
        self.assertEqual(status, 0)
        table = self.section(md, "luma top and luma exporter")
        self.assertIn("| `luma top --once --json` | not in this build |", table)
        self.assertIn("| `luma exporter` /metrics | not in this build |", table)

    def test_a_luma_tool_that_cannot_run_is_not_taken_for_one_without_top(self):
        self.work.set("live-view.json", {"help_exit": 127, "help_error": "libfmt.so.9: not found",
                                         "top_in_build": False, "exporter_in_build": False})
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("live-view: luma --help exited 127: libfmt.so.9: not found",
                      self.section(md, "Failures"))

    def test_a_job_top_still_lists_after_it_ended_fails(self):
        r = self.work.get("live-view.json")
        r["top_after_exit"]["row"] = r["top"]["row"]
        self.work.set("live-view.json", r)
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("luma top still listed job pid 4242 after it ended", self.section(md, "Failures"))

    def test_live_view_that_missed_the_job_fails(self):
        r = self.work.get("live-view.json")
        r["top"]["row"] = None
        r["exporter"]["job_values"] = {}
        self.work.set("live-view.json", r)
        status, md = self.report()
        self.assertEqual(status, 1)
        failures = self.section(md, "Failures")
        self.assertIn("luma top did not show job pid 4242", failures)
        self.assertIn("/metrics had no series of job pid 4242", failures)

    def test_a_step_skipped_for_the_budget_is_a_check_not_run(self):
        self.work.drop("torch-ipc-plain.json")
        self.work.step("torch-ipc-plain", "SKIPPED (time budget spent)\n", rc=125)
        status, md = self.report()
        self.assertEqual(status, 1)
        self.assertIn("torch-ipc-plain: exit SKIPPED", self.section(md, "Failures"))

    def test_only_the_stages_run_are_reported(self):
        self.work.set("stages", "correctness,sanitizer\n")
        status, md = self.report()
        self.assertEqual(status, 0)
        self.assertIn("Stages run: correctness, sanitizer", md)
        self.assertNotIn("## Latency", md)


class ScriptTest(unittest.TestCase):
    """scripts/gpu-check's checks of its own arguments (no GPU, no bundle needed)."""

    script = os.path.join(ROOT, "scripts", "gpu-check")

    def run_script(self, *args):
        return subprocess.run(["bash", self.script, *args], capture_output=True, text=True,
                              timeout=60, check=False)

    def test_the_script_parses(self):
        self.assertEqual(subprocess.run(["bash", "-n", self.script], check=False).returncode, 0)

    def test_an_unknown_stage_is_named_and_exits_2(self):
        r = self.run_script("--only", "latency,bogus")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown stage 'bogus'", r.stderr)

    def test_a_budget_that_is_not_seconds_exits_2(self):
        r = self.run_script("--budget", "5m")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--budget '5m' is not a number of seconds", r.stderr)

    def test_help_lists_every_stage(self):
        r = self.run_script("--help")
        self.assertEqual(r.returncode, 2)
        for stage in gpu_report.ALL_STAGES:
            self.assertRegex(r.stdout, rf"\n\s+{stage}\s", stage)


if __name__ == "__main__":
    unittest.main(verbosity=1)
