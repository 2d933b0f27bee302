#!/usr/bin/env python3
"""Peer numbers for tokamax-attention-bench: torch scaled_dot_product_attention.

Times torch.nn.functional.scaled_dot_product_attention with the FlashAttention backend
and with the cuDNN backend forced (torch.nn.attention.sdpa_kernel), at the bench's
shapes (bf16, T = S, K = N, Hv = H):

    S1 = B 32, T 2048, N 16, H 64
    S2 = B 4,  T 4096, N 32, H 128
    S3 = B 8,  T 8192, N 16, H 128     (Q = B 2, T 512, N 4, H 64 with --quick)

causal and not, "fwd" (forward) and "fwd+bwd" (forward, then backward of out with a
fixed random grad). torch's layout is [B, N, T, H]: the inputs are made [B, T, N, H]
like ours, then transposed and made contiguous once, before timing. Each run is timed
with CUDA events after a 256 MB buffer is overwritten (so nothing is served from L2);
the median of the runs is reported. TFLOP/s use the bench's counts: forward 4 B N T S H
(halved when causal), fwd+bwd 3.5x that.

Writes JSON that `tokamax-attention-bench --peers FILE` reads:
    {"device": ..., "torch": ..., "rows": [{"shape": "S1", "causal": false, "pass": "fwd",
      "backend": "flash", "status": "ok", "ms": ..., "tflops": ..., "iterations": ...}, ...]}
A backend that cannot run a row (not built in, refused) gets status "not supported: ...".

Usage: python3 bench/peers/attention.py [--json FILE] [--shapes S1,S2,S3] [--iters N] [--quick]
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peer_timing import flush_buffer, time_runs

SHAPES = {"S1": (32, 2048, 16, 64), "S2": (4, 4096, 32, 128), "S3": (8, 8192, 16, 128)}
QUICK_SHAPE = {"Q": (2, 512, 4, 64)}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def forward_flops(b, t, n, h, causal):
    return 4.0 * b * n * t * t * h * (0.5 if causal else 1.0)



def bench_row(name, shape, causal, pass_, backend, iters, flush):
    b, t, n, h = shape
    gen = torch.Generator(device="cuda").manual_seed(1)

    def tensor(requires_grad):
        x = torch.randn((b, t, n, h), generator=gen, device="cuda", dtype=torch.bfloat16)
        # [B, T, N, H] -> torch's [B, N, T, H], contiguous, outside the timed region.
        x = x.transpose(1, 2).contiguous()
        return x.requires_grad_(requires_grad)

    grad = pass_ == "fwd+bwd"
    q, k, v = tensor(grad), tensor(grad), tensor(grad)
    dout = tensor(False)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def forward_backward():
        out = forward()
        torch.autograd.grad(out, (q, k, v), dout)

    row = {"shape": name, "causal": causal, "pass": pass_, "backend": backend}
    try:
        with sdpa_kernel([BACKENDS[backend]]):
            work = forward_backward if grad else forward
            # One timed call first: a row that takes long gets fewer iterations (3 at least).
            first = time_runs(work, 1, 1, flush)
            runs = max(3, min(iters, int(10000 / max(first, 1e-3))))
            ms = time_runs(work, runs, 1, flush)
    except RuntimeError as e:  # the backend refuses the shape or is not built
        row["status"] = "not supported: " + str(e).splitlines()[0][:300]
        return row
    flops = forward_flops(b, t, n, h, causal) * (3.5 if grad else 1.0)
    row.update(status="ok", ms=ms, tflops=flops / ms / 1e9, iterations=runs)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--shapes", default="S1,S2,S3", help="comma-separated subset of S1,S2,S3")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backends", default="flash,cudnn")
    parser.add_argument("--quick", action="store_true", help="one small shape, 3 iterations")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("attention.py: no CUDA device")
    if args.quick:
        shapes, iters = QUICK_SHAPE, min(args.iters, 3)
    else:
        unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
        if unknown:
            sys.exit(f"attention.py: unknown shapes {unknown} (S1, S2, S3)")
        shapes, iters = {s: SHAPES[s] for s in args.shapes.split(",")}, args.iters
    backends = args.backends.split(",")

    flush = flush_buffer()
    device = torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print(f"{'shape':<5} {'causal':<6} {'pass':<8} {'backend':<7} {'ms':>9} {'TFLOP/s':>8}")
    rows = []
    for name, shape in shapes.items():
        for causal in (False, True):
            for pass_ in ("fwd", "fwd+bwd"):
                for backend in backends:
                    row = bench_row(name, shape, causal, pass_, backend, iters, flush)
                    rows.append(row)
                    lead = f"{name:<5} {'yes' if causal else 'no':<6} {pass_:<8} {backend:<7}"
                    if row["status"] == "ok":
                        print(f"{lead} {row['ms']:>9.3f} {row['tflops']:>8.1f}", flush=True)
                    else:
                        print(f"{lead} {row['status']}", flush=True)
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "rows": rows}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
