//===- TimingArgs.h - The arguments every timing entry point checks -*- C++ -*-===//
#pragma once

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <functional>

namespace tokamax::detail {

/// Refuses, before the device is touched, counts that would size event vectors wrongly
/// and work that cannot be called; `who` names the entry point in the message.
inline void check_timing_args(const char *who, const std::function<void()> &work, int iterations, int warmup) {
  if (iterations < 1)
    throw Error(fmt::format("{}: iterations must be >= 1 (got {})", who, iterations));
  if (warmup < 0)
    throw Error(fmt::format("{}: warmup must be >= 0 (got {})", who, warmup));
  if (!work)
    throw Error(fmt::format("{}: no work to time", who));
}

} // namespace tokamax::detail
