#!/usr/bin/env python3
"""check_memviz.py SNAPSHOT [--no-wall-clock] [--partial]: the file is a snapshot PyTorch's
memory viewer (torch/utils/viz/MemoryViz.js) and torch.cuda._memory_viz read as PyTorch's
own snapshots (torch.cuda.memory._snapshot(), written by torch/csrc/cuda/memory_snapshot.cpp):
every field they read, with its type and unit. docs/memviz.md lists the facts this checks
and where they come from. A mismatch fails with one line naming the field.

- Opcodes: only those MemoryViz.js's unpickler implements; no container batch larger than
  Python's pickler writes (the viewer appends a batch with one spread call).
- Integers the viewer computes with must be exact in a JavaScript Number (below 2^53).
- Segments: PyTorch's keys and types (is_expandable a bool, segment_pool_id a 2-tuple);
  blocks tile the segment; allocated_size, active_size and requested_size add up as the
  caching allocator counts them; a block's requested_size is at most its size.
- Trace entries: action, addr (device_free for oom), size, stream, time_us, frames on every
  entry; time_us in microseconds since 1970 (unless --no-wall-clock) and non-decreasing;
  alloc/free sizes are the requested size (equal for an alloc and its frees).
- Replay as the viewer does it: the Allocator State History walks back from the final
  segments (a free_requested must find its block, every block must lie in a segment at
  every step; segment_map / segment_unmap of expandable segments cut a mapped range out
  of the segment holding it, and merge it back with an adjacent one of the same stream);
  the timeline pairs alloc with free_completed by address. Unless --partial
  (a --last/--from/--to window), replaying the whole trace forward gives the final blocks.
- allocator_settings: PyTorch's keys with PyTorch's types; no number or boolean as text.
"""
import pickle
import pickletools
import sys

# The opcodes MemoryViz.js's unpickle() implements.
ALLOWED = {"PROTO", "FRAME", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MARK", "SETITEMS",
           "SETITEM", "APPENDS", "APPEND", "LIST", "DICT", "TUPLE", "TUPLE1", "TUPLE2",
           "TUPLE3", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "BINUNICODE",
           "SHORT_BINUNICODE", "NEWTRUE", "NEWFALSE", "NONE", "MEMOIZE", "BINPUT",
           "LONG_BINPUT", "BINGET", "LONG_BINGET", "STOP"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom"}
STATES = {"active_allocated", "active_pending_free", "inactive"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id",
                "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
ENTRY_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
OOM_KEYS = {"action", "device_free", "size", "stream", "time_us", "frames"}
# memory_snapshot.cpp's allocator_settings and the type of each.
SETTINGS = {"PYTORCH_CUDA_ALLOC_CONF": str, "max_split_size": int,
            "garbage_collection_threshold": float, "expandable_segments": bool,
            "pinned_num_register_threads": int, "release_lock_on_cudamalloc": bool,
            "pinned_use_cuda_host_register": bool, "roundup_power2_divisions": dict}
MAX_BATCH = 1000            # items per APPENDS, pairs per SETITEMS (Python's pickler)
JS_EXACT = 1 << 53          # a JavaScript Number holds integers exactly below this
EPOCH_2001_US = 10 ** 15    # September 2001 in microseconds since 1970
EPOCH_2100_US = 4102444800 * 10 ** 6


class Bad(Exception):
    pass


def fail(msg):
    raise Bad(msg)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_int(v, where, signed=False):
    if not is_int(v):
        fail("%s is %r, not an int" % (where, type(v).__name__))
    if v >= JS_EXACT or (v < 0 and not signed) or v <= -JS_EXACT:
        fail("%s = %d is not exact in a JavaScript Number" % (where, v))


def check_opcodes(data):
    depth_items = []  # per open MARK: items pushed since
    for op, arg, pos in pickletools.genops(data):
        if op.name not in ALLOWED:
            fail("opcode %s at byte %d is not one MemoryViz.js reads" % (op.name, pos))
        if op.name == "MARK":
            depth_items.append(0)
        elif op.name in ("APPENDS", "SETITEMS"):
            n = depth_items.pop()
            limit = MAX_BATCH if op.name == "APPENDS" else 2 * MAX_BATCH
            if n > limit:
                fail("%s at byte %d adds %d items (Python's pickler: at most %d)" % (
                    op.name, pos, n, limit))
        elif depth_items and op.name not in ("BINPUT", "LONG_BINPUT", "MEMOIZE", "PROTO",
                                             "FRAME", "STOP"):
            if op.name == "TUPLE2":
                depth_items[-1] -= 1
            elif op.name == "TUPLE3":
                depth_items[-1] -= 2
            else:
                depth_items[-1] += 1


def check_frames(frames, where):
    if not isinstance(frames, list):
        fail(where + ": frames is not a list")
    for f in frames:
        if not isinstance(f, dict) or set(f) != {"filename", "line", "name"}:
            fail(where + ": frame keys " + str(sorted(f) if isinstance(f, dict) else f))
        if not (isinstance(f["filename"], str) and is_int(f["line"]) and isinstance(f["name"], str)):
            fail(where + ": frame types (filename and name text, line an int)")


def check_segment(s, i):
    where = "segment %d" % i
    if not isinstance(s, dict) or set(s) != SEGMENT_KEYS:
        fail("%s keys %s" % (where, sorted(s)))
    for k in ("device", "address", "total_size", "allocated_size", "active_size",
              "requested_size", "stream"):
        check_int(s[k], "%s %s" % (where, k))
    if s["segment_type"] not in ("small", "large"):
        fail("%s segment_type %r" % (where, s["segment_type"]))
    pool = s["segment_pool_id"]
    if not (isinstance(pool, tuple) and len(pool) == 2 and all(is_int(x) for x in pool)):
        fail("%s segment_pool_id %r is not a 2-tuple of ints" % (where, pool))
    if not isinstance(s["is_expandable"], bool):
        fail("%s is_expandable is %s, not a bool" % (where, type(s["is_expandable"]).__name__))
    check_frames(s["frames"], where)
    at, allocated, active, requested = s["address"], 0, 0, 0
    for j, b in enumerate(s["blocks"]):
        bw = "%s block %d" % (where, j)
        if not isinstance(b, dict) or set(b) != BLOCK_KEYS:
            fail("%s keys %s" % (bw, sorted(b)))
        for k in ("address", "size", "requested_size"):
            check_int(b[k], "%s %s" % (bw, k))
        if b["state"] not in STATES:
            fail("%s state %r" % (bw, b["state"]))
        if b["address"] != at:
            fail("%s: blocks do not tile their segment at 0x%x" % (bw, at))
        if b["requested_size"] > b["size"]:
            fail("%s requested_size %d > size %d" % (bw, b["requested_size"], b["size"]))
        check_frames(b["frames"], bw)
        at += b["size"]
        if b["state"] == "active_allocated":
            allocated += b["size"]
        if b["state"] != "inactive":
            active += b["size"]
            requested += b["requested_size"]
    if at != s["address"] + s["total_size"]:
        fail("%s: blocks add up to %d, segment is %d" % (where, at - s["address"], s["total_size"]))
    for k, v in (("allocated_size", allocated), ("active_size", active),
                 ("requested_size", requested)):
        if s[k] != v:
            fail("%s %s is %d, its blocks say %d" % (where, k, s[k], v))


def check_entry(e, where, wall_clock):
    if not isinstance(e, dict) or "action" not in e:
        fail(where + ": not an entry dict")
    if e["action"] not in ACTIONS:
        fail("%s action %r" % (where, e["action"]))
    keys = OOM_KEYS if e["action"] == "oom" else ENTRY_KEYS
    if set(e) != keys:
        fail("%s (%s) keys %s, PyTorch writes %s" % (where, e["action"], sorted(e), sorted(keys)))
    for k in keys - {"action", "frames"}:
        check_int(e[k], "%s %s" % (where, k))
    if wall_clock and not EPOCH_2001_US <= e["time_us"] < EPOCH_2100_US:
        fail("%s time_us %d is not microseconds since 1970" % (where, e["time_us"]))
    check_frames(e["frames"], where)


def contains(segments, addr, size):
    return any(a <= addr and addr + size <= a + n for a, n in segments.items())


def map_back(segs, streams, addr, size, stream):
    """Walking back over a segment_unmap: the range is mapped again and merges with the
    segment right after it and right before it when of the same stream (the viewer's
    map_segment)."""
    segs[addr], streams[addr] = size, stream
    after = addr + size
    if after in segs and streams[after] == stream:
        segs[addr] += segs.pop(after)
        streams.pop(after)
    before = next((a for a, n in segs.items() if a + n == addr and streams[a] == stream), None)
    if before is not None:
        segs[before] += segs.pop(addr)
        streams.pop(addr)


def unmap_back(segs, streams, addr, size, where):
    """Walking back over a segment_map: the range leaves the segment holding it, which
    keeps what lies before and after it (the viewer's unmap_segment)."""
    owner = next((a for a, n in segs.items() if a <= addr and addr + size <= a + n), None)
    if owner is None:
        fail(where + ": no segment holds the mapped range 0x%x of %d bytes" % (addr, size))
    owner_end, stream = owner + segs.pop(owner), streams.pop(owner)
    if owner < addr:
        segs[owner], streams[owner] = addr - owner, stream
    if addr + size < owner_end:
        segs[addr + size], streams[addr + size] = owner_end - addr - size, stream


def replay(snap, device, partial):
    """The viewer's two replays of one device's trace; fails where the viewer would throw
    or draw something the trace does not say."""
    trace = snap["device_traces"][device]
    segs = {s["address"]: s["total_size"] for s in snap["segments"] if s["device"] == device}
    streams = {s["address"]: s["stream"] for s in snap["segments"] if s["device"] == device}
    final_blocks = {b["address"]: b for s in snap["segments"] if s["device"] == device
                    for b in s["blocks"] if b["state"] != "inactive"}
    # MemoryViz.js annotate_snapshot: free_requested + free_completed of one address in a
    # row become one 'free'.
    events = []
    for e in trace:
        if (e["action"] == "free_completed" and events and events[-1]["action"] == "free_requested"
                and events[-1]["addr"] == e["addr"]):
            events[-1] = dict(events[-1], action="free")
            continue
        events.append(e)
    # simulate_memory: backwards from the final state.
    blocks = {a: {"size": b["size"], "pending": b["state"] == "active_pending_free"}
              for a, b in final_blocks.items()}
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        where = "device %d entry %d (%s)" % (device, i, e["action"])
        a = e["action"]
        if a in ("free", "free_completed"):
            if not contains(segs, e["addr"], e["size"]):
                fail(where + ": the viewer finds no segment for the block at 0x%x" % e["addr"])
            blocks[e["addr"]] = {"size": e["size"], "pending": a == "free_completed"}
        elif a == "free_requested":
            if e["addr"] not in blocks:
                fail(where + ": the viewer finds no block at 0x%x to un-free" % e["addr"])
            blocks[e["addr"]]["pending"] = False
        elif a == "alloc":
            if e["addr"] not in blocks and not partial:
                fail(where + ": allocated block 0x%x is missing after it" % e["addr"])
            blocks.pop(e["addr"], None)
        elif a == "segment_free":
            segs[e["addr"]], streams[e["addr"]] = e["size"], e["stream"]
        elif a == "segment_unmap":
            map_back(segs, streams, e["addr"], e["size"], e["stream"])
        elif a in ("segment_alloc", "segment_map"):
            if a == "segment_map":
                unmap_back(segs, streams, e["addr"], e["size"], where)
            elif segs.get(e["addr"]) != e["size"]:
                fail(where + ": no segment 0x%x of %d bytes to remove" % (e["addr"], e["size"]))
            else:
                del segs[e["addr"]]
                streams.pop(e["addr"])
            inside = [b for b in blocks if e["addr"] <= b < e["addr"] + e["size"]]
            if inside:
                fail(where + ": blocks %s would have no segment" % [hex(b) for b in inside])
    # process_alloc_data / _memory_viz.trace: forward, alloc to free_completed by address.
    live = {}
    last_time = 0
    for i, e in enumerate(trace):
        where = "device %d entry %d (%s)" % (device, i, e["action"])
        if e["time_us"] < last_time:
            fail(where + ": time_us goes back")
        last_time = e["time_us"]
        if e["action"] == "alloc":
            if e["addr"] in live:
                fail(where + ": 0x%x allocated twice" % e["addr"])
            live[e["addr"]] = e["size"]
        elif e["action"] in ("free_requested", "free_completed"):
            if e["addr"] in live and live[e["addr"]] != e["size"]:
                fail(where + ": size %d, its alloc said %d" % (e["size"], live[e["addr"]]))
            if e["action"] == "free_completed":
                live.pop(e["addr"], None)
    for a, size in live.items():
        b = final_blocks.get(a)
        if b is None:
            if not partial:
                fail("device %d: 0x%x is allocated at the end of the trace but in no segment" % (device, a))
        elif b["requested_size"] != size:
            fail("device %d: block 0x%x requested_size %d, its alloc entry's size %d (the "
                 "requested size)" % (device, a, b["requested_size"], size))
    if not partial and set(live) != set(final_blocks):
        fail("device %d: the segments hold blocks %s the trace never allocated" % (
            device, [hex(a) for a in set(final_blocks) - set(live)]))


def check_settings(settings):
    if not isinstance(settings, dict):
        fail("allocator_settings is not a dict")
    for k, t in SETTINGS.items():
        if k not in settings:
            fail("allocator_settings has no %s" % k)
        v = settings[k]
        if not isinstance(v, t) or (t is int and isinstance(v, bool)):
            fail("allocator_settings %s is %s, PyTorch writes %s" % (k, type(v).__name__, t.__name__))

    def no_text_numbers(d, where):
        for k, v in d.items():
            if isinstance(v, dict):
                no_text_numbers(v, where + "." + k)
            elif is_int(v):
                check_int(v, "%s.%s" % (where, k), signed=True)  # the page's JSON.stringify
            elif isinstance(v, str) and k != "PYTORCH_CUDA_ALLOC_CONF" and (
                    v.isdigit() or v in ("true", "false", "True", "False")):
                fail("allocator_settings %s.%s is the text %r, not a number or bool" % (where, k, v))
    no_text_numbers(settings, "allocator_settings")


def check(path, wall_clock=True, partial=False):
    data = open(path, "rb").read()
    try:
        check_opcodes(data)
        snap = pickle.loads(data)
        if not isinstance(snap, dict) or set(snap) != {"segments", "device_traces",
                                                       "allocator_settings"}:
            fail("top-level keys: " + str(sorted(snap) if isinstance(snap, dict) else type(snap)))
        if not isinstance(snap["segments"], list) or not isinstance(snap["device_traces"], list):
            fail("segments and device_traces must be lists")
        for i, s in enumerate(snap["segments"]):
            check_segment(s, i)
        for d, trace in enumerate(snap["device_traces"]):
            if not isinstance(trace, list):
                fail("device_traces[%d] is not a list" % d)
            for i, e in enumerate(trace):
                check_entry(e, "device %d entry %d" % (d, i), wall_clock)
        for d in range(len(snap["device_traces"])):
            replay(snap, d, partial)
        for s in snap["segments"]:
            if not 0 <= s["device"] < len(snap["device_traces"]):
                fail("segment on device %d, which has no trace list" % s["device"])
        check_settings(snap["allocator_settings"])
    except Bad as e:
        sys.exit("check_memviz: %s: %s" % (path, e))
    return snap


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    snap = check(args[0], wall_clock="--no-wall-clock" not in sys.argv,
                 partial="--partial" in sys.argv)
    print("ok: %d segments, %d device traces, %d entries" % (
        len(snap["segments"]), len(snap["device_traces"]),
        sum(len(t) for t in snap["device_traces"])))
