"""tokamax_cpp.torch on CPU tensors (the interpreter): numerics against the float64
references, f64 gradcheck through the VJP ops, torch.library.opcheck, fake tensors.
Needs torch >= 2.4 (torch.library.custom_op); skipped, with the reason, otherwise. The
CUDA side (streams, workspace, torch.compile, CUDA graphs) runs on the GPU machine."""

import numpy as np
import pytest

import references as ref

torch = pytest.importorskip("torch", reason="torch is not installed")
try:
    import tokamax_cpp.torch as tt
except ImportError as e:  # torch older than 2.4
    pytest.skip(str(e), allow_module_level=True)

import tokamax_cpp as tokamax


def t(a, requires_grad=False):
    return torch.tensor(np.asarray(a), requires_grad=requires_grad)


def test_forward_numerics_on_cpu():
    r = ref.rng(0)
    x = r.standard_normal((3, 16)).astype(np.float32)
    scale, offset = r.standard_normal(16).astype(np.float32), r.standard_normal(16).astype(np.float32)
    y = tokamax.layer_norm(t(x), t(scale), t(offset))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    ref.assert_close(y.numpy(), ref.layer_norm(x, scale, offset), 2e-4, 2e-5, "layer_norm")
    q = r.standard_normal((1, 4, 2, 8)).astype(np.float32)
    out = tokamax.dot_product_attention(t(q), t(q), t(q), is_causal=True)
    ref.assert_close(out.numpy(), ref.attention(q, q, q, is_causal=True), 2e-4, 2e-5, "attention")


def test_gradcheck_f64():
    r = ref.rng(1)
    x = t(r.standard_normal((3, 6)), True)
    scale, offset = t(r.standard_normal(6), True), t(r.standard_normal(6), True)
    assert torch.autograd.gradcheck(lambda a, b, c: tokamax.layer_norm(a, b, c), (x, scale, offset))
    assert torch.autograd.gradcheck(lambda a, b: tokamax.rms_norm(a, b), (x, scale))
    q, k, v = (t(r.standard_normal((1, 3, 2, 4)), True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda a, b, c: tokamax.dot_product_attention(a, b, c, is_causal=True),
                                    (q, k, v))
    w = t(r.standard_normal((6, 2, 5)) / 3, True)
    assert torch.autograd.gradcheck(lambda a, b: tokamax.gated_linear_unit(a, b, activation="swish"), (x, w))
    rhs = t(r.standard_normal((2, 6, 4)), True)
    sizes = torch.tensor([1, 2], dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda a, b: tokamax.ragged_dot(a, b, sizes), (x, rhs))
    wv = t(r.standard_normal((6, 7)), True)
    labels = torch.tensor([0, 6, 3], dtype=torch.int32)
    assert torch.autograd.gradcheck(
        lambda a, b: tokamax.linear_softmax_cross_entropy_loss(a, labels, b, reduction="mean"), (x, wv))


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
    assert "layer_norm_vjp" in tt.register_all()


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="x"):
        tokamax.layer_norm(torch.zeros(2, 4, dtype=torch.int32), None, None)
    with pytest.raises(ValueError, match="scale"):
        tokamax.layer_norm(torch.zeros(2, 4), torch.ones(3), None)
