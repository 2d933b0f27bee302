#!/usr/bin/env python3
"""Peer numbers for tokamax-ragged-dot-bench: a grouped matmul through torch.

At the bench's shape (bf16):

    R1 = 8 groups, M 32768, K 4096, N 4096   (Q = 8 groups, M 4096, K 1024, N 1024 with --quick)

with the bench's group sizes (the same fixed cut points, summing to M), two backends,
each "fwd" and "fwd+bwd" (forward, then backward of out with a fixed random grad into
lhs and rhs):

    torch_grouped_mm:  torch._grouped_mm(lhs, rhs, offs=cumsum(sizes)) (one grouped
                       kernel; absent from older torch: the row says so)
    torch_loop:        one torch.matmul per group on its rows (what a model without a
                       grouped kernel runs)
    jax_ragged_dot:    jax.lax.ragged_dot(lhs, rhs, group_sizes) under jax.jit, the
                       fwd+bwd its jitted jax.vjp (issue 38's target: >= 10x it); timed by
                       wall clock around five queued runs (jax has no CUDA events here),
                       median of --iters / 4 such batches; absent jax: the row says so

and a "dense" row: lhs @ rhs[0] at the same FLOPs. Each run is timed with CUDA events
after a 256 MB buffer is overwritten (so nothing is served from L2); the median of the
runs is reported. TFLOP/s use the bench's counts: forward 2 M K N, fwd+bwd 3x that.

Writes JSON that `tokamax-ragged-dot-bench --peers FILE` reads:
    {"device": ..., "torch": ..., "rows": [{"shape": "R1", "pass": "fwd",
      "backend": "torch_grouped_mm", "status": "ok", "ms": ..., "tflops": ..., "iterations": ...}, ...]}

Usage: python3 bench/peers/ragged_dot.py [--json FILE] [--iters N] [--quick]
"""

import os
import statistics
import time

import torch

import common

SHAPES = {"R1": (8, 32768, 4096, 4096)}
QUICK_SHAPE = {"Q": (8, 4096, 1024, 1024)}
BACKENDS = ("torch_grouped_mm", "torch_loop", "jax_ragged_dot")


def group_sizes(groups, m):
    """The bench's sizes: sorted cut points of the same LCG (tokamax-ragged-dot-bench.cpp)."""
    cuts, state = [0, m], 12345
    for _ in range(groups - 1):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 63)
        cuts.append((state >> 16) % (m + 1))
    cuts.sort()
    return [b - a for a, b in zip(cuts, cuts[1:])]


def jax_row(name, shape, pass_, iters):
    """jax.lax.ragged_dot at the shape, jitted (fwd, or the jitted vjp into lhs and rhs)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        raise RuntimeError(f"no jax: {e}") from e
    groups, m, k, n = shape
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(1), 3)
    lhs = jax.random.normal(k1, (m, k), jnp.bfloat16)
    rhs = (jax.random.normal(k2, (groups, k, n), jnp.float32) / k**0.5).astype(jnp.bfloat16)
    dout = jax.random.normal(k3, (m, n), jnp.bfloat16)
    sizes = jnp.asarray(group_sizes(groups, m), jnp.int32)
    fwd = jax.jit(lambda l, r, g: jax.lax.ragged_dot(l, r, g))
    vjp = jax.jit(lambda l, r, g, d: jax.vjp(lambda l, r: jax.lax.ragged_dot(l, r, g), l, r)[1](d))
    grad = pass_ == "fwd+bwd"
    call = (lambda: vjp(lhs, rhs, sizes, dout)) if grad else (lambda: fwd(lhs, rhs, sizes))
    try:
        for _ in range(2):
            jax.block_until_ready(call())
        times = []
        for _ in range(max(1, iters // 4)):
            t0 = time.perf_counter()
            outs = [call() for _ in range(5)]
            jax.block_until_ready(outs)
            times.append((time.perf_counter() - t0) * 1e3 / 5)
    except Exception as e:  # noqa: BLE001: XLA's errors (out of memory, unsupported) fail the row
        raise RuntimeError(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
    ms = statistics.median(times)
    return common.ok_row(name, pass_, "jax_ragged_dot", ms, 2.0 * m * k * n * (3 if grad else 1), len(times))


def bench_row(name, shape, pass_, backend, iters, flush):
    if backend == "jax_ragged_dot":
        try:
            return jax_row(name, shape, pass_, iters)
        except RuntimeError:
            raise
        except Exception as e:  # noqa: BLE001: whatever jax raises fails its row, not the script
            raise RuntimeError(f"jax: {type(e).__name__}: {e}") from e
    groups, m, k, n = shape
    gen = torch.Generator(device="cuda").manual_seed(1)
    grad = pass_ == "fwd+bwd"
    lhs = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16).requires_grad_(grad)
    rhs = (torch.randn((groups, k, n), generator=gen, device="cuda", dtype=torch.bfloat16) / k**0.5)
    rhs.requires_grad_(grad)
    dout = torch.randn((m, n), generator=gen, device="cuda", dtype=torch.bfloat16)
    sizes = group_sizes(groups, m)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)

    def forward():
        if backend == "torch_grouped_mm":
            return torch._grouped_mm(lhs, rhs, offs=offs)
        if backend == "dense":
            return lhs @ rhs[0]
        return torch.cat([part @ rhs[g] for g, part in enumerate(torch.split(lhs, sizes))])

    def forward_backward():
        forward().backward(dout)

    if backend == "torch_grouped_mm" and not hasattr(torch, "_grouped_mm"):
        raise RuntimeError(f"torch {torch.__version__} has no torch._grouped_mm")
    work = forward_backward if grad else forward
    ms = common.timed_ms(work, grad, iters, warmup=2, flush=flush)
    return common.ok_row(name, pass_, backend, ms, 2.0 * m * k * n * (3 if grad else 1), iters)


def announce(name, shape):
    print(f"{name}: group sizes {group_sizes(shape[0], shape[1])}")


if __name__ == "__main__":
    # A RuntimeError (out of memory, a refused kernel, no grouped mm) fails its row.
    common.main(__doc__, SHAPES, QUICK_SHAPE, common.each_pass(BACKENDS) + [("dense", "dense")], bench_row,
                backend_width=17, announce=announce)
