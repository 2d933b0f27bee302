#!/usr/bin/env python3
"""The headline gradient step in JAX, timed: the peer of tokamax-example-attention's
"grad(loss) step".

    l1 = layer_norm(x, scale)  a1 = attention(l1, l1, l1)  l2 = layer_norm(a1, scale)
    out = attention(l2, l2, l2)  loss = sum(f32(out));  d loss / d (x, scale)

x [B, T, N, H] bf16 (default 32 x 2048 x 16 x 64, the example's shape), scale [H] f32;
layer_norm over the last axis as a user writes it in jnp (f32 statistics, bf16 result);
attention by jax.nn.dot_product_attention with implementation "cudnn", then "xla", not
causal, scale 1 / sqrt(H). The step is jax.jit(jax.value_and_grad(loss, argnums=(0, 1)));
each figure is the median of --iters steps after --warmup, each step waited for
(block_until_ready), so it includes the launch and dispatch costs a user's step has.

    python3 bench/peers/headline.py [--shape 32,2048,16,64] [--iters 20] [--json FILE]
"""

import argparse
import json
import os
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="32,2048,16,64")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        sys.exit("headline.py needs jax")

    shape = tuple(int(d) for d in args.shape.split(","))
    h = shape[-1]
    kx, ks = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(kx, shape, jnp.float32).astype(jnp.bfloat16)
    scale = 1.0 + 0.1 * jax.random.normal(ks, (h,), jnp.float32)
    device = jax.devices()[0].device_kind
    print(f"jax {jax.__version__} on {device}; headline gradient at {shape} bf16", flush=True)

    from jax_chain import layer_norm  # as a user writes it: f32 statistics, bf16 result

    def loss(xx, ss, implementation):
        l1 = layer_norm(xx, ss, 1e-5)
        a1 = jax.nn.dot_product_attention(l1, l1, l1, implementation=implementation)
        l2 = layer_norm(a1, ss, 1e-5)
        out = jax.nn.dot_product_attention(l2, l2, l2, implementation=implementation)
        return jnp.sum(out.astype(jnp.float32))

    rows = []
    for implementation in ("cudnn", "xla"):
        try:
            step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)
            for _ in range(args.warmup):
                jax.block_until_ready(step(x, scale, implementation))
            times = []
            for _ in range(args.iters):
                start = time.perf_counter()
                jax.block_until_ready(step(x, scale, implementation))
                times.append((time.perf_counter() - start) * 1e3)
            ms = statistics.median(times)
            print(f"jax {implementation:6s} grad(loss) step  median {ms:.3f} ms (min {min(times):.3f}; "
                  f"{args.iters} steps)", flush=True)
            rows.append({"peer": f"jax-{implementation}", "shape": list(shape), "ms": ms, "min_ms": min(times),
                         "device": device})
        except Exception as e:  # cuDNN missing or refusing the call, out of memory, ...
            why = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"jax {implementation:6s} skipped: {type(e).__name__}: {why[:200]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
