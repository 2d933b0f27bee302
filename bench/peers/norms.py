#!/usr/bin/env python3
"""Peer numbers for tokamax-bench's norms: torch and jnp/XLA layer_norm and rms_norm.

At the bench's shapes (bf16 x, f32 scale and offset; eps 1e-6):

    1048576x64, 16384x4096, 16384x8192, 4096x16384

each backend, forward and VJP, in GB/s by the bench's byte counts: the forward moves x in
and y out (2 bytes an element each way), the VJP dy and x in and dx out (the parameter
rows and the statistics are not counted, as in tokamax-bench).

    torch:  F.layer_norm / F.rms_norm with bf16 parameters (its fused kernels need the
            input's dtype); the VJP times the gradients of x, scale, offset from dy
    xla:    the norm written in jnp under jax.jit (XLA fuses it); the VJP is the jitted
            jax.vjp of (x, scale, offset) -> y applied to dy (XLA recomputes the
            statistics inside its fused backward)

torch runs are timed with CUDA events after a 256 MB buffer is overwritten (nothing
served from L2), the median reported; jax runs by wall time around five queued runs and
block_until_ready, the median over rounds (every input, 128 MB or more, is larger than
L2).

Usage: python3 bench/peers/norms.py [--json FILE] [--iters N] [--backends torch,xla]
"""

import argparse
import json
import os
import statistics
import sys
import time

SHAPES = [(1048576, 64), (16384, 4096), (16384, 8192), (4096, 16384)]
EPS = 1e-6


def torch_rows(iters):
    import torch
    import torch.nn.functional as F
    from peer_timing import flush_buffer, time_runs

    flush = flush_buffer()
    rows = []
    for rows_, cols in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn((rows_, cols), generator=gen, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn((rows_, cols), generator=gen, device="cuda", dtype=torch.bfloat16)
        # bf16 parameters: torch's fused kernels take the input's dtype (f32 ones fail in
        # layer_norm and send rms_norm to its unfused path).
        scale = torch.randn((cols,), generator=gen, device="cuda", dtype=torch.bfloat16)
        offset = torch.randn((cols,), generator=gen, device="cuda", dtype=torch.bfloat16)
        n = x.numel() * 2
        for op in ("layer_norm", "rms_norm"):
            def forward(xx, s, b):
                if op == "layer_norm":
                    return F.layer_norm(xx, (cols,), s, b, EPS)
                return F.rms_norm(xx, (cols,), s, EPS)
            for pass_ in ("fwd", "vjp"):
                row = {"op": op, "shape": f"{rows_}x{cols}", "pass": pass_, "backend": "torch"}
                try:
                    if pass_ == "fwd":
                        with torch.no_grad():
                            ms = time_runs(lambda: forward(x, scale, offset), iters, 2, flush)
                        moved = 2 * n
                    else:
                        xg = x.detach().requires_grad_(True)
                        sg = scale.detach().requires_grad_(True)
                        bg = offset.detach().requires_grad_(True)
                        y = forward(xg, sg, bg)
                        ms = time_runs(lambda: torch.autograd.grad(y, (xg, sg, bg) if op == "layer_norm" else (xg, sg), dy,
                                                                   retain_graph=True), iters, 2, flush)
                        moved = 3 * n
                    row.update(status="ok", ms=ms, gbs=moved / ms / 1e6)
                except (RuntimeError, TypeError) as e:
                    row.update(status=f"failed: {e}")
                rows.append(row)
                report(row)
        del x, dy
        torch.cuda.empty_cache()
    return rows


def xla_rows(iters):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    def layer_norm(x, s, b):
        xf = x.astype(jnp.float32)
        mean = xf.mean(-1, keepdims=True)
        var = ((xf - mean) ** 2).mean(-1, keepdims=True)
        return ((xf - mean) * jax.lax.rsqrt(var + EPS) * s + b).astype(x.dtype)

    def rms_norm(x, s, b):
        xf = x.astype(jnp.float32)
        return (xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + EPS) * s).astype(x.dtype)

    rows = []
    key = jax.random.PRNGKey(1)
    for rows_, cols in SHAPES:
        k1, k2, k3, k4 = jax.random.split(jax.random.fold_in(key, cols), 4)
        x = jax.random.normal(k1, (rows_, cols), jnp.bfloat16)
        dy = jax.random.normal(k2, (rows_, cols), jnp.bfloat16)
        scale = jax.random.normal(k3, (cols,), jnp.float32)
        offset = jax.random.normal(k4, (cols,), jnp.float32)
        n = rows_ * cols * 2
        for name, fn in (("layer_norm", layer_norm), ("rms_norm", rms_norm)):
            fwd = jax.jit(fn)
            vjp = jax.jit(lambda x, s, b, dy, fn=fn: jax.vjp(fn, x, s, b)[1](dy))
            for pass_, call, moved in (("fwd", lambda: fwd(x, scale, offset), 2 * n),
                                       ("vjp", lambda: vjp(x, scale, offset, dy), 3 * n)):
                row = {"op": name, "shape": f"{rows_}x{cols}", "pass": pass_, "backend": "xla"}
                try:
                    for _ in range(3):
                        jax.block_until_ready(call())
                    times = []
                    for _ in range(iters):  # 5 calls queued back to back: dispatch overlaps the runs
                        t0 = time.perf_counter()
                        outs = [call() for _ in range(5)]
                        jax.block_until_ready(outs)
                        times.append((time.perf_counter() - t0) * 1e3 / 5)
                    ms = statistics.median(times)
                    row.update(status="ok", ms=ms, gbs=moved / ms / 1e6)
                except Exception as e:  # noqa: BLE001: any backend failure is a row, not a crash
                    row.update(status=f"failed: {e}")
                rows.append(row)
                report(row)
    return rows


def report(row):
    what = f"{row['op']:10} {row['pass']:3} {row['shape']:11} {row['backend']:5}"
    print(what + (f" {row['ms']:8.3f} ms {row['gbs']:7.0f} GB/s" if row["status"] == "ok" else " " + row["status"]),
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backends", default="torch,xla")
    args = parser.parse_args()
    rows = []
    backends = args.backends.split(",")
    if "torch" in backends:
        import torch
        if not torch.cuda.is_available():
            sys.exit("norms.py needs a CUDA device")
        rows += torch_rows(args.iters)
    if "xla" in backends:
        try:
            rows += xla_rows(args.iters)
        except ImportError as e:
            print(f"xla: skipped ({e})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
