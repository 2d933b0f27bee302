//===- Reference.cpp - matmul's reference implementation -------------------===//
//
// Small fixed blocks, products summed by exact multiply-adds (no tensor cores) in f32,
// or f64 for f64: every float dtype, on the device and on the interpreter.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/matmul/Common.h"
#include "ops/lib/products/Products.h"

namespace tokamax {

using namespace dsl;

Kernel matmul_reference_kernel(const MatmulSpec &spec) {
  using namespace matmul_impl;
  check_matmul_spec(spec, true);
  if (spec.windowed())
    throw NotSupported("matmul: windows of b or c (b_cols / c_cols) need the hopper kernel");
  constexpr int64_t bm = 16, bn = 16, bk = 8;
  DType accType = spec.dtype == DType::F64 ? DType::F64 : DType::F32;
  Kernel k("matmul_reference", {4});
  Params p = declare(k, spec, accType);
  k.grid(cdiv(spec.m, bm), cdiv(spec.n, bn));
  Value m0 = k.program_id(0) * Value(bm), n0 = k.program_id(1) * Value(bn);
  Value acc = k.full({bm, bn}, 0.0, accType);
  std::vector<Value> out = k.loop(0, spec.k, bk, {acc}, [&](Value k0, std::vector<Value> carried) {
    Value a = cast(blockA(spec, p, m0, k0, bm, bk), accType);
    Value b = cast(blockB(spec, p, k0, n0, bk, bn), accType);
    return std::vector<Value>{exact_product(a, b, carried[0])};
  });
  epilogue(spec, p, out[0], m0, n0, bn);
  return k;
}

namespace matmul_impl {

std::optional<std::string> Reference::why_not(const Problem &) { return std::nullopt; }
Reference::Config Reference::heuristic(const Problem &) { return {}; }
std::vector<Reference::Config> Reference::search_space(const Problem &p) { return {heuristic(p)}; }
std::optional<std::string> Reference::check(const Problem &, const Config &) { return std::nullopt; }

/// The config is ignored: the kernel is keyed with MatmulConfig's defaults.
void Reference::execute(const Problem &p, const Config &, std::span<const TensorView> inputs,
                        std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor) {
  run_matmul(
      kind, p, MatmulConfig{}, [](const MatmulSpec &spec, const MatmulConfig &) { return matmul_reference_kernel(spec); },
      inputs, outputs, executor);
}

} // namespace matmul_impl
} // namespace tokamax
