"""The ctypes binding of the library's C ABI (c/include/tokamax/c/tokamax.h).

Everything here speaks the ABI's terms: dtype codes, flat tensor descriptors, calls bound
to specs and an options JSON. The framework paths (numpy, torch, jax) build on `Call`.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

API_VERSION = 1
MAX_RANK = 8

# tkx_status
OK, INVALID_ARGUMENT, NOT_SUPPORTED, DRIVER_ERROR, OUT_OF_MEMORY, WORKSPACE_TOO_SMALL, INTERNAL = range(7)

# tkx_dtype: frozen numbering, the same as tokamax::DType.
BF16, F16, F32, F64, I8, I32, I64, BOOL, F8E4M3, F8E5M2 = range(10)
DTYPE_NAMES = {BF16: "bfloat16", F16: "float16", F32: "float32", F64: "float64", I8: "int8", I32: "int32",
               I64: "int64", BOOL: "bool", F8E4M3: "float8_e4m3fn", F8E5M2: "float8_e5m2"}
ITEM_SIZES = {BF16: 2, F16: 2, F32: 4, F64: 8, I8: 1, I32: 4, I64: 8, BOOL: 1, F8E4M3: 1, F8E5M2: 1}


class TokamaxError(RuntimeError):
    """A failure of the library that is not the caller's argument (driver, workspace, bug)."""


class DriverError(TokamaxError):
    """A CUDA driver call failed (or there is no driver / device)."""


class WorkspaceTooSmallError(TokamaxError):
    """The workspace given to a run is smaller than the call needs."""


class InternalError(TokamaxError):
    """An unexpected failure inside the library."""


# A message about a dtype makes an invalid argument a TypeError (Python's convention).
_DTYPE_MESSAGE = re.compile(r"must be (bf16|f16|f32|f64|i32|int32|bool|f8e4m3)\b|'s dtype\b|share a dtype|"
                            r"\bdtype must be\b|tkx_dtype|\bdtype \S+ is not")


def error_for(status: int, message: str) -> Exception:
    """The Python exception for a status other than TKX_OK."""
    if status == INVALID_ARGUMENT:
        return TypeError(message) if _DTYPE_MESSAGE.search(message) else ValueError(message)
    if status == NOT_SUPPORTED:
        return NotImplementedError(message)
    if status == OUT_OF_MEMORY:
        return MemoryError(message)
    if status == DRIVER_ERROR:
        return DriverError(message)
    if status == WORKSPACE_TOO_SMALL:
        return WorkspaceTooSmallError(message)
    return InternalError(message or f"status {status}")


class Tensor(ctypes.Structure):
    """tkx_tensor. Keep the shape / strides arrays alive as long as the struct (see `tensor`)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
    ]


TensorPtr = ctypes.POINTER(Tensor)
_CallPtr = ctypes.c_void_p


def tensor(dtype: int, shape, data: int | None = None, device: int = -1) -> Tensor:
    """A contiguous row-major descriptor; its shape array is kept on the struct."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_RANK:
        raise ValueError(f"rank {len(shape)} is above the library's maximum {MAX_RANK}")
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    t = Tensor(ctypes.sizeof(Tensor), dtype, len(shape), device, dims, None, data)
    t._keep = dims  # the struct points into it
    return t


def pointer_array(tensors) -> ctypes.Array:
    """A `const tkx_tensor *const *` of `tensors` (None = an absent optional tensor)."""
    arr = (TensorPtr * max(len(tensors), 1))()
    for i, t in enumerate(tensors):
        if t is not None:
            arr[i] = ctypes.pointer(t)
    arr._keep = tensors
    return arr


# ---- Finding and loading the library ----------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parent


def _candidates() -> list[tuple[str, str]]:
    """(where, path) in search order: the environment, the package's lib/, the installed
    package's lib/ (cmake --install puts this package in PREFIX/python: PREFIX/lib), a
    build tree beside the source (python/../build), then the system loader."""
    found = []
    env = os.environ.get("TOKAMAX_CPP_LIBRARY")
    if env:
        found.append(("TOKAMAX_CPP_LIBRARY", env))
    found.append(("the package", str(_PACKAGE_DIR / "lib" / "libtokamax.so")))
    found.append(("the install prefix", str(_PACKAGE_DIR.parent.parent / "lib" / "libtokamax.so")))
    found.append(("the build tree", str(_PACKAGE_DIR.parent.parent / "build" / "libtokamax.so")))
    found.append(("the system loader", "libtokamax.so"))
    return found


def _load() -> tuple[ctypes.CDLL, str]:
    tried = []
    env_set = bool(os.environ.get("TOKAMAX_CPP_LIBRARY"))
    for where, path in _candidates():
        if where != "the system loader" and not os.path.exists(path):
            tried.append(f"{where}: {path} (missing)")
            if env_set and where == "TOKAMAX_CPP_LIBRARY":
                break  # an explicit path that is wrong is not silently replaced
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{where}: {path} ({e})")
            if where == "TOKAMAX_CPP_LIBRARY":
                break
    raise ImportError("tokamax_cpp: cannot load libtokamax.so; looked in:\n  " + "\n  ".join(tried) +
                      "\nSet TOKAMAX_CPP_LIBRARY to the library's path (e.g. build/libtokamax.so).")


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    sigs = {
        "tkx_api_version": (c.c_uint32, []),
        "tkx_struct_size": (c.c_size_t, [c.c_char_p]),
        "tkx_last_error": (c.c_char_p, []),
        "tkx_op_names": (c.c_char_p, []),
        "tkx_op_args": (c.c_int, [c.c_char_p, c.POINTER(c.c_char_p), c.POINTER(c.c_int32)]),
        "tkx_call_create": (c.c_int, [c.c_char_p, c.POINTER(TensorPtr), c.c_int32, c.c_char_p,
                                      c.POINTER(_CallPtr)]),
        "tkx_call_destroy": (None, [_CallPtr]),
        "tkx_call_num_outputs": (c.c_int32, [_CallPtr]),
        "tkx_call_output": (c.c_int, [_CallPtr, c.c_int32, c.POINTER(c.c_int32), c.POINTER(c.c_int32),
                                      c.POINTER(c.c_int64)]),
        "tkx_call_json": (c.c_char_p, [_CallPtr]),
        "tkx_call_workspace_bytes": (c.c_int, [_CallPtr, c.c_int32, c.POINTER(c.c_size_t)]),
        "tkx_call_run": (c.c_int, [_CallPtr, c.POINTER(TensorPtr), c.c_int32, c.POINTER(TensorPtr), c.c_int32,
                                   c.c_void_p, c.c_void_p, c.c_size_t]),
        "tkx_call_precompile": (c.c_int, [_CallPtr, c.c_char_p]),
        "tkx_autotune": (c.c_int, [c.POINTER(_CallPtr), c.c_int32, c.c_void_p, c.POINTER(c.c_void_p)]),
        "tkx_free_string": (None, [c.c_void_p]),
        "tkx_config_scope_push": (c.c_int, [c.c_char_p, c.POINTER(c.c_uint64)]),
        "tkx_config_scope_pop": (c.c_int, [c.c_uint64]),
        "tkx_call_resolve": (c.c_int, [_CallPtr, c.c_char_p, c.POINTER(c.c_void_p)]),
        "tkx_kernel_trace_start": (c.c_int, [c.POINTER(c.c_void_p)]),
        "tkx_kernel_trace_take": (c.c_int, [c.c_void_p, c.POINTER(c.c_int64), c.POINTER(c.c_double),
                                            c.POINTER(c.c_uint64)]),
        "tkx_kernel_trace_stop": (None, [c.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(f"tokamax_cpp: {lib._name} has no {name}: a library built without the C ABI "
                              "(c/) or older than this package") from None
        fn.restype, fn.argtypes = restype, argtypes


def _self_test(lib: ctypes.CDLL, path: str) -> None:
    version = lib.tkx_api_version()
    if version != API_VERSION:
        raise ImportError(f"tokamax_cpp: {path} speaks C ABI version {version}, this package {API_VERSION}")
    size = lib.tkx_struct_size(b"tkx_tensor")
    if size != ctypes.sizeof(Tensor):
        raise ImportError(f"tokamax_cpp: {path} has sizeof(tkx_tensor) = {size}, this package "
                          f"{ctypes.sizeof(Tensor)}: a layout mismatch")


lib, library_path = _load()
_declare(lib)
_self_test(lib, library_path)


def last_error() -> str:
    return lib.tkx_last_error().decode("utf-8", "replace")


def check(status: int, context: str = "") -> None:
    """Raises the exception of a status other than TKX_OK with the library's message."""
    if status != OK:
        message = last_error()
        raise error_for(status, f"{context}: {message}" if context and not message.startswith(context) else message)


def op_names() -> list[str]:
    return [n for n in lib.tkx_op_names().decode().split("\n") if n]


def op_args(op: str) -> tuple[list[str], int]:
    """(argument names, inputs then outputs; the number of inputs)."""
    names = ctypes.c_char_p()
    num_inputs = ctypes.c_int32()
    check(lib.tkx_op_args(op.encode(), ctypes.byref(names), ctypes.byref(num_inputs)))
    return [n for n in names.value.decode().split("\n") if n], num_inputs.value


# ---- Calls ----------------------------------------------------------------------------


class OutputSpec(tuple):
    """(dtype code, shape) of one output."""

    @property
    def dtype(self) -> int:
        return self[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return self[1]


class _Slots:
    """One thread's prebuilt descriptors of a call's run (tkx_tensor structs with their
    shapes, the pointer arrays tkx_call_run takes): a run fills in data and device only."""

    __slots__ = ("inputs", "outputs", "in_array", "out_array", "present", "device")

    def __init__(self, in_specs, out_specs):
        self.inputs = [None if s is None else tensor(s[0], s[1]) for s in in_specs]
        self.outputs = [None if s is None else tensor(s[0], s[1]) for s in out_specs]
        self.in_array, self.out_array = pointer_array(self.inputs), pointer_array(self.outputs)
        self.present = [t for t in self.inputs + self.outputs if t is not None]
        self.device = -1

    def fill(self, inputs, outputs, device: int) -> None:
        for t, p in zip(self.inputs, inputs):
            if t is not None:
                t.data = p
        for t, p in zip(self.outputs, outputs):
            if t is not None:
                t.data = p
        if device != self.device:
            for t in self.present:
                t.device = device
            self.device = device


class Call:
    """An op bound to its inputs' specs and options (tkx_call); immutable, thread-safe."""

    def __init__(self, op: str, specs, options_json: str):
        """`specs`: per input (dtype code, shape) or None for an absent optional input."""
        self.op = op
        self.options_json = options_json
        self.num_inputs = len(specs)
        descs = [None if s is None else tensor(s[0], s[1]) for s in specs]
        handle = _CallPtr()
        check(lib.tkx_call_create(op.encode(), pointer_array(descs), len(descs), options_json.encode(),
                                  ctypes.byref(handle)))
        self._handle = handle
        self._destroy = lib.tkx_call_destroy
        self.outputs = tuple(self._output(i) for i in range(lib.tkx_call_num_outputs(handle)))
        self._specs = tuple(specs)
        self._local = threading.local()  # this thread's _Slots
        self._run = lib.tkx_call_run
        self._workspace = {}  # device -> bytes last reported (see run_pointers)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._destroy(handle)
            self._handle = None

    @property
    def handle(self) -> int:
        return self._handle.value

    def _output(self, i: int) -> OutputSpec | None:
        dtype, rank = ctypes.c_int32(), ctypes.c_int32()
        shape = (ctypes.c_int64 * MAX_RANK)()
        check(lib.tkx_call_output(self._handle, i, ctypes.byref(dtype), ctypes.byref(rank), shape))
        if rank.value < 0:
            return None  # an optional output this call does not produce
        return OutputSpec((dtype.value, tuple(shape[: rank.value])))

    def json(self) -> str:
        """The canonical BoundArgs JSON of the call."""
        return lib.tkx_call_json(self._handle).decode()

    def workspace_bytes(self, device: int) -> int:
        n = ctypes.c_size_t()
        check(lib.tkx_call_workspace_bytes(self._handle, device, ctypes.byref(n)))
        return n.value

    def run(self, inputs, outputs, stream: int | None = None, workspace: int | None = None,
            workspace_bytes: int = 0) -> None:
        """`inputs` / `outputs`: Tensor descriptors (None where absent)."""
        check(lib.tkx_call_run(self._handle, pointer_array(inputs), len(inputs), pointer_array(outputs),
                               len(outputs), stream, workspace, workspace_bytes))

    def run_pointers(self, inputs, outputs, device: int = -1, stream: int | None = None,
                     workspace: int | None = None, workspace_bytes: int = 0) -> int:
        """The per-call path: `inputs` / `outputs` are data addresses (ints; None or 0 where
        a tensor is absent or empty) of tensors with the bound specs, on `device` (-1:
        host). Fills this thread's prebuilt descriptors and makes one tkx_call_run; returns
        its status (OK, or WORKSPACE_TOO_SMALL for the caller to grow the workspace; any
        other raises)."""
        slots = getattr(self._local, "slots", None)
        if slots is None:
            slots = self._local.slots = _Slots(self._specs, self.outputs)
        slots.fill(inputs, outputs, device)
        status = self._run(self._handle, slots.in_array, self.num_inputs, slots.out_array, len(self.outputs),
                           stream, workspace, workspace_bytes)
        if status != OK and status != WORKSPACE_TOO_SMALL:
            check(status)
        return status

    def cached_workspace_bytes(self, device: int) -> int:
        """workspace_bytes(device) as last asked: a config scope that changes the call's
        config may need more, which run_pointers reports as WORKSPACE_TOO_SMALL; then
        call refresh_workspace_bytes and run again."""
        n = self._workspace.get(device)
        if n is None:
            n = self._workspace[device] = self.workspace_bytes(device)
        return n

    def refresh_workspace_bytes(self, device: int) -> int:
        self._workspace[device] = self.workspace_bytes(device)
        return self._workspace[device]

    def precompile(self, arch: str) -> None:
        check(lib.tkx_call_precompile(self._handle, arch.encode()))

    def resolve(self, arch: str | None) -> dict:
        """What a run of the call on this thread would resolve to now on a GPU of `arch`
        ("sm_90a"; None: CUDA device 0's): {"implementation": name, "config": {...}}
        (the options' choice, else this thread's config scopes, the autotuning cache, the
        heuristic)."""
        out = ctypes.c_void_p()
        check(lib.tkx_call_resolve(self._handle, None if arch is None else arch.encode(), ctypes.byref(out)))
        try:
            return json.loads(ctypes.string_at(out.value).decode())
        finally:
            lib.tkx_free_string(out)


def arch_name(major: int, minor: int) -> str:
    """The library's name for a GPU of compute capability major.minor (as Arch::of names a
    device's): sm_90a for 9.0, sm_100a for 10.0 (the arch-specific feature sets), else
    sm_<major><minor>."""
    return f"sm_{major}{minor}" + ("a" if (major, minor) in ((9, 0), (10, 0)) else "")


def options_json(options: dict) -> str:
    """The canonical JSON of options (sorted keys: equal options give equal text)."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


_cache: OrderedDict = OrderedDict()
call_hooks: list = []  # called with every call bound or found (autotuning records through it)
_cache_lock = threading.Lock()
_CACHE_SIZE = 1024


def get_call(op: str, specs, options: str) -> Call:
    """The Call of (op, specs, options JSON), created once and kept (least recently used
    first out past _CACHE_SIZE): binding parses and validates, a hit is a dict lookup."""
    key = (op, tuple(specs), options)
    with _cache_lock:
        call = _cache.get(key)
        if call is not None:
            _cache.move_to_end(key)
    if call is None:
        call = _insert(key, Call(op, specs, options))
    for hook in call_hooks:
        hook(call)
    return call


def _insert(key, call: Call) -> Call:
    with _cache_lock:
        _cache[key] = call
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return call


# ---- Autotuning and config scopes --------------------------------------------------------


def autotune(calls, stream: int | None = None) -> str:
    """The AutotuningResult JSON of timing every call's candidate configs."""
    handles = (_CallPtr * max(len(calls), 1))(*[c.handle for c in calls])
    out = ctypes.c_void_p()
    check(lib.tkx_autotune(handles, len(calls), stream, ctypes.byref(out)))
    try:
        return ctypes.string_at(out.value).decode()
    finally:
        lib.tkx_free_string(out)


def config_scope_push(result_json: str) -> int:
    scope = ctypes.c_uint64()
    check(lib.tkx_config_scope_push(result_json.encode(), ctypes.byref(scope)))
    return scope.value


def config_scope_pop(scope: int) -> None:
    check(lib.tkx_config_scope_pop(scope))


# ---- Kernel time through CUPTI -------------------------------------------------------------


class KernelTrace:
    """Every kernel of the process that finishes while open (tkx_kernel_trace): a context
    manager; NotImplementedError where CUPTI cannot record."""

    def __init__(self):
        handle = ctypes.c_void_p()
        check(lib.tkx_kernel_trace_start(ctypes.byref(handle)))
        self._handle = handle

    def take(self) -> tuple[int, float, int]:
        """(kernels, their total ms, records dropped since the start) since the last take."""
        kernels, total, dropped = ctypes.c_int64(), ctypes.c_double(), ctypes.c_uint64()
        check(lib.tkx_kernel_trace_take(self._handle, ctypes.byref(kernels), ctypes.byref(total),
                                        ctypes.byref(dropped)))
        return kernels.value, total.value, dropped.value

    def close(self) -> None:
        if self._handle:
            lib.tkx_kernel_trace_stop(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
