"""The public ops on numpy arrays (the CPU interpreter through the C ABI) against the
float64 references of references.py, at small and odd shapes."""

import numpy as np
import pytest

import references as ref
import tokamax_cpp as tokamax

TOL = {np.float64: (1e-10, 1e-10), np.float32: (2e-4, 2e-5), np.float16: (2e-2, 2e-2)}


def tol(dtype):
    return dict(zip(("rtol", "atol"), TOL[np.dtype(dtype).type]))


# ---- norms ----

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(3, 5, 7), (1, 33), (4, 1)])
def test_layer_norm(dtype, shape):
    r = ref.rng(1)
    x = r.standard_normal(shape).astype(dtype)
    scale = r.standard_normal(shape[-1]).astype(dtype)
    offset = r.standard_normal(shape[-1]).astype(dtype)
    y = tokamax.layer_norm(x, scale, offset)
    assert y.dtype == x.dtype and y.shape == x.shape
    ref.assert_close(y, ref.layer_norm(x, scale, offset), **tol(dtype), what="layer_norm")


def test_layer_norm_without_parameters_and_other_axis():
    x = ref.rng(2).standard_normal((6, 5, 3)).astype(np.float32)
    ref.assert_close(tokamax.layer_norm(x, None, None, axis=1), ref.layer_norm(x, None, None, axis=1),
                     **tol(np.float32), what="axis=1")
    ref.assert_close(tokamax.layer_norm(x, None, None, axis=0, epsilon=0.5),
                     ref.layer_norm(x, None, None, axis=0, epsilon=0.5), **tol(np.float32), what="axis=0")


def test_layer_norm_default_epsilon_is_tokamax_s():
    x = (ref.rng(3).standard_normal((2, 8)) * 1e-3).astype(np.float64)  # epsilon matters at this scale
    ref.assert_close(tokamax.layer_norm(x, None, None), ref.layer_norm(x, None, None, epsilon=1e-6),
                     **tol(np.float64), what="epsilon 1e-6")


def test_layer_norm_scale_offset_and_rms():
    r = ref.rng(4)
    x = r.standard_normal((5, 16)).astype(np.float32)
    scale = r.standard_normal(16).astype(np.float32)
    y = tokamax.layer_norm(x, scale, None, scale_offset=1.0)
    ref.assert_close(y, ref.layer_norm(x, scale + 1.0, None), **tol(np.float32), what="scale_offset")
    y = tokamax.layer_norm(x, scale, None, subtract_mean=False)
    ref.assert_close(y, ref.rms_norm(x, scale), **tol(np.float32), what="subtract_mean=False")
    ref.assert_close(tokamax.rms_norm(x, scale, epsilon=1e-3), ref.rms_norm(x, scale, epsilon=1e-3),
                     **tol(np.float32), what="rms_norm")


def test_layer_norm_vjp_op_by_name():
    r = ref.rng(5)
    x = r.standard_normal((7, 12))
    scale, offset, dy = r.standard_normal(12), r.standard_normal(12), r.standard_normal((7, 12))
    y, mean, rstd = tokamax.call("layer_norm", x, scale, offset, axis=-1, epsilon=1e-6)
    assert mean.shape == (7,) and rstd.shape == (7,)
    dx, dscale, doffset = tokamax.call("layer_norm_vjp", dy, x, scale, mean, rstd, axis=-1)
    want = ref.layer_norm_vjp(dy, x, scale)
    for got, expected, what in zip((dx, dscale, doffset), want, ("dx", "dscale", "doffset")):
        ref.assert_close(got, expected, 1e-9, 1e-9, what=what)


# ---- attention ----

def qkv(r, b=2, t=5, s=7, n=4, k=2, h=8, hv=8, dtype=np.float32):
    return (r.standard_normal((b, t, n, h)).astype(dtype), r.standard_normal((b, s, k, h)).astype(dtype),
            r.standard_normal((b, s, k, hv)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_plain_and_gqa(dtype):
    q, k, v = qkv(ref.rng(6), dtype=dtype)
    out = tokamax.dot_product_attention(q, k, v)
    assert out.shape == (2, 5, 4, 8) and out.dtype == dtype
    ref.assert_close(out, ref.attention(q, k, v), **tol(dtype), what="attention")


def test_attention_options():
    r = ref.rng(7)
    q, k, v = qkv(r, t=6, s=6, hv=4)
    bias = r.standard_normal((1, 4, 6, 6)).astype(np.float32)
    mask = r.random((2, 1, 6, 6)) > 0.3
    cases = [
        (dict(is_causal=True), dict(is_causal=True)),
        (dict(scale=0.3, logits_soft_cap=2.0), dict(scale=0.3, soft_cap=2.0)),
        (dict(local_window_size=1), dict(window=(1, 1))),
        (dict(local_window_size=(2, 0)), dict(window=(2, 0))),
        (dict(bias=bias, mask=mask), dict(bias=bias, mask=mask)),
        (dict(query_seq_lengths=np.array([6, 3], np.int32), key_value_seq_lengths=np.array([4, 6], np.int32)),
         dict(q_lengths=[6, 3], kv_lengths=[4, 6])),
    ]
    for ours, theirs in cases:
        out = tokamax.dot_product_attention(q, k, v, **ours)
        ref.assert_close(out, ref.attention(q, k, v, **theirs), **tol(np.float32), what=str(sorted(ours)))


def bnth(a):
    """BTNH -> SDPA's BNTH (and back): axes -3 and -2 swapped, contiguous."""
    return np.ascontiguousarray(np.swapaxes(a, -3, -2))


def test_attention_bnth_layout_is_the_btnh_result_transposed_bitwise():
    r = ref.rng(15)
    q, k, v = qkv(r, t=6, s=6, hv=4)  # grouped: 4 heads, 2 kv heads
    bias = r.standard_normal((1, 4, 6, 6)).astype(np.float32)  # [B, N, T, S] in both layouts
    options = dict(bias=bias, is_causal=True, query_seq_lengths=np.array([6, 3], np.int32))
    want = tokamax.dot_product_attention(q, k, v, **options)
    got = tokamax.dot_product_attention(bnth(q), bnth(k), bnth(v), layout="BNTH", **options)
    assert got.shape == (2, 4, 6, 4) and got.dtype == want.dtype
    assert bnth(got).tobytes() == want.tobytes()
    assert tokamax.dot_product_attention(q, k, v, layout="BTNH", **options).tobytes() == want.tobytes()


def test_attention_deterministic_goes_to_the_vjp_alone():
    from tokamax_cpp import _opdefs
    r = ref.rng(16)
    q, k, v = qkv(r, t=5, s=7)
    # The forward's call leaves it out (its op takes no such option); the VJP's keeps it.
    options = {"is_causal": True, "deterministic": False}
    assert _opdefs.ATTENTION.forward_options(options) == {"is_causal": True}
    assert _opdefs.ATTENTION.vjp_options_of(options, [q, k, v, None, None, None, None, None]) == options
    plain = {"is_causal": True}
    assert _opdefs.ATTENTION.forward_options(plain) is plain
    assert tokamax.dot_product_attention(q, k, v, deterministic=False).tobytes() == \
        tokamax.dot_product_attention(q, k, v).tobytes()
    out, lse = tokamax.call("attention", q, k, v, None, None, None, None, None)
    dout = r.standard_normal(out.shape).astype(np.float32)
    grads = [tokamax.call("attention_vjp", dout, q, k, v, out, lse, None, None, None, None, None, **extra)
             for extra in ({}, {"deterministic": False}, {"deterministic": True})]
    for g in grads[1:]:  # deterministic either way here (no hopper fused dq): the same bits
        assert all(a.tobytes() == b.tobytes() for a, b in zip(g[:3], grads[0][:3]))
    with pytest.raises(ValueError, match="deterministic"):
        tokamax.call("attention", q, k, v, None, None, None, None, None, deterministic=False)


def test_attention_vjp_op_by_name():
    r = ref.rng(8)
    q, k, v = qkv(r, b=1, t=3, s=4, n=2, k=1, h=4, hv=4, dtype=np.float64)
    out, lse = tokamax.call("attention", q, k, v, None, None, None, None, None, is_causal=True)
    dout = r.standard_normal(out.shape)
    dq, dk, dv, dbias, dsinks = tokamax.call("attention_vjp", dout, q, k, v, out, lse, None, None, None, None, None,
                                             is_causal=True)
    assert dbias is None and dsinks is None
    # Central differences of sum(dout * attention) against the VJP.
    f = lambda q_, k_, v_: float((ref.attention(q_, k_, v_, is_causal=True) * dout).sum())
    for grad, which in ((dq, 0), (dk, 1), (dv, 2)):
        args = [q.copy(), k.copy(), v.copy()]
        numeric = np.zeros_like(args[which])
        for idx in np.ndindex(numeric.shape):
            hi, lo = [a.copy() for a in args], [a.copy() for a in args]
            hi[which][idx] += 1e-6
            lo[which][idx] -= 1e-6
            numeric[idx] = (f(*hi) - f(*lo)) / 2e-6
        ref.assert_close(grad, numeric, 1e-5, 1e-6, what=f"attention_vjp d{'qkv'[which]}")


def test_attention_sinks_forward_and_vjp():
    """sinks [N] f32: a logit per head in each row's softmax sum; out against the numpy
    reference, lse = log(sum exp(logits) + exp(sink)) (the sink where no key is seen), and
    the VJP's dsinks and dq against central differences of sum(dout * attention)."""
    r = ref.rng(16)
    q, k, v = qkv(r, b=2, t=4, s=5, n=2, k=1, h=4, hv=4, dtype=np.float64)
    sinks = (1.0 + r.standard_normal(2)).astype(np.float32)
    lengths = np.array([5, 0], np.int32)  # batch row 1 sees no key: lse = the sink
    out = tokamax.dot_product_attention(q, k, v, is_causal=True, key_value_seq_lengths=lengths, sinks=sinks)
    want = ref.attention(q, k, v, is_causal=True, kv_lengths=[5, 0], sinks=sinks)
    ref.assert_close(out, want, 1e-9, 1e-9, what="attention with sinks")
    assert not np.allclose(out, ref.attention(q, k, v, is_causal=True, kv_lengths=[5, 0]))
    out, lse = tokamax.call("attention", q, k, v, None, None, None, lengths, sinks, is_causal=True)
    assert np.array_equal(lse[1], np.broadcast_to(sinks.astype(np.float64)[:, None], (2, 4)))
    dout = r.standard_normal(out.shape)
    dq, dk, dv, dbias, dsinks = tokamax.call("attention_vjp", dout, q, k, v, out, lse, None, None, None, lengths,
                                             sinks, is_causal=True)
    assert dbias is None and dsinks.shape == (2,) and dsinks.dtype == np.float32
    f = lambda q_, s_: float((ref.attention(q_, k, v, is_causal=True, kv_lengths=[5, 0], sinks=s_) * dout).sum())
    numeric = np.array([(f(q, sinks + e * 1e-3) - f(q, sinks - e * 1e-3)) / 2e-3 for e in np.eye(2)])
    ref.assert_close(dsinks, numeric, 1e-4, 1e-5, what="dsinks")
    numeric_dq = np.zeros_like(q)
    for idx in np.ndindex(q.shape):
        hi, lo = q.copy(), q.copy()
        hi[idx] += 1e-6
        lo[idx] -= 1e-6
        numeric_dq[idx] = (f(hi, sinks) - f(lo, sinks)) / 2e-6
    ref.assert_close(dq, numeric_dq, 1e-5, 1e-6, what="dq with sinks")
    with pytest.raises(Exception, match="sinks must be f32"):
        tokamax.dot_product_attention(q, k, v, sinks=sinks.astype(np.float64))


def test_attention_varlen_is_each_sequence_alone():
    """Packed sequences (lengths 3, 0, 6 queries; 5, 2, 4 keys) against the reference run
    on each sequence alone, causal aligned bottom-right (key j visible to query i when
    j <= i + kv_len - q_len); the VJP by name against the padded call's gradients."""
    r = ref.rng(17)
    lq, lk = [3, 0, 6], [5, 2, 4]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = r.standard_normal((9, 4, 8))
    k, v = r.standard_normal((11, 2, 8)), r.standard_normal((11, 2, 8))
    out = tokamax.dot_product_attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=6, max_seqlen_kv=5, is_causal=True)
    assert out.shape == (9, 4, 8) and out.dtype == np.float64
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lq[b] == 0:
            continue
        i, j = np.arange(lq[b])[:, None], np.arange(lk[b])[None, :]
        mask = (j <= i + lk[b] - lq[b])[None, None]
        want = ref.attention(q[None, qs], k[None, ks], v[None, ks], mask=mask)[0]
        ref.assert_close(out[qs], want, 1e-10, 1e-10, what=f"sequence {b}")
    assert np.all(out[3:5] == 0)  # queries 0 and 1 of sequence 2 (6 queries, 4 keys) see no key
    with pytest.raises(ValueError, match="max_seqlen_q"):
        tokamax.dot_product_attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=5, max_seqlen_kv=5)
    with pytest.raises(ValueError, match="cu_seqlens_kv"):
        tokamax.dot_product_attention_varlen(q, k, v, cu_q, cu_k[:3], max_seqlen_q=6, max_seqlen_kv=5)


# ---- gated linear unit ----

@pytest.mark.parametrize("activation", ["swish", "gelu", "gelu_tanh", "sigmoid", "relu", None])
def test_gated_linear_unit(activation):
    r = ref.rng(9)
    x = r.standard_normal((2, 3, 10)).astype(np.float32)
    w = (r.standard_normal((10, 2, 6)) / 3).astype(np.float32)
    out = tokamax.gated_linear_unit(x, w, activation=activation)
    assert out.shape == (2, 3, 6)
    ref.assert_close(out, ref.gated_linear_unit(x, w, activation or "none"), **tol(np.float32),
                     what=str(activation))


def test_gated_linear_unit_unfused_weights_and_callables():
    r = ref.rng(10)
    x = r.standard_normal((5, 9)).astype(np.float64)
    w_gate, w_up = r.standard_normal((9, 3)), r.standard_normal((9, 3))
    out = tokamax.gated_linear_unit(x, (w_gate, w_up), activation="silu")
    ref.assert_close(out, ref.gated_linear_unit(x, np.stack([w_gate, w_up], 1), "swish"), **tol(np.float64))

    def relu(a):
        return np.maximum(a, 0)
    assert tokamax.activation_name(relu) == "relu"


# ---- ragged dot ----

@pytest.mark.parametrize("sizes", [[3, 0, 4], [2, 2, 9], [1, 1, 1]])
def test_ragged_dot(sizes):
    r = ref.rng(11)
    lhs = r.standard_normal((7, 5)).astype(np.float32)
    rhs = r.standard_normal((3, 5, 6)).astype(np.float32)
    group_sizes = np.array(sizes, np.int32)
    out = tokamax.ragged_dot(lhs, rhs, group_sizes)
    ref.assert_close(out, ref.ragged_dot(lhs, rhs, group_sizes), **tol(np.float32), what=str(sizes))


# ---- cross-entropy ----

@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_linear_softmax_cross_entropy_loss(reduction):
    r = ref.rng(12)
    x = r.standard_normal((6, 8)).astype(np.float32)
    w = r.standard_normal((8, 11)).astype(np.float32)
    labels = np.array([0, 3, 10, -100, 5, 7], np.int32)
    loss = tokamax.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction)
    assert loss.shape == ((6,) if reduction == "none" else ())
    ref.assert_close(loss, ref.cross_entropy(x, labels, w, reduction), **tol(np.float32), what=reduction)


# ---- implementations ----

@pytest.mark.parametrize("alias", ["xla", "reference", ("cudnn", "xla")])
def test_attention_implementation_aliases(alias):
    q, k, v = qkv(ref.rng(13), b=1, t=3, s=3)
    out = tokamax.dot_product_attention(q, k, v, implementation=alias)
    ref.assert_close(out, ref.attention(q, k, v), **tol(np.float32), what=str(alias))


def test_norm_implementation_aliases_agree():
    x = ref.rng(14).standard_normal((4, 32)).astype(np.float32)
    a = tokamax.layer_norm(x, None, None, implementation="xla")
    b = tokamax.layer_norm(x, None, None, implementation="reference")
    np.testing.assert_array_equal(a, b)
    assert tokamax.canonical_implementation("triton") == "tile"
    assert tokamax.canonical_implementation("mosaic") == "hopper"
    assert tokamax.canonical_implementation("xla_chunked") == "chunked"
    assert tokamax.canonical_implementation(None) is None


# ---- paged decode ----

def test_paged_attention_reads_the_pages_through_the_table():
    """Two sequences (7 and 20 keys, the last 2 new) in pages of 8 scattered through the
    cache, GQA 4:2: out against attention over each sequence's keys gathered by hand,
    causal among the new tokens; lse on request; a bad page table named."""
    r = ref.rng(23)
    page_size, num_pages, tq = 8, 7, 2
    lengths = np.array([7, 20], np.int32)
    table = np.array([[5, 0, 0], [2, 6, 1]], np.int32)  # pages in use: 5 / 2, 6, 1
    q = r.standard_normal((2, tq, 4, 16)).astype(np.float32)
    k_pages = r.standard_normal((num_pages, page_size, 2, 16)).astype(np.float32)
    v_pages = r.standard_normal((num_pages, page_size, 2, 16)).astype(np.float32)
    out, lse = tokamax.paged_attention(q, k_pages, v_pages, table, lengths, return_lse=True,
                                       implementation="reference")
    assert out.shape == (2, tq, 4, 16) and lse.shape == (2, 4, tq) and lse.dtype == np.float32
    for b in range(2):
        keys = np.arange(lengths[b])
        k = k_pages[table[b, keys // page_size], keys % page_size].astype(np.float64)  # [S, K, H]
        v = v_pages[table[b, keys // page_size], keys % page_size].astype(np.float64)
        i, j = np.arange(tq)[:, None], keys[None, :]
        mask = (j <= lengths[b] - tq + i)[None, None]
        want = ref.attention(q[b:b + 1].astype(np.float64), k[None], v[None], mask=mask)[0]
        ref.assert_close(out[b], want, **tol(np.float32), what=f"sequence {b}")
    plain = tokamax.paged_attention(q, k_pages, v_pages, table, lengths, implementation="reference")
    np.testing.assert_array_equal(plain, out)  # lse asked for or not, the same out
    # What the device cannot check is checked on the interpreter, whichever the path:
    # a sequence longer than its table's pages, a page outside the cache.
    with pytest.raises(ValueError, match=r"seq_lengths\[1\] = 20"):
        tokamax.paged_attention(q, k_pages, v_pages, table[:, :1].copy(), lengths)
    bad = table.copy()
    bad[1, 2] = num_pages
    with pytest.raises(ValueError, match=r"page_table\[1, 2\]"):
        tokamax.paged_attention(q, k_pages, v_pages, bad, lengths)
    with pytest.raises(NotImplementedError, match="bf16 and f16"):
        tokamax.paged_attention(q, k_pages, v_pages, table, lengths, implementation="tile")



def appended(k_pages, v_pages, k, v, table, lengths):
    """The pages after writing each sequence's new tokens where paged_kv_append does, by
    numpy indexing."""
    k_pages, v_pages = k_pages.copy(), v_pages.copy()
    page_size, tq = k_pages.shape[1], k.shape[1]
    for b in range(k.shape[0]):
        pos = lengths[b] - tq + np.arange(tq)
        k_pages[table[b, pos // page_size], pos % page_size] = k[b]
        v_pages[table[b, pos // page_size], pos % page_size] = v[b]
    return k_pages, v_pages


def test_paged_kv_append_writes_the_new_rows_in_place():
    """Two sequences (7 and 20 tokens, the last 3 new; the second's new ones across a page
    boundary) in pages of 8, K 2, H 16, Hv 32: exactly the new rows change, in the arrays
    given (returned as they are); f16 too; what is wrong is named before anything runs."""
    r = ref.rng(29)
    page_size, num_pages, tq = 8, 7, 3
    lengths = np.array([7, 20], np.int32)
    table = np.array([[5, 0, 0], [2, 6, 1]], np.int32)
    for dtype in (np.float32, np.float16):
        k_pages = r.standard_normal((num_pages, page_size, 2, 16)).astype(dtype)
        v_pages = r.standard_normal((num_pages, page_size, 2, 32)).astype(dtype)
        k = r.standard_normal((2, tq, 2, 16)).astype(dtype)
        v = r.standard_normal((2, tq, 2, 32)).astype(dtype)
        want_k, want_v = appended(k_pages, v_pages, k, v, table, lengths)
        got_k, got_v = tokamax.paged_kv_append(k, v, table, lengths, k_pages, v_pages)
        assert got_k is k_pages and got_v is v_pages
        np.testing.assert_array_equal(k_pages, want_k)
        np.testing.assert_array_equal(v_pages, want_v)
    # A decode step's attention then sees the new keys: the same as over the pages written by hand.
    q = r.standard_normal((2, tq, 4, 16)).astype(np.float32)
    k_pages = r.standard_normal((num_pages, page_size, 2, 16)).astype(np.float32)
    v_pages = r.standard_normal((num_pages, page_size, 2, 32)).astype(np.float32)
    k = r.standard_normal((2, tq, 2, 16)).astype(np.float32)
    v = r.standard_normal((2, tq, 2, 32)).astype(np.float32)
    want_k, want_v = appended(k_pages, v_pages, k, v, table, lengths)
    tokamax.paged_kv_append(k, v, table, lengths, k_pages, v_pages)
    np.testing.assert_array_equal(tokamax.paged_attention(q, k_pages, v_pages, table, lengths),
                                  tokamax.paged_attention(q, want_k, want_v, table, lengths))
    # Bad pages: a copy would lose the writes, so views are refused; shapes and dtypes named.
    with pytest.raises(ValueError, match="v_pages: the call writes it in place"):
        tokamax.paged_kv_append(k, v, table, lengths, k_pages, np.asfortranarray(v_pages))
    with pytest.raises(ValueError, match="v_pages: the call writes it in place"):
        frozen = v_pages.copy()
        frozen.flags.writeable = False
        tokamax.paged_kv_append(k, v, table, lengths, k_pages, frozen)
    with pytest.raises(TypeError, match="k_pages: expected float32"):
        tokamax.paged_kv_append(k, v, table, lengths, k_pages.astype(np.float64), v_pages)
    with pytest.raises(ValueError, match="v_pages: expected shape"):
        tokamax.paged_kv_append(k, v, table, lengths, k_pages, v_pages[..., :16].copy())
    with pytest.raises(ValueError, match="k_pages: expected .num_pages, page_size, K, dim."):
        tokamax.paged_kv_append(k, v, table, lengths, k_pages[0], v_pages)
    # The interpreter's checks, as paged_attention's: a length past its table's pages.
    with pytest.raises(ValueError, match=r"seq_lengths\[1\] = 20"):
        tokamax.paged_kv_append(k, v, table[:, :1].copy(), lengths, k_pages, v_pages)