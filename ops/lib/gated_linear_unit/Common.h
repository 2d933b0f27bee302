//===- Common.h - gated_linear_unit problems, kernels, plans ----*- C++ -*-===//
//
// Internal to ops/lib/gated_linear_unit. A bound call becomes a Problem (x's leading dims flattened to
// M); kernels see x [M, K], weights [K, 2, N], out / dout [M, N] and the VJP's dh
// workspace [M, 2, N]. A kernel's IR is a pure function of its GateKernelSpec.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/GatedLinearUnit.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax::glu_detail {

/// hopper (sm_90a): the gate kernels on TMA rings and wgmma (the tile "tma" configs),
/// the VJP's dx and dweights on the hopper matmul.
using Impl = ProductImpl;

struct Problem {
  bool vjp = false;
  int64_t M = 0, K = 0, N = 0;
  DType dtype = DType::BF16;
  DType compute = DType::F32;  ///< accumulation: f32, f64 for f64
  GluActivation activation = GluActivation::Swish;
};

/// Reads a validated BoundArgs of gated_linear_unit / gated_linear_unit_vjp.
Problem problem_of(const BoundArgs &args);

/// The kernel computing both products of an output tile: the forward writes the gated
/// tile to out; the VJP's reads dout and writes dh = [da, db] instead.
struct GateKernelSpec {
  Problem p;
  bool exact = false;        ///< products: exact multiply-adds (reference), else tensor cores
  int64_t block_m = 128, block_n = 128, block_k = 32, group_m = 8;
  int num_warps = 8;
  bool async_copy = false;   ///< x, W0, W1 blocks through a cp.async ring
  int64_t stages = 3;        ///< the ring's slots
  /// With async_copy, on sm_90a: every warp along M (16 rows each) and the products read
  /// the ring's weight blocks on wgmma (dsl::KernelOptions::wgmma_dots); mma.sync elsewhere.
  bool wgmma = false;
  /// With async_copy, on sm_90a only: the blocks come by TMA (weights read as [K, 2N]),
  /// a producer warpgroup refilling the rings (dsl::Kernel::specialized_loop), and both
  /// products read both operands from shared memory on wgmma.
  bool tma = false;
  /// With tma: a persistent grid of this many programs walking the tiles (0: one per
  /// tile), so the producer loads a tile's blocks while the consumers gate the last one.
  int64_t programs = 0;

  KernelKey key() const;
};

dsl::Kernel gate_kernel(const GateKernelSpec &spec);

/// act(x), and g * act'(x), elementwise in x's dtype (f32 or f64).
dsl::Value activate(GluActivation activation, const dsl::Value &x);
dsl::Value activate_vjp(GluActivation activation, const dsl::Value &x, const dsl::Value &g);

//===----------------------------------------------------------------------===//
// Plans and configs (Plans.cpp)
//===----------------------------------------------------------------------===//

/// Runs the call: tensors in the op's argument order (inputs, then outputs).
void execute(const Problem &p, Impl impl, const Config &config, std::span<const TensorView> inputs,
             std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor);

std::optional<std::string> why_not(const Problem &p, Impl impl);
Config heuristic(const Problem &p, Impl impl);
std::vector<Config> search_space(const Problem &p, Impl impl);
std::optional<std::string> check_config(const Problem &p, Impl impl, const Config &config);

/// Whether the tile kernel can stream its blocks with cp.async: 16-bit dtypes and rows of
/// x (K) and of each weight half (N) of whole 16-byte chunks.
bool async_copy_serves(const Problem &p);

} // namespace tokamax::glu_detail
