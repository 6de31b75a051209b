#!/usr/bin/env python3
"""check_memviz.py SNAPSHOT: the file is a pickle that Python loads, written with only the
opcodes PyTorch's memory_viz unpickler reads, and it holds the snapshot schema
(segments with blocks, device_traces, allocator_settings) with the right types."""
import pickle
import pickletools
import sys

ALLOWED = {"PROTO", "FRAME", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "SETITEM",
           "APPENDS", "APPEND", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
           "BINUNICODE", "SHORT_BINUNICODE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
           "MEMOIZE", "BINPUT", "BINGET", "STOP"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom"}
STATES = {"active_allocated", "active_pending_free", "inactive"}


def fail(msg):
    print("check_memviz: " + msg)
    sys.exit(1)


def check_frames(frames, where):
    if not isinstance(frames, list):
        fail(where + ": frames is not a list")
    for f in frames:
        if set(f) != {"filename", "line", "name"}:
            fail(where + ": frame keys " + str(sorted(f)))
        if not (isinstance(f["filename"], str) and isinstance(f["line"], int)
                and isinstance(f["name"], str)):
            fail(where + ": frame types")


def check(path):
    data = open(path, "rb").read()
    for op, _, _ in pickletools.genops(data):
        if op.name not in ALLOWED:
            fail("opcode %s is not one the viewer reads" % op.name)
    snap = pickle.loads(data)
    if not isinstance(snap, dict) or set(snap) != {"segments", "device_traces",
                                                   "allocator_settings"}:
        fail("top-level keys: " + str(sorted(snap) if isinstance(snap, dict) else type(snap)))
    seg_keys = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id",
                "is_expandable", "frames", "blocks"}
    for s in snap["segments"]:
        if set(s) != seg_keys:
            fail("segment keys " + str(sorted(s)))
        for k in ("device", "address", "total_size", "allocated_size", "active_size",
                  "requested_size", "stream", "is_expandable"):
            if not isinstance(s[k], int):
                fail("segment %s is not an int" % k)
        if s["segment_type"] not in ("small", "large"):
            fail("segment_type " + repr(s["segment_type"]))
        if not isinstance(s["segment_pool_id"], tuple):
            fail("segment_pool_id is not a tuple")
        check_frames(s["frames"], "segment")
        total = 0
        at = s["address"]
        for b in s["blocks"]:
            if set(b) != {"address", "size", "requested_size", "state", "frames"}:
                fail("block keys " + str(sorted(b)))
            if b["state"] not in STATES:
                fail("block state " + repr(b["state"]))
            if b["address"] != at:
                fail("blocks do not tile their segment at 0x%x" % at)
            at += b["size"]
            total += b["size"]
            check_frames(b["frames"], "block")
        if total != s["total_size"]:
            fail("blocks add up to %d, segment is %d" % (total, s["total_size"]))
    if not isinstance(snap["device_traces"], list):
        fail("device_traces is not a list")
    for trace in snap["device_traces"]:
        for e in trace:
            if set(e) != {"action", "addr", "size", "stream", "time_us", "frames"}:
                fail("trace entry keys " + str(sorted(e)))
            if e["action"] not in ACTIONS:
                fail("action " + repr(e["action"]))
            for k in ("addr", "size", "stream", "time_us"):
                if not isinstance(e[k], int):
                    fail("trace entry %s is not an int" % k)
            check_frames(e["frames"], "trace entry")
    if not isinstance(snap["allocator_settings"], dict):
        fail("allocator_settings is not a dict")
    return snap


if __name__ == "__main__":
    snap = check(sys.argv[1])
    print("ok: %d segments, %d device traces, %d entries" % (
        len(snap["segments"]), len(snap["device_traces"]),
        sum(len(t) for t in snap["device_traces"])))
