"""How each forward op of the library meets its VJP op: which forward outputs the API
returns, what the VJP takes (cotangents, forward inputs, forward outputs) and which
forward input each VJP output is the gradient of. Framework-neutral: the torch and jax
adapters build their autograd from these tables, the numpy path reads `returns`.

Argument orders are the C++ ops' (ops/include/tokamax/ops/*.h, "Argument order").
"""

from __future__ import annotations

from dataclasses import dataclass


def ct(j: int) -> tuple[str, int]:
    """The cotangent of forward output j."""
    return ("ct", j)


def inp(i: int) -> tuple[str, int]:
    """Forward input i."""
    return ("in", i)


def out(j: int) -> tuple[str, int]:
    """Forward output j (a residual such as mean / rstd / lse, or the result itself)."""
    return ("out", j)


@dataclass(frozen=True)
class OpDef:
    name: str                       # the C++ op
    inputs: tuple[str, ...]         # its inputs, in order
    outputs: tuple[str, ...]        # its outputs, in order
    returns: tuple[int, ...]        # the outputs the API returns (the rest are residuals)
    vjp: str | None = None          # the VJP op
    vjp_inputs: tuple = ()          # per VJP input: ct(j) / inp(i) / out(j)
    vjp_grads: tuple[int, ...] = () # per VJP output: the forward input it differentiates
    vjp_options: tuple[str, ...] = ()  # the forward's option keys the VJP op takes too
    has_residuals: bool = False     # the forward takes "residuals": false to skip them
    vjp_flags: tuple = ()           # (VJP option, forward input): true iff the input is present
    vjp_only: tuple[str, ...] = ()  # options of the API's call that only the VJP op takes

    def vjp_input_values(self, cotangents, inputs, outputs) -> list:
        """The VJP op's inputs from the forward's (cotangents indexed like outputs)."""
        pick = {"ct": cotangents, "in": inputs, "out": outputs}
        return [pick[kind][j] for kind, j in self.vjp_inputs]

    def vjp_options_of(self, options: dict, inputs) -> dict:
        keep = set(self.vjp_options) | set(self.vjp_only) | {"implementation"}
        vjp = {k: v for k, v in options.items() if k in keep}
        vjp.update({key: inputs[i] is not None for key, i in self.vjp_flags})
        return vjp

    def forward_options(self, options: dict) -> dict:
        """The forward op's options: the call's without those only the VJP takes (the
        adapters keep the call's for the backward)."""
        if not any(k in options for k in self.vjp_only):
            return options
        return {k: v for k, v in options.items() if k not in self.vjp_only}


LAYER_NORM = OpDef(
    "layer_norm", ("x", "scale", "offset"), ("y", "mean", "rstd"), (0,),
    "layer_norm_vjp", (ct(0), inp(0), inp(1), out(1), out(2)), (0, 1, 2), ("axis",), has_residuals=True,
    vjp_flags=(("doffset", 2),))  # no offset, no doffset to compute

RMS_NORM = OpDef(
    "rms_norm", ("x", "scale"), ("y", "rstd"), (0,),
    "rms_norm_vjp", (ct(0), inp(0), inp(1), out(1)), (0, 1), ("axis",), has_residuals=True)

ATTENTION = OpDef(
    "attention", ("q", "k", "v", "bias", "mask", "q_seq_lengths", "kv_seq_lengths", "sinks"), ("out", "lse"), (0,),
    "attention_vjp",
    (ct(0), inp(0), inp(1), inp(2), out(0), out(1), inp(3), inp(4), inp(5), inp(6), inp(7)), (0, 1, 2, 3, 7),
    ("scale", "is_causal", "window_left", "window_right", "logits_soft_cap", "layout"), has_residuals=True,
    vjp_only=("deterministic",))  # false lets the hopper VJP's opt-in fused dq add in any order

ATTENTION_VARLEN = OpDef(  # packed variable-length sequences: cu_seqlens int32 [B + 1]
    "attention_varlen", ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv", "sinks"), ("out", "lse"), (0,),
    "attention_varlen_vjp",
    (ct(0), inp(0), inp(1), inp(2), out(0), out(1), inp(3), inp(4), inp(5)), (0, 1, 2, 5),
    ("scale", "is_causal", "window_left", "window_right", "logits_soft_cap", "max_seqlen_q", "max_seqlen_kv"),
    has_residuals=True, vjp_only=("deterministic",))

GATED_LINEAR_UNIT = OpDef(  # the pre-activations x W: the VJP reads them instead of recomputing
    "gated_linear_unit", ("x", "weights"), ("out", "preactivations"), (0,),
    "gated_linear_unit_vjp", (ct(0), inp(0), inp(1), out(1)), (0, 1), ("activation",), has_residuals=True)

RAGGED_DOT = OpDef(
    "ragged_dot", ("lhs", "rhs", "group_sizes"), ("out",), (0,),
    "ragged_dot_vjp", (ct(0), inp(0), inp(1), inp(2)), (0, 1), ())

CROSS_ENTROPY = OpDef(
    "linear_softmax_cross_entropy_loss", ("x", "w", "labels"), ("loss", "lse"), (0,),
    "linear_softmax_cross_entropy_loss_vjp", (ct(0), inp(0), inp(1), inp(2), out(1)), (0, 1),
    ("reduction", "ignore_index"))

PAGED_ATTENTION = OpDef(  # decode over a paged KV cache: forward only; lse when the option "lse" is true
    "paged_attention", ("q", "k_pages", "v_pages", "page_table", "seq_lengths"), ("out", "lse"), (0,))

ATTENTION_FP8 = OpDef(  # fp8 q, k, v with f32 descales [*B, K]: forward only; lse when the option "lse" is true
    "attention_fp8", ("q", "k", "v", "q_descale", "k_descale", "v_descale", "q_seq_lengths", "kv_seq_lengths"),
    ("out", "lse"), (0,))

BY_NAME = {d.name: d for d in (LAYER_NORM, RMS_NORM, ATTENTION, ATTENTION_VARLEN, GATED_LINEAR_UNIT, RAGGED_DOT,
                               CROSS_ENTROPY, PAGED_ATTENTION, ATTENTION_FP8)}


def plain(name: str, inputs, outputs) -> OpDef:
    """An op with no VJP wiring (any registered op called by name): returns every output."""
    return OpDef(name, tuple(inputs), tuple(outputs), tuple(range(len(outputs))))
