//===- Plans.cpp - Norm implementations: plans --------------------------===//
//
// A call becomes a short list of kernels (Kernels.cpp):
//   forward, tile:       one fused kernel (rows in registers; with programs, persistent
//                        programs that load the parameters once), with row_split one
//                        whose programs share a row (split mode), or, with block_cols, one
//                        kernel that loops twice over column blocks (shifted sums, then y);
//   forward, reference:  one kernel looping three times over column blocks (mean,
//                        variance, y), any axis;
//   VJP, tile fused:     dx + per-program partial column sums in one kernel, then reduce
//                        (row_split: the same with a row's column blocks on adjacent programs;
//                        staged: the same with each row copied into shared memory);
//   VJP, looping / ref.: row coefficients, then dx + partials, then reduce.
// The partial sums (dscale, doffset) go to a [programs, cols] workspace and one kernel sums
// them in a fixed order: deterministic, no atomics.
//
//===----------------------------------------------------------------------===//
#include "ops/lib/layer_norm/Kernels.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <algorithm>

namespace tokamax::norm_detail {

void launch(Executor &executor, const NormKernelSpec &spec, const std::vector<Executor::Arg> &args) {
  executor.launch(spec.key(), [spec] { return build_norm_kernel(spec); }, args);
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

namespace {

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

NormKernelSpec baseSpec(const NormProblem &p, const Config &c) {
  NormKernelSpec s;
  s.kind = p.kind;
  s.outer = p.outer;
  s.n = p.n;
  s.inner = p.inner;
  s.x = p.x;
  s.compute = p.compute;
  s.residual = p.residual;
  s.scale = p.scale;
  s.block_rows = c.get("block_rows");
  s.num_warps = static_cast<int>(c.get("num_warps"));
  return s;
}

void runForward(const NormProblem &p, ImplKind impl, const Config &c, std::span<const TensorView> in,
                std::span<const TensorView> out, Executor &ex, int device) {
  const bool layer = p.kind == NormKind::Layer;
  Shapes shapes(p, device);
  NormKernelSpec s = baseSpec(p, c);
  s.kernel = KernelKind::Fwd;
  s.offset = layer ? p.offset : std::nullopt;
  s.mean_out = p.mean_out;
  s.rstd_out = p.rstd_out;
  if (impl == ImplKind::Reference) {
    s.mode = Mode::Looping;
    s.block_cols = c.get("block_cols");
  } else if (c.has("block_cols")) {
    s.mode = Mode::Shifted;
    s.block_cols = c.get("block_cols");
  } else {
    s.mode = c.has("row_split") ? Mode::Split : Mode::Fused;
    s.block_cols = next_pow2(p.n) / c.get_or("row_split", 1);
  }
  s.programs = std::clamp<int64_t>(c.get_or("programs", s.groups()), 1, s.groups());
  s.prefetch = c.get_or("prefetch", 0) != 0 && s.programs < s.groups();
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

void runVjp(const NormProblem &p, ImplKind impl, const Config &c, std::span<const TensorView> in,
            std::span<const TensorView> out, Executor &ex, int device) {
  const bool layer = p.kind == NormKind::Layer;
  Shapes shapes(p, device);
  // Inputs: dy, x, scale, [mean], rstd; outputs: dx, dscale, [doffset].
  const TensorView &dy = in[0], &x = in[1], &rstd = in[layer ? 4 : 3];
  const bool wantScale = p.dscale.has_value(), wantOffset = layer && p.doffset.has_value();
  const bool staged = impl == ImplKind::Tile && c.get_or("staged", 0) != 0;
  const bool split = impl == ImplKind::Tile && c.has("row_split") && !staged;  // staged: the row's parts
  const bool fused = impl == ImplKind::Tile && !c.has("block_cols") && !split;
  const bool looping = !fused && !split && !staged;  // coefficients in a kernel of their own
  NormKernelSpec s = baseSpec(p, c);
  s.block_cols = fused ? next_pow2(p.n) : split ? next_pow2(p.n) / c.get("row_split") : c.get("block_cols");
  const int64_t groups = s.groups();
  const int64_t programs = (wantScale || wantOffset) ? std::clamp<int64_t>(c.get("programs"), 1, groups) : groups;
  const size_t elem = dtype_size(p.compute);
  // The coefficient rows (looping) and the partial sums, out of the call's one scratch request.
  ops_detail::Workspace ws;
  const double rowBytes = double(p.rows()) * double(elem);
  const double partialBytes = double(programs) * double(p.n) * double(elem);
  const size_t c1At = looping ? ws.add(rowBytes) : 0, c2At = looping && layer ? ws.add(rowBytes) : 0;
  const size_t pdsAt = wantScale ? ws.add(partialBytes) : 0, pdoAt = wantOffset ? ws.add(partialBytes) : 0;
  ws.allocate(ex);
  const uint64_t c1 = ws.at(c1At), c2 = ws.at(c2At), pds = ws.at(pdsAt), pdo = ws.at(pdoAt);

  auto common = [&] {
    std::vector<Executor::Arg> args{shapes.asMatrix(dy), shapes.asMatrix(x)};
    if (p.scale)
      args.push_back(shapes.asParameter(in[2], s));
    if (layer)
      args.push_back(shapes.asRow(in[3]));
    args.push_back(shapes.asRow(rstd));
    return args;
  };
  if (looping) {
    NormKernelSpec coef = s;
    coef.kernel = KernelKind::VjpCoef;
    coef.mode = Mode::Looping;
    std::vector<Executor::Arg> args = common();
    args.push_back(shapes.asRow(c1));
    if (layer)
      args.push_back(shapes.asRow(c2));
    launch(ex, coef, args);
  }
  NormKernelSpec dxSpec = s;
  dxSpec.kernel = KernelKind::VjpDx;
  dxSpec.mode = fused ? Mode::Fused : split ? Mode::Split : staged ? Mode::Staged : Mode::Looping;
  dxSpec.parts = staged ? c.get_or("row_split", 1) : 1;
  dxSpec.programs = programs;
  dxSpec.dscale = wantScale ? std::optional<DType>(p.compute) : std::nullopt;
  dxSpec.doffset = wantOffset ? std::optional<DType>(p.compute) : std::nullopt;
  std::vector<Executor::Arg> args = common();
  if (looping) {
    args.push_back(shapes.asRow(c1));
    if (layer)
      args.push_back(shapes.asRow(c2));
  }
  args.push_back(shapes.asMatrix(out[0]));
  if (wantScale)
    args.push_back(shapes.partials(pds, programs));
  if (wantOffset)
    args.push_back(shapes.partials(pdo, programs));
  launch(ex, dxSpec, args);
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

} // namespace

void execute(const NormProblem &p, ImplKind impl, const Config &config, std::span<const TensorView> inputs,
             std::span<const TensorView> outputs, Executor &executor) {
  if (auto reason = why_not(p, impl))
    throw NotSupported(*reason);
  if (auto problem = check_config(p, impl, config))
    throw Error(fmt::format("norm: config {} is not valid: {}", config.to_json(), *problem));
  int device = deviceOf(inputs);
  if (p.rows() == 0) {
    if (p.vjp)  // sums over no rows
      for (size_t i = 1; i < outputs.size(); ++i)
        if (outputs[i].data())
          executor.zero(outputs[i]);
    return;
  }
  if (p.vjp)
    runVjp(p, impl, config, inputs, outputs, executor, device);
  else
    runForward(p, impl, config, inputs, outputs, executor, device);
}

} // namespace tokamax::norm_detail
