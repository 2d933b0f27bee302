"""The ctypes binding: loading, the layout self-test, ops and their arguments, status
codes as exceptions, the call cache."""

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokamax_cpp as tokamax
from tokamax_cpp import _capi

PYTHON_DIR = str(Path(__file__).resolve().parents[2] / "python")


def test_layout_and_version():
    assert _capi.lib.tkx_api_version() == _capi.API_VERSION
    assert _capi.lib.tkx_struct_size(b"tkx_tensor") == ctypes.sizeof(_capi.Tensor)
    assert _capi.lib.tkx_struct_size(b"no_such_struct") == 0
    assert os.path.exists(tokamax.library_path) or tokamax.library_path == "libtokamax.so"


def test_ops_and_arguments():
    names = tokamax.op_names()
    for op in ("layer_norm", "layer_norm_vjp", "rms_norm", "attention", "attention_vjp", "gated_linear_unit",
               "ragged_dot", "linear_softmax_cross_entropy_loss"):
        assert op in names
    args, num_inputs = tokamax.op_args("layer_norm")
    assert args == ["x", "scale", "offset", "y", "mean", "rstd"] and num_inputs == 3


def test_status_codes_map_to_exceptions():
    assert isinstance(_capi.error_for(_capi.INVALID_ARGUMENT, "x: wrong shape"), ValueError)
    assert isinstance(_capi.error_for(_capi.INVALID_ARGUMENT, "x must be bf16, f16, f32 or f64"), TypeError)
    assert isinstance(_capi.error_for(_capi.NOT_SUPPORTED, "no"), NotImplementedError)
    assert isinstance(_capi.error_for(_capi.OUT_OF_MEMORY, "no"), MemoryError)
    for status, cls in ((_capi.DRIVER_ERROR, tokamax.DriverError),
                        (_capi.WORKSPACE_TOO_SMALL, tokamax.WorkspaceTooSmallError),
                        (_capi.INTERNAL, tokamax.InternalError)):
        e = _capi.error_for(status, "why")
        assert isinstance(e, cls) and isinstance(e, tokamax.TokamaxError) and isinstance(e, RuntimeError)


def test_a_call_is_bound_once_and_reports_its_outputs():
    specs = [(_capi.F32, (3, 4)), None, None]
    a = _capi.get_call("layer_norm", specs, _capi.options_json({"axis": -1, "epsilon": 1e-6}))
    b = _capi.get_call("layer_norm", specs, _capi.options_json({"epsilon": 1e-6, "axis": -1}))
    assert a is b
    assert a.outputs[0] == (_capi.F32, (3, 4)) and a.outputs[1].shape == (3,)
    assert a.workspace_bytes(-1) == 0
    assert '"layer_norm"' in a.json() or "layer_norm" in a.json()
    c = _capi.get_call("layer_norm", specs, _capi.options_json({"axis": -1, "residuals": False}))
    assert c.outputs[1] is None and c.outputs[2] is None


def test_attention_layout_option_infers_bnth_outputs_and_names_a_bad_value():
    q, kv = (_capi.F32, (2, 4, 17, 8)), (_capi.F32, (2, 2, 40, 8))  # [B, N, T, H], [B, K, S, H]
    specs = [q, kv, kv, None, None, None, None, None]
    call = _capi.get_call("attention", specs, _capi.options_json({"layout": "bnth"}))
    assert call.outputs[0] == (_capi.F32, (2, 4, 17, 8)) and call.outputs[1] == (_capi.F32, (2, 4, 17))
    assert '"layout":"bnth"' in call.json().replace(" ", "")
    with pytest.raises(ValueError, match="layout must be"):
        _capi.get_call("attention", specs, _capi.options_json({"layout": "nhtb"}))


def test_run_with_a_shape_other_than_the_bound_one_is_refused():
    call = _capi.get_call("rms_norm", [(_capi.F32, (2, 4)), None], "{}")
    x = np.zeros((2, 5), np.float32)
    y = np.zeros((2, 5), np.float32)
    with pytest.raises(ValueError):
        call.run([_capi.tensor(_capi.F32, x.shape, x.ctypes.data), None],
                 [_capi.tensor(_capi.F32, y.shape, y.ctypes.data), None])


def test_missing_library_gives_an_import_error_listing_where_it_looked():
    env = dict(os.environ, TOKAMAX_CPP_LIBRARY="/nonexistent/libtokamax.so", PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", "import tokamax_cpp"], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "/nonexistent/libtokamax.so" in r.stderr and "TOKAMAX_CPP_LIBRARY" in r.stderr


def _e4m3_values() -> np.ndarray:
    """The value of each of f8e4m3's 256 codes (sign, 4 exponent bits with bias 7, 3
    mantissa bits; 0x7f / 0xff NaN, no infinities)."""
    values = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent, mantissa = (code >> 3) & 0xF, code & 7
        if exponent == 0xF and mantissa == 7:
            values.append(np.nan)
        elif exponent == 0:
            values.append(sign * mantissa / 8 * 2.0 ** -6)
        else:
            values.append(sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return np.array(values)


def test_attention_fp8_binds_bf16_out_and_runs_on_the_interpreter():
    """attention_fp8 through the C ABI on host pointers: codes of f8e4m3 values in
    [-4, 4], descales, a causal mask; out (bf16) and lse against float64, for hopper (its
    kernels on the interpreter, P rounded to fp8 before P V) and reference."""
    values = _e4m3_values()
    usable = np.flatnonzero(np.isfinite(values) & (np.abs(values) <= 4))
    rng = np.random.default_rng(7)
    B, T, S, N, K, H = 1, 5, 40, 2, 1, 32
    q, k, v = (rng.choice(usable, size=shape).astype(np.uint8) for shape in ((B, T, N, H), (B, S, K, H), (B, S, K, H)))
    q_descale, k_descale, v_descale = (np.array([[x]], np.float32) for x in (0.5, 0.75, 2.0))
    specs = [(_capi.F8E4M3, q.shape), (_capi.F8E4M3, k.shape), (_capi.F8E4M3, v.shape), (_capi.F32, (1, 1)),
             (_capi.F32, (1, 1)), (_capi.F32, (1, 1)), None, None]
    plain = _capi.get_call("attention_fp8", specs, "{}")
    assert plain.outputs[0] == (_capi.BF16, (B, T, N, H)) and plain.outputs[1] is None
    with pytest.raises(TypeError, match="q must be f8e4m3 or f8e5m2, got f32"):
        _capi.get_call("attention_fp8", [(_capi.F32, q.shape)] + specs[1:], "{}")

    # float64: logits = scale q k^T q_descale k_descale (query i sees keys j <= i),
    # out = softmax V v_descale.
    qf, kf, vf = values[q] * 0.5, values[k] * 0.75, values[v] * 2.0
    logits = np.einsum("tnh,snh->nts", qf[0], np.repeat(kf[0], N // K, axis=1)) / np.sqrt(H)
    logits = np.where(np.arange(S)[None, None, :] <= np.arange(T)[None, :, None], logits, -np.inf)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    want = np.einsum("nts,snh->tnh", np.exp(logits - lse[..., None]), np.repeat(vf[0], N // K, axis=1))
    bound = 2.0 ** -4 * np.abs(vf).max()  # P's rounding to fp8 (hopper), at most
    for implementation in ("hopper", "reference"):
        options = {"is_causal": True, "lse": True, "implementation": implementation}
        call = _capi.get_call("attention_fp8", specs, _capi.options_json(options))
        assert call.outputs[1] == (_capi.F32, (B, N, T))
        out = np.zeros((B, T, N, H), np.uint16)
        got_lse = np.zeros((B, N, T), np.float32)
        ins = [q, k, v, q_descale, k_descale, v_descale]
        call.run([_capi.tensor(code, x.shape, x.ctypes.data) for (code, _), x in zip(specs, ins)] + [None, None],
                 [_capi.tensor(_capi.BF16, out.shape, out.ctypes.data),
                  _capi.tensor(_capi.F32, got_lse.shape, got_lse.ctypes.data)])
        got = (out.astype(np.uint32) << 16).view(np.float32)[0]
        error = np.abs(got - want).max()
        assert error <= (0.5 * bound if implementation == "hopper" else 2.0 ** -8 * np.abs(vf).max()), implementation
        np.testing.assert_allclose(got_lse[0], lse, rtol=1e-5, atol=1e-5)
