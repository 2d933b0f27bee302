"""The device side of the C ABI from Python under the null driver (tests/nulldriver: two
H200-like devices whose memory is host memory and whose launches do nothing): autotune
of a function's calls, its result's round trip and scope, workspace sizes and the
workspace contract of device runs. Skipped without TOKAMAX_CUDA_DRIVER (CTest's
python-tests-null-driver sets it to the null driver)."""

import os

import numpy as np
import pytest

if "null-cuda" not in os.environ.get("TOKAMAX_CUDA_DRIVER", ""):
    pytest.skip("needs TOKAMAX_CUDA_DRIVER=<build>/tests/libtokamax-null-cuda.so "
                "(CTest python-tests-null-driver sets it)", allow_module_level=True)

import tokamax_cpp as tokamax  # noqa: E402
from tokamax_cpp import _capi  # noqa: E402

X = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
SCALE = np.ones(256, np.float32)


def test_autotune_round_trip_and_scope():
    result = tokamax.autotune(lambda a: tokamax.layer_norm(a, SCALE, None), X)
    assert len(result) == 1 and result.device["name"] == "tokamax null device"
    entry = result.entries[0]
    assert entry["args"]["op"] == "layer_norm" and entry["implementation"] and entry["config"]
    again = tokamax.AutotuningResult.loads(result.dumps())
    assert again.dumps() == result.dumps()
    with again:
        np.testing.assert_array_equal(tokamax.layer_norm(X, SCALE, None), tokamax.layer_norm(X, SCALE, None))


def vjp_call():
    specs = [(_capi.F32, X.shape), (_capi.F32, X.shape), (_capi.F32, SCALE.shape), (_capi.F32, (64,)),
             (_capi.F32, (64,))]
    return _capi.get_call("layer_norm_vjp", specs, _capi.options_json({"axis": -1}))


def descriptors(call, device):
    """Host buffers standing in for device memory (the null driver touches none)."""
    keep = [np.zeros(s, np.float32) for s in (X.shape, X.shape, SCALE.shape, (64,), (64,))]
    outs = [None if s is None else np.zeros(s.shape, np.float32) for s in call.outputs]
    ins = [_capi.tensor(_capi.F32, a.shape, a.ctypes.data, device) for a in keep]
    out_descs = [None if o is None else _capi.tensor(_capi.F32, o.shape, o.ctypes.data, device) for o in outs]
    return ins, out_descs, keep + [o for o in outs if o is not None]


def test_device_run_takes_the_callers_workspace():
    call = vjp_call()
    need = call.workspace_bytes(0)
    assert need > 0 and call.workspace_bytes(-1) == 0
    ins, outs, _keep = descriptors(call, 0)
    workspace = np.zeros(need + 16, np.uint8)
    base = workspace.ctypes.data + (-workspace.ctypes.data % 16)  # 16-byte aligned
    call.run(ins, outs, None, base, need)
    with pytest.raises(tokamax.WorkspaceTooSmallError):
        call.run(ins, outs, None, base, need - 16)


def test_mixed_devices_are_refused():
    call = vjp_call()
    ins, outs, _keep = descriptors(call, 0)
    ins[0] = _capi.tensor(_capi.F32, X.shape, _keep[0].ctypes.data, -1)
    with pytest.raises(ValueError, match="device"):
        call.run(ins, outs, None, None, 0)


def test_ffi_handler_device_workspace(tmp_path):
    """The JAX handler's device runs (ffi_handler_check device): the workspace result XLA
    allocates is taken when large enough, else the scratch allocator, else an error."""
    import subprocess
    import test_ffi_handler
    binary = test_ffi_handler.build_check(tmp_path)
    result = subprocess.run([str(binary), _capi.library_path, "device"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 failed" in result.stdout
