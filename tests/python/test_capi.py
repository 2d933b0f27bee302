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
