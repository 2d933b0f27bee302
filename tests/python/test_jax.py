"""tokamax_cpp.jax on the CPU platform (the FFI handler runs the interpreter): numerics,
jit, grad against the float64 references, vmap, export. Skipped, with the reason, where
jax is not installed (CI); the GPU side runs on the GPU machine."""

import numpy as np
import pytest

import references as ref

jax = pytest.importorskip("jax", reason="jax is not installed (Debian has no package; CI cannot run this)")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import tokamax_cpp as tokamax  # noqa: E402


def test_layer_norm_jit_and_grad():
    r = ref.rng(0)
    x = r.standard_normal((3, 8))
    scale, offset = r.standard_normal(8), r.standard_normal(8)
    y = jax.jit(lambda a, b, c: tokamax.layer_norm(a, b, c))(x, scale, offset)
    ref.assert_close(np.asarray(y), ref.layer_norm(x, scale, offset), 1e-9, 1e-9, "layer_norm")
    dy = r.standard_normal((3, 8))
    grads = jax.grad(lambda a, b, c: jnp.sum(tokamax.layer_norm(a, b, c) * dy), argnums=(0, 1, 2))(x, scale, offset)
    for got, want, what in zip(grads, ref.layer_norm_vjp(dy, x, scale), ("dx", "dscale", "doffset")):
        ref.assert_close(np.asarray(got), want, 1e-8, 1e-8, what)


def test_attention_vmap_and_grad():
    r = ref.rng(1)
    q = jnp.asarray(r.standard_normal((2, 1, 4, 2, 8)).astype(np.float32))
    out = jax.vmap(lambda a: tokamax.dot_product_attention(a, a, a, is_causal=True))(q)
    for i in range(2):
        want = ref.attention(np.asarray(q[i]), np.asarray(q[i]), np.asarray(q[i]), is_causal=True)
        ref.assert_close(np.asarray(out[i]), want, 2e-4, 2e-5, "vmap")
    g = jax.grad(lambda a: jnp.sum(tokamax.dot_product_attention(a, a, a)))(q[0])
    assert g.shape == q[0].shape and bool(jnp.all(jnp.isfinite(g)))


def test_attention_bnth_layout_jit_and_grad():
    r = ref.rng(2)
    q, k, v = (jnp.asarray(r.standard_normal((1, 3, 2, 4))) for _ in range(3))
    to_bnth = lambda a: jnp.swapaxes(a, 1, 2)
    want = tokamax.dot_product_attention(q, k, v, is_causal=True)
    f = jax.jit(lambda a, b, c: tokamax.dot_product_attention(a, b, c, is_causal=True, layout="BNTH"))
    got = f(to_bnth(q), to_bnth(k), to_bnth(v))
    np.testing.assert_array_equal(np.asarray(to_bnth(got)), np.asarray(want))
    loss = lambda a, b, c, layout: jnp.sum(tokamax.dot_product_attention(a, b, c, is_causal=True, layout=layout) ** 2)
    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, "BTNH")
    grads_bnth = jax.grad(loss, argnums=(0, 1, 2))(to_bnth(q), to_bnth(k), to_bnth(v), "BNTH")
    for got_grad, want_grad in zip(grads_bnth, grads):
        ref.assert_close(np.asarray(to_bnth(got_grad)), np.asarray(want_grad), 1e-12, 1e-12, "BNTH grad")


def test_attention_sinks_jit_grad_and_vmap():
    r = ref.rng(3)
    q = r.standard_normal((2, 4, 2, 4))
    k, v = (r.standard_normal((2, 5, 1, 4)) for _ in range(2))
    sinks, dout = (1.0 + r.standard_normal(2)).astype(np.float32), r.standard_normal((2, 4, 2, 4))
    f = jax.jit(lambda a, s: tokamax.dot_product_attention(a, k, v, is_causal=True, sinks=s))
    ref.assert_close(np.asarray(f(q, sinks)), ref.attention(q, k, v, is_causal=True, sinks=sinks), 1e-9, 1e-9,
                     "attention with sinks")
    dq, dsinks = jax.grad(lambda a, s: jnp.sum(f(a, s) * dout), argnums=(0, 1))(q, sinks)
    assert dsinks.dtype == jnp.float32 and dq.shape == q.shape
    loss = lambda s: float((ref.attention(q, k, v, is_causal=True, sinks=s) * dout).sum())
    numeric = np.array([(loss(sinks + e * 1e-3) - loss(sinks - e * 1e-3)) / 2e-3 for e in np.eye(2)])
    ref.assert_close(np.asarray(dsinks), numeric, 1e-4, 1e-5, "dsinks")
    # vmap over a stack of q: sinks [N] are not batched with it (a loop, not folded).
    out = jax.vmap(lambda a: tokamax.dot_product_attention(a, k, v, sinks=sinks))(jnp.stack([q, 2 * q]))
    for i, a in enumerate((q, 2 * q)):
        ref.assert_close(np.asarray(out[i]), ref.attention(a, k, v, sinks=sinks), 1e-9, 1e-9, "vmap with sinks")


def test_export_round_trip():
    x = jnp.ones((2, 8), jnp.float32)
    f = jax.jit(jax.grad(lambda a: jnp.sum(tokamax.layer_norm(a, None, None) ** 2)))
    exported = jax.export.export(f, disabled_checks=tokamax.DISABLE_JAX_EXPORT_CHECKS)(x)
    again = jax.export.deserialize(exported.serialize())
    np.testing.assert_allclose(np.asarray(again.call(x)), np.asarray(f(x)), rtol=1e-6)


def test_a_scope_is_applied_at_trace_time():
    """The handler runs on XLA's threads: a scope open while tracing is embedded in the
    custom calls' options (the forward's and the VJP's); jitted functions trace again
    inside a scope where jax keys jit on it (>= 0.7.2), else after jax.clear_caches()."""
    import json
    from tokamax_cpp import _capi
    x = jnp.asarray(ref.rng(4).standard_normal((64, 48)).astype(np.float32))
    f = jax.jit(jax.grad(lambda a: jnp.sum(tokamax.layer_norm(a, None, None) ** 2)))
    entries = []
    for op, specs, options in (("layer_norm", [(_capi.F32, x.shape), None, None],
                                {"axis": -1, "epsilon": 1e-6, "residuals": True}),):
        call = _capi.get_call(op, specs, _capi.options_json(options))
        resolved = call.resolve("sm_90a")
        entries.append({"args": json.loads(call.json()), "implementation": resolved["implementation"],
                        "config": resolved["config"], "candidates": []})
    result = tokamax.AutotuningResult(json.dumps({"format": "tokamax-autotuning", "version": 1, "device": None,
                                                  "entries": entries}))

    def configs_embedded():
        text = f.lower(x).as_text()
        return sum(text.count(q + "config" + q) for q in ("\\22", '\\"'))

    keyed = hasattr(jax, "make_user_context")
    # The command-buffer handler (opt-in) fixes every call's config at the trace, scope or not.
    from tokamax_cpp import jax as jax_adapter
    outside = 2 if jax_adapter.RECORDABLE else 0
    assert configs_embedded() == outside
    if not keyed:
        jax.clear_caches()
    with result:
        assert configs_embedded() == 2  # layer_norm and layer_norm_vjp
        inside = f(x)
    if not keyed:
        jax.clear_caches()
    assert configs_embedded() == outside
    np.testing.assert_allclose(np.asarray(inside), np.asarray(f(x)), rtol=1e-5, atol=1e-6)


def test_paged_kv_append_returns_the_pages_with_the_new_rows():
    """jax arrays are immutable: new pages with exactly the new rows set (numpy's in-place
    append of the same arrays gives the same bits), under jit too."""
    r = ref.rng(41)
    lengths = np.array([7, 20], np.int32)
    table = np.array([[5, 0, 0], [2, 6, 1]], np.int32)
    k_pages = r.standard_normal((7, 8, 2, 16)).astype(np.float32)
    v_pages = r.standard_normal((7, 8, 2, 32)).astype(np.float32)
    k = r.standard_normal((2, 3, 2, 16)).astype(np.float32)
    v = r.standard_normal((2, 3, 2, 32)).astype(np.float32)
    args = [jnp.asarray(a) for a in (k, v, table, lengths, k_pages, v_pages)]
    got = tokamax.paged_kv_append(*args)
    jitted = jax.jit(tokamax.paged_kv_append)(*args)
    want = tokamax.paged_kv_append(k, v, table, lengths, k_pages.copy(), v_pages.copy())
    for g, j, w in zip(got, jitted, want):
        np.testing.assert_array_equal(np.asarray(g), w)
        np.testing.assert_array_equal(np.asarray(j), w)
    np.testing.assert_array_equal(np.asarray(args[4]), k_pages)  # the pages given are unchanged
    with pytest.raises(TypeError, match="k: expected float32"):
        tokamax.paged_kv_append(args[0].astype(jnp.float16), *args[1:])
    with pytest.raises(NotImplementedError, match="jax's scatter"):
        tokamax.paged_kv_append(*args, implementation="tile")
