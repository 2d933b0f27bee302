//===- ImplKind.h - The kinds of implementation and their architectures -*- C++ -*-===//
#pragma once

#include <tokamax/runtime/Arch.h>

#include <cstdint>
#include <string>


namespace tokamax::ops_detail {

/// The kinds of implementation (Tokamax's xla, xla_chunked, triton, mosaic).
enum class ImplKind : uint8_t {
  Reference,  ///< unfused, exact: every dtype, every GPU; the fallback
  Chunked,    ///< the flash loop with every block masked
  Tile,       ///< the portable fused DSL kernel (mma.sync, cp.async): sm_80+
  Hopper,     ///< TMA, wgmma, warp specialization: sm_90a
};

/// "reference", "chunked", "tile", "hopper".
const char *impl_name(ImplKind kind);
/// Whether implementations of `kind` run on GPUs of `arch` (reference: all; chunked and
/// tile: sm_80+; hopper: wgmma, sm_90a). An arch that is no arch name is an Error.
bool impl_supported_on(ImplKind kind, const std::string &arch);

} // namespace tokamax::ops_detail
