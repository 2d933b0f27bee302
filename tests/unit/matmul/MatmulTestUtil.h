//===- MatmulTestUtil.h - Shared by the matmul unit tests ---------*- C++ -*-===//
#pragma once

#include <tokamax/ops/Matmul.h>

#include <optional>
#include <string>

namespace test {

/// "MxNxK in->out [a^T] [b^T] [+bias] [alpha=...]" for test messages.
inline std::string describe(const tokamax::MatmulSpec &s, std::optional<double> alpha = std::nullopt) {
  using tokamax::dtype_name;
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " +
         std::string(dtype_name(s.dtype)) + "->" + std::string(dtype_name(s.out_dtype)) + (s.trans_a ? " a^T" : "") +
         (s.trans_b ? " b^T" : "") + (s.has_bias ? " +bias" : "") +
         (alpha ? " alpha=" + std::to_string(*alpha) : std::string());
}

} // namespace test
