"""JAX adapter: each op a `jax.custom_vjp` over `jax.ffi.ffi_call` of ONE generic XLA FFI
handler (ffi/handler.cc). The handler is compiled at first use against
`jax.ffi.include_dir()` with the system C++ compiler ($CXX, else c++) and cached per
jaxlib version under $XDG_CACHE_HOME/tokamax_cpp (else ~/.cache/tokamax_cpp). It is
registered for CUDA (XLA's stream) and for the CPU (the library's interpreter). A call's
workspace is one more result of the custom call, sized at trace time for the default
device (XLA allocates it with the executable's buffers); where a run needs more (the
autotuning cache changed its config since), the handler takes XLA's scratch allocator.

Binding happens at trace time (the abstract evaluation binds the call through the C ABI),
so bad arguments raise Python exceptions naming them when the function is traced.

Config scopes (`with result:`) are per thread and XLA runs the handler on threads of its
own, so a call traced inside a scope is handed to the handler with the implementation and
config it resolves to on the tracing thread for the target device's arch (as Tokamax
applies autotuning results at trace time); outside scopes the handler resolves on its own
(explicit choice, the autotuning cache, the heuristic), except with the command-buffer
handler (RECORDABLE below), which needs every call's config fixed when it is traced.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp

from . import _capi, _opdefs, autotuning

try:
    from jax import ffi as _ffi
except ImportError:  # jax < 0.4.38 kept it in jax.extend
    from jax.extend import ffi as _ffi

TARGET = "tokamax_cpp"
# $TOKAMAX_CPP_JAX_COMMAND_BUFFERS=1 (read once, at import): the handler registered as
# XLA command-buffer compatible, so XLA records a jitted function's calls into its CUDA
# graphs with its own kernels (a call then costs 2.0-2.3 us over its kernels in a jitted
# chain on an H100, against 8-11 us launched one by one); every call is bound with the
# implementation and config it resolves to at trace time (a run must launch exactly what
# was recorded) and its workspace is an XLA buffer of that config's size. Opt-in: with
# it the seed's step ran slower on an H100 (21.8 ms against 19.0), and two traces of one
# function made before and after an autotune run differ in their configs.
RECORDABLE = os.environ.get("TOKAMAX_CPP_JAX_COMMAND_BUFFERS", "0") == "1"
_SOURCE = Path(__file__).resolve().parent / "ffi" / "handler.cc"

_TO_CODE = {jnp.dtype(jnp.bfloat16): _capi.BF16, jnp.dtype(jnp.float16): _capi.F16,
            jnp.dtype(jnp.float32): _capi.F32, jnp.dtype(jnp.float64): _capi.F64, jnp.dtype(jnp.int8): _capi.I8,
            jnp.dtype(jnp.int32): _capi.I32, jnp.dtype(jnp.int64): _capi.I64, jnp.dtype(jnp.bool_): _capi.BOOL,
            jnp.dtype(jnp.float8_e4m3fn): _capi.F8E4M3, jnp.dtype(jnp.float8_e5m2): _capi.F8E5M2}
_FROM_CODE = {code: dtype for dtype, code in _TO_CODE.items()}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tokamax_cpp"


def _build_handler() -> Path:
    """The handler's shared library for this jaxlib and this source, compiled once."""
    import jaxlib
    source = _SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = _cache_dir() / f"ffi-jaxlib-{jaxlib.__version__}-{digest}" / "libtokamax_ffi.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    compiler = os.environ.get("CXX", "c++")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        command = [compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-I",
                   _ffi.include_dir(), str(_SOURCE), "-o", str(built), "-ldl"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise ImportError(f"tokamax_cpp.jax: building the XLA FFI handler failed ({' '.join(command)}):\n"
                              f"{result.stderr[-4000:]}")
        os.replace(built, target)  # atomic: concurrent builders each install a whole file
    return target


@functools.cache
def _handler() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(_build_handler()))
    lib.tokamax_ffi_init.argtypes = [ctypes.c_char_p]
    status = lib.tokamax_ffi_init(_capi.library_path.encode())
    if status != 0:
        raise ImportError(f"tokamax_cpp.jax: the FFI handler could not resolve the C ABI in "
                          f"{_capi.library_path} (status {status})")
    cuda = lib.TokamaxFfiCudaRecordable if RECORDABLE else lib.TokamaxFfiCuda
    _ffi.register_ffi_target(TARGET, _ffi.pycapsule(cuda), platform="CUDA")
    _ffi.register_ffi_target(TARGET, _ffi.pycapsule(lib.TokamaxFfiHost), platform="cpu")
    return lib


def _code(dtype, name: str) -> int:
    code = _TO_CODE.get(jnp.dtype(dtype))
    if code is None:
        raise TypeError(f"{name}: dtype {dtype} is not one the library takes")
    return code


autotuning.jit_context()  # made before any trace: the open scopes are part of jit's cache key


def arch_of(device) -> str | None:
    """The library's arch name for a jax device ("sm_90a" for compute capability 9.0,
    "sm_100a" for 10.0, else sm_<major><minor>); the CPU platform runs the interpreter,
    which selects as on sm_90a. None where jax does not say (the library then asks CUDA
    device 0)."""
    if device.platform == "cpu":
        return "sm_90a"
    capability = getattr(device, "compute_capability", None)  # "9.0" on CUDA devices
    try:
        major, minor = (int(p) for p in str(capability).split(".")[:2])
    except ValueError:
        return None
    return _capi.arch_name(major, minor)


def _default_device():
    """The device a traced call will run on: jax's default device."""
    device = getattr(jax.config, "jax_default_device", None)
    if isinstance(device, str):  # a platform name
        device = jax.devices(device)[0]
    return device if device is not None else jax.devices()[0]


def _target_arch() -> str | None:
    """The arch of the device a traced call will run on."""
    return arch_of(_default_device())


def _vmap_method(op: str, inputs) -> str:
    """Batch dims fold into the op where its leading dims are batch dims of every input
    (attention without bias / mask / sinks; the norms without scale / offset); otherwise a loop."""
    if op == "attention" and all(x is None for x in (inputs[3], inputs[4], inputs[7])):
        return "broadcast_all"
    if op in ("layer_norm", "rms_norm") and all(x is None for x in inputs[1:]):
        return "broadcast_all"
    return "sequential"


def call(op: str, inputs, options: dict, names=None) -> list:
    """Runs `op` on jax arrays (None = absent) through the FFI handler: every output, None
    where the call produces none. Traceable (jit, vmap); no autograd (see `apply`)."""
    _handler()
    names = names or [f"input {i}" for i in range(len(inputs))]
    text = _capi.options_json(options)
    specs = [None if x is None else (_code(x.dtype, n), tuple(int(d) for d in x.shape)) for n, x in zip(names, inputs)]
    bound = _capi.get_call(op, specs, text)  # validates: Python exceptions at trace time
    if autotuning.scope_active() or RECORDABLE:  # the handler's threads see no scope of this one
        text = autotuning.scoped_options(bound, _target_arch(), always=RECORDABLE)
    results = [jax.ShapeDtypeStruct(s.shape, _FROM_CODE[s.dtype]) for s in bound.outputs if s is not None]
    outputs = "".join("0" if s is None else "1" for s in bound.outputs)
    workspace = _workspace_bytes(bound)
    if workspace:  # one more result: the run's workspace, allocated by XLA with the executable's buffers
        results.append(jax.ShapeDtypeStruct((workspace,), jnp.uint8))
        outputs += "w"
    fn = _ffi.ffi_call(TARGET, results, vmap_method=_vmap_method(op, inputs))
    outs = iter(fn(*[x for x in inputs if x is not None], op=op, options=text,
                   inputs="".join("0" if x is None else "1" for x in inputs), outputs=outputs))
    return [None if s is None else next(outs) for s in bound.outputs]


def _workspace_bytes(bound) -> int:
    """The workspace the call needs on jax's default device as it resolves now, on this
    thread (its scopes included: the config the traced options pin); 0 on the CPU
    platform, whose interpreter needs none. A run whose config needs more by then (the
    autotuning cache changed since the trace) takes XLA's scratch allocator instead."""
    device = _default_device()
    if device.platform != "gpu":
        return 0
    ordinal = getattr(device, "local_hardware_id", None)
    return bound.workspace_bytes(device.id if ordinal is None else ordinal)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _apply(name: str, options: str, present: str, *arrays):
    opdef = _opdefs.BY_NAME[name]
    opts = _capi_options(options, residuals=False if opdef.has_residuals else None)
    outs = call(name, _unpack(present, arrays), opdef.forward_options(opts), opdef.inputs)
    return tuple(outs[j] for j in opdef.returns)


def _apply_fwd(name, options, present, *arrays):
    opdef = _opdefs.BY_NAME[name]
    # The residuals its VJP reads (gated_linear_unit's pre-activations are not produced
    # unless asked for).
    opts = _capi_options(options, residuals=True if opdef.has_residuals else None)
    outs = call(name, _unpack(present, arrays), opdef.forward_options(opts), opdef.inputs)
    return tuple(outs[j] for j in opdef.returns), (arrays, tuple(outs))


def _apply_bwd(name, options, present, residuals, cotangents):
    opdef = _opdefs.BY_NAME[name]
    arrays, outs = residuals
    inputs = _unpack(present, arrays)
    cts = [None if o is None else jnp.zeros_like(o) for o in outs]
    for j, c in zip(opdef.returns, cotangents):
        cts[j] = c.astype(outs[j].dtype)
    vjp_options = opdef.vjp_options_of(_capi_options(options), inputs)
    grads = call(opdef.vjp, opdef.vjp_input_values(cts, inputs, list(outs)), vjp_options)
    by_input = [None] * len(inputs)
    for g, i in zip(grads, opdef.vjp_grads):
        if g is not None and inputs[i] is not None:
            by_input[i] = _typed_like(g.astype(inputs[i].dtype), inputs[i])
    return tuple(g for g, x in zip(by_input, inputs) if x is not None)


_apply.defvjp(_apply_fwd, _apply_bwd)


def _typed_like(g, x):
    """g with x's varying manual axes: under shard_map (check_vma) a VJP's gradients must
    have their primals' types, and a custom call's results vary over no axis."""
    typeof = getattr(jax, "typeof", None)
    if typeof is None:
        return g
    missing = tuple(sorted(_varying_axes(typeof(x)) - _varying_axes(typeof(g)), key=str))
    if not missing:
        return g
    pvary = getattr(jax.lax, "pvary", None)
    return pvary(g, missing) if pvary is not None else jax.lax.pcast(g, missing, to="varying")


def _varying_axes(aval) -> set:
    """The manual axes an abstract value varies over: `aval.mat.varying` (jax >= 0.11's
    manual axis type), `aval.vma` before it."""
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return set(getattr(mat, "varying", ()))
    return set(getattr(aval, "vma", ()))


def _capi_options(text: str, residuals=None) -> dict:
    import json
    options = json.loads(text)
    if residuals is not None:
        options["residuals"] = residuals
    return options


def _unpack(present: str, arrays) -> list:
    it = iter(arrays)
    return [next(it) if p == "1" else None for p in present]


class _JaxBackend:
    name = "jax"

    @staticmethod
    def apply(opdef, inputs, options: dict) -> tuple:
        inputs = [None if x is None else jnp.asarray(x) for x in inputs]
        present = "".join("0" if x is None else "1" for x in inputs)
        if opdef.vjp is None:
            outs = call(opdef.name, inputs, options, opdef.inputs)
            return tuple(outs[j] for j in opdef.returns)
        return _apply(opdef.name, _capi.options_json(options), present, *[x for x in inputs if x is not None])

    @staticmethod
    def stack(arrays, axis: int):
        return jnp.stack(list(arrays), axis=axis)

    @staticmethod
    def paged_kv_append(k, v, page_table, seq_lengths, k_pages, v_pages) -> tuple:
        """jax arrays are immutable: the pages with the new rows set (one scatter each, which
        XLA does in place where the pages are donated to a jitted step); traceable. Rows
        whose page-table entry is out of range, or whose position is negative, are dropped
        (no error: the device cannot check them)."""
        for name, new, pages in (("k", k, k_pages), ("v", v, v_pages)):
            if jnp.dtype(new.dtype) != jnp.dtype(pages.dtype):
                raise TypeError(f"{name}: expected {jnp.dtype(pages.dtype)} (its pages' dtype), got {new.dtype}")
            if len(new.shape) != 4 or tuple(new.shape[2:]) != tuple(pages.shape[2:]):
                raise ValueError(f"{name}: expected [B, Tq, {pages.shape[2]}, {pages.shape[3]}] (its pages' K and "
                                 f"dim), got shape {tuple(new.shape)}")
        tq, page_size = k.shape[1], k_pages.shape[1]
        pos = jnp.asarray(seq_lengths)[:, None] - tq + jnp.arange(tq, dtype=jnp.int32)[None, :]  # [B, Tq]
        num_pages = k_pages.shape[0]
        page = jnp.take_along_axis(jnp.asarray(page_table), jnp.maximum(pos, 0) // page_size, axis=1, mode="fill",
                                   fill_value=num_pages)
        # Past the cache (a bad entry, a length below Tq): index num_pages, which the scatter
        # drops (a negative index would wrap around to the last page).
        page = jnp.where((pos >= 0) & (page >= 0) & (page < num_pages), page, num_pages)
        slot = pos % page_size
        return (k_pages.at[page, slot].set(k, mode="drop"), v_pages.at[page, slot].set(v, mode="drop"))


BACKEND = _JaxBackend()


def disabled_export_checks() -> list:
    """What jax.export must be told to accept our custom call (Tokamax's
    DISABLE_JAX_EXPORT_CHECKS)."""
    checks = getattr(jax.export, "DisabledSafetyCheck", None) or jax.export.DisabledSafetyChecks  # renamed
    return [checks.custom_call(TARGET)]


# ---- autotuning and benchmarking helpers ----

def trace(f, *args) -> None:
    """Traces f(*args) afresh (jit's trace cache cleared) so every call binds again and
    autotune's recorder sees it."""
    jax.clear_caches()
    jax.make_jaxpr(f)(*args)


def standardize_function(f, args, kwargs, mode: str, seed):
    """benchmarking.standardize_function for jax arrays (jax.ShapeDtypeStruct leaves of
    args / kwargs filled with random values from `seed`)."""
    leaves, tree = jax.tree_util.tree_flatten((list(args), kwargs))
    key = jax.random.PRNGKey(seed or 0)
    filled = []
    for leaf in leaves:
        if isinstance(leaf, jax.ShapeDtypeStruct) and seed is not None:
            key, sub = jax.random.split(key)
            if jnp.issubdtype(leaf.dtype, jnp.floating):
                leaf = jax.random.normal(sub, leaf.shape, leaf.dtype)
            else:
                leaf = jax.random.randint(sub, leaf.shape, 0, 2, leaf.dtype)
        filled.append(leaf)
    positions = [i for i, leaf in enumerate(filled) if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct))]

    def evaluate(arrays):
        full = list(filled)
        for i, a in zip(positions, arrays):
            full[i] = a
        call_args, call_kwargs = jax.tree_util.tree_unflatten(tree, full)
        return f(*call_args, **call_kwargs)

    def g(arrays):
        if mode in ("forward", "forward_res"):
            return evaluate(arrays)
        out, pullback = jax.vjp(evaluate, list(arrays))
        cotangent = jax.tree_util.tree_map(lambda o: jax.random.normal(jax.random.PRNGKey(1), o.shape, o.dtype), out)
        grads = pullback(cotangent)[0]
        return (out, grads) if mode == "forward_and_vjp" else grads

    return g, tuple(filled[i] for i in positions)


def compile_benchmark(f, x):
    """benchmarking.compile_benchmark for jax: jit, lower and compile timed; the runner
    times blocked calls (wall-clock)."""
    import time
    from .benchmarking import BenchmarkData
    jitted = jax.jit(f)
    start = time.perf_counter()
    lowered = jitted.lower(x)
    lower_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_ms = (time.perf_counter() - start) * 1e3
    memory = compiled.memory_analysis()
    peak = getattr(memory, "peak_memory_in_bytes", None) if memory is not None else None

    def runner(x, *, iterations: int = 5, method=None, event_filter_regex=None):
        del event_filter_regex
        if method not in (None, "wallclock", "cupti"):
            raise NotImplementedError(f"method={method!r} needs Tokamax's XProf timers; tokamax_cpp's jax runner "
                                      "measures 'wallclock' (blocked calls) and 'cupti' (the kernels' time)")
        jax.block_until_ready(compiled(x))
        if method == "cupti":
            from .benchmarking import cupti_times
            times = cupti_times(lambda: jax.block_until_ready(compiled(x)), iterations)
        else:
            times = []
            for _ in range(iterations):
                start = time.perf_counter()
                jax.block_until_ready(compiled(x))
                times.append((time.perf_counter() - start) * 1e3)
        return BenchmarkData(compile_time_ms=compile_ms, lower_time_ms=lower_ms, evaluation_times_ms=tuple(times),
                             metadata={"method": method or "wallclock", "framework": "jax"},
                             peak_memory_mb=None if peak is None else peak / 1e6)

    return runner
