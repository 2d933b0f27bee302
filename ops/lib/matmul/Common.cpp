//===- Common.cpp - What matmul's implementations share ---------------===//
#include "ops/lib/matmul/Common.h"

#include "ops/lib/framework/SharedMemory.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace tokamax {

using namespace dsl;

void check_matmul_spec(const MatmulSpec &spec, bool reference) {
  // (The op serves empty products without a kernel; a kernel needs every extent.)
  if (spec.m < 1 || spec.n < 1 || spec.k < 1)
    throw Error(fmt::format("matmul: needs M, N, K >= 1, got {} x {} x {}", spec.m, spec.n, spec.k));
  if (spec.b_cols < 0 || spec.c_cols < 0)
    throw Error(fmt::format("matmul: b_cols and c_cols must be >= 0 (0: no window), got {} and {}", spec.b_cols,
                            spec.c_cols));
  check_matmul_dtypes(spec, reference);
}

void check_matmul_dtypes(const MatmulSpec &spec, bool reference) {
  if (!is_floating(spec.dtype))
    throw Error(fmt::format("matmul: dtype must be bf16, f16, f32, f64, f8e4m3 or f8e5m2, got {}",
                            dtype_name(spec.dtype)));
  if (spec.dtype == DType::F64 && !reference)
    throw NotSupported("matmul: f64 has no tensor-core path; use matmul_reference_kernel "
                       "(the CUDA cores, or the CPU interpreter)");
  DType wide = spec.dtype == DType::F64 ? DType::F64 : DType::F32;
  DType narrow = is_fp8(spec.dtype) ? DType::BF16 : spec.dtype;  // fp8 products come out as bf16 or f32
  if (spec.out_dtype != narrow && spec.out_dtype != wide)
    throw Error(fmt::format("matmul: c must be {} or {} for {} inputs, got {}", dtype_name(narrow),
                            dtype_name(wide), dtype_name(spec.dtype), dtype_name(spec.out_dtype)));
}

std::string tile_unsupported(const MatmulSpec &spec) {
  if (spec.dtype == DType::F64 || is_fp8(spec.dtype))
    return fmt::format("the tile kernel (mma.sync) takes bf16, f16 or f32, got {}", dtype_name(spec.dtype));
  return {};
}

bool rows_of_16_bytes(const MatmulSpec &spec) {
  int64_t rowA = spec.trans_a ? spec.m : spec.k,
          rowB = spec.trans_b ? spec.b_stored_k() : spec.n;
  int64_t perRow = 16 / static_cast<int64_t>(std::max<size_t>(1, dtype_size(spec.dtype)));
  return rowA % perRow == 0 && rowB % perRow == 0;
}

namespace matmul_impl {

MatmulProblem problem_of(const BoundArgs &args) { return {matmul_spec(args), args.float_attribute("alpha")}; }

MatmulConfig KeyedMatmulConfig::resolved(int sm_count) const {
  MatmulConfig c = *this;
  if (c.programs == kOnePerSm)
    c.programs = sm_count;
  return c;
}

namespace {
bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
} // namespace

std::optional<std::string> check_blocks(const KeyedMatmulConfig &c) {
  if (c.programs < kOnePerSm)
    return fmt::format("programs must be -1 (one per SM), 0 (one per tile) or a count, got {}", c.programs);
  for (int64_t v : {c.block_m, c.block_n, c.block_k, int64_t(c.num_warps)})
    if (!isPowerOfTwo(v))
      return fmt::format("block sizes and num_warps must be powers of two, got {}", ops_detail::to_config(c).to_json());
  if (c.group_m < 1)
    return fmt::format("group_m must be at least 1, got {}", c.group_m);
  return std::nullopt;
}

void add_candidate(std::vector<KeyedMatmulConfig> &space, const KeyedMatmulConfig &c,
                   const std::optional<std::string> &problem) {
  if (problem)
    return;
  const Config map = ops_detail::to_config(c);
  for (const KeyedMatmulConfig &there : space)
    if (ops_detail::to_config(there) == map)
      return;
  space.push_back(c);
}

namespace {

/// The rule for empty tensors: no rows or columns of c is a no-op; K = 0 (an empty sum)
/// makes c = bias in every row, or 0. Returns whether the call was one of those.
bool emptyProduct(const MatmulSpec &spec, std::span<const TensorView> inputs, const TensorView &c,
                  ops_detail::KernelExecutor &executor) {
  if (spec.m > 0 && spec.n > 0 && spec.k > 0)
    return false;
  if (spec.m == 0 || spec.n == 0)
    return true;
  if (!spec.has_bias) {
    executor.zero(c);
    return true;
  }
  auto bytesAt = [&](uint64_t address, size_t bytes) {
    const int64_t n = static_cast<int64_t>(bytes);
    return TensorView(address, DType::I8, std::span<const int64_t>(&n, 1), c.device());
  };
  // Row 0 from bias, then the rows so far doubled: log2(M) copies.
  const size_t row = c.nbytes() / spec.m;
  executor.copy(bytesAt(c.data(), row), bytesAt(inputs[2].data(), row));
  for (int64_t done = 1; done < spec.m; done *= 2) {
    const size_t bytes = size_t(std::min(done, spec.m - done)) * row;
    executor.copy(bytesAt(c.data() + done * row, bytes), bytesAt(c.data(), bytes));
  }
  return true;
}

} // namespace

void run_matmul(ops_detail::ImplKind kind, const MatmulProblem &p, const MatmulConfig &c, BuildKernel build,
                std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                ops_detail::KernelExecutor &executor) {
  const MatmulSpec &spec = p.spec;
  if (emptyProduct(spec, inputs, outputs[0], executor))
    return;
  // The spec, then the config's fields in its keys' order (a new key keys the kernel too).
  KernelKey key = ops_detail::specializationKey(
      (std::string("matmul_") + ops_detail::impl_name(kind)).c_str(),
      {spec.m, spec.n, spec.k, int64_t(spec.dtype), int64_t(spec.out_dtype), spec.trans_a, spec.trans_b,
       spec.has_bias});
  std::apply([&](const auto &...field) { (key.add(int64_t(c.*field.member)), ...); }, KeyedMatmulConfig::keys);
  key.add(int64_t(spec.accumulate));
  std::vector<ops_detail::KernelExecutor::Arg> kernelArgs{inputs[0], inputs[1]};
  if (spec.has_bias)
    kernelArgs.emplace_back(inputs[2]);
  kernelArgs.emplace_back(outputs[0]);
  kernelArgs.push_back(ops_detail::KernelExecutor::Arg::value(p.alpha));
  executor.launch(key, [build, spec, c] { return build(spec, c); }, kernelArgs);
}

std::optional<std::string> check_shared_memory(ops_detail::ImplKind kind, const MatmulProblem &p,
                                               const KeyedMatmulConfig &keyed, BuildKernel build) {
  const std::array<TensorView, 3> inputs{};  // a, b, bias: views without data
  const std::array<TensorView, 1> outputs{};
  return ops_detail::check_shared_memory([&](ops_detail::KernelExecutor &ex) {
    run_matmul(kind, p, keyed.resolved(ex.sm_count()), build, inputs, outputs, ex);
  });
}

Params declare(Kernel &k, const MatmulSpec &spec, DType scalar) {
  Params p;
  p.a = k.input("a", spec.dtype, spec.trans_a ? std::vector<int64_t>{spec.k, spec.m} : std::vector<int64_t>{spec.m, spec.k});
  const int64_t bK = spec.b_stored_k();
  p.b = k.input("b", spec.dtype, spec.trans_b ? std::vector<int64_t>{spec.n, bK} : std::vector<int64_t>{bK, spec.n});
  if (spec.has_bias)
    p.bias = k.input("bias", spec.out_dtype, {spec.n});
  p.c = k.output("c", spec.out_dtype, {spec.m, spec.c_stored_n()});
  p.alpha = k.scalar("alpha", scalar);
  if (spec.windowed())
    p.window = k.scalar("window", DType::I32);
  return p;
}

Value cast(const Value &v, DType dtype) { return v.dtype() == dtype ? v : v.to(dtype); }

Value blockA(const MatmulSpec &spec, const Params &p, Value m0, Value k0, int64_t bm, int64_t bk) {
  return spec.trans_a ? p.a.load({k0, m0}, {bk, bm}).trans() : p.a.load({m0, k0}, {bm, bk});
}
Value blockB(const MatmulSpec &spec, const Params &p, Value k0, Value n0, int64_t bk, int64_t bn) {
  return spec.trans_b ? p.b.load({n0, k0}, {bn, bk}).trans() : p.b.load({k0, n0}, {bk, bn});
}

void epilogue(const MatmulSpec &spec, const Params &p, Value acc, Value m0, Value n0, int64_t bn, bool tma) {
  Value out = acc * cast(p.alpha, acc.dtype());
  if (spec.has_bias)
    out = out + cast(p.bias.load({n0}, {bn}), acc.dtype()).expand(0);
  const Value cn = p.c_column(spec, n0);
  if (spec.accumulate && tma && spec.out_dtype == DType::F32) {
    // TMA's reduce-add: c's tile is never read into registers (one f32 add per element,
    // as the load-add-store below, so the sums are the same bit for bit).
    p.c.tma_reduce_add({m0, cn}, out);
    return;
  }
  if (spec.accumulate)
    out = out + cast(p.c.load({m0, cn}, {acc.shape()[0], bn}), acc.dtype());
  if (tma)
    p.c.tma_store({m0, cn}, cast(out, spec.out_dtype));
  else
    p.c.store({m0, cn}, cast(out, spec.out_dtype));
}

} // namespace matmul_impl
} // namespace tokamax
