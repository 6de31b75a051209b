#!/usr/bin/env python3
"""torch_train.py - a small, deterministic PyTorch training loop for scripts/gpu-check.

It trains a 4-layer transformer encoder on synthetic data whose batch size and sequence
length change every step, so the allocator sees a changing mix of sizes, the way real
training does. scripts/gpu-check runs it three times: under torch's own caching allocator,
with PYTORCH_NO_CUDA_MEMORY_CACHING=1, and with that plus LD_PRELOAD=libluma.so; the same
seed must give the same losses in all three, since the allocator must never change results.

It writes one JSON file (--out) with the losses (exact, as Python float repr), the timing
and torch's memory statistics, and prints one line per --print-every steps. It must never
depend on the allocator for its results: attention is written out (no fused kernels whose
choice could depend on alignment), TF32 is off and torch's deterministic mode is on.
Needs a GPU; never run by CI.
"""

import argparse
import json
import os
import random
import sys
import time

# cuBLAS is deterministic only with a fixed workspace; it reads this at its first call.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

# Model and data sizes: small enough for ~5 ms steps on an H200, large enough that a step
# allocates some hundred blocks from a few KiB to tens of MiB.
FEATURES = 64
CLASSES = 64
D_MODEL = 256
HEADS = 4
LAYERS = 4
FFN = 1024
BATCH_SIZES = (4, 8, 12, 16, 24, 32)
SEQ_LENS = (32, 48, 64, 96, 128, 160, 192, 256)
WARMUP_STEPS = 10  # kernels loaded, cuBLAS handles made, the allocator's first segments


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--max-seconds", type=float, default=45.0,
                   help="stop early after this long; the losses of the steps done are kept")
    p.add_argument("--label", default="run", help="name of this run in the JSON")
    p.add_argument("--out", required=True, help="JSON result file")
    p.add_argument("--print-every", type=int, default=50)
    a = p.parse_args(argv)
    if a.steps <= WARMUP_STEPS:
        p.error(f"--steps must be more than the {WARMUP_STEPS} warm-up steps")
    return a


def build_model(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D_MODEL)
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)
            self.ln2 = nn.LayerNorm(D_MODEL)
            self.ff1 = nn.Linear(D_MODEL, FFN)
            self.ff2 = nn.Linear(FFN, D_MODEL)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(D_MODEL, dim=-1)
            shape = (b, t, HEADS, D_MODEL // HEADS)
            q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (D_MODEL // HEADS) ** -0.5
            att = att.softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, D_MODEL)
            x = x + self.proj(y)
            return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(FEATURES, D_MODEL)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = nn.LayerNorm(D_MODEL)
            self.out = nn.Linear(D_MODEL, CLASSES)

        def forward(self, x):
            x = self.inp(x)
            for blk in self.blocks:
                x = blk(x)
            return self.out(self.ln(x))

    return Model()


def main(argv):
    a = parse_args(argv)
    import torch  # after CUBLAS_WORKSPACE_CONFIG is set

    if not torch.cuda.is_available():
        print("torch_train: torch sees no CUDA device", file=sys.stderr)
        return 77
    torch.manual_seed(a.seed)
    # warn_only: an op without a deterministic kernel must not stop the run; the loss
    # comparison across the three runs is the judge.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")

    model = build_model(torch).to(dev)
    teacher = torch.randn(FEATURES, CLASSES, device=dev)  # the labels' fixed rule
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    shapes = random.Random(a.seed)
    data = torch.Generator(device=dev)
    data.manual_seed(a.seed)
    loss_fn = torch.nn.CrossEntropyLoss()

    losses = []
    t_start = None
    timed_steps = 0
    wall0 = time.monotonic()
    stopped_early = False
    for step in range(a.steps):
        if step == WARMUP_STEPS:
            torch.cuda.synchronize()
            t_start = time.perf_counter()
        b, t = shapes.choice(BATCH_SIZES), shapes.choice(SEQ_LENS)
        x = torch.randn(b, t, FEATURES, device=dev, generator=data)
        # Labels from a running mean of the inputs: learnable, and they need the attention.
        ctx = x.cumsum(dim=1) / torch.arange(1, t + 1, device=dev).view(1, t, 1)
        y = (ctx @ teacher).argmax(dim=-1)
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, CLASSES), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # a sync per step, the same in every run
        if step >= WARMUP_STEPS:
            timed_steps += 1
        if a.print_every > 0 and (step % a.print_every == 0 or step == a.steps - 1):
            print(f"{a.label}: step {step:4d} b={b:2d} t={t:3d} loss {losses[-1]!r}", flush=True)
        if time.monotonic() - wall0 > a.max_seconds and step + 1 < a.steps:
            stopped_early = True
            print(f"{a.label}: stopped after {step + 1} steps (--max-seconds {a.max_seconds})",
                  flush=True)
            break
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t_start if t_start is not None else 0.0

    result = {
        "label": a.label,
        "seed": a.seed,
        "steps_requested": a.steps,
        "steps_done": len(losses),
        "stopped_early": stopped_early,
        "warmup_steps": WARMUP_STEPS,
        "timed_steps": timed_steps,
        "timed_seconds": elapsed,
        "steps_per_second": timed_steps / elapsed if elapsed > 0 else None,
        "losses": losses,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "torch_caching_disabled": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") == "1",
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0),
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    sps = result["steps_per_second"]
    rate = f"{sps:.2f}" if sps is not None else "n/a"
    print(f"{a.label}: {len(losses)} steps, {rate} steps/s over {timed_steps} timed steps; "
          f"torch max reserved {result['max_memory_reserved']} B, "
          f"max allocated {result['max_memory_allocated']} B", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
