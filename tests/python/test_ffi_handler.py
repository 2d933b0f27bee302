"""The JAX FFI handler's slot mapping without jax: ffi_handler_check.cc compiles the
XLA-free part of python/tokamax_cpp/ffi/handler.cc with the system C++ compiler and runs
layer_norm (x; x + scale; x + scale + offset), layer_norm_vjp and attention through it on
the CPU interpreter, checking that tkx_call_create gets the op's full input slots (NULL
for absent ones) and the results match references. Skips visibly without a compiler."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tokamax_cpp import _capi

HERE = Path(__file__).resolve().parent


def build_check(tmp_path) -> Path:
    """ffi_handler_check built with the system compiler (skips visibly without one)."""
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        pytest.skip("no C++ compiler ($CXX, else c++) to build the FFI handler check")
    binary = tmp_path / "ffi_handler_check"
    build = subprocess.run([compiler, "-std=c++17", "-O1", str(HERE / "ffi_handler_check.cc"), "-o", str(binary),
                            "-ldl"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    return binary


def test_ffi_handler_maps_every_slot(tmp_path):
    result = subprocess.run([str(build_check(tmp_path)), _capi.library_path], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
