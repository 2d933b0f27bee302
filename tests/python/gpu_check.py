#!/usr/bin/env python3
"""GPU checks of tokamax_cpp's torch and jax adapters (run on a GPU machine; CI has none).

    PYTHONPATH=python TOKAMAX_CPP_LIBRARY=build/libtokamax.so python3 tests/python/gpu_check.py [torch] [jax]

(scripts/gpu-check.sh's python part: PYTHONPATH=tokamax/python of the package; without
PYTHONPATH the checkout's python/ is used.)

torch (CUDA): layer_norm and attention forward and gradients against torch's own
(F.layer_norm, SDPA), torch.library.opcheck on CUDA tensors, torch.compile(fullgraph=True)
(these two: torch >= 2.4, custom_op), a CUDA graph capture and replay, the host time of an
eager call. TOKAMAX_CPP_TORCH_LIBRARY=1 checks the registration of torch < 2.4 instead. jax (GPU backend): jit,
grad and vmap against jnp / jax.nn references, autotune + scope, benchmarking, jax.export
round trip, the time of a jitted call. Prints one line per check; exit status 1 if any failed.
"""

import importlib.util
import os
import sys
import time
import traceback

import numpy as np

if importlib.util.find_spec("tokamax_cpp") is None:  # else PYTHONPATH's (the package's) is the one checked
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import tokamax_cpp as tokamax  # noqa: E402

print(f"tokamax_cpp {tokamax.__file__} over {tokamax.library_path}")

failures = []


def check(name, fn):
    try:
        detail = fn()
        print(f"PASS {name}" + (f": {detail}" if detail else ""))
    except Exception:  # noqa: BLE001 - report every failure and go on
        failures.append(name)
        print(f"FAIL {name}\n{traceback.format_exc()}")


def close(a, b, tol):
    err = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
    assert err <= tol, f"max abs error {err} > {tol}"
    return f"max abs error {err:.2e}"


def close_relative(a, b, tol):
    """Max abs error against the reference's largest magnitude: a bf16 output's rounding
    grows with its values (dx of a squared loss reaches ~100, where one ulp is 0.5)."""
    b = np.asarray(b, np.float64)
    err = float(np.max(np.abs(np.asarray(a, np.float64) - b))) / max(float(np.max(np.abs(b))), 1e-30)
    assert err <= tol, f"max abs error {err} of the reference's largest magnitude > {tol}"
    return f"max abs error {err:.2e} of the largest magnitude"


def torch_checks():
    import torch
    import torch.nn.functional as F
    dev = "cuda"
    x = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(1024, device=dev, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(1024, device=dev, dtype=torch.bfloat16, requires_grad=True)

    def layer_norm():
        y = tokamax.layer_norm(x, w, b)
        ref = F.layer_norm(x.float(), (1024,), w.float(), b.float(), eps=1e-6)
        g = torch.autograd.grad(y.float().square().sum(), (x, w, b))
        gr = torch.autograd.grad(ref.square().sum(), (x, w, b))
        close_relative(g[0].float().cpu(), gr[0].float().cpu(), 0.02)
        return close(y.float().detach().cpu(), ref.detach().cpu(), 0.05)

    q, k, v = (torch.randn(2, 256, 8, 64, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def attention():
        out = tokamax.dot_product_attention(q, k, v, is_causal=True)
        ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True).transpose(1, 2)
        g = torch.autograd.grad(out.float().sum(), (q, k, v))
        gr = torch.autograd.grad(ref.float().sum(), (q, k, v))
        for a, c in zip(g, gr):
            close(a.float().cpu(), c.float().cpu(), 0.1)
        return close(out.float().detach().cpu(), ref.float().detach().cpu(), 0.02)

    def benchmark():
        f, args = tokamax.standardize_function(lambda a: tokamax.dot_product_attention(a, a, a, is_causal=True),
                                               q.detach(), mode="forward_and_vjp")
        runner = tokamax.compile_benchmark(f, args)
        events = runner(args, iterations=10)
        kernels = runner(args, iterations=10, method="cupti")
        assert 0 < kernels.median_evaluation_time_ms <= events.median_evaluation_time_ms * 1.05, (kernels, events)
        return (f"median {events.median_evaluation_time_ms:.3f} ms (cuda events), "
                f"{kernels.median_evaluation_time_ms:.3f} ms of kernels (cupti)")

    def opcheck():
        from tokamax_cpp import torch as tt
        torch.library.opcheck(tt.op("layer_norm"), (x.detach(), w.detach(), None, '{"axis":-1,"epsilon":1e-06}'))
        torch.library.opcheck(tt.op("attention"), (q.detach(), k.detach(), v.detach(), None, None, None, None, None,
                                                   '{"is_causal":true}'))

    def compiled():
        f = torch.compile(lambda a, s: tokamax.dot_product_attention(tokamax.layer_norm(a, s, None), a, a),
                          fullgraph=True)
        a = torch.randn(2, 128, 4, 64, device=dev, dtype=torch.bfloat16)
        s = torch.ones(64, device=dev, dtype=torch.bfloat16)
        eager = tokamax.dot_product_attention(tokamax.layer_norm(a, s, None), a, a)
        return close(f(a, s).float().cpu(), eager.float().cpu(), 1e-2)

    def cuda_graph():
        a = torch.randn(4, 128, 4, 64, device=dev, dtype=torch.bfloat16)
        static_out = tokamax.dot_product_attention(a, a, a)  # warm-up: binds and compiles
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = tokamax.dot_product_attention(a, a, a)
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize()
        return close(static_out.float().cpu(), tokamax.dot_product_attention(a, a, a).float().cpu(), 1e-2)

    def overhead():
        # Host time per call with the launch queue never full (n well below its depth, a
        # sync before each batch), so the figure is the CPU's, not the kernels'; the
        # device time per call from events around the same loop.
        a = torch.randn(1, 128, 1, 64, device=dev, dtype=torch.bfloat16)
        t = a.transpose(1, 2)
        calls = {"ours": lambda: tokamax.dot_product_attention(a, a, a),
                 "SDPA": lambda: F.scaled_dot_product_attention(t, t, t),
                 "ours layer_norm": lambda: tokamax.layer_norm(a, None, None),
                 "F.layer_norm": lambda: F.layer_norm(a, a.shape[-1:])}
        figures = []
        for name, call in calls.items():
            for _ in range(20):
                call()
            host, device = [], []
            for _ in range(5):
                torch.cuda.synchronize()
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                n = 100
                start = time.perf_counter()
                begin.record()
                for _ in range(n):
                    call()
                end.record()
                host.append((time.perf_counter() - start) / n * 1e6)
                torch.cuda.synchronize()
                device.append(begin.elapsed_time(end) / n * 1e3)
            figures.append(f"{name} host {min(host):.1f} us, device {min(device):.1f} us")
        return "per eager call: " + "; ".join(figures)

    def paged():
        # 3 sequences of a cache of 64 pages of 16 keys, GQA 8:2, one new token each:
        # against SDPA over each sequence's keys gathered through the page table.
        lengths = torch.tensor([1, 100, 300], dtype=torch.int32, device=dev)
        table = torch.randperm(64, device=dev)[:60].reshape(3, 20).to(torch.int32)
        pages = [torch.randn(64, 16, 2, 64, device=dev, dtype=torch.bfloat16) for _ in range(2)]
        pq = torch.randn(3, 1, 8, 64, device=dev, dtype=torch.bfloat16)
        out = tokamax.paged_attention(pq, pages[0], pages[1], table, lengths)
        worst = 0.0
        for s in range(3):
            keys = torch.arange(int(lengths[s]), device=dev)
            kv = [p[table[s, keys // 16].long(), keys % 16].repeat_interleave(4, dim=1).transpose(0, 1)[None]
                  for p in pages]  # [1, N, S, H]
            ref = F.scaled_dot_product_attention(pq[s:s + 1].transpose(1, 2).float(), kv[0].float(), kv[1].float())
            worst = max(worst, float((out[s].float() - ref[0].transpose(0, 1)).abs().max()))
        assert worst <= 0.02, f"max abs error {worst}"
        return f"max abs error {worst:.2e}"

    def append():
        # Two new tokens a sequence written into CUDA pages in place, against torch's
        # indexing of the same rows (bits equal; the other rows untouched).
        lengths = torch.tensor([2, 100, 300], dtype=torch.int32, device=dev)
        table = torch.randperm(64, device=dev)[:60].reshape(3, 20).to(torch.int32)
        pages = [torch.randn(64, 16, 2, 64, device=dev, dtype=torch.bfloat16) for _ in range(2)]
        new = [torch.randn(3, 2, 2, 64, device=dev, dtype=torch.bfloat16) for _ in range(2)]
        want = [p.clone() for p in pages]
        for s in range(3):
            pos = torch.arange(int(lengths[s]) - 2, int(lengths[s]), device=dev)
            for w, n in zip(want, new):
                w[table[s, pos // 16].long(), pos % 16] = n[s]
        tokamax.paged_kv_append(new[0], new[1], table, lengths, pages[0], pages[1])
        assert all(torch.equal(p, w) for p, w in zip(pages, want)), "pages differ from torch's indexing"
        return "bitwise equal to torch's indexing"

    def fp8():
        # float8_e4m3fn q, k, v with descales [B, K], GQA 8:2, causal: against SDPA in f32
        # on the dequantized values; the fp8 rounding of P bounds the error (2^-4 |v|).
        f8 = torch.float8_e4m3fn
        q8, k8, v8 = (torch.randn(2, 300, n, 64, device=dev).clamp(-4, 4).to(f8) for n in (8, 2, 2))
        qd, kd, vd = (torch.rand(2, 2, device=dev) * 0.75 + 0.25 for _ in range(3))
        out = tokamax.dot_product_attention_fp8(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd, is_causal=True)
        assert out.dtype == torch.bfloat16 and out.shape == (2, 300, 8, 64), (out.dtype, out.shape)
        def deq(t, d):  # [B, T, heads, H] times its kv head's descale, as [B, N, T, H]
            return (t.float() * d.repeat_interleave(t.shape[2] // 2, dim=1)[:, None, :, None]).repeat_interleave(
                8 // t.shape[2], dim=2).transpose(1, 2)
        ref = F.scaled_dot_product_attention(deq(q8, qd), deq(k8, kd), deq(v8, vd), is_causal=True).transpose(1, 2)
        worst = float((out.float() - ref).abs().max())
        bound = 2.0 ** -5 * float(deq(v8, vd).abs().max())
        assert worst <= bound, f"max abs error {worst} past {bound}"
        return f"max abs error {worst:.2e} (bound {bound:.2e})"

    from tokamax_cpp import torch as tt
    for name, fn in (("torch layer_norm fwd+bwd vs F.layer_norm", layer_norm),
                     ("torch attention_fp8 (float8_e4m3fn, descales) vs SDPA in f32", fp8),
                     ("torch attention fwd+bwd vs SDPA", attention), ("torch paged_attention vs SDPA", paged),
                     ("torch paged_kv_append (CUDA, in place)", append),
                     ("torch benchmarking", benchmark),
                     ("torch opcheck (CUDA)", opcheck),
                     ("torch.compile fullgraph", compiled), ("torch CUDA graph replay", cuda_graph),
                     ("torch eager overhead", overhead)):
        if fn in (opcheck, compiled) and not tt.CUSTOM_OP:
            print(f"SKIP {name}: needs torch.library.custom_op (torch >= 2.4); torch {torch.__version__} "
                  "has the Library registration")
            continue
        check(name, fn)


def jax_checks():
    import jax
    import jax.numpy as jnp
    assert jax.default_backend() == "gpu", f"jax backend is {jax.default_backend()}"
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (2, 256, 8, 64), jnp.bfloat16)
    scale = jnp.ones((64,), jnp.float32)

    def seed(a, s):
        h = tokamax.layer_norm(a, s, None, implementation="triton")
        h = tokamax.dot_product_attention(h, h, h, implementation="xla_chunked")
        h = tokamax.layer_norm(h, s, None)
        return jnp.sum(tokamax.dot_product_attention(h, h, h, implementation="mosaic").astype(jnp.float32))

    def reference(a, s):
        def ln(t):
            t32 = t.astype(jnp.float32)
            m = t32.mean(-1, keepdims=True)
            return ((t32 - m) * jax.lax.rsqrt(((t32 - m) ** 2).mean(-1, keepdims=True) + 1e-6) * s).astype(t.dtype)
        h = ln(a)
        h = jax.nn.dot_product_attention(h, h, h)
        h = ln(h)
        return jnp.sum(jax.nn.dot_product_attention(h, h, h).astype(jnp.float32))

    grad = jax.jit(jax.grad(seed, argnums=(0, 1)))

    def seed_grad():
        g = grad(x, scale)
        gr = jax.jit(jax.grad(reference, argnums=(0, 1)))(x, scale)
        close(np.asarray(g[1], np.float32), np.asarray(gr[1], np.float32), 0.05 * float(jnp.abs(gr[1]).max()) + 1e-3)
        return close(np.asarray(g[0], np.float32), np.asarray(gr[0], np.float32), 0.05)

    def autotune_scope():
        # A scope applies at trace time (the FFI handler runs on XLA's threads): jax >= 0.7.2
        # keys jit's caches on the open scopes, so grad traces again inside it; older jax is
        # cleared before each trace here.
        fresh = (lambda: None) if hasattr(jax, "make_user_context") else jax.clear_caches
        result = tokamax.autotune(grad, x, scale)
        again = tokamax.AutotuningResult.loads(result.dumps())

        def embedded():  # our custom calls whose options carry a config: the scope's
            text = grad.lower(x, scale).as_text()
            return sum(text.count(q + "config" + q) for q in ("\\22", '\\"'))

        def step_ms():
            jax.block_until_ready(grad(x, scale))
            start = time.perf_counter()
            for _ in range(20):
                jax.block_until_ready(grad(x, scale))
            return (time.perf_counter() - start) / 20 * 1e3

        fresh()
        with again:
            inside = embedded()
            g = grad(x, scale)
            tuned = step_ms()
        fresh()
        outside = embedded()
        untuned = step_ms()
        from tokamax_cpp import jax as jax_adapter
        # With the command-buffer handler every call is traced with its config pinned.
        want_outside = inside if jax_adapter.RECORDABLE else 0
        assert inside > 0 and outside == want_outside, (f"calls with a config: {inside} inside the scope, "
                                                        f"{outside} outside (want {want_outside})")
        return (f"{len(result)} calls tuned, {inside} traced with their configs in the scope; step {untuned:.3f} ms "
                f"untuned, {tuned:.3f} ms in the scope; |dscale| {float(jnp.abs(g[1]).max()):.3g}")

    def benchmark():
        f, args = tokamax.standardize_function(seed, x, scale, mode="forward_and_vjp")
        runner = tokamax.compile_benchmark(f, args)
        wall = runner(args, iterations=10)
        kernels = runner(args, iterations=10, method="cupti")
        assert 0 < kernels.median_evaluation_time_ms <= wall.median_evaluation_time_ms * 1.02, (kernels, wall)
        return (f"median {wall.median_evaluation_time_ms:.3f} ms wall-clock, "
                f"{kernels.median_evaluation_time_ms:.3f} ms of kernels (cupti)")

    def export():
        exported = jax.export.export(grad, disabled_checks=tokamax.DISABLE_JAX_EXPORT_CHECKS)(x, scale)
        again = jax.export.deserialize(exported.serialize())
        return close(np.asarray(again.call(x, scale)[0], np.float32), np.asarray(grad(x, scale)[0], np.float32), 0)

    def vmap():
        out = jax.vmap(lambda a: tokamax.dot_product_attention(a, a, a, is_causal=True))(x[:, None])
        ref = jax.vmap(lambda a: jax.nn.dot_product_attention(a, a, a, is_causal=True))(x[:, None])
        return close(np.asarray(out, np.float32), np.asarray(ref, np.float32), 0.02)

    def sharded():
        # shard_map over the GPUs (data parallel along the batch): the custom calls run
        # per shard on its local shapes, gradients included.
        from jax.sharding import Mesh, PartitionSpec
        shard_map = getattr(jax, "shard_map", None)
        if shard_map is None:
            from jax.experimental.shard_map import shard_map
        devices = jax.devices()
        mesh = Mesh(np.array(devices), ("data",))
        batch = x[: (x.shape[0] // len(devices)) * len(devices)] if x.shape[0] >= len(devices) else x
        spec = PartitionSpec("data")
        f = jax.jit(shard_map(lambda a, s: jax.grad(seed, argnums=(0, 1))(a, s), mesh=mesh,
                              in_specs=(spec, PartitionSpec()), out_specs=(spec, spec)))
        g = f(batch, scale)
        # Traced now, as f is: with the command-buffer handler a trace fixes the configs
        # of its time, and the autotune check above changed the cache since grad's.
        plain = jax.jit(jax.grad(seed, argnums=(0, 1)))(batch, scale)
        return (close(np.asarray(g[0], np.float32), np.asarray(plain[0], np.float32), 0) +
                f" ({len(devices)} device(s))")

    def overhead():
        # A chain of calls unrolled in one jit (a fori_loop on the GPU syncs the host for its
        # predicate every iteration, which is not the call's cost): wall-clock per call,
        # the kernels' own time per call (CUPTI), and what is left over them.
        from tokamax_cpp.benchmarking import cupti_times
        small = jnp.ones((1, 128, 1, 64), jnp.bfloat16)
        n = 100

        def chain(a):
            for _ in range(n):
                a = tokamax.layer_norm(a, None, None)
            return a

        def xla_chain(a):  # XLA's own kernels, kept apart by barriers: the floor of a step
            for _ in range(n):
                a = jax.lax.optimization_barrier(a * 1.0001)
            return a

        def per_call(f):
            jitted = jax.jit(f)
            jax.block_until_ready(jitted(small))
            walls = []
            for _ in range(5):
                start = time.perf_counter()
                jax.block_until_ready(jitted(small))
                walls.append((time.perf_counter() - start) / n * 1e6)
            try:
                kernels = min(cupti_times(lambda: jax.block_until_ready(jitted(small)), 5)) / n * 1e3
            except RuntimeError:  # kernels CUPTI's driver-API trace does not see (XLA's CUDA graphs)
                kernels = float("nan")
            return min(walls), kernels

        wall, kernels = per_call(chain)
        xla_wall, xla_kernels = per_call(xla_chain)
        return (f"per FFI call in a jitted chain of {n} small layer_norms: {wall:.1f} us wall-clock, "
                f"{kernels:.1f} us of kernels, {wall - kernels:.1f} us over them (target <= 5 us); "
                f"XLA's own multiply in a like chain: {xla_wall:.1f} us wall-clock, {xla_kernels:.1f} us of kernels")

    for name, fn in (("jax seed gradient vs jax.nn + jnp", seed_grad), ("jax autotune + scope", autotune_scope),
                     ("jax benchmarking", benchmark), ("jax.export round trip", export),
                     ("jax vmap attention", vmap), ("jax shard_map of the seed's gradient", sharded),
                     ("jax call overhead", overhead)):
        check(name, fn)


if __name__ == "__main__":
    parts = sys.argv[1:] or ["torch", "jax"]
    if "torch" in parts:
        check("torch import", lambda: __import__("tokamax_cpp.torch") and None)
        if not failures:
            torch_checks()
    if "jax" in parts:
        before = len(failures)
        check("jax import", lambda: __import__("tokamax_cpp.jax") and None)
        if len(failures) == before:
            jax_checks()
    print(f"{len(failures)} failed" + (f": {', '.join(failures)}" if failures else ""))
    sys.exit(1 if failures else 0)
