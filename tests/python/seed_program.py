#!/usr/bin/env python3
"""The README's JAX block (Tokamax's own usage example with `import tokamax_cpp as
tokamax`) as a script, at the seed's shape, its jitted gradient step timed beside JAX's
own version of the same function in the same process (GPU machine; needs jax).

    python3 tests/python/seed_program.py [--shape 32,2048,16,64] [--iters 20] [--warmup 3]
                                         [--no-autotune] [--json FILE]

--shape is (batch, seq, heads, head_dim), bf16. The block runs as written: the first call
of f_grad, autotune + dumps / loads + the scope, benchmarking, jax.export of f_grad
reloaded and run (its result must equal f_grad's bit for bit). Then each step,
`jax.block_until_ready(f(x, scale))`, is timed (the median of --iters after --warmup,
wall clock, so the host's dispatch counts as a user's step has it): tokamax_cpp's f_grad
with the implementations the seed names, again inside the autotuned scope (traced there:
a scope applies at trace time; first checked by lowering f_grad inside and outside the
scope and counting the custom calls that carry the scope's configs), and JAX's
f_grad with jax.nn.dot_product_attention(implementation="cudnn") and a jnp layer norm
(f32 statistics, epsilon 1e-6 as Tokamax's default). Prints each, the ratio (JAX's time
/ ours: above 1, tokamax_cpp is faster) and the gradients' relative difference.
Exit status 1 if the block raised or the export's result differs.
"""

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from importlib.util import find_spec

if find_spec("tokamax_cpp") is None:  # else PYTHONPATH's (the package's) is the one tested
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def time_step(f, x, scale, warmup, iters):
    import jax
    for _ in range(warmup):
        jax.block_until_ready(f(x, scale))
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        jax.block_until_ready(f(x, scale))
        times.append((time.perf_counter() - start) * 1e3)
    return {"ms": statistics.median(times), "min_ms": min(times), "iters": iters}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="32,2048,16,64", help="batch,seq,heads,head_dim")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-autotune", action="store_true", help="skip the block's autotuning (and the tuned timing)")
    parser.add_argument("--json", help="write the figures here")
    opts = parser.parse_args()
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

    # ---- The README's JAX block (keep the two the same) -------------------------------
    import jax
    import jax.numpy as jnp
    from jax import export
    import tokamax_cpp as tokamax   # the seed imports tokamax; nothing below changes

    def loss(x, scale):
        x = tokamax.layer_norm(x, scale=scale, offset=None, implementation="triton")
        x = tokamax.dot_product_attention(x, x, x, implementation="xla_chunked")
        x = tokamax.layer_norm(x, scale=scale, offset=None, implementation=None)
        x = tokamax.dot_product_attention(x, x, x, implementation="mosaic")
        return jnp.sum(x)

    f_grad = jax.jit(jax.grad(loss))

    batch_size, seq_len, num_heads, channels = (int(d) for d in opts.shape.split(","))  # README: (32, 2048, 16, 64)
    scale = jax.random.normal(jax.random.key(0), (channels,), dtype=jnp.float32)
    x = jax.random.normal(jax.random.key(1), (batch_size, seq_len, num_heads, channels), dtype=jnp.bfloat16)
    report = {"shape": [batch_size, seq_len, num_heads, channels], "dtype": "bfloat16",
              "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "tokamax_cpp": tokamax.__file__, "library": tokamax.library_path, "iters": opts.iters}
    print(f"jax {jax.__version__} on {report['device']}; tokamax_cpp {tokamax.__file__} over "
          f"{tokamax.library_path}; seed program at {tuple(report['shape'])} bf16", flush=True)
    failed = []

    def stage(name, fn):
        start = time.perf_counter()
        try:
            result = fn()
        except Exception:  # noqa: BLE001 - report it and go on with the rest
            failed.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
            return None
        seconds = time.perf_counter() - start
        report.setdefault("stages_s", {})[name] = seconds
        print(f"ok   {name} ({seconds:.1f} s)", flush=True)
        return result

    def first_call():
        out = f_grad(x, scale)
        return jax.block_until_ready(out)
    out = stage("first call of f_grad (compiles)", first_call)

    autotune_result = None
    if not opts.no_autotune:
        def autotune():
            autotune_result: tokamax.AutotuningResult = tokamax.autotune(f_grad, x, scale)
            autotune_result = tokamax.AutotuningResult.loads(autotune_result.dumps())
            with autotune_result:
                out_autotuned = f_grad(x, scale)
            jax.block_until_ready(out_autotuned)
            report["autotuned_calls"] = len(autotune_result)
            return autotune_result
        autotune_result = stage("autotune, dumps / loads, the scope", autotune)

    def benchmark():
        f_std, args = tokamax.benchmarking.standardize_function(f_grad, x, scale)
        bench: tokamax.benchmarking.BenchmarkData = tokamax.benchmarking.compile_benchmark(f_std, args)(args)
        report["benchmark_median_ms"] = bench.median_evaluation_time_ms
        print(f"     tokamax.benchmarking median {bench.median_evaluation_time_ms:.3f} ms", flush=True)
    stage("benchmarking", benchmark)

    def export_and_reload():
        f_grad_exported = export.export(f_grad, disabled_checks=tokamax.DISABLE_JAX_EXPORT_CHECKS)(
            jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(scale.shape, scale.dtype))
        out_again = export.deserialize(f_grad_exported.serialize()).call(x, scale)
        # Against f_grad now, not the first call's `out`: autotune above updated the
        # autotuning cache, so untuned calls since (f_grad's too) may run other configs,
        # whose sums round differently.
        out_now = f_grad(x, scale)
        diff = float(jnp.max(jnp.abs(out_again.astype(jnp.float32) - out_now.astype(jnp.float32))))
        report["export_max_abs_diff"] = diff
        report["max_abs_diff_vs_first_call"] = float(jnp.max(jnp.abs(out_now.astype(jnp.float32) -
                                                                     out.astype(jnp.float32))))
        assert diff == 0, f"the reloaded export's gradient differs from f_grad's: max |diff| {diff}"
    if out is not None:
        stage("jax.export, reload, run", export_and_reload)
    # ---- end of the block -------------------------------------------------------------

    def jnp_layer_norm(t, s, epsilon=1e-6):
        tf = t.astype(jnp.float32)
        mean = tf.mean(-1, keepdims=True)
        var = jnp.square(tf - mean).mean(-1, keepdims=True)
        return ((tf - mean) * jax.lax.rsqrt(var + epsilon) * s).astype(t.dtype)

    def loss_jax(x, scale):
        x = jnp_layer_norm(x, scale)
        x = jax.nn.dot_product_attention(x, x, x, implementation="cudnn")
        x = jnp_layer_norm(x, scale)
        x = jax.nn.dot_product_attention(x, x, x, implementation="cudnn")
        return jnp.sum(x)

    # A scope applies when f_grad is traced (the handler runs on XLA's threads, which see no
    # scope: the trace embeds the configs). jax >= 0.7.2 keys jit's caches on the open
    # scopes, so f_grad traces again inside the scope and outside it; older jax is cleared.
    keyed = hasattr(jax, "make_user_context")
    report["jit_keyed_on_scopes"] = keyed

    def fresh_trace():
        if not keyed:
            jax.clear_caches()

    def embedded_configs():  # our custom calls whose options carry a config: a scope's
        text = f_grad.lower(x, scale).as_text()
        return sum(text.count(q + "config" + q) for q in ("\\22", '\\"'))

    if autotune_result is not None:
        def scope_reaches_the_handler():
            fresh_trace()
            with autotune_result:
                inside = embedded_configs()
            fresh_trace()
            outside = embedded_configs()
            report["calls_with_scope_configs"] = {"inside": inside, "outside": outside}
            print(f"     calls traced with the scope's configs: {inside} inside the scope, {outside} outside",
                  flush=True)
            from tokamax_cpp import jax as jax_adapter
            # With the command-buffer handler every call is traced with its config fixed.
            want_outside = inside if jax_adapter.RECORDABLE else 0
            assert inside > 0 and outside == want_outside, (f"calls with a config: {inside} inside the scope, "
                                                            f"{outside} outside (want {want_outside})")
        stage("the scope reaches the FFI handler (trace-time configs)", scope_reaches_the_handler)

    jax_grad = jax.jit(jax.grad(loss_jax))

    def timed_untuned():
        fresh_trace()
        return time_step(f_grad, x, scale, opts.warmup, opts.iters)
    ours = stage("time tokamax_cpp's f_grad", timed_untuned)
    tuned = None
    if autotune_result is not None:
        def timed_in_scope():
            fresh_trace()
            with autotune_result:  # traced in here: the tuned configs
                return time_step(f_grad, x, scale, opts.warmup, opts.iters)
        tuned = stage("time tokamax_cpp's f_grad in the autotuned scope", timed_in_scope)
    peer = stage("time JAX's f_grad (cuDNN attention, jnp layer norm)",
                 lambda: time_step(jax_grad, x, scale, opts.warmup, opts.iters))

    if out is not None and peer is not None:
        ref = jax_grad(x, scale).astype(jnp.float32)
        rel = float(jnp.linalg.norm(out.astype(jnp.float32) - ref) / jnp.maximum(jnp.linalg.norm(ref), 1e-30))
        report["grad_relative_difference_vs_jax"] = rel
        print(f"dx: |tokamax_cpp - jax| / |jax| = {rel:.3e} (both bf16; the attentions' softmax near one-hot at "
              "these inputs)", flush=True)
    report.update(tokamax_cpp_step=ours, tokamax_cpp_tuned_step=tuned, jax_cudnn_step=peer)
    for name, row in (("tokamax_cpp f_grad", ours), ("tokamax_cpp f_grad, autotuned scope", tuned),
                      ("jax f_grad, cuDNN attention", peer)):
        if row:
            print(f"{name:38s} median {row['ms']:8.3f} ms (min {row['min_ms']:.3f}; {row['iters']} steps)")
    for key, row in (("ratio_jax_over_tokamax_cpp", ours), ("ratio_jax_over_tokamax_cpp_tuned", tuned)):
        if row and peer:
            report[key] = peer["ms"] / row["ms"]
            print(f"{key}: {report[key]:.3f} (above 1: tokamax_cpp faster)")
    report["failed"] = failed
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"{len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
