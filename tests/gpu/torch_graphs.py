#!/usr/bin/env python3
"""torch_graphs.py - PyTorch CUDA graphs over the allocator, for scripts/gpu-check.

Captures one training step of a small MLP (forward, loss, backward) with torch.cuda.graph,
PyTorch's caching allocator on (the default: the graph's tensors live in its private
pool), then replays it --replays times on new inputs copied into the static input. After
each replay the same step is computed eagerly on a copy of the model made before the
capture, and the graph's output, loss and gradients are compared with it; between replays
tensors of mixed sizes are allocated, written and freed, so the allocator hands out and
takes back memory around the graph's pool. scripts/gpu-check runs it plain and under
LD_PRELOAD=libluma.so: every replay must equal the eager step both ways.

Equality: each replay is counted exact when every compared tensor is bitwise equal, and
equal when every one is within the tolerance (torch.allclose, rtol 1e-5, atol 1e-6): the
graph replays the kernels captured, the eager step chooses its own, and with TF32 off and
deterministic algorithms they agree to rounding. Writes one JSON file (--out).
Exit 0 every replay equal, 1 some replay differs, 77 no CUDA device. Needs a GPU.
"""

import argparse
import copy
import json
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

RTOL, ATOL = 1e-5, 1e-6
BATCH, IN, HIDDEN, OUT = 64, 512, 1024, 256
# Bytes of the tensors allocated and freed between two replays (a cycle of sizes from 1 KiB
# to 48 MiB: small-pool blocks, large-pool blocks, a segment of its own).
BETWEEN = (1 << 10, 3 << 10, 64 << 10, 700 << 10, 2 << 20, 5 << 20, 12 << 20, 48 << 20)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--label", default="run")
    p.add_argument("--out", required=True, help="JSON result file")
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("torch_graphs: torch sees no CUDA device", file=sys.stderr)
        return 77
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    nn = torch.nn

    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN), nn.GELU(),
                          nn.Linear(HIDDEN, OUT)).to(dev)
    eager = copy.deepcopy(model)  # the reference: its own parameters' copies, its own grads
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    static_in = torch.randn(BATCH, IN, device=dev, generator=gen)

    def step(m, x):
        out = m(x)
        loss = out.square().mean()
        loss.backward()
        return out, loss

    # Warm-up on a side stream, as PyTorch's documentation asks before a capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            step(model, static_in)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)  # the grads are allocated inside the capture
    with torch.cuda.graph(graph):
        static_out, static_loss = step(model, static_in)
    params = list(model.parameters())
    eager_params = list(eager.parameters())

    results = []
    keep = []  # some tensors of each round outlive it, freed two rounds later
    for r in range(a.replays):
        x = torch.randn(BATCH, IN, device=dev, generator=gen)
        static_in.copy_(x)
        graph.replay()
        eager.zero_grad(set_to_none=True)
        ref_out, ref_loss = step(eager, x)
        pairs = [(static_out, ref_out), (static_loss, ref_loss)] + \
            [(p.grad, q.grad) for p, q in zip(params, eager_params)]
        exact = all(torch.equal(g, e) for g, e in pairs)
        close = all(torch.allclose(g, e, rtol=RTOL, atol=ATOL) for g, e in pairs)
        worst = max(float((g - e).abs().max()) for g, e in pairs)
        results.append({"replay": r, "exact": exact, "equal": close, "max_abs_diff": worst})
        # Memory handed out and taken back between replays, around the graph's pool.
        round_tensors = []
        for i, n in enumerate(BETWEEN):
            t = torch.empty(n // 4, device=dev)
            t.fill_(float(r * 10 + i))
            round_tensors.append(t)
        keep.append(round_tensors[r % len(round_tensors)])
        if len(keep) > 2:
            keep.pop(0)
        del round_tensors, ref_out, ref_loss
    torch.cuda.synchronize()

    equal = sum(1 for x in results if x["equal"])
    exact = sum(1 for x in results if x["exact"])
    worst = max((x["max_abs_diff"] for x in results), default=0.0)
    out = {
        "label": a.label,
        "replays": a.replays,
        "equal": equal,
        "exact": exact,
        "max_abs_diff": worst,
        "rtol": RTOL,
        "atol": ATOL,
        "per_replay": results,
        "torch_caching_disabled": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") == "1",
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "torch_version": torch.__version__,
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(f"{a.label}: {a.replays} replays, {equal} equal to eager (rtol {RTOL}, atol {ATOL}), "
          f"{exact} bitwise; max |diff| {worst:.3g}", flush=True)
    return 0 if equal == a.replays else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
