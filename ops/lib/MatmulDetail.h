//===- MatmulDetail.h - Shared between the matmul kernels and its op -*- C++ -*-===//
#pragma once

#include <tokamax/ops/Matmul.h>

#include <string>

namespace tokamax {

/// Throws Error (bad spec) or NotSupported (f64 off the reference kernel) naming the
/// problem; `reference`: the spec is for matmul_reference_kernel.
void check_matmul_spec(const MatmulSpec &spec, bool reference);
/// Why the tile kernel (mma.sync) cannot serve `spec`'s dtype (f64, fp8); empty when it can.
std::string tile_unsupported(const MatmulSpec &spec);
/// Whether the rows of a and b (as stored) are whole 16-byte chunks: TMA (hopper) and
/// the tile kernel's cp.async ring need it; the tile kernel falls back to masked loads.
bool rows_of_16_bytes(const MatmulSpec &spec);

} // namespace tokamax
