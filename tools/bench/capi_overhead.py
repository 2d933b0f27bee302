"""Host cost of one op call through tokamax_cpp's ctypes path, per call (no GPU needed).

Run under the null driver, which takes "device" pointers without touching them (host
only: no kernel runs):

  TOKAMAX_CPP_LIBRARY=build/libtokamax.so TOKAMAX_CUDA_DRIVER=build/tests/libtokamax-null-cuda.so \
    PYTHONPATH=python python3 tools/bench/capi_overhead.py

Prints microseconds per call of layer_norm [1, 64] bf16 (f32 scale) on device 0 for:
  per-call descriptors: what the adapters did before (specs tuple, get_call, a tkx_tensor
      and pointer array built per call, then tkx_call_run);
  prebuilt (run_pointers): the bound call found by a tuple key, its prebuilt descriptors
      filled with the data pointers, one ctypes call.
"""

from __future__ import annotations

import time

import numpy as np

from tokamax_cpp import _capi


def per_call_us(fn, n: int = 20000, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main() -> None:
    buffers = [np.zeros(4096, np.uint8) for _ in range(3)]  # "device" memory: the null driver never reads it
    x, scale, y = (((b.ctypes.data + 15) // 16) * 16 for b in buffers)
    specs = [(_capi.BF16, (1, 64)), (_capi.F32, (64,)), None]
    options = _capi.options_json({"epsilon": 1e-5, "residuals": False})
    call = _capi.get_call("layer_norm", specs, options)

    def descriptors():
        c = _capi.get_call("layer_norm", [(_capi.BF16, (1, 64)), (_capi.F32, (64,)), None], options)
        c.run([_capi.tensor(_capi.BF16, (1, 64), x, 0), _capi.tensor(_capi.F32, (64,), scale, 0), None],
              [_capi.tensor(_capi.BF16, (1, 64), y, 0), None, None])

    calls = {}

    def prebuilt():
        key = ("layer_norm", options, (_capi.BF16, (1, 64)), (_capi.F32, (64,)), None)
        c = calls.get(key)
        if c is None:
            c = calls[key] = _capi.get_call("layer_norm", specs, options)
        c.run_pointers((x, scale, None), (y, None, None), 0)

    descriptors()
    prebuilt()
    print(f"library: {_capi.library_path}")
    print(f"  per-call descriptors (get_call, tkx_tensor per call): {per_call_us(descriptors):7.2f} us per call")
    print(f"  prebuilt (key lookup, run_pointers):                  {per_call_us(prebuilt):7.2f} us per call")


if __name__ == "__main__":
    main()
