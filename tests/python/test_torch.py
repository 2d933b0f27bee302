"""tokamax_cpp.torch on CPU tensors (the interpreter): every op against the float64
references, f64 gradcheck of every op with a VJP (public functions and torch.ops),
meta shapes. These run on torch >= 1.13 (Debian 12's 1.13 through the Library
registration, 2.4+ through custom_op); opcheck and fake tensors need custom_op (2.4) and
are skipped, with the reason, before it. The CUDA side (streams, workspace,
torch.compile, CUDA graphs) runs on the GPU machine (gpu_check.py)."""

import numpy as np
import pytest

import references as ref

torch = pytest.importorskip("torch", reason="torch is not installed")
import tokamax_cpp as tokamax  # noqa: E402  (a missing library fails here, it is no skip)

try:
    import tokamax_cpp.torch as tt
except ImportError as e:  # torch older than 1.13
    pytest.skip(str(e), allow_module_level=True)

needs_custom_op = pytest.mark.skipif(
    not tt.CUSTOM_OP, reason=f"needs torch.library.custom_op (torch >= 2.4): torch {torch.__version__} "
                             "has the Library registration (no opcheck, fake tensors, torch.compile)")

TOL = {np.float64: (1e-10, 1e-10), np.float32: (2e-4, 2e-5)}


def t(a, requires_grad=False):
    return torch.tensor(np.asarray(a), requires_grad=requires_grad)


def check(actual, expected, dtype, what):
    assert isinstance(actual, torch.Tensor) and actual.dtype == t(np.zeros(1, dtype)).dtype, what
    rtol, atol = TOL[np.dtype(dtype).type]
    ref.assert_close(actual.detach().numpy(), expected, rtol, atol, what)


# ---- forward, every op, against the references ----

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norms_forward(dtype):
    r = ref.rng(0)
    x = r.standard_normal((3, 16)).astype(dtype)
    scale, offset = r.standard_normal(16).astype(dtype), r.standard_normal(16).astype(dtype)
    check(tokamax.layer_norm(t(x), t(scale), t(offset)), ref.layer_norm(x, scale, offset), dtype, "layer_norm")
    check(tokamax.layer_norm(t(x), None, None, axis=0), ref.layer_norm(x, None, None, axis=0), dtype, "axis=0")
    check(tokamax.rms_norm(t(x), t(scale)), ref.rms_norm(x, scale), dtype, "rms_norm")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_forward(dtype):
    r = ref.rng(1)
    q = r.standard_normal((2, 4, 4, 8)).astype(dtype)
    k, v = (r.standard_normal((2, 5, 2, 8)).astype(dtype) for _ in range(2))  # grouped: 4 heads, 2 kv heads
    check(tokamax.dot_product_attention(t(q), t(k), t(v)), ref.attention(q, k, v), dtype, "attention")
    check(tokamax.dot_product_attention(t(q), t(q), t(q), is_causal=True, scale=0.5),
          ref.attention(q, q, q, is_causal=True, scale=0.5), dtype, "causal")


def test_attention_bnth_layout_forward_and_gradients_bitwise():
    r = ref.rng(11)
    q = r.standard_normal((2, 4, 4, 8))
    k, v = (r.standard_normal((2, 5, 2, 8)) for _ in range(2))
    dout = t(r.standard_normal((2, 4, 4, 8)))
    btnh = [t(a, True) for a in (q, k, v)]
    bnth = [t(a).transpose(1, 2).contiguous().requires_grad_() for a in (q, k, v)]  # SDPA's [B, N, T, H]
    want = tokamax.dot_product_attention(*btnh, is_causal=True)
    got = tokamax.dot_product_attention(*bnth, is_causal=True, layout="BNTH")
    assert got.shape == (2, 4, 4, 8) and got.is_contiguous()  # written in place in BNTH, no transposed view
    assert torch.equal(got.transpose(1, 2), want)
    want.backward(dout)
    got.backward(dout.transpose(1, 2).contiguous())
    for a, b, what in zip(bnth, btnh, "qkv"):
        assert a.grad.is_contiguous(), f"d{what} in BNTH"
        assert torch.equal(a.grad.transpose(1, 2), b.grad), f"d{what}"


def test_non_contiguous_inputs_are_read_as_their_values():
    # The eager path copies a non-contiguous input (a transposed view) before handing its
    # pointer over: the result equals the contiguous input's bit for bit.
    r = ref.rng(13)
    base = t(r.standard_normal((16, 3)))
    x = base.transpose(0, 1)  # [3, 16], strides (1, 3)
    assert not x.is_contiguous()
    scale = t(r.standard_normal(16))
    assert torch.equal(tokamax.layer_norm(x, scale, None), tokamax.layer_norm(x.contiguous(), scale, None))


def test_attention_deterministic_reaches_the_vjp():
    # The forward op leaves "deterministic" to its backward; the gradients here are
    # deterministic either way (no hopper fused dq), so they match bit for bit.
    r = ref.rng(12)
    q, k, v = (r.standard_normal(s).astype(np.float32) for s in ((1, 5, 4, 8), (1, 6, 2, 8), (1, 6, 2, 8)))
    dout = t(r.standard_normal((1, 5, 4, 8)).astype(np.float32))
    grads = []
    for options in ({}, {"deterministic": False}):
        leaves = [t(a, True) for a in (q, k, v)]
        out = tokamax.dot_product_attention(*leaves, is_causal=True, **options)
        out.backward(dout)
        grads.append([a.grad for a in leaves])
    for a, b, what in zip(*grads, "qkv"):
        assert torch.equal(a, b), f"d{what}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gated_linear_unit_forward(dtype):
    r = ref.rng(2)
    x, w = r.standard_normal((3, 6)).astype(dtype), (r.standard_normal((6, 2, 5)) / 3).astype(dtype)
    check(tokamax.gated_linear_unit(t(x), t(w), activation=torch.nn.functional.silu),
          ref.gated_linear_unit(x, w, "swish"), dtype, "swish")
    check(tokamax.gated_linear_unit(t(x), (t(w[:, 0]), t(w[:, 1])), activation=torch.nn.functional.gelu),
          ref.gated_linear_unit(x, w, "gelu"), dtype, "gelu, a (w_gate, w_up) pair")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ragged_dot_forward(dtype):
    r = ref.rng(3)
    lhs, rhs = r.standard_normal((5, 6)).astype(dtype), r.standard_normal((3, 6, 4)).astype(dtype)
    sizes = np.array([2, 0, 3], dtype=np.int32)
    check(tokamax.ragged_dot(t(lhs), t(rhs), t(sizes)), ref.ragged_dot(lhs, rhs, sizes), dtype, "ragged_dot")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_forward(dtype):
    r = ref.rng(4)
    x, w = r.standard_normal((4, 6)).astype(dtype), r.standard_normal((6, 7)).astype(dtype)
    labels = np.array([0, 6, -100, 3], dtype=np.int32)
    for reduction in ("sum", "mean", "none"):
        loss = tokamax.linear_softmax_cross_entropy_loss(t(x), t(labels), t(w), reduction=reduction)
        check(loss, ref.cross_entropy(x, labels, w, reduction), dtype, reduction)


def _sinks_case(r):
    q = r.standard_normal((2, 4, 2, 4))
    k, v = (r.standard_normal((2, 5, 1, 4)) for _ in range(2))
    return q, k, v, (1.0 + r.standard_normal(2)).astype(np.float32), r.standard_normal((2, 4, 2, 4))


def _sinks_numeric(q, k, v, sinks, dout):
    """d sum(dout * attention) / d sinks by central differences of the numpy reference."""
    f = lambda s: float((ref.attention(q, k, v, is_causal=True, sinks=s) * dout).sum())
    return np.array([(f(sinks + e * 1e-3) - f(sinks - e * 1e-3)) / 2e-3 for e in np.eye(len(sinks))])


def test_attention_sinks_forward_and_gradient():
    # f32 sinks beside f64 q, k, v: the gradient comes back in the sinks' dtype.
    q, k, v, sinks, dout = _sinks_case(ref.rng(12))
    args = [t(a, True) for a in (q, k, v, sinks)]
    out = tokamax.dot_product_attention(*args[:3], is_causal=True, sinks=args[3])
    check(out, ref.attention(q, k, v, is_causal=True, sinks=sinks), np.float64, "attention with sinks")
    out.backward(t(dout))
    assert args[3].grad.dtype == torch.float32
    ref.assert_close(args[3].grad.numpy(), _sinks_numeric(q, k, v, sinks, dout), 1e-4, 1e-5, "dsinks")
    f = lambda a: float((ref.attention(a, k, v, is_causal=True, sinks=sinks) * dout).sum())
    i = (1, 2, 1, 3)
    hi, lo = q.copy(), q.copy()
    hi[i] += 1e-6
    lo[i] -= 1e-6
    ref.assert_close(args[0].grad.numpy()[i], (f(hi) - f(lo)) / 2e-6, 1e-5, 1e-6, "dq with sinks")


# ---- gradients: f64 gradcheck through the VJP ops ----

def _gradcheck_cases():
    r = ref.rng(5)
    x = r.standard_normal((3, 6))
    scale, offset = r.standard_normal(6), r.standard_normal(6)
    q, k, v = (r.standard_normal((1, 3, 2, 4)) for _ in range(3))
    sizes = torch.tensor([1, 2], dtype=torch.int32)
    labels = torch.tensor([0, 6, 3], dtype=torch.int32)
    return {
        "layer_norm": (lambda a, b, c: tokamax.layer_norm(a, b, c), (x, scale, offset)),
        "layer_norm_no_offset": (lambda a, b: tokamax.layer_norm(a, b, None), (x, scale)),
        "rms_norm": (lambda a, b: tokamax.rms_norm(a, b), (x, scale)),
        "attention_causal": (lambda a, b, c: tokamax.dot_product_attention(a, b, c, is_causal=True), (q, k, v)),
        "attention_bnth": (lambda a, b, c: tokamax.dot_product_attention(a, b, c, is_causal=True, layout="BNTH"),
                           tuple(np.ascontiguousarray(a.swapaxes(1, 2)) for a in (q, k, v))),
        "gated_linear_unit": (lambda a, b: tokamax.gated_linear_unit(a, b, activation="swish"),
                              (x, r.standard_normal((6, 2, 5)) / 3)),
        "ragged_dot": (lambda a, b: tokamax.ragged_dot(a, b, sizes), (x, r.standard_normal((2, 6, 4)))),
        "cross_entropy_mean": (lambda a, b: tokamax.linear_softmax_cross_entropy_loss(a, labels, b, reduction="mean"),
                               (x, r.standard_normal((6, 7)))),
    }


GRADCHECK = _gradcheck_cases()


@pytest.mark.parametrize("case", sorted(GRADCHECK))
def test_gradcheck_f64(case):
    f, arrays = GRADCHECK[case]
    assert torch.autograd.gradcheck(f, tuple(t(a, True) for a in arrays))


def test_torch_ops_have_autograd():
    r = ref.rng(6)
    x, scale = t(r.standard_normal((4, 8)), True), t(r.standard_normal(8), True)
    options = '{"axis":-1,"epsilon":1e-06,"residuals":true}'
    y, rstd = torch.ops.tokamax_cpp.rms_norm(x, scale, options)
    assert y.grad_fn is not None and rstd.shape == (4,)
    dx, dscale = torch.autograd.grad(y.sum(), (x, scale))
    ex, escale = torch.autograd.grad(tokamax.rms_norm(x, scale).sum(), (x, scale))
    assert torch.equal(dx, ex) and torch.equal(dscale, escale)


def test_gated_linear_unit_keeps_its_preactivations_for_backward():
    # With "residuals": the forward also returns x W ([..., 2, N]); backward reads it.
    r = ref.rng(8)
    x, w = t(r.standard_normal((3, 6)), True), t(r.standard_normal((6, 2, 5)) / 3, True)
    out, h = torch.ops.tokamax_cpp.gated_linear_unit(x, w, '{"activation":"swish","residuals":true}')
    assert h.shape == (3, 2, 5)
    ref.assert_close(h.detach().numpy(), np.einsum("mk,kjn->mjn", x.detach().numpy(), w.detach().numpy()),
                     1e-12, 1e-12, "preactivations")
    dx, dw = torch.autograd.grad(out.sum(), (x, w))
    ex, ew = torch.autograd.grad(tokamax.gated_linear_unit(x, w, activation="swish").sum(), (x, w))
    assert torch.equal(dx, ex) and torch.equal(dw, ew)
    with torch.no_grad():  # no gradient asked: no pre-activations
        out, h = torch.ops.tokamax_cpp.gated_linear_unit(x, w, '{"activation":"swish","residuals":false}')
    assert h.numel() == 0


def test_no_grad_skips_residuals():
    x, scale = t(ref.rng(7).standard_normal((2, 8)), True), t(np.ones(8), True)
    with torch.no_grad():
        y = tokamax.layer_norm(x, scale, None)
    assert y.grad_fn is None
    ref.assert_close(y.numpy(), ref.layer_norm(x.detach().numpy(), np.ones(8), None), 1e-10, 1e-10, "no_grad")


def test_eager_calls_skip_the_registered_op_and_traced_calls_take_it(monkeypatch):
    # Plain tensors run the op directly (torch's custom-op layer costs tens of us a call),
    # gradients through the same autograd rules; a dispatch mode sees the registered op.
    r = ref.rng(9)
    x, scale = t(r.standard_normal((4, 8)), True), t(r.standard_normal(8), True)
    dx, dscale = torch.autograd.grad(tokamax.rms_norm(x, scale).sum(), (x, scale))
    seen = []
    registered = tt._registered["rms_norm"]
    monkeypatch.setitem(tt._registered, "rms_norm", lambda *a: seen.append(a) or registered(*a))
    ex, escale = torch.autograd.grad(tokamax.rms_norm(x, scale).sum(), (x, scale))
    assert not seen and torch.equal(dx, ex) and torch.equal(dscale, escale)
    mode = getattr(__import__("torch.utils._python_dispatch", fromlist=["x"]), "TorchDispatchMode", None)
    if mode is None:
        return

    class PassThrough(mode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with PassThrough():
        y = tokamax.rms_norm(x, scale)
    assert len(seen) == 1 and torch.equal(y, tokamax.rms_norm(x, scale))


def test_paged_attention_forward_and_meta():
    """Decode over pages from torch: bf16 on tile (auto) against the float64 gather of
    each sequence's keys, f32 on reference bitwise equal to numpy's, lse on request, and
    meta shapes (what torch.compile's fake tensors get)."""
    r = ref.rng(31)
    lengths = np.array([9, 3], np.int32)
    table = np.array([[3, 0], [1, 2]], np.int32)
    q = r.standard_normal((2, 1, 4, 16)).astype(np.float32)
    k_pages = r.standard_normal((4, 8, 2, 16)).astype(np.float32)
    v_pages = r.standard_normal((4, 8, 2, 16)).astype(np.float32)
    args = [t(q), t(k_pages), t(v_pages), t(table), t(lengths)]
    out, lse = tokamax.paged_attention(*args, return_lse=True, implementation="reference")
    want_out, want_lse = tokamax.paged_attention(q, k_pages, v_pages, table, lengths, return_lse=True,
                                                 implementation="reference")
    assert torch.equal(out, t(want_out)) and torch.equal(lse, t(want_lse))
    half = [a.to(torch.bfloat16) if a.is_floating_point() else a for a in args]
    got = tokamax.paged_attention(*half).float().numpy()
    for b in range(2):
        keys = np.arange(lengths[b])
        k = k_pages[table[b, keys // 8], keys % 8]
        v = v_pages[table[b, keys // 8], keys % 8]
        as_bf16 = [half[0][b:b + 1].double().numpy(), t(k).to(torch.bfloat16).double().numpy()[None],
                   t(v).to(torch.bfloat16).double().numpy()[None]]
        ref.assert_close(got[b], ref.attention(*as_bf16)[0], 2e-2, 2e-2, f"sequence {b}")
    meta = [torch.empty(a.shape, dtype=a.dtype, device="meta") for a in half]
    m_out, m_lse = tokamax.paged_attention(*meta, return_lse=True)
    assert m_out.device.type == "meta" and m_out.shape == (2, 1, 4, 16) and m_out.dtype == torch.bfloat16
    assert m_lse.shape == (2, 4, 1) and m_lse.dtype == torch.float32


def test_paged_kv_append_in_place():
    """The new tokens' keys and values into torch pages (bf16 and f32), in place: the same
    bits as numpy indexing writes; no gradient; meta tensors (nothing to write) refused."""
    r = ref.rng(37)
    lengths = np.array([9, 3], np.int32)
    table = np.array([[3, 0], [1, 2]], np.int32)
    for dtype in (torch.float32, torch.bfloat16):
        k_pages = t(r.standard_normal((4, 8, 2, 16)).astype(np.float32)).to(dtype)
        v_pages = t(r.standard_normal((4, 8, 2, 16)).astype(np.float32)).to(dtype)
        k = t(r.standard_normal((2, 2, 2, 16)).astype(np.float32)).to(dtype)
        v = t(r.standard_normal((2, 2, 2, 16)).astype(np.float32)).to(dtype)
        want_k, want_v = k_pages.clone(), v_pages.clone()
        for b in range(2):
            pos = torch.arange(int(lengths[b]) - 2, int(lengths[b]))
            want_k[t(table).long()[b, pos // 8], pos % 8] = k[b]
            want_v[t(table).long()[b, pos // 8], pos % 8] = v[b]
        got = tokamax.paged_kv_append(k, v, t(table), t(lengths), k_pages, v_pages)
        assert got[0] is k_pages and got[1] is v_pages
        assert torch.equal(k_pages, want_k) and torch.equal(v_pages, want_v)
    with pytest.raises(ValueError, match="no gradient"):
        tokamax.paged_kv_append(k.float().requires_grad_(), v.float(), t(table), t(lengths), k_pages.float(),
                                v_pages.float())
    with pytest.raises(ValueError, match="k_pages: the call writes it in place"):
        tokamax.paged_kv_append(k, v, t(table), t(lengths), k_pages.transpose(1, 2).contiguous().transpose(1, 2),
                                v_pages)
    with pytest.raises(TypeError, match=r"k_pages: expected torch.bfloat16, got torch.float16"):
        tokamax.paged_kv_append(k, v, t(table), t(lengths), k_pages.half(), v_pages)
    with pytest.raises(ValueError, match=r"v_pages: expected shape \(4, 8, 2, 16\), got \(4, 8, 2, 8\)"):
        tokamax.paged_kv_append(k, v, t(table), t(lengths), k_pages, v_pages[..., :8].contiguous())
    meta = [torch.empty(a.shape, dtype=a.dtype, device="meta") for a in (k, v, t(table), t(lengths), k_pages, v_pages)]
    with pytest.raises(NotImplementedError, match="runs eagerly only"):
        tokamax.paged_kv_append(*meta)


def test_meta_tensors_get_shapes():
    options = '{"axis":-1,"epsilon":1e-06}'
    y, mean, rstd = tt.op("layer_norm")(torch.empty(5, 8, device="meta"), None, None, options)
    assert y.device.type == "meta" and y.shape == (5, 8) and mean.shape == (5,) and rstd.shape == (5,)
    q = torch.empty(2, 3, 4, 8, device="meta", dtype=torch.float16)
    out = tokamax.dot_product_attention(q, q, q)
    assert out.device.type == "meta" and out.shape == (2, 3, 4, 8) and out.dtype == torch.float16


@needs_custom_op
def test_opcheck_and_fake():
    r = ref.rng(2)
    x = t(r.standard_normal((2, 8)).astype(np.float32))
    scale = t(r.standard_normal(8).astype(np.float32))
    layer_norm = tt.op("layer_norm")
    options = '{"axis":-1,"epsilon":1e-06}'
    torch.library.opcheck(layer_norm, (x, scale, None, options))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fx = torch.empty(5, 8)
        y, mean, rstd = layer_norm(fx, None, None, options)
        assert y.shape == (5, 8) and mean.shape == (5,)


def test_register_all():
    names = tt.register_all()
    assert "layer_norm_vjp" in names and "attention_vjp" in names
    assert all(hasattr(torch.ops.tokamax_cpp, n) for n in names)


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="x"):
        tokamax.layer_norm(torch.zeros(2, 4, dtype=torch.int32), None, None)
    with pytest.raises(ValueError, match="scale"):
        tokamax.layer_norm(torch.zeros(2, 4), torch.ones(3), None)
