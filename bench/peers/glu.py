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

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from peer_timing import flush_buffer, time_runs

SHAPES = {"G1": (8192, 4096, 14336)}
QUICK_SHAPE = {"Q": (1024, 1024, 2048)}



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
    with torch.no_grad() if not grad else torch.enable_grad():
        ms = time_runs(work, iters, warmup=2, flush=flush)
    flops = 4.0 * m * k * n * (3 if grad else 1)
    return {"shape": name, "pass": pass_, "backend": backend, "status": "ok", "ms": ms,
            "tflops": flops / ms / 1e9, "iterations": iters}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("glu.py needs a CUDA device")
    flush = flush_buffer()
    rows = []
    for name, shape in (QUICK_SHAPE if args.quick else SHAPES).items():
        for pass_ in ("fwd", "fwd+bwd"):
            for backend in ("cublas_2gemm", "cublas_1gemm"):
                try:
                    row = bench_row(name, shape, pass_, backend, args.iters, flush)
                except RuntimeError as e:  # out of memory, a refused kernel
                    row = {"shape": name, "pass": pass_, "backend": backend, "status": f"failed: {e}"}
                rows.append(row)
                print(f"{name} {pass_:8} {backend:14} " + (f"{row['ms']:9.3f} ms {row['tflops']:7.1f} TFLOP/s"
                                                           if row["status"] == "ok" else row["status"]))
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
