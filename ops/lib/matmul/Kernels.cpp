//===- Kernels.cpp - Matrix multiplication: tile and reference kernels -------===//
#include <tokamax/ops/Matmul.h>

#include "ops/lib/framework/Dispatch.h"
#include "ops/lib/matmul/Common.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tokamax {

using namespace dsl;

void check_matmul_spec(const MatmulSpec &spec, bool reference) {
  // (The op serves empty products without a kernel; a kernel needs every extent.)
  if (spec.m < 1 || spec.n < 1 || spec.k < 1)
    throw Error(fmt::format("matmul: needs M, N, K >= 1, got {} x {} x {}", spec.m, spec.n, spec.k));
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
  int64_t rowA = spec.trans_a ? spec.m : spec.k, rowB = spec.trans_b ? spec.k : spec.n;
  int64_t perRow = 16 / static_cast<int64_t>(std::max<size_t>(1, dtype_size(spec.dtype)));
  return rowA % perRow == 0 && rowB % perRow == 0;
}

namespace {

struct Params {
  TensorArg a, b, bias, c;
  Value alpha;
};

Params declare(Kernel &k, const MatmulSpec &spec, DType scalar) {
  Params p;
  p.a = k.input("a", spec.dtype, spec.trans_a ? std::vector<int64_t>{spec.k, spec.m} : std::vector<int64_t>{spec.m, spec.k});
  p.b = k.input("b", spec.dtype, spec.trans_b ? std::vector<int64_t>{spec.n, spec.k} : std::vector<int64_t>{spec.k, spec.n});
  if (spec.has_bias)
    p.bias = k.input("bias", spec.out_dtype, {spec.n});
  p.c = k.output("c", spec.out_dtype, {spec.m, spec.n});
  p.alpha = k.scalar("alpha", scalar);
  return p;
}

Value cast(const Value &v, DType dtype) { return v.dtype() == dtype ? v : v.to(dtype); }

/// [bm, bk] block of op(a) and [bk, bn] block of op(b) at (m0, k0) and (k0, n0).
Value blockA(const MatmulSpec &spec, const Params &p, Value m0, Value k0, int64_t bm, int64_t bk) {
  return spec.trans_a ? p.a.load({k0, m0}, {bk, bm}).trans() : p.a.load({m0, k0}, {bm, bk});
}
Value blockB(const MatmulSpec &spec, const Params &p, Value k0, Value n0, int64_t bk, int64_t bn) {
  return spec.trans_b ? p.b.load({n0, k0}, {bn, bk}).trans() : p.b.load({k0, n0}, {bk, bn});
}

/// alpha * acc (+ bias) (+ c with spec.accumulate), stored to c at (m0, n0), through TMA
/// when `tma`.
void epilogue(const MatmulSpec &spec, const Params &p, Value acc, Value m0, Value n0, int64_t bn, bool tma = false) {
  Value out = acc * cast(p.alpha, acc.dtype());
  if (spec.has_bias)
    out = out + cast(p.bias.load({n0}, {bn}), acc.dtype()).expand(0);
  if (spec.accumulate)
    out = out + cast(p.c.load({m0, n0}, {acc.shape()[0], bn}), acc.dtype());
  if (tma)
    p.c.tma_store({m0, n0}, cast(out, spec.out_dtype));
  else
    p.c.store({m0, n0}, cast(out, spec.out_dtype));
}

} // namespace

/// Block origin (m0, n0) of tile `pid` in grouped order: group_m consecutive tiles walk
/// down M before moving along N, so the B blocks they share stay in L2.
std::pair<Value, Value> grouped_block(Value pid, int64_t gridM, int64_t gridN, int64_t groupM, int64_t bm,
                                     int64_t bn) {
  groupM = std::max<int64_t>(1, groupM);
  Value inGroup = Value(groupM * gridN);
  Value firstM = (pid / inGroup) * Value(groupM);
  Value sizeM = minimum(Value(gridM) - firstM, Value(groupM));
  Value local = pid % inGroup;
  return {(firstM + local % sizeM) * Value(bm), (local / sizeM) * Value(bn)};
}


Value exact_product(const Value &a, const Value &b, const Value &acc) {
  // [bm, bk, 1] * [1, bk, bn], summed over k.
  return acc + (a.expand(2) * b.expand(0)).sum(1);
}

std::vector<Config> block_search_space(Config heuristic, bool reference, bool ring, const Config &extra,
                                       const std::function<bool(const Config &)> &valid) {
  std::vector<Config> space{std::move(heuristic)};
  auto add = [&](Config c) {
    if (std::find(space.begin(), space.end(), c) == space.end() && valid(c))
      space.push_back(std::move(c));
  };
  if (reference) {
    add({{"block_m", 16}, {"block_n", 32}, {"block_k", 8}, {"num_warps", 4}});
    add({{"block_m", 32}, {"block_n", 16}, {"block_k", 8}, {"num_warps", 4}});
    return space;
  }
  for (int64_t bm : {64, 128, 256})
    for (int64_t bn : {64, 128, 256})
      for (int64_t bk : {32, 64})
        for (int64_t warps : {4, 8})
          for (int64_t stages : {0, 3, 4}) {  // 0: register loads
            if (stages && !ring)
              continue;
            Config c = extra;
            c.set("block_m", bm).set("block_n", bn).set("block_k", bk).set("num_warps", warps);
            if (stages)
              c.set("async_copy", 1).set("stages", stages);
            add(std::move(c));
          }
  return space;
}

std::vector<Value> ring_loop(Kernel &k, const Value &lo, const Value &hi, int64_t step, int64_t stages,
                             std::vector<Value> accs, const RingCopies &copies, const RingProducts &products,
                             const Mbarriers *tma) {
  const size_t numAccs = accs.size();
  std::vector<Value> carried = std::move(accs);
  size_t perStep = 0;
  for (int64_t ahead = 0; ahead + 1 < stages; ++ahead) {
    Value k0 = lo.is_literal() ? Value(int64_t(*lo.literal()) + ahead * step) : lo + Value(ahead * step);
    std::vector<Value> blocks = copies(k0, k.constant(double(ahead), DType::I32));
    perStep = blocks.size();
    carried.insert(carried.end(), blocks.begin(), blocks.end());
  }
  carried.push_back(k.constant(0, DType::I32));  // this step's slot
  std::vector<Value> out = k.loop(lo, hi, step, carried, [&](Value k0, std::vector<Value> c) {
    Value slot = c.back();
    auto blocks = c.begin() + numAccs;
    auto refill = [&] { return copies(k0 + Value((stages - 1) * step), (slot + Value(stages - 1)) % Value(stages)); };
    std::vector<Value> next, result;
    if (!tma) {
      k.wait_async(static_cast<int>((stages - 2) * perStep));
      next = refill();
      result = products(k0, {c.begin(), blocks}, {blocks, blocks + perStep});
    } else {
      // Step j's copies complete phase j / stages of its slot's barrier.
      k.wait(*tma, slot, ((k0 - lo) / Value(step * stages)) % Value(2));
      result = products(k0, {c.begin(), blocks}, {blocks, blocks + perStep});
      k.wait_async(0);  // every warp is past step j - 1: its slot may be refilled
      next = refill();
    }
    result.insert(result.end(), blocks + perStep, c.end() - 1);  // later steps' blocks, in flight
    result.insert(result.end(), next.begin(), next.end());
    result.push_back((slot + Value(1)) % Value(stages));
    return result;
  });
  if (!tma) {
    k.wait_async(0);  // the last copies land before the program ends
  } else {
    // Steps n .. n + stages - 2 were copied and not used: wait for them too.
    Value n = lo.is_literal() && hi.is_literal()
                  ? Value(int64_t(cdiv(int64_t(*hi.literal()) - int64_t(*lo.literal()), step)))
                  : (hi - lo + Value(step - 1)) / Value(step);
    for (int64_t i = 0; i + 1 < stages; ++i) {
      Value j = n.is_literal() ? Value(int64_t(*n.literal()) + i) : n + Value(i);
      if (j.is_literal())
        k.wait(*tma, Value(int64_t(*j.literal()) % stages), Value(int64_t(*j.literal()) / stages % 2));
      else
        k.wait(*tma, j % Value(stages), (j / Value(stages)) % Value(2));
    }
  }
  out.resize(numAccs);
  return out;
}

MatmulConfig default_config(const MatmulSpec &spec) {
  MatmulConfig config;
  config.block_m = std::clamp<int64_t>(ops_detail::next_power_of_two(spec.m), 16, 128);
  config.block_n = std::clamp<int64_t>(ops_detail::next_power_of_two(spec.n), 16, 128);
  int64_t minK = spec.dtype == DType::F32 ? 8 : 16;  // one mma K step (k16, tf32 k8)
  if (rows_of_16_bytes(spec)) {
    // cp.async ring: 64-byte K slices (two mma steps), four stages (16 KiB each at
    // 128 x 128 bf16), 64 x 64 warp tiles: 4 warps at 128 x 128.
    config.block_k = 32 / static_cast<int64_t>(dtype_size(spec.dtype)) * 2;
    config.num_stages = 4;
    config.num_warps = static_cast<int>(std::clamp<int64_t>(config.block_m * config.block_n / 4096, 1, 8));
    return config;
  }
  // Register prefetch: one K block of two mma steps, so that both operands' staging
  // tiles fit twice in 48 KiB (double-buffered: one barrier per block).
  config.block_k = std::clamp<int64_t>(ops_detail::next_power_of_two(spec.k), minK, 2 * minK);
  // About a 32x64 warp tile: 8 warps for 128x128 blocks, fewer for small blocks.
  config.num_warps = static_cast<int>(std::clamp<int64_t>(config.block_m * config.block_n / 2048, 1, 8));
  return config;
}

Kernel matmul_kernel(const MatmulSpec &spec, const MatmulConfig &config) {
  check_matmul_spec(spec, false);
  if (std::string why = tile_unsupported(spec); !why.empty())
    throw NotSupported("matmul: " + why + "; use hopper (sm_90a) or reference");
  int64_t bm = config.block_m, bn = config.block_n, bk = config.block_k;
  Kernel k("matmul", {config.num_warps});
  Params p = declare(k, spec, DType::F32);
  int64_t gridM = cdiv(spec.m, bm), gridN = cdiv(spec.n, bn);
  k.grid(gridM * gridN);
  auto [m0, n0] = grouped_block(k.program_id(0), gridM, gridN, config.group_m, bm, bn);
  Value acc = k.full({bm, bn}, 0.0, DType::F32);

  if (rows_of_16_bytes(spec)) {
    // Rows of whole 16-byte chunks: the cp.async ring streams both operands.
    CpAsyncDotOptions options{.block_k = bk, .stages = config.num_stages, .trans_a = spec.trans_a,
                              .trans_b = spec.trans_b};
    epilogue(spec, p, cp_async_dot(p.a, p.b, m0, n0, acc, options), m0, n0, bn);
    return k;
  }
  // Otherwise masked register loads: the k-loop carries the accumulator and the next
  // blocks, each iteration issuing the loads of block k + bk before the dot of block k.
  std::vector<Value> out = k.loop(
      0, spec.k, bk, {acc, blockA(spec, p, m0, 0, bm, bk), blockB(spec, p, 0, n0, bk, bn)},
      [&](Value k0, std::vector<Value> carried) -> std::vector<Value> {
        Value next = k0 + Value(bk);
        Value a = blockA(spec, p, m0, next, bm, bk), b = blockB(spec, p, next, n0, bk, bn);
        return {dot(carried[1], carried[2], carried[0]), a, b};
      });
  epilogue(spec, p, out[0], m0, n0, bn);
  return k;
}

std::optional<std::string> check_block_sizes(const Config &c, bool tile) {
  auto isPowerOfTwo = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  const int64_t bm = c.get("block_m"), bn = c.get("block_n"), bk = c.get("block_k"), w = c.get("num_warps");
  const int64_t minBlock = tile ? 16 : 1;
  for (auto [key, v] : {std::pair{"block_m", bm}, std::pair{"block_n", bn}})
    if (!isPowerOfTwo(v) || v < minBlock || v > 256)
      return fmt::format("{} must be a power of two in [{}, 256], got {}", key, minBlock, v);
  if (!isPowerOfTwo(bk) || bk < minBlock || bk > 128)
    return fmt::format("block_k must be a power of two in [{}, 128], got {}", minBlock, bk);
  if (w != 1 && w != 2 && w != 4 && w != 8)
    return fmt::format("num_warps must be 1, 2, 4 or 8, got {}", w);
  if (!tile && bm * bk * bn > 8192)  // exact products hold [block_m, block_k, block_n] partial products
    return fmt::format("block_m * block_k * block_n must be at most 8192 for exact products, got {}", bm * bk * bn);
  return std::nullopt;
}

std::optional<std::string> check_ring_keys(const Config &c, bool serves, int64_t K, int64_t N) {
  const int64_t async = c.get_or("async_copy", 0);
  if (async != 0 && async != 1)
    return fmt::format("async_copy must be 0 or 1, got {}", async);
  if (async && !serves)
    return fmt::format("async_copy needs bf16 / f16 with K and N multiples of 8 (rows of 16-byte chunks), got "
                       "K {}, N {}",
                       K, N);
  // TMA rings wait on each slot's own barrier, so they may be deeper than a cp.async ring
  // (whose waits count the copies in flight).
  const int64_t most = c.get_or("tma", 0) == 1 ? 8 : 4;
  if (c.has("stages") && (!async || c.get("stages") < 2 || c.get("stages") > most))
    return most == 4 ? fmt::format("stages (the cp.async ring's slots) must be 2, 3 or 4 with \"async_copy\": 1, "
                                   "got {}",
                                   c.get("stages"))
                     : fmt::format("stages (the TMA ring's slots) must be 2 to 8, got {}", c.get("stages"));
  return std::nullopt;
}

std::optional<std::string> check_tma_ring_keys(const Config &c, int64_t elem_bytes) {
  const int64_t tma = c.get_or("tma", 0);
  if (tma != 0 && tma != 1)
    return fmt::format("tma must be 0 or 1, got {}", tma);
  if (!tma)
    return std::nullopt;
  const int64_t bm = c.get("block_m"), bn = c.get("block_n"), bk = c.get("block_k"), w = c.get("num_warps");
  if (!c.get_or("async_copy", 0) || bm != 16 * w || w % 4 != 0)
    return fmt::format("tma (TMA rings and a producer warpgroup, sm_90a) needs \"async_copy\": 1, 4 or 8 warps and "
                       "block_m = 16 * num_warps, got block_m {} with {} warps",
                       bm, w);
  return check_tma_block_shape(bk, "block_n", bn, elem_bytes);
}

std::optional<std::string> check_hopper_keys(const Config &c) {
  for (const char *key : {"async_copy", "tma", "wgmma"})
    if (c.has(key))
      return fmt::format("unknown key \"{}\" for hopper (its kernels are always on TMA rings)", key);
  return std::nullopt;
}

const char *impl_name(ProductImpl impl) {
  switch (impl) {
  case ProductImpl::Tile: return "tile";
  case ProductImpl::Hopper: return "hopper";
  case ProductImpl::Reference: break;
  }
  return "reference";
}

Config hopper_as_tile(const Config &c) { return Config(c).set("async_copy", 1).set("tma", 1); }

std::vector<Config> hopper_search_space(Config heuristic, const std::function<bool(const Config &)> &valid) {
  std::vector<Config> space{std::move(heuristic)};
  for (int64_t bn : {64, 128})
    for (int64_t stages : {2, 3, 4, 6}) {
      Config c = Config(space.front()).set("block_n", bn).set("stages", stages);
      if (valid(c) && std::find(space.begin(), space.end(), c) == space.end())
        space.push_back(std::move(c));
    }
  return space;
}

std::optional<std::string> check_tma_block_shape(int64_t bk, const char *cols_key, int64_t cols, int64_t elem_bytes) {
  if (bk * elem_bytes != 32 && bk * elem_bytes != 64 && bk * elem_bytes != 128)
    return fmt::format("tma needs block_k of 32, 64 or 128 bytes (a swizzle row), got {}", bk);
  if (cols * elem_bytes % 128 != 0)
    return fmt::format("tma needs {} of whole 128-byte rows ({} elements), got {}", cols_key, 128 / elem_bytes, cols);
  return std::nullopt;
}

TmaRing TmaRing::make(Kernel &k, int64_t stages, int64_t copies, int consumer_warps) {
  return {stages, k.mbarriers(stages, copies), k.mbarriers(stages, 32 * int64_t(consumer_warps))};
}

void TmaRing::wait_free(Kernel &k, const Value &step) const {
  k.wait(empty, slot(step), (step / Value(stages) + Value(1)) % Value(2));
}

void TmaRing::wait_full(Kernel &k, const Value &step) const {
  k.wait(full, slot(step), (step / Value(stages)) % Value(2));
}

void TmaRing::release(Kernel &k, const Value &step) const { k.arrive(empty, slot(step)); }

std::vector<Value> tma_ring_loop(Kernel &k, const Value &steps, int64_t step, const TmaRing &ring,
                                 std::vector<Value> accs, const TmaRingCopies &copies, const RingProducts &products) {
  std::vector<Value> out = k.specialized_loop(
      0, steps, 1, std::move(accs),
      [&](Value i) {
        ring.wait_free(k, i);
        return copies(i * Value(step), ring.slot(i));
      },
      [&](Value i, std::vector<Value> carried, std::vector<Value> blocks) {
        ring.wait_full(k, i);
        std::vector<Value> result = products(i * Value(step), std::move(carried), std::move(blocks));
        k.when(i > Value(0), [&] { ring.release(k, i - Value(1)); });  // step i - 1's dots are done
        return result;
      });
  for (Value &acc : out)
    acc = dot_wait(acc, 0);
  return out;
}

std::vector<Value> tma_tile_loop(Kernel &k, const Value &tiles, int64_t steps, int64_t step, const TmaRing &ring,
                                 const std::vector<Value> &zeros, std::vector<Value> extras, const TmaTileLoop &body) {
  const Value perTile(steps);
  const int inFlight = static_cast<int>(zeros.size());  // one commit group per product
  // Tiles outside, each tile's K steps inside: the producer walks the steps of every
  // tile in turn (step i = tile x steps + s of the ring), the consumers complete a tile's
  // products before its epilogue on every path.
  return k.specialized_loop(
      0, tiles, 1, std::move(extras), [](Value) { return std::vector<Value>{}; },
      [&](Value tile, std::vector<Value> carried, std::vector<Value>) {
        Value first = tile * perTile;
        std::vector<Value> accs = k.specialized_steps(
            0, perTile, 1, zeros,
            [&](Value s) {
              ring.wait_free(k, first + s);
              return body.copies(tile, s * Value(step), ring.slot(first + s));
            },
            [&](Value s, std::vector<Value> c, std::vector<Value> blocks) {
              ring.wait_full(k, first + s);
              std::vector<Value> products = body.products(blocks, c, s == Value(0));
              for (Value &product : products)  // step s - 1's products are done
                product = dot_wait(product, inFlight);
              k.when(s > Value(0), [&] { ring.release(k, first + s - Value(1)); });
              return products;
            });
        for (Value &acc : accs)
          acc = dot_wait(acc, 0);
        ring.release(k, first + perTile - Value(1));
        return body.done(tile, accs, std::move(carried));
      });
}

std::string hopper_unsupported(const MatmulSpec &spec) {
  if (spec.dtype != DType::BF16 && spec.dtype != DType::F16 && !is_fp8(spec.dtype))
    return fmt::format("the hopper matmul takes bf16, f16, f8e4m3 or f8e5m2, got {}", dtype_name(spec.dtype));
  if (is_fp8(spec.dtype) && (spec.trans_a || !spec.trans_b))
    return fmt::format("the hopper matmul reads {} operands K-major only: a as [M, K] and b as [N, K] (trans_b)",
                       dtype_name(spec.dtype));
  int64_t rowA = spec.trans_a ? spec.m : spec.k, rowB = spec.trans_b ? spec.k : spec.n;
  if (!rows_of_16_bytes(spec))
    return fmt::format("the hopper matmul needs rows of a and b that are multiples of 16 bytes (TMA); a's rows "
                       "have {} elements, b's {}",
                       rowA, rowB);
  return {};
}

MatmulConfig default_hopper_config(const MatmulSpec &spec, int sm_count) {
  MatmulConfig config;
  config.block_m = 128;
  config.block_n = spec.n > 128 ? 256 : std::max<int64_t>(64, ops_detail::next_power_of_two(spec.n));
  if (spec.accumulate) {  // the epilogue holds c's tile beside the accumulator
    config.block_n = std::min<int64_t>(config.block_n, 128);
    config.rebalance_registers = true;  // 168 registers a thread spilled; the consumers get 232
  }
  config.block_k = 128 / static_cast<int64_t>(std::max<size_t>(1, dtype_size(spec.dtype)));  // 128-byte rows
  config.num_warps = 8;
  // 128 x 256 x 64 bf16 (or x 128 fp8) stages are 48 KiB: four fit in the 227 KiB a program may use.
  config.num_stages = config.block_n == 256 ? 4 : 6;
  if (spec.accumulate)  // c's f32 tile meets the accumulator's layout through 64 KiB of shared memory
    config.num_stages = 4;
  config.programs = sm_count;
  return config;
}

namespace {

/// The hopper kernel's main loop on the DSL's Hopper primitives: a's [bm, block_k] (or
/// [block_k, bm]) and b's [block_k, bn] (or [bn, block_k]) slices per K step through TMA
/// rings, both read by wgmma from shared memory; each step's product stays in flight
/// until the next one has been issued.
///   - in order (no warp_specialize): one program per tile, every warp waits, multiplies
///     and refills (ring_loop);
///   - warp-specialized: a producer warpgroup (Kernel::specialized_loop) walks the K
///     steps, refilling a slot once every consumer thread has released it. With a
///     persistent grid (`programs` fewer than the tiles: tiles p, p + P, ... in grouped
///     order) a loop over the program's tiles holds their K steps (tma_tile_loop): the
///     consumers store each tile after its last step and start the next from zero, while
///     the producer loads the next tile's slices.
Kernel tma_ring_kernel(const MatmulSpec &spec, const MatmulConfig &config, bool tmaStore) {
  const int64_t bm = config.block_m, bn = config.block_n, bk = config.block_k, stages = config.num_stages;
  const int64_t gridM = cdiv(spec.m, bm), gridN = cdiv(spec.n, bn), units = gridM * gridN, steps = cdiv(spec.k, bk);
  const int64_t programs = config.programs == 0 || config.programs >= units ? units : config.programs;
  const bool persistent = config.warp_specialize && programs < units;
  // The persistent producer's nested tile / step loops spill at 24 registers (8-40
  // bytes); at 40 the consumers keep 232, more than a 128 x 256 accumulator needs.
  Kernel k("matmul_hopper_tma_ring", {.num_warps = config.num_warps,
                                      .mma_rows_per_warp = true,
                                      .wgmma_dots = true,
                                      .producer_registers = persistent ? 40 : 24});
  Params p = declare(k, spec, DType::F32);
  // a's and b's copies; in order no consumer releases a slot (the block barrier orders refills).
  const TmaRing ring = config.warp_specialize ? TmaRing::make(k, stages, 2, config.num_warps)
                                              : TmaRing{stages, k.mbarriers(stages, 2), {}};
  SharedBuffer aRing = k.shared_buffer(stages), bRing = k.shared_buffer(stages);
  auto copies = [&](const Value &m0, const Value &n0, const Value &k0, const Value &slot) {
    Value a = spec.trans_a ? p.a.load_tma({k0, m0}, {bk, bm}, aRing, slot, ring.full, slot)
                           : p.a.load_tma({m0, k0}, {bm, bk}, aRing, slot, ring.full, slot);
    Value b = spec.trans_b ? p.b.load_tma({n0, k0}, {bn, bk}, bRing, slot, ring.full, slot)
                           : p.b.load_tma({k0, n0}, {bk, bn}, bRing, slot, ring.full, slot);
    return std::vector<Value>{a, b};
  };
  // A step's a and b as the product reads them (a transposed slot is a view of it).
  auto operands = [&](const std::vector<Value> &blocks) {
    return std::pair{spec.trans_a ? blocks[0].trans() : blocks[0], spec.trans_b ? blocks[1].trans() : blocks[1]};
  };
  // The step's product, left in flight until the next one is issued.
  RingProducts products = [&](const Value &, std::vector<Value> accs, std::vector<Value> blocks) {
    auto [a, b] = operands(blocks);
    return std::vector<Value>{dot_wait(dot_async(a, b, accs[0]), 1)};
  };
  Value zeros = k.full({bm, bn}, 0.0, DType::F32);
  if (!persistent) {
    k.grid(units);
    auto [m0, n0] = grouped_block(k.program_id(0), gridM, gridN, config.group_m, bm, bn);
    TmaRingCopies step = [&](const Value &k0, const Value &slot) { return copies(m0, n0, k0, slot); };
    std::vector<Value> acc =
        config.warp_specialize
            ? tma_ring_loop(k, Value(steps), bk, ring, {zeros}, step, products)
            : ring_loop(k, 0, Value(spec.k), bk, stages, {zeros}, step, products, &ring.full);
    epilogue(spec, p, config.warp_specialize ? acc[0] : dot_wait(acc[0], 0), m0, n0, bn, tmaStore);
    return k;
  }
  // Persistent: a loop over the program's tiles holding their K steps, each step's
  // product left in flight until the next step's is issued. A tile's first product
  // starts from zero (dot_async's `fresh`: no select on registers in flight); its store
  // follows the tile's completed products, while the producer loads the next tile's.
  k.grid(programs);
  Value pid = k.program_id(0);
  Value tiles = (Value(units) - pid + Value(programs - 1)) / Value(programs);
  auto origin = [&](const Value &tile) {
    return grouped_block(pid + tile * Value(programs), gridM, gridN, config.group_m, bm, bn);
  };
  TmaTileLoop body;
  body.copies = [&](const Value &tile, const Value &k0, const Value &slot) {
    auto [m0, n0] = origin(tile);
    return copies(m0, n0, k0, slot);
  };
  body.products = [&](const std::vector<Value> &blocks, const std::vector<Value> &accs, const Value &fresh) {
    auto [a, b] = operands(blocks);
    return std::vector<Value>{dot_async(a, b, accs[0], fresh)};
  };
  body.done = [&](const Value &tile, const std::vector<Value> &accs, std::vector<Value>) {
    auto [m0, n0] = origin(tile);
    epilogue(spec, p, accs[0], m0, n0, bn, tmaStore);
    return std::vector<Value>{};
  };
  tma_tile_loop(k, tiles, steps, bk, ring, {zeros}, {}, body);
  return k;
}

} // namespace

Kernel matmul_hopper_kernel(const MatmulSpec &spec, const MatmulConfig &config) {
  check_matmul_spec(spec, false);
  if (std::string why = hopper_unsupported(spec); !why.empty())
    throw NotSupported("matmul: " + why);
  if (config.programs < 0)
    throw Error(fmt::format("matmul: programs must be >= 0 (0: one program per tile), got {}", config.programs));
  if (config.cluster_m != 1 && config.cluster_m != 2)
    throw Error(fmt::format("matmul: cluster_m must be 1 or 2, got {}", config.cluster_m));
  int64_t bm = config.block_m, bn = config.block_n, cluster = config.cluster_m;
  // TMA stores need rows of c of whole 16-byte chunks and room for two [bm][128-byte]
  // strips beside the ring (1 KiB of slack each); otherwise the threads store.
  const int64_t outBytes = static_cast<int64_t>(dtype_size(spec.out_dtype));
  bool tmaStore = config.tma_store && spec.n * outBytes % 16 == 0 && bn * outBytes % 128 == 0 &&
                  hopper_ring_bytes(config, static_cast<int64_t>(dtype_size(spec.dtype))) +
                          hopper_store_strip_bytes(config) <=
                      kHopperSharedLimit;
  if (config.tma_ring)
    return tma_ring_kernel(spec, config, tmaStore);
  Kernel k("matmul_hopper", {config.num_warps});
  Params p = declare(k, spec, DType::F32);
  // Work is handed out in units of `cluster` vertically adjacent blocks (one per CTA of
  // a cluster; a unit hanging below M computes zeros and stores nothing).
  int64_t gridM = cdiv(cdiv(spec.m, bm), cluster), gridN = cdiv(spec.n, bn), units = gridM * gridN;
  TmaDotOptions options{.block_k = config.block_k, .stages = config.num_stages, .trans_a = spec.trans_a,
                        .trans_b = spec.trans_b, .warp_specialize = config.warp_specialize,
                        .cluster_m = cluster, .a_in_registers = config.a_in_registers};
  Value first = cluster == 1 ? k.program_id(0) : k.program_id(0) / Value(cluster);
  auto tile = [&](Value unit) {
    auto [m0, n0] = grouped_block(unit, gridM, gridN, std::max<int64_t>(1, config.group_m / cluster), bm * cluster, bn);
    Value m = cluster == 1 ? m0 : m0 + (k.program_id(0) % Value(cluster)) * Value(bm);
    Value acc = tma_dot(p.a, p.b, m, n0, k.full({bm, bn}, 0.0, DType::F32), options);
    epilogue(spec, p, acc, m, n0, bn, tmaStore);
  };
  int64_t programs = config.programs / cluster * cluster;
  if (programs == 0 || programs >= units * cluster) {
    k.grid(units * cluster);
    tile(first);
    return k;
  }
  // Persistent: program p takes units p, p + P, ... (P programs / cluster of them). With a
  // producer warpgroup, the next tile's loads overlap this tile's epilogue.
  options.rebalance_registers = config.rebalance_registers && config.warp_specialize;
  k.grid(programs);
  k.loop(first, Value(units), Value(programs / cluster), {}, [&](Value unit, std::vector<Value>) {
    tile(unit);
    return std::vector<Value>{};
  });
  return k;
}

Kernel matmul_reference_kernel(const MatmulSpec &spec) {
  check_matmul_spec(spec, true);
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

} // namespace tokamax
