"""tokamax_cpp: the Tokamax C++ op library from Python, with Tokamax's API.

    import tokamax_cpp as tokamax
    y = tokamax.layer_norm(x, scale, offset)             # numpy, torch or jax arrays
    out = tokamax.dot_product_attention(q, k, v, is_causal=True)

numpy arrays run on the library's CPU interpreter; torch tensors through
`torch.ops.tokamax_cpp.*` (CPU and CUDA, autograd; torch.compile on torch >= 2.4); jax arrays through
one XLA FFI handler (jit, grad, vmap). The library is found through ctypes:
$TOKAMAX_CPP_LIBRARY, the package's lib/, PREFIX/lib of an installed package (this one in
PREFIX/python), a build tree beside the source, the loader.
"""

from __future__ import annotations

from . import _capi, _host
from ._api import (ALIASES, activation_name, canonical_implementation, dot_product_attention,
                   dot_product_attention_fp8, dot_product_attention_varlen, gated_linear_unit, layer_norm, linear_softmax_cross_entropy_loss,
                   paged_attention, paged_kv_append, ragged_dot, rms_norm)
from ._capi import DriverError, InternalError, TokamaxError, WorkspaceTooSmallError
from .autotuning import AutotuningResult, autotune
from . import benchmarking
from .benchmarking import BenchmarkData, compile_benchmark, standardize_function

__version__ = "0.1.0"

# Where jax is already imported, its jit-key context of the autotuning scopes is made now,
# before a trace reaches our ops (made inside a first trace, it would cost a retrace).
from .autotuning import jit_context as _jit_context
_jit_context()


def __getattr__(name):
    # DISABLE_JAX_EXPORT_CHECKS: what jax.export(..., disabled_checks=...) needs to accept
    # our custom call; computed on first use so that importing the package needs no jax.
    if name == "DISABLE_JAX_EXPORT_CHECKS":
        try:
            from . import jax as jax_adapter
        except ImportError:
            return []
        return jax_adapter.disabled_export_checks()
    raise AttributeError(f"module 'tokamax_cpp' has no attribute {name!r}")


library_path = _capi.library_path


def op_names() -> list[str]:
    """The library's ops (forward and VJP), as the C++ registry names them."""
    return _capi.op_names()


def op_args(op: str) -> tuple[list[str], int]:
    """An op's argument names (inputs, then outputs) and its number of inputs."""
    return _capi.op_args(op)


def call(op: str, *inputs, **options) -> list:
    """Runs any registered op by name on numpy arrays (None = an absent optional input):
    e.g. call("layer_norm_vjp", dy, x, scale, mean, rstd, axis=-1). Returns every output
    (None where the call produces none). `options` are the op's attributes plus
    "implementation" and "config" (docs/c-api.md has each op's)."""
    names, num_inputs = _capi.op_args(op)
    if len(inputs) != num_inputs:
        raise TypeError(f"{op} takes {num_inputs} inputs ({', '.join(names[:num_inputs])}), got {len(inputs)}")
    if "implementation" in options:
        options["implementation"] = canonical_implementation(options["implementation"])
        if options["implementation"] is None:
            del options["implementation"]
    return _host.run(op, inputs, options, names[:num_inputs])


__all__ = [
    "ALIASES", "AutotuningResult", "BenchmarkData", "DISABLE_JAX_EXPORT_CHECKS", "DriverError", "InternalError",
    "TokamaxError", "WorkspaceTooSmallError", "activation_name", "autotune", "benchmarking", "call",
    "compile_benchmark", "dot_product_attention", "dot_product_attention_fp8", "dot_product_attention_varlen", "gated_linear_unit", "layer_norm",
    "linear_softmax_cross_entropy_loss", "op_args", "op_names", "paged_attention", "paged_kv_append", "ragged_dot",
    "rms_norm", "standardize_function",
]
