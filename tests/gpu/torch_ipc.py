#!/usr/bin/env python3
"""torch_ipc.py - CUDA tensors shared between processes by torch.multiprocessing, for
scripts/gpu-check.

The parent makes --tensors CUDA tensors of mixed sizes and dtypes with PyTorch's caching
allocator on (the default), so many of them are blocks of one of its segments (PyTorch
shares a tensor as the IPC handle of its segment's start plus the tensor's offset), fills
each with values computed from its index, and puts them on a torch.multiprocessing queue
to a spawned process. The peer recomputes what each tensor must hold, counts the wrong
ones, adds 1 to every element in place (data the other way) and answers; the parent then
checks every tensor holds its values plus 1. scripts/gpu-check runs it plain and under
LD_PRELOAD=libluma.so (no setting: luma recognises PyTorch's allocator, shim/program/program_cache.h).
Writes one JSON file (--out). Exit 0 no tensor wrong either way, 1 some wrong or the peer
failed, 77 no CUDA device. Needs a GPU.
"""

import argparse
import json
import os
import sys

# (elements, dtype name) cycled over the tensors: tiny ones, many below PyTorch's 1 MiB
# small-pool limit (they share its 2 MiB segments), some in 20 MiB segments, a few large
# enough for a segment of their own.
SHAPES = (
    (1, "float32"), (3, "int64"), (17, "uint8"), (100, "float16"), (255, "int32"),
    (1000, "float32"), (4096, "float32"), (10_000, "int64"), (33_333, "float16"),
    (65_536, "float32"), (100_000, "uint8"), (200_000, "float32"), (250_000, "int32"),
    (1 << 20, "float32"), (3_000_000, "float16"), (6_000_000, "float32"),
)
MODULUS = {"uint8": 200, "float16": 2000}  # values exact in the dtype, +1 included


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tensors", type=int, default=40)
    p.add_argument("--label", default="run")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the peer")
    p.add_argument("--out", required=True, help="JSON result file")
    return p.parse_args(argv)


def expected(torch, i, n, dtype_name, plus=0):
    """What tensor i holds: (7k + 13i) mod m (+ plus), computed on the device."""
    mod = MODULUS.get(dtype_name, 65_521)
    k = torch.arange(n, device="cuda", dtype=torch.int64)
    v = (k * 7 + i * 13) % mod + plus
    return v.to(getattr(torch, dtype_name))


def sharing(torch, tensors):
    """(PyTorch segments holding the tensors, tensors in a segment with another), from
    torch.cuda.memory_snapshot(); (None, None) when it cannot say."""
    try:
        segs = [(s["address"], s["address"] + s["total_size"]) for s in torch.cuda.memory_snapshot()]
    except Exception:
        return None, None
    count = {}
    for t in tensors:
        p = t.data_ptr()
        seg = next((lo for lo, hi in segs if lo <= p < hi), None)
        count[seg] = count.get(seg, 0) + 1
    if None in count:
        return None, None
    return len(count), sum(n for n in count.values() if n > 1)


def peer(inbox, outbox):
    """The spawned process: check each tensor, answer, write the reply into it."""
    import torch

    try:
        wrong = []
        received = 0
        while True:
            item = inbox.get()
            if item is None:
                break
            i, dtype_name, t = item
            received += 1
            if not torch.equal(t, expected(torch, i, t.numel(), dtype_name)):
                wrong.append(i)
            t.add_(1)
            del t, item
        torch.cuda.synchronize()
        outbox.put({"received": received, "wrong": wrong, "pid": os.getpid()})
    except Exception as e:  # the parent must get an answer, not wait for its timeout
        outbox.put({"error": repr(e)})


def main(argv):
    a = parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    if not torch.cuda.is_available():
        print("torch_ipc: torch sees no CUDA device", file=sys.stderr)
        return 77
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=peer, args=(inbox, outbox))
    proc.start()

    tensors = []
    for i in range(a.tensors):
        n, dtype_name = SHAPES[i % len(SHAPES)]
        t = expected(torch, i, n, dtype_name)
        tensors.append((i, dtype_name, t))
    torch.cuda.synchronize()
    for item in tensors:
        inbox.put(item)
    inbox.put(None)

    answer = None
    try:
        answer = outbox.get(timeout=a.timeout)
    except Exception as e:  # queue.Empty: the peer never answered
        answer = {"error": f"no answer from the peer in {a.timeout} s ({e!r})"}
    proc.join(timeout=30)
    peer_rc = proc.exitcode
    if peer_rc is None:
        proc.kill()
        proc.join()

    torch.cuda.synchronize()
    reply_wrong = [i for i, d, t in tensors if not torch.equal(t, expected(torch, i, t.numel(), d, 1))]
    shared = sharing(torch, [t for _, _, t in tensors])
    out = {
        "label": a.label,
        "tensors": a.tensors,
        "bytes": sum(t.numel() * t.element_size() for _, _, t in tensors),
        "segments": shared[0],
        "tensors_sharing_a_segment": shared[1],
        "peer_exit": peer_rc,
        "peer_answer": answer,
        "wrong_in_peer": answer.get("wrong") if "wrong" in answer else None,
        "received_by_peer": answer.get("received"),
        "wrong_replies": reply_wrong,
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "torch_version": torch.__version__,
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    wrong_peer = out["wrong_in_peer"]
    print(f"{a.label}: {a.tensors} tensors ({out['bytes']} bytes, in {out['segments']} PyTorch "
          f"segments, {out['tensors_sharing_a_segment']} sharing one) shared; peer received "
          f"{out['received_by_peer']}, found {len(wrong_peer) if wrong_peer is not None else 'n/a'} "
          f"wrong; {len(reply_wrong)} replies wrong; peer exit {peer_rc}"
          + (f"; peer error {answer['error']}" if "error" in answer else ""), flush=True)
    ok = wrong_peer == [] and not reply_wrong and out["received_by_peer"] == a.tensors and peer_rc == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
