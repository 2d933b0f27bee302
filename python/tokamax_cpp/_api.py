"""The public ops with Tokamax's signatures. Each one checks its Python-level arguments,
maps them to the C++ op's inputs and options, and hands the call to the backend of its
arrays: numpy -> the host path, torch tensors -> tokamax_cpp.torch, jax arrays ->
tokamax_cpp.jax."""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Sequence

from . import _opdefs
from ._host import HostBackend, is_host_array

# Tokamax's implementation names -> ours.
ALIASES = {"triton": "tile", "mosaic": "hopper", "mosaic_gpu": "hopper", "xla": "reference",
           "xla_chunked": "chunked", "chunked_xla": "chunked"}
# Names of Tokamax's that no implementation of ours stands for.
FOREIGN = {"cudnn": "cuDNN is not part of this library; use None (auto) or 'hopper' / 'tile'",
           "mosaic_tpu": "this library runs on NVIDIA GPUs (and the CPU interpreter), not TPUs"}
OURS = ("hopper", "tile", "chunked", "reference")


def canonical_implementation(name):
    """Ours for a Tokamax name (None = auto); NotImplementedError for a foreign one."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError(f"implementation must be a string, a sequence of strings or None, got {type(name).__name__}")
    if name in FOREIGN:
        raise NotImplementedError(f"implementation={name!r}: {FOREIGN[name]}")
    return ALIASES.get(name, name)


def _implementations(implementation) -> list:
    """The implementations to try in order: one (None = auto) or Tokamax's sequence."""
    if implementation is None or isinstance(implementation, str):
        return [implementation]
    if isinstance(implementation, Sequence) and implementation:
        return list(implementation)
    raise TypeError(f"implementation must be a string, a non-empty sequence of strings or None, "
                    f"got {implementation!r}")


_backend_of_type: dict = {}  # an array type -> its backend (found once per type)


def backend_of(*arrays):
    """The backend that runs arrays of these types (the first array decides)."""
    for a in arrays:
        if a is None:
            continue
        backend = _backend_of_type.get(type(a))
        if backend is None:
            backend = _backend_of_type[type(a)] = _find_backend(a)
        return backend
    raise ValueError("no array among the arguments")


def _find_backend(a):
    module = type(a).__module__
    if module.startswith("torch"):
        from . import torch as torch_adapter
        return torch_adapter.BACKEND
    if module.startswith(("jax", "jaxlib")):
        from . import jax as jax_adapter
        return jax_adapter.BACKEND
    if is_host_array(a):
        return HostBackend
    raise TypeError(f"tokamax_cpp takes numpy arrays, torch tensors or jax arrays, got {type(a).__name__}")


def apply(opdef, inputs, options: dict, implementation=None) -> tuple:
    """Runs `opdef` through the inputs' backend, trying Tokamax-style implementation
    sequences in order (the first that does not raise NotImplementedError)."""
    backend = backend_of(*inputs)
    if implementation is None:  # auto (the common call): no sequence to try, nothing to add
        return backend.apply(opdef, inputs, options)
    candidates = _implementations(implementation)
    errors = []
    for candidate in candidates:
        opts = dict(options)
        try:
            name = canonical_implementation(candidate)
            if name is not None:
                opts["implementation"] = name
            return backend.apply(opdef, list(inputs), opts)
        except NotImplementedError as e:
            if len(candidates) == 1:
                raise
            errors.append(f"{candidate}: {e}")
    raise NotImplementedError("no implementation could serve the call:\n  " + "\n  ".join(errors))


def _require_none(name: str, value, why: str) -> None:
    if value is not None:
        raise NotImplementedError(f"{name}={value!r} is not supported: {why}")


def _dtype_name(dtype) -> str:
    """"float32" for numpy, jax and torch dtypes alike."""
    try:
        import numpy as np
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype).split(".")[-1]


def _number(name: str, value, kind=float):
    if type(value) is kind:  # the common case, without the ABC check below
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return kind(value)


# ---- Normalization -----------------------------------------------------------------------


def layer_norm(x, scale, offset, *, axis: int = -1, epsilon: float = 1e-6, scale_offset: float = 0.0,
               subtract_mean: bool = True, implementation=None):
    """Tokamax's layer_norm: (x - mean) * rstd * (scale + scale_offset) + offset over `axis`;
    with subtract_mean=False the RMS norm x * rstd * (scale + scale_offset)."""
    axis = _number("axis", axis, int)
    ndim = getattr(x, "ndim", None)
    if ndim is not None and 0 <= axis < ndim:
        axis -= ndim  # counted from the end: the same axis once vmap adds leading dims
    options = {"axis": axis, "epsilon": _number("epsilon", epsilon)}
    scale_offset = _number("scale_offset", scale_offset)
    if scale_offset != 0.0:
        if scale is None:
            raise ValueError("scale_offset needs a scale")
        scale = scale + scale_offset  # a 1-D add; its gradient is the identity
    if not subtract_mean:
        if offset is not None:
            raise NotImplementedError("offset with subtract_mean=False: the library's rms_norm has no offset")
        return apply(_opdefs.RMS_NORM, [x, scale], options, implementation)[0]
    return apply(_opdefs.LAYER_NORM, [x, scale, offset], options, implementation)[0]


def rms_norm(x, scale=None, *, axis: int = -1, epsilon: float = 1e-6, implementation=None):
    """x * rstd * scale, rstd = 1 / sqrt(mean(x^2) + epsilon) over `axis`."""
    return layer_norm(x, scale, None, axis=axis, epsilon=epsilon, subtract_mean=False,
                      implementation=implementation)


# ---- Attention ---------------------------------------------------------------------------


def _window(local_window_size) -> dict:
    if local_window_size is None:
        return {}
    if isinstance(local_window_size, numbers.Integral) and not isinstance(local_window_size, bool):
        left = right = int(local_window_size)
    elif isinstance(local_window_size, Sequence) and len(local_window_size) == 2:
        left, right = local_window_size
    else:
        raise TypeError(f"local_window_size must be an int or a (left, right) pair, got {local_window_size!r}")
    window = {}
    for key, side in (("window_left", left), ("window_right", right)):
        if side is not None:  # an absent side is unbounded
            side = _number("local_window_size", side, int)
            if side < 0:
                raise ValueError(f"local_window_size must be non-negative, got {local_window_size!r}")
            window[key] = side
    return window


# The attention's q / k / v / out layouts: Tokamax's (the kernels') and SDPA's.
LAYOUTS = {"BTNH": "Tokamax's: q [*B, T, N, H], k / v [*B, S, K, H]",
           "BNTH": "SDPA's: q [*B, N, T, H], k / v [*B, K, S, H]"}


def _attention_layout(layout) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)} "
                         f"({'; '.join(f'{k}: {v}' for k, v in LAYOUTS.items())}), got {layout!r}")
    return layout


def _logit_options(scale, logits_soft_cap) -> dict:
    """scale and logits_soft_cap, as every attention op takes them (absent: the op's default)."""
    options = {}
    if scale is not None:
        options["scale"] = _number("scale", scale)
    if logits_soft_cap is not None:
        cap = _number("logits_soft_cap", logits_soft_cap)
        if not cap > 0:
            raise ValueError(f"logits_soft_cap must be positive, got {logits_soft_cap!r}")
        options["logits_soft_cap"] = cap
    return options


def _attention_options(scale, is_causal, local_window_size, logits_soft_cap, deterministic) -> dict:
    """The options dense and packed attention share, as the ops take them."""
    options = {"is_causal": bool(is_causal), **_logit_options(scale, logits_soft_cap)}
    options.update(_window(local_window_size))
    if not bool(deterministic):  # absent when true: the VJP call's options as they were
        options["deterministic"] = False
    return options


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal: bool = False,
                          query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None,
                          logits_soft_cap=None, precision=None, implementation=None, q_sharding=None,
                          layout: str = "BTNH", sinks=None, deterministic: bool = True):
    """Tokamax's dot_product_attention: q [*B, T, N, H], k [*B, S, K, H], v [*B, S, K, Hv]
    -> [*B, T, N, Hv]. `q_sharding` is a placement hint and does not change the result.

    layout="BNTH" takes SDPA's q [*B, N, T, H], k [*B, K, S, H], v [*B, K, S, Hv] and returns
    [*B, N, T, Hv], read and written in place by every implementation (no transposes; the
    gradients come in their primals' layout). bias, mask ([*B, N, T, S]) and the sequence
    lengths are the same in both layouts.

    sinks (f32 [N], a learnable logit per query head, as in gpt-oss) joins each row's
    softmax denominator: Z = sum_j exp(logits_j) + exp(sinks[n]); its gradient flows like
    bias's.

    deterministic (the gradient's): True (the default) keeps every VJP bitwise
    reproducible; False lets the hopper VJP's opt-in fused dq (config "fused_dq": 1) add
    in any order. It goes to the VJP call only."""
    del q_sharding
    layout = _attention_layout(layout)
    _require_none("precision", precision, "the products use each dtype's native precision (f32 accumulation)")
    options = _attention_options(scale, is_causal, local_window_size, logits_soft_cap, deterministic)
    if layout == "BNTH":
        for name, x in (("query", query), ("key", key), ("value", value)):
            if len(x.shape) < 3:
                raise ValueError(f"{name}: layout='BNTH' needs [*B, N, T, H] (rank >= 3), got shape {tuple(x.shape)}")
        options["layout"] = "bnth"
    inputs = [query, key, value, bias, mask, query_seq_lengths, key_value_seq_lengths, sinks]
    return apply(_opdefs.ATTENTION, inputs, options, implementation)[0]


def dot_product_attention_varlen(query, key, value, cu_seqlens_q, cu_seqlens_kv, *, max_seqlen_q: int,
                                 max_seqlen_kv: int, scale=None, is_causal: bool = False, local_window_size=None,
                                 logits_soft_cap=None, sinks=None, deterministic: bool = True, implementation=None):
    """Packed variable-length attention (FlashAttention's varlen): q [total_q, N, H],
    k [total_kv, K, H], v [total_kv, K, Hv] -> [total_q, N, Hv], sequence b's rows from
    cu_seqlens[b] to cu_seqlens[b + 1] (int32 [B + 1] each). max_seqlen_q / max_seqlen_kv
    bound every sequence's lengths (they size the grid). is_causal and local_window_size
    align each sequence's last query with its last key. Gradients flow to q, k, v (and
    sinks)."""
    options = _attention_options(scale, is_causal, local_window_size, logits_soft_cap, deterministic)
    options["max_seqlen_q"] = _number("max_seqlen_q", max_seqlen_q, int)
    options["max_seqlen_kv"] = _number("max_seqlen_kv", max_seqlen_kv, int)
    inputs = [query, key, value, cu_seqlens_q, cu_seqlens_kv, sinks]
    return apply(_opdefs.ATTENTION_VARLEN, inputs, options, implementation)[0]


def dot_product_attention_fp8(query, key, value, *, q_descale=None, k_descale=None, v_descale=None, scale=None,
                              is_causal: bool = False, query_seq_lengths=None, key_value_seq_lengths=None,
                              local_window_size=None, logits_soft_cap=None, return_lse: bool = False,
                              implementation=None):
    """The attention forward on fp8 q [*B, T, N, H], k [*B, S, K, H], v [*B, S, K, Hv]
    (float8_e4m3fn or float8_e5m2, one dtype) -> bf16 [*B, T, N, Hv], as FlashAttention-3's
    fp8 forward takes them: q_descale, k_descale, v_descale (f32 [*B, K], one per batch row
    and kv head; None = 1) scale the logits by q_descale k_descale and the output by
    v_descale. With return_lse also lse [*B, N, T] (f32). Forward only (no gradient);
    the other options as dot_product_attention's (no bias, mask, sinks or BNTH)."""
    options = _attention_options(scale, is_causal, local_window_size, logits_soft_cap, True)
    inputs = [query, key, value, q_descale, k_descale, v_descale, query_seq_lengths, key_value_seq_lengths]
    return _apply_with_lse(_opdefs.ATTENTION_FP8, inputs, options, implementation, return_lse)


def _apply_with_lse(opdef, inputs, options: dict, implementation, return_lse: bool):
    """A forward-only op whose lse output comes with the option "lse": out, or (out,
    lse) where return_lse."""
    if not return_lse:
        return apply(opdef, inputs, options, implementation)[0]
    return tuple(apply(_returning_lse(opdef), inputs, {**options, "lse": True}, implementation))


@functools.lru_cache(maxsize=None)
def _returning_lse(opdef):
    """`opdef` returning its lse output too (one object per op: the adapters key on it)."""
    return dataclasses.replace(opdef, returns=(0, 1))


def paged_attention(query, k_pages, v_pages, page_table, seq_lengths, *, scale=None, logits_soft_cap=None,
                    return_lse: bool = False, implementation=None):
    """Decode attention over a paged KV cache (forward only): query [B, Tq, N, H] holds
    each sequence's Tq (1..16) newest tokens; k_pages [num_pages, page_size, K, H] and
    v_pages [num_pages, page_size, K, Hv] hold the cache, key j of sequence b in row
    j % page_size of page page_table[b, j // page_size] (int32 [B, max_pages]);
    seq_lengths (int32 [B]) counts each sequence's keys, the new tokens included (query i
    sits at position seq_len - Tq + i and sees the keys up to it). Returns out
    [B, Tq, N, Hv], and with return_lse also lse [B, N, Tq] (f32). GQA: N a multiple of
    K. paged_kv_append writes the new tokens into the pages before the call."""
    inputs = [query, k_pages, v_pages, page_table, seq_lengths]
    return _apply_with_lse(_opdefs.PAGED_ATTENTION, inputs, _logit_options(scale, logits_soft_cap), implementation,
                           return_lse)


def paged_kv_append(k, v, page_table, seq_lengths, k_pages, v_pages, *, implementation=None):
    """Writes each sequence's Tq newest keys k [B, Tq, K, H] and values v [B, Tq, K, Hv]
    into their pages, in place, in one kernel: token t of sequence b, at position pos =
    seq_lengths[b] - Tq + t (seq_lengths already counts it), goes to row pos % page_size of
    page page_table[b, pos // page_size] of k_pages [num_pages, page_size, K, H] and
    v_pages [num_pages, page_size, K, Hv]; no other row changes. Returns (k_pages,
    v_pages), the arrays given: numpy arrays and torch tensors (CPU, CUDA; the pages
    contiguous, no gradient). jax arrays are immutable: new pages are returned, the rows
    set by jax's scatter (in place where a jitted step donates the pages). On the CPU
    interpreter the lengths and the page table are checked as paged_attention checks them."""
    backend = backend_of(k, v, page_table, seq_lengths, k_pages, v_pages)
    for name, pages in (("k_pages", k_pages), ("v_pages", v_pages)):
        if len(pages.shape) != 4:
            raise ValueError(f"{name}: expected [num_pages, page_size, K, dim], got shape {tuple(pages.shape)}")
    name = canonical_implementation(implementation)
    in_place = getattr(backend, "apply_in_place", None)
    if in_place is None:
        if name is not None:  # no kernel of ours runs: an implementation asked for would be ignored
            raise NotImplementedError(f"implementation={implementation!r}: {backend.name} arrays are appended by "
                                      f"{backend.name}'s scatter, not by the library's kernels")
        return backend.paged_kv_append(k, v, page_table, seq_lengths, k_pages, v_pages)
    options = {"num_pages": int(k_pages.shape[0]), "page_size": int(k_pages.shape[1])}
    if name is not None:
        options["implementation"] = name
    in_place("paged_kv_append", [k, v, page_table, seq_lengths], [k_pages, v_pages], options,
             ("k", "v", "page_table", "seq_lengths"), ("k_pages", "v_pages"))
    return k_pages, v_pages


# ---- Gated linear unit -------------------------------------------------------------------

_ACTIVATIONS = {"silu": "swish", "swish": "swish", "gelu": "gelu", "gelu_tanh": "gelu_tanh",
                "gelu_exact": "gelu", "sigmoid": "sigmoid", "relu": "relu", "none": "none"}


def activation_name(activation) -> str:
    """The library's activation for Tokamax's `activation` (a callable such as jax.nn.swish
    or torch.nn.functional.silu, a name, or None: no activation)."""
    if activation is None:
        return "none"
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of {sorted(_ACTIVATIONS)}")
        return _ACTIVATIONS[activation]
    approximate = None
    fn = activation
    if isinstance(fn, functools.partial):
        approximate = fn.keywords.get("approximate")
        fn = fn.func
    name = getattr(fn, "__name__", "")
    module = getattr(fn, "__module__", "") or ""
    if name == "gelu":
        if approximate is None:  # jax.nn.gelu approximates by default, torch's gelu does not
            approximate = module.startswith("jax")
        return "gelu_tanh" if approximate in (True, "tanh") else "gelu"
    if name in ("silu", "swish", "sigmoid", "relu"):
        return _ACTIVATIONS[name]
    raise NotImplementedError(f"activation {activation!r}: the library's kernels have swish (silu), gelu, "
                              "gelu_tanh, sigmoid, relu and none")


def gated_linear_unit(x, weights, *, activation=None, precision=None, implementation=None):
    """Tokamax's gated_linear_unit: activation(x @ w_gate) * (x @ w_up) with weights fused
    [K, 2, N] or a (w_gate, w_up) pair of [K, N]."""
    _require_none("precision", precision, "the products accumulate in f32 (f64 for f64)")
    options = {"activation": activation_name(activation)}
    if isinstance(weights, (tuple, list)):
        if len(weights) != 2:
            raise ValueError(f"weights: a pair (w_gate, w_up) or a fused [K, 2, N] array, got {len(weights)} arrays")
        weights = backend_of(x, *weights).stack(weights, axis=1)
    return apply(_opdefs.GATED_LINEAR_UNIT, [x, weights], options, implementation)[0]


# ---- Ragged dot --------------------------------------------------------------------------


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None, group_offset=None, *,
               implementation=None):
    """Tokamax's ragged_dot: lhs [M, K], rhs [G, K, N], group_sizes int32 [G] -> [M, N]."""
    _require_none("precision", precision, "the products accumulate in f32 (f64 for f64)")
    _require_none("group_offset", group_offset, "the library's ragged_dot takes every group")
    if preferred_element_type is not None and _dtype_name(preferred_element_type) != _dtype_name(lhs.dtype):
        raise NotImplementedError(f"preferred_element_type={preferred_element_type!r}: the output has lhs's dtype "
                                  f"{lhs.dtype}")
    return apply(_opdefs.RAGGED_DOT, [lhs, rhs, group_sizes], {}, implementation)[0]


# ---- Linear softmax cross-entropy ----------------------------------------------------------


def linear_softmax_cross_entropy_loss(x, labels, weights, *, reduction: str = "sum", precision=None,
                                      implementation=None, ignore_index: int = -100):
    """Tokamax's linear_softmax_cross_entropy_loss: x [B, D], labels int32 [B], weights
    [D, V]; the loss of softmax(x @ weights) against labels, "sum" / "mean" (a scalar) or
    "none" ([B]). Rows labelled `ignore_index` count for nothing."""
    _require_none("precision", precision, "the products accumulate in f32 (f64 for f64)")
    if reduction not in ("sum", "mean", "none"):
        raise ValueError(f"reduction must be 'sum', 'mean' or 'none', got {reduction!r}")
    options = {"reduction": reduction, "ignore_index": _number("ignore_index", ignore_index, int)}
    loss = apply(_opdefs.CROSS_ENTROPY, [x, weights, labels], options, implementation)[0]
    return loss if reduction == "none" else loss.reshape(())
