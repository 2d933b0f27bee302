#!/usr/bin/env python3
"""Peer numbers for tokamax-cross-entropy-bench: the output layer's loss through torch.

At the bench's shape (bf16, mean reduction):

    X1 = B 8192, D 4096, V 131072      (Q = B 1024, D 1024, V 16384 with --quick)

one backend, "fwd" and "fwd+bwd" (forward, then backward of the scalar loss into x and
w):

    torch_matmul_ce:  logits = x @ w (cuBLAS, [B, V] bf16), loss =
                      F.cross_entropy(logits.float(), labels): what an unfused output
                      layer runs (the logits and their f32 copy materialized)

Each run is timed with CUDA events after a 256 MB buffer is overwritten (so nothing is
served from L2); the median of the runs is reported. Peak extra memory: the largest
torch.cuda.max_memory_allocated() over one call beyond what was allocated before it
(inputs, and for fwd+bwd the gradient buffers of x and w after a first run), in MiB.
TFLOP/s use the bench's counts: forward 2 B D V, fwd+bwd 3x that.

Writes JSON that `tokamax-cross-entropy-bench --peers FILE` reads:
    {"device": ..., "torch": ..., "rows": [{"shape": "X1", "pass": "fwd",
      "backend": "torch_matmul_ce", "status": "ok", "ms": ..., "tflops": ...,
      "extra_mib": ..., "iterations": ...}, ...]}

Usage: python3 bench/peers/cross_entropy.py [--json FILE] [--iters N] [--quick]
"""

import torch
import torch.nn.functional as F

import common

SHAPES = {"X1": (8192, 4096, 131072)}
QUICK_SHAPE = {"Q": (1024, 1024, 16384)}
BACKEND = "torch_matmul_ce"


def peak_extra_mib(work):
    """Peak memory one call allocates beyond what is allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    work()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / (1 << 20)


def bench_row(name, shape, pass_, backend, iters, flush):
    torch.cuda.empty_cache()  # the previous row's cached blocks: each row starts with free memory
    b, d, v = shape
    gen = torch.Generator(device="cuda").manual_seed(1)
    grad = pass_ == "fwd+bwd"
    x = torch.randn((b, d), generator=gen, device="cuda", dtype=torch.bfloat16).requires_grad_(grad)
    w = (torch.randn((d, v), generator=gen, device="cuda", dtype=torch.bfloat16) / d**0.5).requires_grad_(grad)
    labels = torch.randint(0, v, (b,), generator=gen, device="cuda")

    def forward():
        return F.cross_entropy((x @ w).float(), labels, reduction="mean")

    def forward_backward():  # x.grad and w.grad accumulate in place after the first run
        forward().backward()

    work = forward_backward if grad else forward
    with common.grad_mode(grad):
        work()  # the gradient buffers exist before the memory is measured
        extra = peak_extra_mib(work)
    ms = common.timed_ms(work, grad, iters, warmup=1, flush=flush)
    return common.ok_row(name, pass_, backend, ms, 2.0 * b * d * v * (3 if grad else 1), iters, extra_mib=extra)


if __name__ == "__main__":
    common.main(__doc__, SHAPES, QUICK_SHAPE, common.each_pass([BACKEND]), bench_row, backend_width=15)
