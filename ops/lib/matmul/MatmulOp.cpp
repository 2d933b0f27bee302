//===- MatmulOp.cpp - matmul on the op framework ----------------------------===//
//
// matmul as an Op: arguments a, b, bias (optional) then c; attributes trans_a, trans_b
// and alpha. Implementations in auto order: hopper (sm_90a: TMA + wgmma, bf16, f16,
// fp8), tile (mma.sync: bf16, f16, f32 as tf32) and reference (every float dtype). A
// Config holds MatmulConfig's fields; "programs" = -1 (the hopper heuristic) runs a
// persistent grid of one program per SM of the device (3 on the interpreter, so the
// tile loop still runs), 0 one program per tile, N > 0 N programs.
//
//===----------------------------------------------------------------------===//
#include <tokamax/ops/Matmul.h>

#include "ops/lib/CallCache.h"
#include "ops/lib/Dispatch.h"
#include "ops/lib/PlannedImplementation.h"
#include "ops/lib/Views.h"
#include "ops/lib/matmul/MatmulDetail.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

namespace tokamax {

namespace {

const std::vector<std::string> kMatmulArgs{"a", "b", "bias", "c"};

enum class Kind { Hopper, Tile, Reference };

std::string describe(const ArgSpec &s) { return fmt::format("{} [{}]", dtype_name(s.dtype), fmt::join(s.shape, ", ")); }

constexpr int64_t kOnePerSm = -1;

Config toConfig(const MatmulConfig &c, int64_t programs) {
  Config config{{"block_m", c.block_m},     {"block_n", c.block_n},
                {"block_k", c.block_k},     {"group_m", c.group_m},
                {"num_warps", c.num_warps}, {"num_stages", c.num_stages},
                {"warp_specialize", c.warp_specialize}, {"cluster_m", c.cluster_m}, {"tma_store", c.tma_store},
                {"a_in_registers", c.a_in_registers}, {"programs", programs}};
  if (c.rebalance_registers)  // only where set: configs saved before it existed stay valid
    config.set("rebalance_registers", 1);
  if (c.tma_ring)
    config.set("tma_ring", 1);
  return config;
}

/// `sm_count`: what programs = -1 stands for.
MatmulConfig fromConfig(const Config &config, int sm_count) {
  MatmulConfig c;
  c.block_m = config.get("block_m");
  c.block_n = config.get("block_n");
  c.block_k = config.get("block_k");
  c.group_m = config.get_or("group_m", 8);
  c.num_warps = static_cast<int>(config.get("num_warps"));
  c.num_stages = config.get_or("num_stages", 4);
  c.warp_specialize = config.get_or("warp_specialize", 1) != 0;
  c.cluster_m = config.get_or("cluster_m", 1);
  c.tma_store = config.get_or("tma_store", 0) != 0;
  c.a_in_registers = config.get_or("a_in_registers", 0) != 0;
  c.rebalance_registers = config.get_or("rebalance_registers", 0) != 0;
  c.tma_ring = config.get_or("tma_ring", 0) != 0;
  int64_t programs = config.get_or("programs", 0);
  c.programs = programs == kOnePerSm ? sm_count : programs;
  return c;
}

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

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

class MatmulImplementation : public ops_detail::PlannedImplementation {
public:
  explicit MatmulImplementation(Kind kind) : PlannedImplementation(kMatmulArgs, 3), kind_(kind) {}

  std::string name() const override {
    return kind_ == Kind::Hopper ? "hopper" : kind_ == Kind::Tile ? "tile" : "reference";
  }

  bool supported_on(const std::string &arch) const override {
    return kind_ != Kind::Hopper || Arch::parse(arch).has_wgmma();
  }

  std::optional<std::string> why_not(const BoundArgs &args) const override {
    MatmulSpec spec = matmul_spec(args);
    std::string why = kind_ == Kind::Hopper ? hopper_unsupported(spec)
                      : kind_ == Kind::Tile ? tile_unsupported(spec)
                                            : std::string();
    if (why.empty())
      return std::nullopt;
    return why;
  }

  std::optional<std::string> check_config(const BoundArgs &args, const Config &config) const override {
    if (kind_ == Kind::Reference)
      return std::nullopt;  // fixed small blocks
    for (const char *key : {"block_m", "block_n", "block_k", "num_warps"})
      if (!config.has(key))
        return fmt::format("missing \"{}\"", key);
    if (config.get_or("programs", 0) < kOnePerSm)
      return fmt::format("programs must be -1 (one per SM), 0 (one per tile) or a count, got {}",
                         config.get("programs"));
    MatmulConfig c = fromConfig(config, 1);
    for (int64_t v : {c.block_m, c.block_n, c.block_k, int64_t(c.num_warps)})
      if (!isPowerOfTwo(v))
        return fmt::format("block sizes and num_warps must be powers of two, got {}", config.to_json());
    if (c.group_m < 1)
      return fmt::format("group_m must be at least 1, got {}", c.group_m);
    MatmulSpec spec = matmul_spec(args);
    int64_t bytes = static_cast<int64_t>(dtype_size(spec.dtype));
    if (kind_ == Kind::Tile)
      return check_tile_config(spec, c, bytes);
    // A K-major slice row is one swizzle row of 32, 64 or 128 bytes.
    if (c.block_k * bytes != 32 && c.block_k * bytes != 64 && c.block_k * bytes != 128)
      return fmt::format("block_k must be {}, {} or {} (32-, 64- or 128-byte rows), got {}", 32 / bytes, 64 / bytes,
                         128 / bytes, c.block_k);
    if (c.block_m < 64 || c.block_m > 256 || c.block_n < 64 || c.block_n > 256)
      return fmt::format("block_m and block_n must be 64, 128 or 256, got {} x {}", c.block_m, c.block_n);
    if ((c.num_warps != 4 && c.num_warps != 8) || c.block_m % (16 * c.num_warps) != 0)
      return fmt::format("num_warps must be 4 or 8 with block_m a multiple of 16 * num_warps, got {} for {}",
                         c.num_warps, c.block_m);
    // The ring (plus 1 KiB of alignment slack) must fit the 227 KiB of one program (the
    // TMA store's strips are used only where they fit beside it).
    if (c.num_stages < 2 || hopper_ring_bytes(c, bytes) > kHopperSharedLimit)
      return fmt::format("num_stages must be >= 2 and the ring must fit 227 KiB, got {} stages of {} x {}",
                         c.num_stages, c.block_m, c.block_n);
    if (c.cluster_m != 1 && c.cluster_m != 2)
      return fmt::format("cluster_m must be 1 or 2, got {}", c.cluster_m);
    if (c.cluster_m == 2 && !c.warp_specialize)
      return std::string("cluster_m = 2 needs warp_specialize");
    if (c.a_in_registers && spec.trans_a)
      return std::string("a_in_registers needs a as [M, K] (trans_a = false)");
    if (c.rebalance_registers && !c.warp_specialize)
      return std::string("rebalance_registers needs warp_specialize");
    if (c.cluster_m == 2 && !spec.trans_b && c.block_n < 128)
      return fmt::format("cluster_m = 2 with b as [K, N] needs block_n >= 128, got {}", c.block_n);
    if (c.tma_ring) {
      if (is_fp8(spec.dtype))
        return fmt::format("tma_ring takes bf16 or f16 operands, got {}", dtype_name(spec.dtype));
      if (c.programs != 0 && !c.warp_specialize)
        return fmt::format("tma_ring in order runs one program per tile (programs 0), got programs {}", c.programs);
      if (c.cluster_m != 1 || c.a_in_registers || c.rebalance_registers)
        return std::string("tma_ring does not combine with cluster_m, a_in_registers or rebalance_registers");
    }
    return std::nullopt;
  }

  static std::optional<std::string> check_tile_config(const MatmulSpec &spec, const MatmulConfig &c, int64_t bytes) {
    if (c.block_m < 16 || c.block_n < 16 || c.block_m > 256 || c.block_n > 256)
      return fmt::format("block_m and block_n must be in [16, 256], got {} x {}", c.block_m, c.block_n);
    if (!rows_of_16_bytes(spec))
      return std::nullopt;  // masked register loads: any power-of-two block_k
    // The cp.async ring: K slices of whole mma steps, all stages within 227 KiB.
    if (c.block_k * bytes % 32 != 0 || c.block_k * bytes > 256)
      return fmt::format("block_k must be a multiple of {} up to {} for {}, got {}", 32 / bytes, 256 / bytes,
                         dtype_name(spec.dtype), c.block_k);
    if (c.num_stages < 2 || c.num_stages > 8 ||
        c.num_stages * (c.block_m + c.block_n) * c.block_k * bytes > kHopperSharedLimit)
      return fmt::format("num_stages must be in [2, 8] with the ring within 227 KiB, got {} stages of {} x {} x {}",
                         c.num_stages, c.block_m, c.block_n, c.block_k);
    return std::nullopt;
  }

  Config heuristic(const BoundArgs &args) const override {
    MatmulSpec spec = matmul_spec(args);
    if (kind_ == Kind::Hopper)
      return toConfig(default_hopper_config(spec), kOnePerSm);
    if (kind_ == Kind::Tile)
      return toConfig(default_config(spec), 0);
    return Config{};
  }

  std::vector<Config> search_space(const BoundArgs &args) const override {
    std::vector<Config> space{heuristic(args)};
    if (kind_ == Kind::Reference)
      return space;
    MatmulSpec spec = matmul_spec(args);
    auto add = [&](MatmulConfig c, int64_t programs) {
      Config config = toConfig(c, programs);
      if (!check_config(args, config) && std::find(space.begin(), space.end(), config) == space.end())
        space.push_back(config);
    };
    if (kind_ == Kind::Hopper) {
      MatmulConfig c = default_hopper_config(spec);
      for (auto [bm, bn, stages] : {std::tuple<int64_t, int64_t, int64_t>{128, 256, 4}, {128, 256, 3}, {256, 128, 4},
                                    {128, 128, 6}, {128, 128, 4}})
        for (int64_t programs : {kOnePerSm, int64_t(0)})
          for (bool tma : {true, false}) {
            c.block_m = bm, c.block_n = bn, c.num_stages = stages, c.warp_specialize = true, c.tma_store = tma;
            add(c, programs);
          }
      // 2-CTA clusters: within 1 % of the default at 4096^3 on the H200, ahead for
      // 128 x 128 blocks (see docs/performance.md): one config keeps them in reach.
      c = default_hopper_config(spec);
      c.cluster_m = 2;
      add(c, kOnePerSm);
      c = default_hopper_config(spec);
      c.warp_specialize = false, c.cluster_m = 1;
      add(c, 0);
      // Registers moved from the producer to the consumers (setmaxnreg): 1-2 % behind the
      // default on the H200 (docs/performance.md), kept in reach for other shapes.
      c = default_hopper_config(spec);
      c.rebalance_registers = true;
      add(c, kOnePerSm);
      // Half-width K slices (64-byte swizzle): twice the stages in the same shared memory;
      // with A from registers too (wgmma RS, a as [M, K] only), where half-width slices
      // keep the fragments of two slices in flight within a consumer's registers.
      c = default_hopper_config(spec);
      c.block_k /= 2, c.num_stages = std::min<int64_t>(8, 2 * c.num_stages);
      add(c, kOnePerSm);
      if (!spec.trans_a) {
        c.a_in_registers = true;
        add(c, kOnePerSm);
      }
      return space;
    }
    int64_t minK = spec.dtype == DType::F32 ? 8 : 16;
    for (auto [bm, bn, warps] : {std::tuple<int64_t, int64_t, int>{128, 128, 4}, {128, 128, 8}, {128, 256, 8},
                                 {256, 128, 8}, {64, 128, 4}, {64, 64, 4}})
      for (int64_t bk : {2 * minK, 4 * minK})
        for (int64_t stages : {3, 4}) {
          MatmulConfig c = default_config(spec);
          c.block_m = bm, c.block_n = bn, c.block_k = bk, c.num_warps = warps, c.num_stages = stages;
          add(c, 0);
        }
    return space;
  }

  /// One kernel (none for an empty product), its persistent grid as large as the
  /// executor's device (132 SMs when only listing kernels, as on an H100 / H200).
  void execute(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
               std::span<const TensorView> outputs, ops_detail::KernelExecutor &executor) const override {
    MatmulSpec spec = matmul_spec(args);
    if (emptyProduct(spec, inputs, outputs[0], executor))
      return;
    MatmulConfig c = kind_ == Kind::Reference ? MatmulConfig{} : fromConfig(config, executor.sm_count());
    KernelKey key = ops_detail::specializationKey(
        ("matmul_" + name()).c_str(),
        {spec.m, spec.n, spec.k, int64_t(spec.dtype), int64_t(spec.out_dtype), spec.trans_a, spec.trans_b,
         spec.has_bias, c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages, c.warp_specialize,
         c.cluster_m, c.tma_store, c.a_in_registers, c.programs, c.rebalance_registers, c.tma_ring,
         spec.accumulate});
    std::vector<ops_detail::KernelExecutor::Arg> kernelArgs{inputs[0], inputs[1]};
    if (spec.has_bias)
      kernelArgs.emplace_back(inputs[2]);
    kernelArgs.emplace_back(outputs[0]);
    kernelArgs.push_back(ops_detail::KernelExecutor::Arg::value(args.float_attribute("alpha")));
    executor.launch(key, [this, spec, c] { return build(spec, c); }, kernelArgs);
  }

private:
  dsl::Kernel build(const MatmulSpec &spec, const MatmulConfig &c) const {
    switch (kind_) {
    case Kind::Hopper: return matmul_hopper_kernel(spec, c);
    case Kind::Tile: return matmul_kernel(spec, c);
    case Kind::Reference: break;
    }
    return matmul_reference_kernel(spec);
  }

  Kind kind_;
};

class MatmulOp : public Op {
public:
  MatmulOp()
      : Op("matmul", kMatmulArgs, 3,
           {std::make_shared<MatmulImplementation>(Kind::Hopper), std::make_shared<MatmulImplementation>(Kind::Tile),
            std::make_shared<MatmulImplementation>(Kind::Reference)}) {}

  void validate(const BoundArgs &b) const override {
    if (b.op != name())
      throw Error(fmt::format("matmul: the arguments are bound for op \"{}\"", b.op));
    if (b.args.size() != 4 || !b.args[0] || !b.args[1] || !b.args[3])
      throw Error("matmul: expected the arguments a, b, bias (optional), c");
    for (const auto &[key, value] : b.attributes)
      if (key != "trans_a" && key != "trans_b" && key != "alpha")
        throw Error(fmt::format("matmul: unknown attribute \"{}\"", key));
    BoundArgs again = bind_matmul(*b.args[0], *b.args[1], b.args[2], *b.args[3], b.int_attribute("trans_a") != 0,
                                  b.int_attribute("trans_b") != 0, b.float_attribute("alpha"));
    if (!(again == b))
      throw Error(fmt::format("matmul: the bound arguments are not canonical: {}", b.to_json()));
  }
};

[[maybe_unused]] const bool kRegistered = [] {
  register_op(matmul_op());
  return true;
}();

} // namespace

BoundArgs bind_matmul(const ArgSpec &a, const ArgSpec &b, const std::optional<ArgSpec> &bias, const ArgSpec &c,
                      bool trans_a, bool trans_b, double alpha) {
  ops_detail::check_spec("matmul", "a", a);
  ops_detail::check_spec("matmul", "b", b);
  ops_detail::check_spec("matmul", "bias", bias);
  ops_detail::check_spec("matmul", "c", c);
  if (a.shape.size() != 2 || b.shape.size() != 2 || c.shape.size() != 2)
    throw Error(fmt::format("matmul: a, b and c must be 2-D, got a {}, b {}, c {}", describe(a), describe(b),
                            describe(c)));
  if (a.dtype != b.dtype)
    throw Error(fmt::format("matmul: a is {} but b is {}", dtype_name(a.dtype), dtype_name(b.dtype)));
  int64_t m = trans_a ? a.shape[1] : a.shape[0], k = trans_a ? a.shape[0] : a.shape[1];
  int64_t kb = trans_b ? b.shape[1] : b.shape[0], n = trans_b ? b.shape[0] : b.shape[1];
  if (kb != k || c.shape[0] != m || c.shape[1] != n)
    throw Error(fmt::format("matmul: op(a) is [{}, {}], op(b) is [{}, {}] and c is [{}]", m, k, kb, n,
                            fmt::join(c.shape, ", ")));
  if (bias && (bias->shape != std::vector<int64_t>{n} || bias->dtype != c.dtype))
    throw Error(fmt::format("matmul: bias must be a [{}] {} tensor, got {}", n, dtype_name(c.dtype), describe(*bias)));
  if (!std::isfinite(alpha))
    throw Error(fmt::format("matmul: alpha must be finite, got {}", alpha));
  BoundArgs bound{"matmul",
                  {a, b, bias, c},
                  {{"trans_a", trans_a ? "1" : "0"}, {"trans_b", trans_b ? "1" : "0"}, {"alpha", fmt::format("{}", alpha)}}};
  check_matmul_dtypes(matmul_spec(bound), true);  // any implementation's dtypes
  return bound;
}

MatmulSpec matmul_spec(const BoundArgs &args) {
  const ArgSpec &a = args.arg(0), &b = args.arg(1), &c = args.arg(3);
  MatmulSpec spec;
  spec.trans_a = args.int_attribute("trans_a") != 0;
  spec.trans_b = args.int_attribute("trans_b") != 0;
  spec.m = spec.trans_a ? a.shape[1] : a.shape[0];
  spec.k = spec.trans_a ? a.shape[0] : a.shape[1];
  spec.n = spec.trans_b ? b.shape[0] : b.shape[1];
  spec.dtype = a.dtype;
  spec.out_dtype = c.dtype;
  spec.has_bias = args.has(2);
  return spec;
}

const Op &matmul_op() {
  static const MatmulOp op;
  return op;
}

namespace {
BoundArgs bindCall(const TensorView &a, const TensorView &b, const TensorView &c, const MatmulOptions &options) {
  return bind_matmul(ArgSpec::of(a), ArgSpec::of(b),
                     options.bias ? std::optional<ArgSpec>(ArgSpec::of(*options.bias)) : std::nullopt, ArgSpec::of(c),
                     options.trans_a, options.trans_b, options.alpha);
}
std::optional<Config> explicitConfig(const MatmulOptions &options) {
  if (!options.config)
    return std::nullopt;
  return toConfig(*options.config, options.config->programs);
}
std::optional<std::string> explicitImplementation(const MatmulOptions &options) {
  if (options.implementation.empty())
    return std::nullopt;
  return options.implementation;
}
} // namespace

void matmul(const TensorView &a, const TensorView &b, const TensorView &c, Stream &stream,
            const MatmulOptions &options) {
  // Every option joins the key (bias among the tensors); a new field must join it too.
  static_assert(sizeof(MatmulOptions) == 288, "MatmulOptions changed: add the new option to the call key");
  TensorView inputs[3] = {a, b, options.bias ? *options.bias : TensorView()};
  ops_detail::CallKey key(matmul_op());
  key.add({&a, &b, options.bias ? &*options.bias : nullptr, &c}).add(options.trans_a).add(options.trans_b);
  key.add(options.alpha);
  const std::optional<std::string> implementation = explicitImplementation(options);  // short: no allocation
  const std::optional<Config> config = explicitConfig(options);
  ops_detail::run_eager(key, {matmul_op(), inputs, std::span<const TensorView>(&c, 1), stream, implementation, config},
                        [&] {
                          for (auto [name, t] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"c", &c}})
                            if (!t->is_contiguous())
                              throw Error(fmt::format(
                                  "matmul: {} must be contiguous (use trans_a / trans_b for transposes)", name));
                          if (options.bias && !options.bias->is_contiguous())
                            throw Error("matmul: bias must be contiguous");
                          return bindCall(a, b, c, options);
                        });
}

void matmul_host(const TensorView &a, const TensorView &b, const TensorView &c, const MatmulOptions &options) {
  BoundArgs args = bindCall(a, b, c, options);
  TensorView inputs[3] = {a, b, options.bias ? *options.bias : TensorView()};
  matmul_op().interpret(args, inputs, std::span<const TensorView>(&c, 1), explicitImplementation(options),
                        explicitConfig(options));
}

void launch_matmul_step(ops_detail::KernelExecutor &ex, const char *op, MatmulKernelKind kind, const MatmulSpec &spec,
                        TensorView a, TensorView b, TensorView c) {
  static const char *names[] = {"reference", "tile", "hopper"};
  MatmulConfig mc = kind == MatmulKernelKind::Hopper ? default_hopper_config(spec, ex.sm_count())
                    : kind == MatmulKernelKind::Tile ? default_config(spec)
                                                     : MatmulConfig{};
  KernelKey key = ops_detail::specializationKey(
      fmt::format("{}_matmul_{}", op, names[int(kind)]).c_str(),
      {spec.m, spec.n, spec.k, int64_t(spec.dtype), int64_t(spec.out_dtype), spec.trans_a, spec.trans_b,
       spec.accumulate, mc.block_m, mc.block_n, mc.block_k, mc.group_m, mc.num_warps, mc.num_stages,
       mc.warp_specialize, mc.cluster_m, mc.tma_store, mc.programs, mc.rebalance_registers});
  ex.launch(
      key,
      [=] {
        switch (kind) {
        case MatmulKernelKind::Hopper: return matmul_hopper_kernel(spec, mc);
        case MatmulKernelKind::Tile: return matmul_kernel(spec, mc);
        case MatmulKernelKind::Reference: break;
        }
        return matmul_reference_kernel(spec);
      },
      {std::move(a), std::move(b), std::move(c), ops_detail::KernelExecutor::Arg::value(1.0)});
}

} // namespace tokamax
