#!/usr/bin/env python3
"""check_oom_snapshot.py SNAPSHOT RESERVED REQUESTED FUNCTION: the snapshot libluma.so wrote
at an out-of-memory error (LUMA_OOM_SNAPSHOT) is one PyTorch's memory viewer opens
(check_memviz.py's checks, as a partial trace: its events are the last ones kept), and says
what the error was: its blocks add up to RESERVED bytes (the segments luma held then); the
last entry of the device's trace is the oom, with the driver's device_free and the
REQUESTED size; the recent events are there (allocs, frees, segments), and the allocs made
by FUNCTION carry frames naming it. A mismatch fails with one line.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_memviz  # noqa: E402


def main():
    path, reserved, requested, function = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    snap = check_memviz.check(path, wall_clock=True, partial=True)

    def fail(msg):
        sys.exit("check_oom_snapshot: %s: %s" % (path, msg))

    segments = snap["segments"]
    total = sum(s["total_size"] for s in segments)
    blocks = sum(b["size"] for s in segments for b in s["blocks"])
    if total != reserved or blocks != reserved:
        fail("segments hold %d bytes, blocks %d; luma had reserved %d" % (total, blocks, reserved))
    devices = {s["device"] for s in segments}
    if len(devices) != 1:
        fail("segments of devices %s, not of the one that ran out" % sorted(devices))
    trace = snap["device_traces"][devices.pop()]
    if not trace or trace[-1]["action"] != "oom":
        fail("the device's trace does not end with the oom entry")
    oom = trace[-1]
    if oom["size"] != requested:
        fail("oom size %d, the request was %d" % (oom["size"], requested))
    if not 0 <= oom["device_free"] < requested:
        fail("oom device_free %d: the request of %d would have fitted" % (oom["device_free"], requested))
    actions = {e["action"] for e in trace}
    for a in ("alloc", "free_requested", "segment_alloc"):
        if a not in actions:
            fail("no %s among the recent events (%s)" % (a, sorted(actions)))
    named = [e for e in trace if e["action"] == "alloc" and e["size"] == requested
             and any(function in f["name"] for f in e["frames"])]
    if not named:
        fail("no alloc of %d bytes has a frame naming %s" % (requested, function))
    live = [b for s in segments for b in s["blocks"] if b["state"] == "active_allocated"
            and any(function in f["name"] for f in b["frames"])]
    if not live:
        fail("no live block has a frame naming " + function)
    print("ok: %d segments, %d bytes, %d recent events, %d live blocks from %s" % (
        len(segments), total, len(trace), len(live), function))


if __name__ == "__main__":
    main()
