//===- Common.cpp - What the norm implementations share -----------------===//
//
// The problem of a bound call, grid sizing, the checks both implementations make, and
// the plans. A call becomes a short list of kernels (Kernels.cpp, VjpKernels.cpp):
//   forward:  one kernel (Fused, Split, Shifted or Looping: the implementation's choice);
//   VJP:      Looping: row coefficients, then dx + partials; Fused / Split / Staged: dx
//             + per-program partial column sums in one kernel; then the reduction.
// The partial sums (dscale, doffset) go to a [programs, cols] workspace and one kernel sums
// them in a fixed order: deterministic, no atomics.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/layer_norm/Common.h"

#include <tokamax/ops/Norm.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::norm_detail {

//===----------------------------------------------------------------------===//
// Problem, sizing, checks
//===----------------------------------------------------------------------===//

NormProblem problem_of(const BoundArgs &args, NormKind kind, bool vjp) {
  NormProblem p;
  p.kind = kind;
  p.vjp = vjp;
  const bool layer = kind == NormKind::Layer;
  size_t xIndex = vjp ? 1 : 0;
  const ArgSpec &x = args.arg(xIndex);
  int axis = static_cast<int>(args.int_attribute("axis"));
  p.x = x.dtype;
  p.compute = x.dtype == DType::F64 ? DType::F64 : DType::F32;
  p.outer = 1;
  p.inner = 1;
  for (int d = 0; d < axis; ++d)
    p.outer *= x.shape[d];
  p.n = x.shape[axis];
  for (size_t d = axis + 1; d < x.shape.size(); ++d)
    p.inner *= x.shape[d];
  p.residual = p.compute;
  if (!vjp) {
    p.epsilon = args.float_attribute("epsilon");
    for (size_t i : {layer ? size_t(4) : size_t(3), layer ? size_t(5) : size_t(3)})
      if (args.has(i))
        p.residual = args.arg(i).dtype;
    if (args.has(1))
      p.scale = args.arg(1).dtype;
    size_t out = layer ? 3 : 2;  // y
    if (layer && args.has(2))
      p.offset = args.arg(2).dtype;
    if (layer)
      p.mean_out = args.has(out + 1);
    p.rstd_out = args.has(layer ? out + 2 : out + 1);
  } else {
    p.residual = args.arg(layer ? 4 : 3).dtype;  // rstd
    if (args.has(2))
      p.scale = args.arg(2).dtype;
    size_t dx = layer ? 5 : 4;
    if (args.has(dx + 1))
      p.dscale = args.arg(dx + 1).dtype;
    if (layer && args.has(dx + 2))
      p.doffset = args.arg(dx + 2).dtype;
  }
  return p;
}

bool is_pow2(int64_t v) { return v > 0 && !(v & (v - 1)); }

int64_t groups_of(const NormProblem &p, int64_t blockRows) {
  return p.inner > 1 ? p.outer * dsl::cdiv(p.inner, blockRows) : dsl::cdiv(p.outer, blockRows);
}

/// From an estimate of the programs' registers (ptxas: ~30 + 6 per element a thread holds
/// of a tile; 64K registers and 64 warps per SM).
int64_t vjp_programs(const NormProblem &p, int64_t blockRows, int64_t blockCols, int numWarps) {
  int64_t perThread = std::max<int64_t>(1, blockRows * blockCols / (32 * numWarps));
  int64_t registers = (30 + 6 * perThread + 7) / 8 * 8;
  int64_t perSm = std::clamp<int64_t>(std::min<int64_t>(64 / numWarps, 65536 / (32 * numWarps * registers)), 1, 32);
  // Looping kernels have one program per column block too (a 2-D grid).
  int64_t columnBlocks = blockCols >= p.n ? 1 : dsl::cdiv(p.n, blockCols);
  return std::max<int64_t>(1, std::min(kTargetSms * perSm / columnBlocks, groups_of(p, blockRows)));
}

std::optional<std::string> why_not_any(const NormProblem &p) {
  if (p.rows() > (int64_t(1) << 31) - 1)
    return fmt::format("{} rows exceed the 2^31 - 1 a kernel grid addresses", p.rows());
  return std::nullopt;
}

std::optional<std::string> check_common(const NormProblem &p, int64_t blockRows, int64_t numWarps,
                                        const std::optional<int64_t> &programs) {
  if (p.vjp && !programs)
    return std::string("missing \"programs\"");
  if (!is_pow2(blockRows) || blockRows > 65536)
    return fmt::format("block_rows must be a power of two up to 65536, got {}", blockRows);
  if (!is_pow2(numWarps) || numWarps > 32)
    return fmt::format("num_warps must be a power of two up to 32, got {}", numWarps);
  if (programs && *programs < 1)
    return fmt::format("programs must be positive, got {}", *programs);
  return std::nullopt;
}

std::optional<std::string> check_block_cols(int64_t blockCols) {
  if (!is_pow2(blockCols) || blockCols > kNormTileMaxCols)
    return fmt::format("block_cols must be a power of two up to {}, got {}", kNormTileMaxCols, blockCols);
  return std::nullopt;
}

std::optional<std::string> check_block_size(int64_t blockRows, int64_t blockCols) {
  if (blockRows * blockCols > 65536)
    return fmt::format("a block of {} x {} elements is too large for one program", blockRows, blockCols);
  return std::nullopt;
}

const char *const kForwardProgramsNeedTile =
    "programs (persistent forward programs that load the parameters once) needs the tile implementation without "
    "block_cols (a looping forward loads the parameters per block)";
const char *const kPrefetchNeedsPersistentTileForward =
    "prefetch (the next row group loaded during the current one) is a config of the tile forward's fused kernel on "
    "persistent programs (programs, no block_cols or row_split)";
const char *const kStagedNeedsLoopingTileVjp =
    "staged (each row copied into shared memory) is a config of the tile VJP with block_cols and block_rows 1";

std::vector<LoopingBlock> looping_blocks(const NormProblem &p, int64_t blockRows, bool belowN) {
  std::vector<LoopingBlock> blocks;
  for (int64_t cols = 512; cols <= 8192 && (!belowN || cols < p.n); cols *= 2)
    for (int warps = 4; warps <= 16; warps *= 2) {
      int64_t perThread = blockRows * cols / (32 * warps);
      if (perThread < 4 || perThread > 64)
        continue;
      LoopingBlock b{cols, warps, std::nullopt};
      if (p.vjp)
        b.programs = vjp_programs(p, blockRows, cols, warps);
      blocks.push_back(b);
    }
  return blocks;
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

namespace {

void launch(Executor &executor, const NormKernelSpec &spec, const std::vector<Executor::Arg> &args) {
  executor.launch(spec.key(), [spec] { return build_norm_kernel(spec); }, args);
}

/// Views of the call's tensors in the kernels' geometry.
struct Shapes {
  const NormProblem &p;
  int device;
  std::vector<int64_t> matrix, rowVector;

  Shapes(const NormProblem &p, int device) : p(p), device(device) {
    matrix = p.inner > 1 ? std::vector<int64_t>{p.outer, p.n, p.inner} : std::vector<int64_t>{p.outer, p.n};
    rowVector = p.inner > 1 ? std::vector<int64_t>{p.outer, p.inner} : std::vector<int64_t>{p.outer};
  }
  Executor::Arg asMatrix(const TensorView &t) const { return {TensorView(t.data(), t.dtype(), matrix, device)}; }
  Executor::Arg asRow(const TensorView &t) const { return {TensorView(t.data(), t.dtype(), rowVector, device)}; }
  Executor::Arg asRow(uint64_t data) const { return {TensorView(data, p.compute, rowVector, device)}; }
  Executor::Arg asColumn(const TensorView &t) const {
    int64_t n = p.n;
    return {TensorView(t.data(), t.dtype(), std::span<const int64_t>(&n, 1), device)};
  }
  /// scale / offset as the kernel of `s` declares them ([1, n] with one row per program).
  Executor::Arg asParameter(const TensorView &t, const NormKernelSpec &s) const {
    if (s.strided() || s.block_rows != 1)
      return asColumn(t);
    int64_t shape[2] = {1, p.n};
    return {TensorView(t.data(), t.dtype(), shape, device)};
  }
  Executor::Arg partials(uint64_t data, int64_t programs) const {
    int64_t shape[2] = {programs, p.n};
    return {TensorView(data, p.compute, shape, device)};
  }
};

int deviceOf(std::span<const TensorView> views) {
  for (const TensorView &t : views)
    if (t.data())
      return t.device();
  return 0;
}

NormKernelSpec baseSpec(const NormProblem &p, int64_t blockRows, int numWarps) {
  return {.kind = p.kind, .outer = p.outer, .n = p.n, .inner = p.inner, .x = p.x, .compute = p.compute,
          .residual = p.residual, .scale = p.scale, .block_rows = blockRows, .num_warps = numWarps};
}

/// A call over no rows: nothing to launch; a VJP's column sums over no rows are zeros.
bool runEmpty(const NormProblem &p, std::span<const TensorView> outputs, Executor &executor) {
  if (p.rows() != 0)
    return false;
  if (p.vjp)
    for (size_t i = 1; i < outputs.size(); ++i)
      if (outputs[i].data())
        executor.zero(outputs[i]);
  return true;
}

} // namespace

void require_runnable(const std::optional<std::string> &whyNot, const std::optional<std::string> &problem,
                      const Config &config) {
  if (whyNot)
    throw NotSupported(*whyNot);
  if (problem)
    throw Error(fmt::format("norm: config {} is not valid: {}", config.to_json(), *problem));
}

void run_forward(const NormProblem &p, const ForwardPlan &plan, std::span<const TensorView> in,
                 std::span<const TensorView> out, Executor &ex) {
  if (runEmpty(p, out, ex))
    return;
  const bool layer = p.kind == NormKind::Layer;
  Shapes shapes(p, deviceOf(in));
  NormKernelSpec s = baseSpec(p, plan.block_rows, plan.num_warps);
  s.kernel = KernelKind::Fwd;
  s.offset = layer ? p.offset : std::nullopt;
  s.mean_out = p.mean_out;
  s.rstd_out = p.rstd_out;
  s.mode = plan.mode;
  s.block_cols = plan.block_cols;
  s.programs = std::clamp<int64_t>(plan.programs.value_or(s.groups()), 1, s.groups());
  s.prefetch = plan.prefetch && s.programs < s.groups();
  std::vector<Executor::Arg> args{shapes.asMatrix(in[0])};
  if (p.scale)
    args.push_back(shapes.asParameter(in[1], s));
  if (layer && p.offset)
    args.push_back(shapes.asParameter(in[2], s));
  args.push_back(shapes.asMatrix(out[0]));
  if (layer && p.mean_out)
    args.push_back(shapes.asRow(out[1]));
  if (p.rstd_out)
    args.push_back(shapes.asRow(out[layer ? 2 : 1]));
  args.push_back(Executor::Arg::value(p.epsilon));
  launch(ex, s, args);
}

void run_vjp(const NormProblem &p, const VjpPlan &plan, std::span<const TensorView> in,
             std::span<const TensorView> out, Executor &ex) {
  if (runEmpty(p, out, ex))
    return;
  const bool layer = p.kind == NormKind::Layer;
  const int device = deviceOf(in);
  Shapes shapes(p, device);
  // Inputs: dy, x, scale, [mean], rstd; outputs: dx, dscale, [doffset].
  const bool wantScale = p.dscale.has_value(), wantOffset = layer && p.doffset.has_value();
  const bool looping = plan.mode == Mode::Looping;  // coefficients in a kernel of their own
  // Looping rows of the last axis in chunks (plan.chunk_rows): each chunk's coefficient
  // and dx kernels run back to back, so the dx kernel reads the chunk's x and dy from L2;
  // the chunks after the first add their column sums to the first's partial rows.
  const int64_t chunkRows =
      looping && p.inner == 1 && plan.chunk_rows > 0 && plan.chunk_rows < p.outer ? plan.chunk_rows : p.outer;
  auto chunkOf = [&](int64_t rows) {
    NormProblem c = p;
    c.outer = rows;
    return c;
  };
  const int64_t groups = baseSpec(chunkOf(chunkRows), plan.block_rows, plan.num_warps).groups();
  const int64_t programs = (wantScale || wantOffset) ? std::clamp<int64_t>(plan.programs, 1, groups) : groups;
  const size_t elem = dtype_size(p.compute);
  // The coefficient rows (looping) and the partial sums, out of the call's one scratch request.
  ops_detail::Workspace ws;
  const double rowBytes = double(p.rows()) * double(elem);
  const double partialBytes = double(programs) * double(p.n) * double(elem);
  const size_t c1At = looping ? ws.add(rowBytes) : 0, c2At = looping && layer ? ws.add(rowBytes) : 0;
  const size_t pdsAt = wantScale ? ws.add(partialBytes) : 0, pdoAt = wantOffset ? ws.add(partialBytes) : 0;
  ws.allocate(ex);
  const uint64_t pds = ws.at(pdsAt), pdo = ws.at(pdoAt);

  // Rows [r0, r0 + pc.outer) of the call (chunks have inner == 1: rows are contiguous).
  auto runChunk = [&](const NormProblem &pc, int64_t r0, bool accumulate) {
    Shapes cs(pc, device);
    auto rowsFrom = [&](uint64_t data, DType dtype, int64_t perRow) {
      return data ? data + uint64_t(r0 * perRow) * dtype_size(dtype) : data;
    };
    auto matrix = [&](const TensorView &t) {
      return cs.asMatrix(TensorView(rowsFrom(t.data(), t.dtype(), p.n), t.dtype(), shapes.matrix, device));
    };
    auto row = [&](const TensorView &t) {
      return cs.asRow(TensorView(rowsFrom(t.data(), t.dtype(), 1), t.dtype(), shapes.rowVector, device));
    };
    const uint64_t c1 = rowsFrom(ws.at(c1At), p.compute, 1), c2 = rowsFrom(ws.at(c2At), p.compute, 1);
    NormKernelSpec s = baseSpec(pc, plan.block_rows, plan.num_warps);
    s.block_cols = plan.block_cols;
    auto common = [&] {
      std::vector<Executor::Arg> args{matrix(in[0]), matrix(in[1])};
      if (p.scale)
        args.push_back(cs.asParameter(in[2], s));
      if (layer)
        args.push_back(row(in[3]));
      args.push_back(row(in[layer ? 4 : 3]));
      return args;
    };
    if (looping) {
      NormKernelSpec coef = s;
      coef.kernel = KernelKind::VjpCoef;
      coef.mode = Mode::Looping;
      std::vector<Executor::Arg> args = common();
      args.push_back(cs.asRow(c1));
      if (layer)
        args.push_back(cs.asRow(c2));
      launch(ex, coef, args);
    }
    NormKernelSpec dxSpec = s;
    dxSpec.kernel = KernelKind::VjpDx;
    dxSpec.mode = plan.mode;
    dxSpec.parts = plan.parts;
    dxSpec.programs = std::min(programs, s.groups());
    dxSpec.dscale = wantScale ? std::optional<DType>(p.compute) : std::nullopt;
    dxSpec.doffset = wantOffset ? std::optional<DType>(p.compute) : std::nullopt;
    dxSpec.accumulate_partials = accumulate && (wantScale || wantOffset);
    std::vector<Executor::Arg> args = common();
    if (looping) {
      args.push_back(cs.asRow(c1));
      if (layer)
        args.push_back(cs.asRow(c2));
    }
    args.push_back(matrix(out[0]));
    // The kernel's partial rows: the first dxSpec.programs of the call's.
    if (wantScale)
      args.push_back(cs.partials(pds, dxSpec.programs));
    if (wantOffset)
      args.push_back(cs.partials(pdo, dxSpec.programs));
    launch(ex, dxSpec, args);
  };
  for (int64_t r0 = 0; r0 < p.outer; r0 += chunkRows)
    runChunk(chunkOf(std::min(chunkRows, p.outer - r0)), r0, r0 > 0);
  if (!wantScale && !wantOffset)
    return;

  NormKernelSpec r;
  r.kernel = KernelKind::Reduce;
  r.kind = p.kind;
  r.outer = 1;
  r.n = p.n;
  r.x = p.x;
  r.compute = p.compute;
  r.dscale = wantScale ? p.dscale : std::nullopt;
  r.doffset = wantOffset ? p.doffset : std::nullopt;
  r.programs = programs;
  // ~128 programs across the columns when there are enough, 2048 partials per step.
  r.block_cols = p.n <= 32 ? next_pow2(p.n) : std::clamp<int64_t>(next_pow2(p.n / 128 + 1) / 2, 32, 256);
  r.block_rows = std::clamp<int64_t>(2048 / r.block_cols, 1, next_pow2(programs));
  r.num_warps = static_cast<int>(std::clamp<int64_t>(r.block_rows * r.block_cols / (32 * 16), 1, 4));
  std::vector<Executor::Arg> rargs;
  if (wantScale)
    rargs.push_back(shapes.partials(pds, programs));
  if (wantOffset)
    rargs.push_back(shapes.partials(pdo, programs));
  if (wantScale)
    rargs.push_back(shapes.asColumn(out[1]));
  if (wantOffset)
    rargs.push_back(shapes.asColumn(out[2]));
  launch(ex, r, rargs);
}

} // namespace tokamax::norm_detail
