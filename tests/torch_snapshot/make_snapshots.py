#!/usr/bin/env python3
"""make_snapshots.py - writes small PyTorch memory snapshots with Python's own pickler.

The files of tests/torch_snapshot/data/ (and the seeds of tests/fuzz/corpus/fuzz_torch_snapshot/)
are its output: `pickle.dump` of dicts shaped as torch.cuda.memory._snapshot() returns them
(torch/csrc/cuda/Module.cpp: the keys, their order and types; key strings and call stacks
shared objects, as there), so that the C++ reader is tested on the bytes Python really
writes, at each protocol from 2 to 5. torch_snapshot_test.cpp holds what each must read as.
Deterministic: the same files every run.

  window_p2.pickle .. window_p5.pickle  one device; the window misses the run's start
  full_p4.pickle                        two devices, every key PyTorch writes, oom and
                                        snapshot entries, allocator_settings, frames

Usage: make_snapshots.py OUTDIR
"""
import os
import pickle
import sys

MIB = 1 << 20
T0 = 1_700_000_000_000_000  # time_us: microseconds since 1970

FRAME_A = {"filename": "train.py", "name": "forward", "line": 42}
FRAME_B = {"filename": "torch/nn/modules/linear.py", "name": "forward", "line": 125}
FRAME_C = {"filename": "train.py", "name": "setup", "line": 7}
STACK_AB = [FRAME_B, FRAME_A]  # innermost first; one list object, shared as in PyTorch
STACK_C = [FRAME_C]


def entry(action, addr, size, t, stream=0, frames=None):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": T0 + t}
    if frames is not None:
        e["frames"] = frames
    return e


def block(address, size, requested, state, frames=None):
    return {"address": address, "size": size, "requested_size": requested, "state": state,
            "frames": frames if frames is not None else []}


def segment(device, address, total, blocks, stream=0, expandable=False):
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": allocated, "active_size": allocated,
            "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
            "stream": stream, "segment_type": "large" if total > 2 * MIB else "small",
            "segment_pool_id": (0, 0), "is_expandable": expandable, "frames": [],
            "blocks": blocks}


S0 = 0x7F0001000000  # 20 MiB, freed in the window
S1 = 0x7F0000000000  # 4 MiB, reserved before the window, kept
S2 = 0x7F0000400000  # 2 MiB, allocated in the window


def window_device0():
    """Reserved 24 MiB when the window begins; peak 26 MiB; 6 MiB at the dump.
    X (1000 B) freed, never seen allocated; W (777 B) allocated all along."""
    trace = [
        entry("free_requested", S0, 1000, 1),
        entry("free_completed", S0, 1000, 2),
        entry("alloc", S0, 3000, 3, frames=STACK_AB),                       # Y
        entry("segment_alloc", S2, 2 * MIB, 4),
        entry("alloc", S2, 100, 5, frames=STACK_AB),                        # Z
        entry("free_requested", S0, 3000, 6, frames=STACK_AB),
        entry("free_completed", S0, 3000, 7, frames=STACK_AB),
        entry("segment_free", S0, 20 * MIB, 8),
    ]
    segments = [
        segment(0, S1, 4 * MIB, [block(S1, 1024, 777, "active_allocated", STACK_C),
                                 block(S1 + 1024, 4 * MIB - 1024, 0, "inactive")]),
        segment(0, S2, 2 * MIB, [block(S2, 512, 100, "active_allocated", STACK_AB),
                                 block(S2 + 512, 2 * MIB - 512, 0, "inactive")]),
    ]
    return trace, segments


def window_snapshot():
    trace, segments = window_device0()
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False}}


D1 = 0x7E0000000000
SIDE = 0x5555AAAA0000  # a side stream of device 1


def full_snapshot():
    """window_snapshot's device 0, with oom and snapshot entries, and device 1 on a side
    stream with an expandable segment mapped twice and unmapped once."""
    trace0, segments = window_device0()
    trace0 = trace0[:4] + [{"action": "oom", "device_free": 123, "size": 1 << 40, "stream": 0,
                            "time_us": T0 + 4, "frames": STACK_C}] + trace0[4:]
    trace0.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": T0 + 9})
    trace1 = [
        entry("segment_map", D1, 20 * MIB, 10, SIDE),
        entry("alloc", D1, 15 * MIB, 11, SIDE, STACK_C),
        entry("segment_map", D1 + 20 * MIB, 20 * MIB, 12, SIDE),
        entry("alloc", D1 + 20 * MIB, 10 * MIB, 13, SIDE, STACK_C),  # A's rest is too small
        entry("free_requested", D1, 15 * MIB, 14, SIDE, STACK_C),
        entry("free_completed", D1, 15 * MIB, 15, SIDE, STACK_C),
        entry("segment_unmap", D1, 20 * MIB, 16, SIDE),
    ]
    # What stays mapped: [D1 + 20 MiB, D1 + 40 MiB), B in it.
    segments.append(segment(1, D1 + 20 * MIB, 20 * MIB,
                            [block(D1 + 20 * MIB, 10 * MIB, 10 * MIB, "active_allocated", STACK_C),
                             block(D1 + 30 * MIB, 10 * MIB, 0, "inactive")],
                            stream=SIDE, expandable=True))
    return {"segments": segments, "device_traces": [trace0, trace1],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                   "max_split_size": -1, "garbage_collection_threshold": 0.0,
                                   "expandable_segments": True, "pinned_num_register_threads": 1,
                                   "release_lock_on_cudamalloc": False,
                                   "pinned_use_cuda_host_register": False,
                                   "roundup_power2_divisions": {"1": 0, "2": 0}}}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for protocol in (2, 3, 4, 5):
        with open(os.path.join(out, f"window_p{protocol}.pickle"), "wb") as f:
            pickle.dump(window_snapshot(), f, protocol=protocol)
    with open(os.path.join(out, "full_p4.pickle"), "wb") as f:
        pickle.dump(full_snapshot(), f, protocol=4)


if __name__ == "__main__":
    main()
