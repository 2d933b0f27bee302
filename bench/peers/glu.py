#!/usr/bin/env python3
"""Peer numbers for tokamax-glu-bench: a gated linear unit on cuBLAS through torch.

At the bench's shape (bf16, swish):

    G1 = M 8192, K 4096, N 14336      (Q = M 1024, K 1024, N 2048 with --quick)

two backends, each "fwd" and "fwd+bwd" (forward, then backward of out with a fixed
random grad into x and weights):

    cublas_2gemm:   a = x @ w0, b = x @ w1 (two cuBLAS GEMMs), out = silu(a) * b
                    (torch's elementwise kernels): what an unfused MLP runs
    cublas_1gemm:   h = x @ w.view(K, 2N) (one GEMM into [M, 2N]), out = silu(h[:, :N])
                    * h[:, N:]: the same with one wider GEMM

Weights are [K, 2, N] like ours (w0 = w[:, 0], w1 = w[:, 1], made contiguous once,
before timing). Each run is timed with CUDA events after a 256 MB buffer is overwritten
(so nothing is served from L2); the median of the runs is reported. TFLOP/s use the
bench's counts: forward 4 M K N, fwd+bwd 3x that.

Writes JSON that `tokamax-glu-bench --peers FILE` reads:
    {"device": ..., "torch": ..., "rows": [{"shape": "G1", "pass": "fwd",
      "backend": "cublas_2gemm", "status": "ok", "ms": ..., "tflops": ..., "iterations": ...}, ...]}

Usage: python3 bench/peers/glu.py [--json FILE] [--iters N] [--quick]
"""

import torch
import torch.nn.functional as F

import common

SHAPES = {"G1": (8192, 4096, 14336)}
QUICK_SHAPE = {"Q": (1024, 1024, 2048)}
BACKENDS = ("cublas_2gemm", "cublas_1gemm")


def bench_row(name, shape, pass_, backend, iters, flush):
    m, k, n = shape
    gen = torch.Generator(device="cuda").manual_seed(1)
    grad = pass_ == "fwd+bwd"
    x = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16).requires_grad_(grad)
    w = (torch.randn((k, 2, n), generator=gen, device="cuda", dtype=torch.bfloat16) / k**0.5).requires_grad_(grad)
    dout = torch.randn((m, n), generator=gen, device="cuda", dtype=torch.bfloat16)
    w0, w1 = w[:, 0].detach().contiguous().requires_grad_(grad), w[:, 1].detach().contiguous().requires_grad_(grad)
    w2 = w.detach().view(k, 2 * n).requires_grad_(grad)

    def forward():
        if backend == "cublas_2gemm":
            return F.silu(x @ w0) * (x @ w1)
        h = x @ w2
        return F.silu(h[:, :n]) * h[:, n:]

    def forward_backward():
        forward().backward(dout)

    work = forward_backward if grad else forward
    ms = common.timed_ms(work, grad, iters, warmup=2, flush=flush)
    return common.ok_row(name, pass_, backend, ms, 4.0 * m * k * n * (3 if grad else 1), iters)


if __name__ == "__main__":
    common.main(__doc__, SHAPES, QUICK_SHAPE, common.each_pass(BACKENDS), bench_row, backend_width=14)
