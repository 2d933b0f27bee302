"""The host path: numpy arrays run on the library's CPU interpreter through the C ABI
(device -1); outputs are allocated with numpy from the call's output specs."""

from __future__ import annotations

import numpy as np

from . import _capi

try:  # bf16 / fp8 numpy dtypes, where installed
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - depends on the machine
    _ml_dtypes = None

_TO_CODE = {
    np.dtype(np.float16): _capi.F16,
    np.dtype(np.float32): _capi.F32,
    np.dtype(np.float64): _capi.F64,
    np.dtype(np.int8): _capi.I8,
    np.dtype(np.int32): _capi.I32,
    np.dtype(np.int64): _capi.I64,
    np.dtype(np.bool_): _capi.BOOL,
}
if _ml_dtypes is not None:
    _TO_CODE[np.dtype(_ml_dtypes.bfloat16)] = _capi.BF16
    _TO_CODE[np.dtype(_ml_dtypes.float8_e4m3fn)] = _capi.F8E4M3
    _TO_CODE[np.dtype(_ml_dtypes.float8_e5m2)] = _capi.F8E5M2
_FROM_CODE = {code: dtype for dtype, code in _TO_CODE.items()}


def dtype_code(dtype, name: str) -> int:
    """The tkx_dtype of a numpy dtype; TypeError naming the argument otherwise."""
    dtype = np.dtype(dtype)
    code = _TO_CODE.get(dtype)
    if code is None:
        if dtype.name == "bfloat16" or _ml_dtypes is None and dtype.kind == "V":
            raise TypeError(f"{name}: bfloat16 numpy arrays need the ml_dtypes package, which is not installed")
        known = ", ".join(sorted(d.name for d in _TO_CODE))
        raise TypeError(f"{name}: dtype {dtype} is not one the library takes ({known})")
    return code


def numpy_dtype(code: int) -> np.dtype:
    dtype = _FROM_CODE.get(code)
    if dtype is None:
        name = _capi.DTYPE_NAMES.get(code, str(code))
        raise TypeError(f"the library returns {name}, which numpy cannot hold here"
                        + (" (install ml_dtypes)" if _ml_dtypes is None else ""))
    return dtype


def run(op: str, inputs, options: dict, arg_names=None) -> list:
    """Runs `op` on numpy `inputs` (None = absent) and returns every output (None where the
    call produces none)."""
    names = arg_names or [f"input {i}" for i in range(len(inputs))]
    arrays, specs = [], []
    for name, a in zip(names, inputs):
        if a is None:
            arrays.append(None), specs.append(None)
            continue
        a = np.ascontiguousarray(a)
        code = dtype_code(a.dtype, name)
        arrays.append(a), specs.append((code, a.shape))
    call = _capi.get_call(op, specs, _capi.options_json(options))
    outputs = [None if s is None else np.empty(s.shape, numpy_dtype(s.dtype)) for s in call.outputs]
    call.run_pointers([None if a is None else a.ctypes.data for a in arrays],
                      [None if o is None else o.ctypes.data for o in outputs])
    return outputs


def is_host_array(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic))


class HostBackend:
    """numpy arrays: forward only (numpy has no autograd); the VJP ops run by name through
    `tokamax_cpp.call`."""

    name = "numpy"

    @staticmethod
    def apply(opdef, inputs, options: dict) -> tuple:
        options = dict(opdef.forward_options(options))
        if opdef.has_residuals:
            options["residuals"] = False
        outputs = run(opdef.name, [None if x is None else np.asarray(x) for x in inputs], options, opdef.inputs)
        return tuple(outputs[j] for j in opdef.returns)

    @staticmethod
    def stack(arrays, axis: int):
        return np.stack([np.asarray(a) for a in arrays], axis=axis)

    @staticmethod
    def apply_in_place(op: str, inputs, outputs, options: dict, input_names, output_names) -> None:
        """Runs `op` writing into the caller's `outputs` (C-contiguous, writeable arrays of
        the call's output specs: an op that updates them in part, such as paged_kv_append)."""
        arrays, specs = [], []
        for name, a in zip(input_names, inputs):
            a = np.ascontiguousarray(a)
            arrays.append(a), specs.append((dtype_code(a.dtype, name), a.shape))
        call = _capi.get_call(op, specs, _capi.options_json(options))
        for name, o, s in zip(output_names, outputs, call.outputs):
            if not isinstance(o, np.ndarray):
                raise TypeError(f"{name}: expected a numpy array like the other arguments, got {type(o).__name__}")
            check_output(name, o.dtype, np.dtype(o.dtype) == numpy_dtype(s.dtype), tuple(o.shape),
                         _capi.DTYPE_NAMES.get(s.dtype, s.dtype), tuple(s.shape),
                         o.flags.c_contiguous and o.flags.writeable, "a C-contiguous, writeable numpy array")
        call.run_pointers([a.ctypes.data for a in arrays], [o.ctypes.data for o in outputs])


def check_output(name: str, dtype, same_dtype: bool, shape: tuple, expected_dtype, expected_shape: tuple,
                 in_place_ok: bool, what: str) -> None:
    """TypeError / ValueError naming a caller's output (written in place) that is not what
    the call writes (`expected_dtype`, `expected_shape`): its dtype, its shape, its layout
    (`in_place_ok`, `what` it must be)."""
    if not same_dtype:
        raise TypeError(f"{name}: expected {expected_dtype}, got {dtype}")
    if shape != expected_shape:
        raise ValueError(f"{name}: expected shape {expected_shape}, got {shape}")
    if not in_place_ok:
        raise ValueError(f"{name}: the call writes it in place, so it must be {what}")
