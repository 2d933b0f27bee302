//===- Common.h - Shared between the matmul kernels and its op -*- C++ -*-===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/ops/Matmul.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tokamax {

/// Throws Error (bad spec) or NotSupported (f64 off the reference kernel) naming the
/// problem; `reference`: the spec is for matmul_reference_kernel.
void check_matmul_spec(const MatmulSpec &spec, bool reference);
/// The dtype rules alone (bind_matmul: any extent may be 0).
void check_matmul_dtypes(const MatmulSpec &spec, bool reference);
/// Why the tile kernel (mma.sync) cannot serve `spec`'s dtype (f64, fp8); empty when it can.
std::string tile_unsupported(const MatmulSpec &spec);
/// Whether the rows of a and b (as stored) are whole 16-byte chunks: TMA (hopper) and
/// the tile kernel's cp.async ring need it; the tile kernel falls back to masked loads.
bool rows_of_16_bytes(const MatmulSpec &spec);

/// Shared memory one hopper program may use, and what its parts take: the ring of
/// num_stages [block_m + block_n][block_k] slices of `elem_bytes` elements (each stage
/// 1 KiB-aligned) with two mbarriers per stage (plus 1 KiB of alignment slack), and the
/// TMA store's two [block_m][128-byte] strips (plus 1 KiB).
inline constexpr int64_t kHopperSharedLimit = 227 * 1024;
inline int64_t hopper_ring_bytes(const MatmulConfig &c, int64_t elem_bytes) {
  const int64_t stage = ((c.block_m + c.block_n) * c.block_k * elem_bytes + 1023) / 1024 * 1024;
  return c.num_stages * stage + 16 * c.num_stages + 1024;
}
inline int64_t hopper_store_strip_bytes(const MatmulConfig &c) { return 2 * c.block_m * 128 + 1024; }

} // namespace tokamax
