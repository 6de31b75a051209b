#!/usr/bin/env python3
"""torch_train.py - a deterministic PyTorch training loop for scripts/gpu-check.

It trains a transformer on synthetic data whose batch size and sequence length change every
step, so the allocator sees a changing mix of sizes, the way real training does. Two models
(--model): `small`, a 4-layer encoder of width 256 on feature vectors (a step allocates
some hundred blocks from a few KiB to tens of MiB, ~5 ms on an H200), and `gpt`, a
GPT-2-like stack built from torch.nn only (token and position embeddings, 8 pre-norm blocks
of width 1024 with 16 heads, a 8,192-token vocabulary; batch 2-16 x length 64-512; some
GiB of activations). scripts/gpu-check runs them under PyTorch's caching allocator, its
expandable segments, and PYTORCH_NO_CUDA_MEMORY_CACHING=1 with LD_PRELOAD=libluma.so (with
luma's own settings); the same seed must give the same losses in all of them, since the
allocator must never change results.

--memory-limit BYTES runs the loop within that much memory: with PyTorch's caching
allocator on, through torch.cuda.set_per_process_memory_fraction; with it off PyTorch
cannot limit itself, so the limit must come from the allocator underneath
(LUMA_CONF=memory_limit:BYTES) and is only recorded. A run that runs out of memory writes
its JSON with "out_of_memory": true and exits 3.

It writes one JSON file (--out) with the losses (exact, as Python float repr), the timing
and PyTorch's memory statistics, and prints one line per --print-every steps. It must never
depend on the allocator for its results: attention is written out (no fused kernels whose
choice could depend on alignment), TF32 is off and PyTorch's deterministic mode is on.
Exit 0 done, 3 out of memory, 77 no CUDA device. Needs a GPU; never run by CI.
"""

import argparse
import json
import os
import random
import sys
import time

# cuBLAS is deterministic only with a fixed workspace; it reads this at its first call.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

MODELS = {
    # Small enough for ~5 ms steps on an H200, large enough that a step allocates some
    # hundred blocks from a few KiB to tens of MiB.
    "small": {"inputs": "features", "features": 64, "classes": 64, "d_model": 256, "heads": 4,
              "layers": 4, "ffn": 1024, "batch_sizes": (4, 8, 12, 16, 24, 32),
              "seq_lens": (32, 48, 64, 96, 128, 160, 192, 256)},
    # GPT-2-like: the attention matrices (batch x 16 heads x length^2) dominate, up to
    # 256 MiB each, a few per layer kept for the backward pass.
    "gpt": {"inputs": "tokens", "vocab": 8192, "d_model": 1024, "heads": 16, "layers": 8,
            "ffn": 4096, "batch_sizes": (2, 4, 8, 12, 16), "seq_lens": (64, 128, 256, 384, 512)},
}
WARMUP_STEPS = 10  # kernels loaded, cuBLAS handles made, the allocator's first segments
EXIT_OOM = 3


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="small")
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--max-seconds", type=float, default=45.0,
                   help="stop early after this long; the losses of the steps done are kept")
    p.add_argument("--memory-limit", type=int, default=0, metavar="BYTES",
                   help="run within this much device memory (see above); 0: no limit")
    p.add_argument("--peak-at-step", type=int, default=0, metavar="N",
                   help="also record PyTorch's peak allocated and reserved bytes after N steps "
                        "(the peaks of a run of N steps: the same seed gives the same steps)")
    p.add_argument("--label", default="run", help="name of this run in the JSON")
    p.add_argument("--out", required=True, help="JSON result file")
    p.add_argument("--print-every", type=int, default=50)
    a = p.parse_args(argv)
    if a.steps <= WARMUP_STEPS:
        p.error(f"--steps must be more than the {WARMUP_STEPS} warm-up steps")
    if a.memory_limit < 0:
        p.error("--memory-limit must be 0 (none) or a number of bytes")
    return a


def build_model(torch, c):
    nn = torch.nn
    F = torch.nn.functional
    d_model, heads = c["d_model"], c["heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.ln2 = nn.LayerNorm(d_model)
            self.ff1 = nn.Linear(d_model, c["ffn"])
            self.ff2 = nn.Linear(c["ffn"], d_model)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d_model, dim=-1)
            shape = (b, t, heads, d_model // heads)
            q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (d_model // heads) ** -0.5
            att = att.softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d_model)
            x = x + self.proj(y)
            return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            if c["inputs"] == "features":
                self.inp = nn.Linear(c["features"], d_model)
            else:
                self.tok = nn.Embedding(c["vocab"], d_model)
                self.pos = nn.Embedding(max(c["seq_lens"]), d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(c["layers"]))
            self.ln = nn.LayerNorm(d_model)
            self.out = nn.Linear(d_model, c["classes"] if c["inputs"] == "features" else c["vocab"])

        def forward(self, x):
            if c["inputs"] == "features":
                x = self.inp(x)
            else:
                x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
            for blk in self.blocks:
                x = blk(x)
            return self.out(self.ln(x))

    return Model()


def is_oom(torch, e):
    """Whether an exception is the device running out of memory (PyTorch's own error, or
    a library's allocation failure reported as a RuntimeError)."""
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in text or "ALLOC_FAILED" in text)


def main(argv):
    a = parse_args(argv)
    import torch  # after CUBLAS_WORKSPACE_CONFIG is set

    if not torch.cuda.is_available():
        print("torch_train: torch sees no CUDA device", file=sys.stderr)
        return 77
    c = MODELS[a.model]
    caching_disabled = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") == "1"
    total = torch.cuda.get_device_properties(0).total_memory
    limit_by = "none"
    if a.memory_limit:
        if caching_disabled:
            limit_by = "the allocator underneath (LUMA_CONF)"
        else:
            torch.cuda.set_per_process_memory_fraction(min(1.0, a.memory_limit / total), 0)
            limit_by = "torch.cuda.set_per_process_memory_fraction"
    torch.manual_seed(a.seed)
    # warn_only: an op without a deterministic kernel must not stop the run; the loss
    # comparison across the runs is the judge.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")

    losses = []
    t_start = None
    timed_steps = 0
    wall0 = time.monotonic()
    stopped_early = False
    oom = None
    peak_at = None
    try:
        model = build_model(torch, c).to(dev)
        if c["inputs"] == "features":
            teacher = torch.randn(c["features"], c["classes"], device=dev)  # the labels' fixed rule
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        shapes = random.Random(a.seed)
        data = torch.Generator(device=dev)
        data.manual_seed(a.seed)
        loss_fn = torch.nn.CrossEntropyLoss()
        classes = c["classes"] if c["inputs"] == "features" else c["vocab"]

        for step in range(a.steps):
            if step == WARMUP_STEPS:
                torch.cuda.synchronize()
                t_start = time.perf_counter()
            b, t = shapes.choice(c["batch_sizes"]), shapes.choice(c["seq_lens"])
            if c["inputs"] == "features":
                x = torch.randn(b, t, c["features"], device=dev, generator=data)
                # Labels from a running mean of the inputs: learnable, and they need the attention.
                ctx = x.cumsum(dim=1) / torch.arange(1, t + 1, device=dev).view(1, t, 1)
                y = (ctx @ teacher).argmax(dim=-1)
            else:
                x = torch.randint(c["vocab"], (b, t), device=dev, generator=data)
                y = (x + x.roll(1, dims=1)) % c["vocab"]  # each token and the one before it
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, classes), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())  # a sync per step, the same in every run
            if step >= WARMUP_STEPS:
                timed_steps += 1
            if a.peak_at_step and step + 1 == a.peak_at_step:
                peak_at = {"steps": a.peak_at_step,
                           "max_memory_allocated": torch.cuda.max_memory_allocated(),
                           "max_memory_reserved": torch.cuda.max_memory_reserved()}
            if a.print_every > 0 and (step % a.print_every == 0 or step == a.steps - 1):
                print(f"{a.label}: step {step:4d} b={b:2d} t={t:3d} loss {losses[-1]!r}", flush=True)
            if time.monotonic() - wall0 > a.max_seconds and step + 1 < a.steps:
                stopped_early = True
                print(f"{a.label}: stopped after {step + 1} steps (--max-seconds {a.max_seconds})",
                      flush=True)
                break
        torch.cuda.synchronize()
    except Exception as e:  # pylint: disable=broad-except
        if not is_oom(torch, e):
            raise
        oom = str(e).strip().splitlines()[0][:400] if str(e).strip() else repr(e)
        print(f"{a.label}: out of memory at step {len(losses)}: {oom}", flush=True)
    elapsed = time.perf_counter() - t_start if t_start is not None else 0.0

    result = {
        "label": a.label,
        "model": a.model,
        "seed": a.seed,
        "steps_requested": a.steps,
        "steps_done": len(losses),
        "stopped_early": stopped_early,
        "out_of_memory": oom is not None,
        "error": oom,
        "memory_limit": a.memory_limit,
        "memory_limit_by": limit_by,
        "device_total_memory": total,
        "warmup_steps": WARMUP_STEPS,
        "timed_steps": timed_steps,
        "timed_seconds": elapsed,
        "steps_per_second": timed_steps / elapsed if elapsed > 0 and oom is None else None,
        "losses": losses,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "peak_at_step": peak_at,
        "torch_caching_disabled": caching_disabled,
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "luma_conf": os.environ.get("LUMA_CONF", ""),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0),
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    if oom is not None:
        return EXIT_OOM
    sps = result["steps_per_second"]
    rate = f"{sps:.2f}" if sps is not None else "n/a"
    print(f"{a.label}: {len(losses)} steps, {rate} steps/s over {timed_steps} timed steps; "
          f"torch max reserved {result['max_memory_reserved']} B, "
          f"max allocated {result['max_memory_allocated']} B", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
