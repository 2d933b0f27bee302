//===- GatedLinearUnit.h - gated_linear_unit, forward and VJP ------*- C++ -*-===//
//
//   x [..., K], weights [K, 2, N] -> out [..., N]
//   out = act(x @ weights[:, 0, :]) * (x @ weights[:, 1, :])
//
// The gated MLP of modern transformers (SwiGLU, GeGLU, ...). x, weights and out share
// one dtype (bf16, f16, f32 or f64); the products accumulate in f32 (f64 for f64) and the
// gate is applied to the accumulated pre-activations before out is rounded.
// Activations: "swish" (also "silu": x * sigmoid(x)), "gelu_tanh" (the tanh
// approximation), "gelu" (exact, with erf; also "gelu_exact"), "sigmoid", "relu" and
// "none" (a bilinear unit).
//
// The VJP forms dh = [dout * b * act'(a), dout * act(a)] as a [..., 2, N] workspace in
// x's dtype from the pre-activations a = x W0, b = x W1, then dx = dh @ weights^T and
// dweights = x^T @ dh with the matmul kernels. It recomputes a and b, unless the forward
// wrote them (the optional output `preactivations` [..., 2, N] in x's dtype, what a
// peer's two GEMMs keep for their backward; the forward then computes them with the
// matmul kernel, as "unfused" does) and the VJP is given them: it reads them, never
// writes them, so a backward may run twice.
//
// Implementations, in the order auto tries them:
//   "hopper":    sm_90a, K and N multiples of 8. By default ("unfused") both products
//                x W on the hopper matmul into an [..., 2N] workspace in x's dtype, then
//                an elementwise kernel applies the gate (in the VJP its gradient, in
//                place); with "unfused": 0 tile's gate kernel on TMA rings and wgmma.
//   "tile":      one kernel per call computing both products of an output tile (two f32
//                accumulators over one K loop on tensor cores: mma.sync) and applying the
//                gate in its epilogue: no [..., 2N] intermediate. With rows of whole
//                16-byte chunks (K and N multiples of 8) the x, W0 and W1 blocks go
//                through a cp.async ring ("async_copy", "stages"), else masked register
//                loads read one step ahead. bf16, f16; any M, K, N; sm_80+.
//   "reference": the same structure with exact multiply-add products in f32 / f64 on
//                small blocks; every dtype, f64 included.
// Empty calls: no rows or columns is a no-op (the VJP zero-fills what it owns); K = 0
// gives out = 0.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>

#include <optional>
#include <string>

namespace tokamax {

class Stream;

enum class GluActivation : uint8_t { Swish, GeluTanh, Gelu, Sigmoid, Relu, None };

/// The canonical name ("swish", "gelu_tanh", "gelu", "sigmoid", "relu", "none").
TOKAMAX_API const char *glu_activation_name(GluActivation activation);
/// Parses a name (canonical or "silu" / "gelu_exact"); throws Error naming the argument
/// `activation` and the known names otherwise.
TOKAMAX_API GluActivation parse_glu_activation(const std::string &name);

struct TOKAMAX_API GluOptions {
  std::string activation = "swish";
  /// "hopper", "tile" or "reference"; std::nullopt: the first that serves the call.
  std::optional<std::string> implementation;
  /// Overrides the config (else: config providers, then the heuristic).
  std::optional<Config> config;
};

// ---- Device tensors, launched on `stream` (asynchronous). ----

TOKAMAX_API void gated_linear_unit(const TensorView &x, const TensorView &weights, const TensorView &out,
                                   Stream &stream, const GluOptions &options = {});
/// The same, also writing the pre-activations [..., 2, N] (x W, x's dtype) for the VJP.
TOKAMAX_API void gated_linear_unit(const TensorView &x, const TensorView &weights, const TensorView &out,
                                   const TensorView &preactivations, Stream &stream, const GluOptions &options = {});
/// dx and dweights from dout and the forward's inputs (options must be the forward's).
TOKAMAX_API void gated_linear_unit_vjp(const TensorView &dout, const TensorView &x, const TensorView &weights,
                                       const TensorView &dx, const TensorView &dweights, Stream &stream,
                                       const GluOptions &options = {});
/// The same from the forward's pre-activations (not recomputed; only read).
TOKAMAX_API void gated_linear_unit_vjp(const TensorView &dout, const TensorView &x, const TensorView &weights,
                                       const TensorView &preactivations, const TensorView &dx,
                                       const TensorView &dweights, Stream &stream, const GluOptions &options = {});

// ---- Host tensors (host_view(...)) on the CPU interpreter, same implementations and
// kernels (implementation choice as on an sm_90a GPU). ----

TOKAMAX_API void gated_linear_unit_host(const TensorView &x, const TensorView &weights, const TensorView &out,
                                        const GluOptions &options = {});
TOKAMAX_API void gated_linear_unit_host(const TensorView &x, const TensorView &weights, const TensorView &out,
                                        const TensorView &preactivations, const GluOptions &options = {});
TOKAMAX_API void gated_linear_unit_vjp_host(const TensorView &dout, const TensorView &x, const TensorView &weights,
                                            const TensorView &dx, const TensorView &dweights,
                                            const GluOptions &options = {});
TOKAMAX_API void gated_linear_unit_vjp_host(const TensorView &dout, const TensorView &x, const TensorView &weights,
                                            const TensorView &preactivations, const TensorView &dx,
                                            const TensorView &dweights, const GluOptions &options = {});

// ---- The ops (for autotuning, precompilation and tools). ----
//
// Argument order (inputs, then outputs):
//   gated_linear_unit:     x, weights | out, preactivations (optional)
//   gated_linear_unit_vjp: dout, x, weights, preactivations (optional) | dx, dweights
// Attribute "activation": the canonical name.
// Configs (tile): block_m, block_n, block_k, num_warps, group_m, async_copy (0 / 1),
// stages (the ring's slots, 2 to 4), wgmma (0 / 1: with async_copy and block_m = 16 *
// num_warps, the products read the ring on wgmma on sm_90a; opt-in), unfused (0 / 1,
// tile and hopper: both products x W on the matmul kernel into the call's scratch, M x 2N
// in x's dtype, then an elementwise kernel applies the gate or its gradient, instead of
// the gate kernel), programs (the gate kernel on TMA rings: a persistent grid, -1 one
// program an SM) and tma_store (0 / 1, the forward's gate kernel on TMA rings: its gated
// tiles leave by TMA stores); reference: block_m, block_n, block_k, num_warps.

TOKAMAX_API const Op &gated_linear_unit_op();
TOKAMAX_API const Op &gated_linear_unit_vjp_op();

/// Binds a call from specs; throws Error naming the bad argument.
TOKAMAX_API BoundArgs bind_gated_linear_unit(const ArgSpec &x, const ArgSpec &weights, const ArgSpec &out,
                                             GluActivation activation,
                                             const std::optional<ArgSpec> &preactivations = std::nullopt);
TOKAMAX_API BoundArgs bind_gated_linear_unit_vjp(const ArgSpec &dout, const ArgSpec &x, const ArgSpec &weights,
                                                 const ArgSpec &dx, const ArgSpec &dweights,
                                                 GluActivation activation,
                                                 const std::optional<ArgSpec> &preactivations = std::nullopt);

/// out's spec for x [..., K] and weights [K, 2, N]: [..., N] in x's dtype.
TOKAMAX_API ArgSpec gated_linear_unit_out_spec(const ArgSpec &x, const ArgSpec &weights);
/// The pre-activations' spec: [..., 2, N] in x's dtype (x W0 then x W1 of each row).
TOKAMAX_API ArgSpec gated_linear_unit_preactivations_spec(const ArgSpec &x, const ArgSpec &weights);

} // namespace tokamax
