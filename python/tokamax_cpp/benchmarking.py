"""Tokamax's benchmarking helpers for functions of our ops: `standardize_function` (one
function of a flat list of arrays, random inputs, forward / VJP modes),
`compile_benchmark` (compile once, then time runs) and `BenchmarkData`.

Timing methods: "wallclock" everywhere (host time around a synchronised call);
"cuda_events" for torch CUDA tensors (events on the current stream); "cupti" for device
arrays of torch or jax: the sum of the durations of every kernel the call ran (CUPTI's
activity records through the library's tkx_kernel_trace: the framework's kernels as well
as ours, no launch gaps, no memcpys). Tokamax's XProf-based methods raise
NotImplementedError."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

_MODES = ("forward", "forward_res", "vjp", "forward_and_vjp")


@dataclasses.dataclass(frozen=True)
class BenchmarkData:
    """Time and memory of a benchmark (Tokamax's fields)."""

    compile_time_ms: float
    lower_time_ms: float
    evaluation_times_ms: tuple[float, ...]
    metadata: dict[str, Any]
    peak_memory_mb: float | None = None

    @property
    def median_evaluation_time_ms(self) -> float:
        return float(statistics.median(self.evaluation_times_ms))

    def asdict(self) -> dict:
        d = dataclasses.asdict(self)
        d["median_evaluation_time_ms"] = self.median_evaluation_time_ms
        return d


def _framework(args) -> str:
    for a in args:
        module = type(a).__module__
        if module.startswith("torch"):
            return "torch"
        if module.startswith(("jax", "jaxlib")):
            return "jax"
    return "numpy"


def standardize_function(f, *args, kwargs=None, mode: str = "forward", seed: int | None = 0):
    """(g, arrays): g(arrays) evaluates f(*args, **kwargs) in `mode` with `arrays` the
    array arguments (jax.ShapeDtypeStruct / torch meta specs filled with random values
    from `seed`). Modes: "forward", "forward_res" (jax: the forward with residuals),
    "vjp" / "forward_and_vjp" (the gradients of f's output against random cotangents)."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    kwargs = dict(kwargs or {})
    framework = _framework(list(args) + list(kwargs.values()))
    if framework == "jax":
        from . import jax as jax_adapter
        return jax_adapter.standardize_function(f, args, kwargs, mode, seed)
    if framework == "torch":
        from . import torch as torch_adapter
        return torch_adapter.standardize_function(f, args, kwargs, mode, seed)
    if mode != "forward":
        raise NotImplementedError(f"mode={mode!r} needs torch or jax arrays: numpy has no autograd")
    import numpy as np
    positions = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]

    def g(arrays):
        full = list(args)
        for i, a in zip(positions, arrays):
            full[i] = a
        return f(*full, **kwargs)

    return g, tuple(args[i] for i in positions)


def compile_benchmark(f, x):
    """Compiles f for x (jax: jit, lower, compile; torch / numpy: the first call, which
    binds the calls and compiles their kernels) and returns runner(x, *, iterations=5,
    method=None) -> BenchmarkData."""
    framework = _framework(list(x) if isinstance(x, (list, tuple)) else [x])
    if framework == "jax":
        from . import jax as jax_adapter
        return jax_adapter.compile_benchmark(f, x)
    sync = _torch_sync(x) if framework == "torch" else (lambda: None)
    start = time.perf_counter()
    f(x)
    sync()
    compile_ms = (time.perf_counter() - start) * 1e3

    def runner(x, *, iterations: int = 5, method: str | None = None, event_filter_regex=None) -> BenchmarkData:
        del event_filter_regex
        if method is None:
            method = "cuda_events" if framework == "torch" and _on_cuda(x) else "wallclock"
        if method == "cuda_events":
            times = _torch_event_times(f, x, iterations)
        elif method == "cupti":
            if not _on_cuda(x):
                raise NotImplementedError("method='cupti' times device kernels: it needs CUDA tensors; here: "
                                          "'wallclock'")
            times = cupti_times(lambda: (f(x), sync()), iterations)
        elif method == "wallclock":
            times = []
            for _ in range(iterations):
                start = time.perf_counter()
                f(x)
                sync()
                times.append((time.perf_counter() - start) * 1e3)
        else:
            raise NotImplementedError(f"method={method!r} is not one of tokamax_cpp's: 'wallclock'"
                                      + (", 'cuda_events', 'cupti'" if framework == "torch" else ""))
        return BenchmarkData(compile_time_ms=compile_ms, lower_time_ms=0.0, evaluation_times_ms=tuple(times),
                             metadata={"method": method, "framework": framework})

    return runner


def cupti_times(run, iterations: int) -> list[float]:
    """Per iteration of `run` (which must wait for its work), the total duration of the
    kernels it ran, in ms. Raises NotImplementedError where CUPTI cannot record, and
    RuntimeError for an iteration that ran no kernel or whose records were dropped."""
    from . import _capi
    times = []
    with _capi.KernelTrace() as trace:
        for i in range(iterations):
            trace.take()  # whatever finished before this iteration
            run()
            kernels, total_ms, dropped = trace.take()
            if kernels == 0:
                raise RuntimeError(f"method='cupti': iteration {i} ran no kernel (was the work synchronised?)")
            if dropped:
                raise RuntimeError(f"method='cupti': CUPTI dropped {dropped} kernel records: the times would "
                                   "be short")
            times.append(total_ms)
    return times


def _leaves(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _on_cuda(x) -> bool:
    return any(getattr(getattr(a, "device", None), "type", None) == "cuda" for a in _leaves(x))


def _torch_sync(x):
    import torch
    return torch.cuda.synchronize if _on_cuda(x) else (lambda: None)


def _torch_event_times(f, x, iterations: int) -> list[float]:
    import torch
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times
