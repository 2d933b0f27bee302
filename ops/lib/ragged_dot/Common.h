//===- Common.h - ragged_dot problems, kernels, plans ---------*- C++ -*-===//
//
// Internal to ops/lib/ragged_dot. A bound call becomes a Problem; kernels see lhs [M, K],
// rhs [G, K, N], group_sizes [G] and out [M, N] (the VJP: dout [M, N], dlhs, drhs). A
// kernel's IR is a pure function of its spec.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/products/Products.h"

#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/RaggedDot.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax::ragged_detail {

/// hopper (sm_90a): the tile kernels with the rows kernels on TMA rings and wgmma (the
/// tile "tma" configs).
using Impl = ProductImpl;

struct Problem {
  bool vjp = false;
  int64_t M = 0, K = 0, N = 0, G = 0;
  DType dtype = DType::BF16;
  DType compute = DType::F32;  ///< accumulation: f32, f64 for f64
};

/// Reads a validated BoundArgs of ragged_dot / ragged_dot_vjp.
Problem problem_of(const BoundArgs &args);

/// Block sizes and product kind shared by both kernels.
struct Blocks {
  bool exact = false;  ///< products: exact multiply-adds (reference), else tensor cores
  int64_t block_m = 128, block_n = 128, block_k = 32;
  int num_warps = 8;
  bool async_copy = false;  ///< operand blocks through a cp.async ring (tile)
  int64_t stages = 3;       ///< the ring's slots
  /// With async_copy, sm_90a only, the rows kernels (forward, dlhs): the blocks by TMA
  /// through rings a producer warpgroup refills (tma_ring_loop), products on wgmma from
  /// shared memory; rhs read as a 2-D [G R, C] (or [G C, R]) tensor.
  bool tma = false;
};

/// out [M, C] = lhs [M, R] @ rhs[g] per group, rhs [G, R, C] (or [G, C, R] read
/// transposed: the VJP's dlhs = dout @ rhs^T). Grid: row tiles x column tiles, in grouped order.
struct RowsKernelSpec {
  int64_t M = 0, R = 0, C = 0, G = 0;
  bool trans_rhs = false;
  DType dtype = DType::BF16, compute = DType::F32;
  Blocks blocks;

  KernelKey key() const;
};
dsl::Kernel rows_kernel(const RowsKernelSpec &spec);
/// Programs along the row axis: enough for every group's row tiles plus the zero tail.
int64_t row_programs(int64_t M, int64_t G, int64_t block_m);

/// drhs [G, K, N]: drhs[g] = lhs_g^T @ dout_g, one program per (g, K tile, N tile)
/// summing the group's rows block_k at a time.
struct GroupsKernelSpec {
  int64_t M = 0, K = 0, N = 0, G = 0;
  DType dtype = DType::BF16, compute = DType::F32;
  Blocks blocks;

  KernelKey key() const;
};
dsl::Kernel groups_kernel(const GroupsKernelSpec &spec);

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

/// Whether the tile kernels can stream their blocks with cp.async: 16-bit dtypes and
/// rows of lhs (K) and of rhs and dout (N) of whole 16-byte chunks.
bool async_copy_serves(const Problem &p);

} // namespace tokamax::ragged_detail
