"""benchmarking on numpy arrays (wall-clock); the GPU methods are checked where a GPU is."""

import numpy as np
import pytest

import tokamax_cpp as tokamax


def test_standardize_and_compile_benchmark_on_host():
    x = np.ones((4, 8), np.float32)
    f, arrays = tokamax.standardize_function(tokamax.layer_norm, x, kwargs={"scale": None, "offset": None})
    assert len(arrays) == 1 and arrays[0] is x
    runner = tokamax.compile_benchmark(f, arrays)
    data = runner(arrays, iterations=3)
    assert isinstance(data, tokamax.BenchmarkData) and len(data.evaluation_times_ms) == 3
    assert data.median_evaluation_time_ms > 0 and data.asdict()["median_evaluation_time_ms"] > 0
    with pytest.raises(NotImplementedError, match="needs CUDA tensors"):
        runner(arrays, method="cupti")
    with pytest.raises(NotImplementedError, match="not one of"):
        runner(arrays, method="xprof_hermetic")


def test_kernel_trace_opens_or_says_why():
    from tokamax_cpp import _capi
    try:
        trace = _capi.KernelTrace()
    except NotImplementedError as e:
        assert "CUPTI kernel timing is unavailable" in str(e)
        return
    with trace:
        assert trace.take() == (0, 0.0, 0)  # nothing ran


def test_numpy_has_no_vjp_mode():
    with pytest.raises(NotImplementedError, match="autograd"):
        tokamax.standardize_function(tokamax.rms_norm, np.ones((2, 4), np.float32), mode="vjp")
