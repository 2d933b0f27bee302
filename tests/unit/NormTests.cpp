//===- NormTests.cpp - layer_norm / rms_norm on the interpreter; the op framework -===//
//
// The norms' kernels run on the CPU interpreter (the *_host functions go through the same
// op, implementation choice, configs and kernels as device calls) and are compared with
// float64 references written here from the formulas, independently of the kernels.
// The framework tests cover implementation choice (NotSupported, auto fallback), configs,
// config providers and the JSON forms of Config and BoundArgs.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace tokamax;
using Catch::Contains;

namespace {

/// A host tensor: values of one dtype in 8-byte aligned storage.
struct HostTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;

  HostTensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    storage.assign((numel() * dtype_size(d) + 7) / 8, 0xA5A5A5A5A5A5A5A5ull);  // poisoned
  }
  HostTensor(DType d, std::vector<int64_t> s, const std::vector<double> &values) : HostTensor(d, std::move(s)) {
    for (size_t i = 0; i < values.size(); ++i)
      store_from_double(dtype, bytes() + i * dtype_size(dtype), values[i]);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  uint8_t *bytes() { return reinterpret_cast<uint8_t *>(storage.data()); }
  const uint8_t *bytes() const { return reinterpret_cast<const uint8_t *>(storage.data()); }
  TensorView view() const { return host_view(storage.data(), dtype, shape); }
  std::vector<double> values() const {
    std::vector<double> v(numel());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = load_as_double(dtype, bytes() + i * dtype_size(dtype));
    return v;
  }
};

/// Random values exactly representable in `dtype`, magnitudes in [lo, hi], random signs.
std::vector<double> randomValues(size_t n, DType dtype, uint32_t seed, double lo = 0.05, double hi = 3.0,
                                 double shift = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  uint8_t one[8];
  for (auto &x : v) {
    store_from_double(dtype, one, shift + (rng() & 1 ? 1 : -1) * dist(rng));
    x = load_as_double(dtype, one);
  }
  return v;
}

/// ||got - ref|| / max(||ref||, floor).
double relError(const std::vector<double> &got, const std::vector<double> &ref, double floor = 1e-30) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  double e = std::sqrt(num) / std::max(std::sqrt(den), floor);
  return std::isnan(e) ? INFINITY : e;
}

double tolerance(DType d) {
  switch (d) {
  case DType::BF16: return 1e-2;
  case DType::F16: return 2e-3;
  case DType::F32: return 2e-5;
  default: return 1e-10;
  }
}

/// float64 layer/rms norm and its VJP over `axis` of x (row-major), from the formulas.
struct Reference {
  std::vector<double> y, mean, rstd, dx, dscale, doffset;
  /// ||dy * scale * rstd||: the size of dx's terms. dx itself can be far smaller (rows of
  /// one element: rms dx = rstd * dy * eps / (x^2 + eps)), and then any f32 evaluation
  /// loses digits to cancellation; errors are measured against this.
  double dx_scale;
};

Reference reference(bool layer, const std::vector<int64_t> &shape, int axis, const std::vector<double> &x,
                    const std::vector<double> *scale, const std::vector<double> *offset, const std::vector<double> &dy,
                    double eps) {
  int64_t outer = 1, inner = 1, n = shape[axis];
  for (int d = 0; d < axis; ++d)
    outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
  Reference r;
  r.dx_scale = 0;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dscale.assign(n, 0);
  r.doffset.assign(n, 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + i; };
      double mean = 0;
      if (layer) {
        for (int64_t j = 0; j < n; ++j)
          mean += x[at(j)];
        mean /= double(n);
      }
      double var = 0;
      for (int64_t j = 0; j < n; ++j)
        var += (x[at(j)] - mean) * (x[at(j)] - mean);
      double rstd = 1 / std::sqrt(var / double(n) + eps);
      r.mean.push_back(mean);
      r.rstd.push_back(rstd);
      double c1 = 0, c2 = 0;
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (x[at(j)] - mean) * rstd, s = scale ? (*scale)[j] : 1.0;
        r.y[at(j)] = xhat * s + (offset ? (*offset)[j] : 0.0);
        c1 += dy[at(j)] * s * xhat;
        c2 += dy[at(j)] * s;
        r.dscale[j] += dy[at(j)] * xhat;
        r.doffset[j] += dy[at(j)];
      }
      c1 /= double(n);
      c2 /= double(n);
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (x[at(j)] - mean) * rstd, s = scale ? (*scale)[j] : 1.0;
        r.dx[at(j)] = rstd * (dy[at(j)] * s - (layer ? c2 : 0.0) - xhat * c1);
        r.dx_scale += std::pow(rstd * dy[at(j)] * s, 2);
      }
    }
  return r;
}

struct Case {
  bool layer = true;
  DType x = DType::F32;
  std::vector<int64_t> shape;
  int axis = -1;
  std::optional<DType> scale, offset;
  std::optional<std::string> implementation;
  std::optional<Config> fwd_config, vjp_config;
  double shift = 0;  // added to x (numerics of the variance)
  std::optional<DType> residual;  // mean / rstd dtype (default: the compute dtype)
  double tolerance_factor = 1;
};

/// Runs forward and VJP on the interpreter; checks y, the residuals, dx, dscale, doffset.
void check(const Case &c) {
  const DType compute = c.x == DType::F64 ? DType::F64 : DType::F32;
  const int rank = int(c.shape.size());
  const int axis = c.axis < 0 ? c.axis + rank : c.axis;
  const int64_t n = c.shape[axis];
  HostTensor x(c.x, c.shape, randomValues(HostTensor(c.x, c.shape).numel(), c.x, 1, 0.05, 3.0, c.shift));
  const int64_t rows = x.numel() / n;
  HostTensor dy(c.x, c.shape, randomValues(x.numel(), c.x, 2));
  std::optional<HostTensor> scale, offset;
  if (c.scale)
    scale.emplace(*c.scale, std::vector<int64_t>{n}, randomValues(n, *c.scale, 3, 0.5, 1.5));
  if (c.offset && c.layer)
    offset.emplace(*c.offset, std::vector<int64_t>{n}, randomValues(n, *c.offset, 4));
  std::vector<double> sv = scale ? scale->values() : std::vector<double>{}, ov = offset ? offset->values() : sv;
  const double eps = 1e-5;
  Reference ref = reference(c.layer, c.shape, axis, x.values(), scale ? &sv : nullptr, offset ? &ov : nullptr,
                            dy.values(), eps);

  NormOptions fwd{.axis = c.axis, .epsilon = eps, .implementation = c.implementation, .config = c.fwd_config};
  NormOptions vjp{.axis = c.axis, .epsilon = eps, .implementation = c.implementation, .config = c.vjp_config};
  const DType residual = c.residual.value_or(compute);
  HostTensor y(c.x, c.shape), mean(residual, {rows}), rstd(residual, {rows});
  TensorView sView = scale ? scale->view() : TensorView(), oView = offset ? offset->view() : TensorView();
  TensorView yv = y.view(), mv = mean.view(), rv = rstd.view(), xv = x.view();
  if (c.layer)
    layer_norm_host(xv, scale ? &sView : nullptr, offset ? &oView : nullptr, yv, fwd, &mv, &rv);
  else
    rms_norm_host(xv, scale ? &sView : nullptr, yv, fwd, &rv);
  double tol = tolerance(c.x) * c.tolerance_factor;
  CHECK(relError(y.values(), ref.y) <= tol);
  if (c.layer)
    CHECK(relError(mean.values(), ref.mean) <= tolerance(residual) * c.tolerance_factor);
  CHECK(relError(rstd.values(), ref.rstd) <= tolerance(residual) * c.tolerance_factor);

  DType paramType = c.scale.value_or(c.x);
  HostTensor dx(c.x, c.shape), dscale(paramType, {n}), doffset(c.offset.value_or(c.x), {n});
  TensorView dxv = dx.view(), dsv = dscale.view(), dov = doffset.view(), dyv = dy.view();
  if (c.layer)
    layer_norm_vjp_host(dyv, xv, scale ? &sView : nullptr, mv, rv, dxv, &dsv, &dov, vjp);
  else
    rms_norm_vjp_host(dyv, xv, scale ? &sView : nullptr, rv, dxv, &dsv, vjp);
  // dx goes through f32 residuals and a cancellation; bf16 / f16 round the output.
  // f64 math on f32 residuals is exact to about f32's precision.
  double f64Tol = residual == DType::F32 ? 1e-6 : 1e-10;
  CHECK(relError(dx.values(), ref.dx, 1e-2 * std::sqrt(ref.dx_scale)) <= std::max(tol, c.x == DType::F64 ? f64Tol : 1e-4));
  CHECK(relError(dscale.values(), ref.dscale) <=
        std::max(tolerance(paramType), c.x == DType::F64 ? f64Tol : 1e-4) * c.tolerance_factor);
  if (c.layer)
    CHECK(relError(doffset.values(), ref.doffset) <= std::max(tolerance(doffset.dtype), 1e-4));
}

std::string describe(const Case &c) {
  std::string s = std::string(c.layer ? "layer_norm " : "rms_norm ") + std::string(dtype_name(c.x)) + " [";
  for (size_t i = 0; i < c.shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(c.shape[i]);
  s += "] axis " + std::to_string(c.axis);
  s += c.scale ? " scale " + std::string(dtype_name(*c.scale)) : " no-scale";
  s += c.offset ? " offset " + std::string(dtype_name(*c.offset)) : " no-offset";
  s += " impl " + c.implementation.value_or("auto");
  if (c.fwd_config)
    s += " fwd " + c.fwd_config->to_json();
  if (c.vjp_config)
    s += " vjp " + c.vjp_config->to_json();
  return s;
}

ArgSpec spec(std::vector<int64_t> shape, DType d) { return ArgSpec{std::move(shape), d}; }

BoundArgs layerArgs(DType d, std::vector<int64_t> shape, int axis = -1) {
  int64_t n = shape[axis < 0 ? axis + shape.size() : axis];
  return bind_layer_norm(spec(shape, d), spec({n}, d), spec({n}, d), spec(shape, d), std::nullopt, std::nullopt, axis,
                         1e-5);
}

} // namespace

//===----------------------------------------------------------------------===//
// Framework
//===----------------------------------------------------------------------===//

TEST_CASE("norm: explicit tile with f64 throws NotSupported, auto falls back to reference", "[norm]") {
  const Op &op = layer_norm_op();
  BoundArgs f64 = layerArgs(DType::F64, {3, 17});
  REQUIRE_THROWS_AS(op.select(f64, std::string("tile"), "sm_90a"), NotSupported);
  REQUIRE_THROWS_WITH(op.select(f64, std::string("tile"), "sm_90a"),
                      Contains("f64 math is not supported by the tile implementation"));
  CHECK(op.select(f64, std::nullopt, "sm_90a").name() == "reference");
  CHECK(op.select(layerArgs(DType::BF16, {3, 17}), std::nullopt, "sm_90a").name() == "tile");
  // The VJP is an op of its own, with the same choice.
  CHECK(layer_norm_vjp_op().implementations().back()->name() == "reference");
  // Older GPUs, non-last axes and overlong rows go to the reference too.
  CHECK(op.select(layerArgs(DType::BF16, {3, 17}), std::nullopt, "sm_75").name() == "reference");
  REQUIRE_THROWS_AS(op.select(layerArgs(DType::BF16, {3, 17}), std::string("tile"), "sm_75"), NotSupported);
  CHECK(op.select(layerArgs(DType::F32, {3, 17, 5}, 1), std::nullopt, "sm_90a").name() == "reference");
  REQUIRE_THROWS_WITH(op.select(layerArgs(DType::F32, {3, 17, 5}, 1), std::string("tile"), "sm_90a"),
                      Contains("last axis"));
  CHECK(op.select(layerArgs(DType::F32, {2, 100000}), std::nullopt, "sm_90a").name() == "reference");
  REQUIRE_THROWS_WITH(op.select(f64, std::string("cuda"), "sm_90a"), Contains("unknown implementation"));

  // Through the host API as well.
  HostTensor x(DType::F64, {3, 17}, randomValues(51, DType::F64, 5)), y(DType::F64, {3, 17});
  TensorView xv = x.view(), yv = y.view();
  NormOptions tile;
  tile.implementation = "tile";
  REQUIRE_THROWS_AS(layer_norm_host(xv, nullptr, nullptr, yv, tile), NotSupported);
  REQUIRE_NOTHROW(layer_norm_host(xv, nullptr, nullptr, yv));
}

TEST_CASE("norm: binding names the offending argument", "[norm]") {
  auto bf = [](std::vector<int64_t> s) { return spec(std::move(s), DType::BF16); };
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), bf({16}), std::nullopt, bf({3, 17}), std::nullopt, std::nullopt,
                                      -1, 1e-5),
                      Contains("scale") && Contains("[17]"));
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), std::nullopt, spec({17}, DType::F16), bf({3, 17}), std::nullopt,
                                      std::nullopt, -1, 1e-5),
                      Contains("offset") && Contains("f16"));
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), std::nullopt, std::nullopt, spec({3, 17}, DType::F32), std::nullopt,
                                      std::nullopt, -1, 1e-5),
                      Contains("y"));
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), std::nullopt, std::nullopt, bf({3, 17}), bf({3}), std::nullopt, -1,
                                      1e-5),
                      Contains("mean") && Contains("f32"));
  REQUIRE_THROWS_WITH(bind_rms_norm(bf({3, 17}), std::nullopt, bf({3, 17}), spec({4}, DType::F32), -1, 1e-5),
                      Contains("rstd") && Contains("3 values"));
  REQUIRE_THROWS_WITH(bind_rms_norm(bf({3, 17}), std::nullopt, bf({3, 17}), std::nullopt, 2, 1e-5),
                      Contains("axis 2"));
  REQUIRE_THROWS_WITH(bind_rms_norm(spec({3, 17}, DType::I32), std::nullopt, spec({3, 17}, DType::I32), std::nullopt,
                                    -1, 1e-5),
                      Contains("x must be bf16, f16, f32 or f64"));
  REQUIRE_THROWS_WITH(bind_rms_norm(bf({3, 17}), std::nullopt, bf({3, 17}), std::nullopt, -1, -1.0),
                      Contains("epsilon"));
  REQUIRE_THROWS_WITH(bind_rms_norm_vjp(bf({3, 16}), bf({3, 17}), std::nullopt, spec({3}, DType::F32), bf({3, 17}),
                                        std::nullopt, -1),
                      Contains("dy"));
  // Residuals may be [rows] or x's shape without the axis.
  REQUIRE_NOTHROW(bind_layer_norm(bf({2, 3, 17}), std::nullopt, std::nullopt, bf({2, 3, 17}), spec({2, 3}, DType::F32),
                                  spec({6}, DType::F32), -1, 1e-5));
}

TEST_CASE("norm: BoundArgs are canonical and round-trip through JSON", "[norm]") {
  BoundArgs a = layerArgs(DType::BF16, {3, 17}, -1);
  BoundArgs b = layerArgs(DType::BF16, {3, 17}, 1);
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  CHECK(a.attributes.at("axis") == "1");
  CHECK(a.attributes.at("epsilon") == "1e-05");
  BoundArgs back = BoundArgs::from_json(a.to_json());
  CHECK(back == a);
  CHECK(back.hash() == a.hash());
  CHECK(back.digest() == a.digest());
  CHECK(back.to_json() == a.to_json());
  REQUIRE_NOTHROW(layer_norm_op().validate(back));
  BoundArgs noScale = bind_rms_norm(spec({4, 8}, DType::F32), std::nullopt, spec({4, 8}, DType::F32), std::nullopt, 0,
                                    1e-6);
  CHECK(BoundArgs::from_json(noScale.to_json()) == noScale);
  CHECK(noScale.to_json().find("null") != std::string::npos);
  CHECK(noScale.attributes.at("epsilon") == "1e-06");
  CHECK_FALSE(noScale == a);
  CHECK(find_op("rms_norm") == &rms_norm_op());
  CHECK(find_op("layer_norm_vjp") == &layer_norm_vjp_op());

  // A hand-edited BoundArgs is checked by the op.
  BoundArgs edited = a;
  edited.args[1]->shape = {16};
  REQUIRE_THROWS_WITH(layer_norm_op().validate(edited), Contains("scale"));
  edited = a;
  edited.attributes["axis"] = "-1";
  REQUIRE_THROWS_WITH(layer_norm_op().validate(edited), Contains("canonical"));
  edited = a;
  edited.attributes["bogus"] = "1";
  REQUIRE_THROWS_WITH(layer_norm_op().validate(edited), Contains("bogus"));

  for (const char *bad : {"{", "[]", "{\"op\": \"layer_norm\", \"args\": []}",
                          "{\"op\": 3, \"args\": [], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": {}, \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [{\"shape\": [-1], \"dtype\": \"f32\"}], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [{\"shape\": [1], \"dtype\": \"f17\"}], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [{\"shape\": [1]}], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [], \"attributes\": {\"axis\": 1}}",
                          "{\"op\": \"x\", \"args\": [], \"attributes\": {}, \"extra\": 1}"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(BoundArgs::from_json(bad), Error);
  }
  CHECK(ArgSpec::from_json(ArgSpec{{2, 3}, DType::F16}.to_json()) == ArgSpec{{2, 3}, DType::F16});
}

TEST_CASE("norm: Config round-trips through JSON and names missing keys", "[norm]") {
  Config c{{"block_rows", 4}, {"num_warps", 8}};
  CHECK(Config::from_json(c.to_json()) == c);
  CHECK(Config::from_json(c.to_json()).hash() == c.hash());
  CHECK(c.get("num_warps") == 8);
  CHECK(c.get_or("block_cols", 7) == 7);
  REQUIRE_THROWS_WITH(c.get("block_cols"), Contains("block_cols") && Contains("block_rows"));
  CHECK_FALSE(Config{{"block_rows", 2}}.hash() == Config{{"block_rows", 4}}.hash());
  for (const char *bad : {"{", "[1, 2]", "3", "{\"a\": 1.5}", "{\"a\": \"x\"}", "{\"a\": [1]}"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(Config::from_json(bad), Error);
  }
  CHECK(Config::from_json("{}").values.empty());
}

TEST_CASE("norm: configs come from explicit values, then providers, then the heuristic", "[norm]") {
  const Op &op = layer_norm_op();
  BoundArgs args = layerArgs(DType::BF16, {1000, 4096});
  const Implementation &tile = op.select(args, std::nullopt, "sm_90a");
  Config heuristic = tile.heuristic(args);
  CHECK(heuristic.has("block_rows"));
  CHECK(heuristic.has("num_warps"));
  CHECK(op.resolve_config(tile, args, std::nullopt) == heuristic);
  Config chosen{{"block_rows", 2}, {"num_warps", 8}};
  {
    ConfigProviderScope scope([&](const BoundArgs &a, const std::string &impl) -> std::optional<Config> {
      if (a == args && impl == "tile")
        return chosen;
      return std::nullopt;
    });
    CHECK(op.resolve_config(tile, args, std::nullopt) == chosen);
    Config inner{{"block_rows", 1}, {"num_warps", 16}};
    {
      ConfigProviderScope newer([&](const BoundArgs &, const std::string &) { return std::optional<Config>(inner); });
      CHECK(op.resolve_config(tile, args, std::nullopt) == inner);
    }
    CHECK(op.resolve_config(tile, args, std::nullopt) == chosen);
    // An invalid provided config is skipped.
    ConfigProviderScope bad([&](const BoundArgs &, const std::string &) {
      return std::optional<Config>(Config{{"block_rows", 3}, {"num_warps", 8}});
    });
    CHECK(op.resolve_config(tile, args, std::nullopt) == chosen);
    // Explicit beats providers; an invalid explicit config is an error.
    Config mine{{"block_rows", 4}, {"num_warps", 4}};
    CHECK(op.resolve_config(tile, args, mine) == mine);
    REQUIRE_THROWS_WITH(op.resolve_config(tile, args, Config{{"block_rows", 4}}), Contains("num_warps"));
  }
  CHECK(op.resolve_config(tile, args, std::nullopt) == heuristic);
  // Long rows loop over column blocks; every search-space entry is valid.
  BoundArgs wide = layerArgs(DType::BF16, {4, 65536});
  CHECK(op.implementation("tile").heuristic(wide).has("block_cols"));
  for (const auto &impl : op.implementations())
    for (const BoundArgs &a : {args, wide, layerArgs(DType::F32, {3, 17, 5}, 1)}) {
      if (impl->why_not(a))
        continue;
      auto space = impl->search_space(a);
      CHECK(space.size() >= 1);
      for (const Config &c : space) {
        INFO(impl->name() << " " << c.to_json());
        CHECK_FALSE(impl->check_config(a, c));
      }
    }
}

//===----------------------------------------------------------------------===//
// Numerics on the interpreter
//===----------------------------------------------------------------------===//

TEST_CASE("norm: forward and VJP match float64 for every dtype and shape", "[norm]") {
  for (bool layer : {true, false})
    for (DType d : {DType::BF16, DType::F16, DType::F32, DType::F64})
      for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 1}, {3, 17}, {37, 1000}, {5, 4097}}) {
        Case c;
        c.layer = layer;
        c.x = d;
        c.shape = shape;
        c.scale = d;
        c.offset = d;
        DYNAMIC_SECTION(describe(c)) { check(c); }
      }
}

TEST_CASE("norm: both implementations, looping configs and a large mean", "[norm]") {
  std::vector<Case> cases;
  for (bool layer : {true, false}) {
    for (DType d : {DType::BF16, DType::F32}) {
      Case ref;
      ref.layer = layer;
      ref.x = d;
      ref.shape = {3, 17};
      ref.scale = d;
      ref.offset = d;
      ref.implementation = "reference";
      cases.push_back(ref);
      // Several column blocks, masked tails, rows split over programs.
      ref.fwd_config = Config{{"block_rows", 2}, {"block_cols", 8}, {"num_warps", 1}};
      ref.vjp_config = Config{{"block_rows", 2}, {"block_cols", 8}, {"num_warps", 1}, {"programs", 1}};
      cases.push_back(ref);
      ref.vjp_config->set("programs", 2);
      ref.shape = {37, 100};
      cases.push_back(ref);
      // The tile implementation's looping variants (rows longer than the registers).
      Case loop = ref;
      loop.implementation = "tile";
      loop.fwd_config = Config{{"block_rows", 1}, {"block_cols", 32}, {"num_warps", 1}};
      loop.vjp_config = Config{{"block_rows", 1}, {"block_cols", 32}, {"num_warps", 1}, {"programs", 3}};
      cases.push_back(loop);
      // Fused with several rows per program and a partial last block.
      Case fused = ref;
      fused.implementation = "tile";
      fused.fwd_config = Config{{"block_rows", 4}, {"num_warps", 2}};
      fused.vjp_config = Config{{"block_rows", 4}, {"num_warps", 2}, {"programs", 3}};
      cases.push_back(fused);
    }
    // Rows far from zero: the variance must not cancel (single-pass shifted sums too).
    for (auto impl : {"tile", "reference"}) {
      Case shifted;
      shifted.layer = layer;
      shifted.x = DType::F32;
      shifted.shape = {5, 4097};
      shifted.scale = DType::F32;
      shifted.offset = DType::F32;
      shifted.shift = 1000;
      shifted.implementation = impl;
      shifted.tolerance_factor = 50;  // the f32 mean of values near 1000 carries ~1e-4 absolute error
      shifted.fwd_config = std::string(impl) == "tile"
                               ? Config{{"block_rows", 1}, {"block_cols", 1024}, {"num_warps", 4}}
                               : Config{{"block_rows", 1}, {"block_cols", 1024}, {"num_warps", 4}};
      cases.push_back(shifted);
    }
  }
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) { check(c); }
}

TEST_CASE("norm: non-last axes, missing and f32 parameters", "[norm]") {
  std::vector<Case> cases;
  for (bool layer : {true, false}) {
    for (DType d : {DType::BF16, DType::F32, DType::F64}) {
      Case c;
      c.layer = layer;
      c.x = d;
      c.shape = {3, 17, 5};
      c.axis = 1;
      c.scale = d;
      c.offset = DType::F32;
      cases.push_back(c);
      c.shape = {6, 4, 3};
      c.axis = 0;
      cases.push_back(c);
      c.shape = {2, 9, 40};
      c.axis = -2;
      c.fwd_config = Config{{"block_rows", 16}, {"block_cols", 4}, {"num_warps", 2}};
      c.vjp_config = Config{{"block_rows", 16}, {"block_cols", 4}, {"num_warps", 2}, {"programs", 2}};
      cases.push_back(c);
    }
    for (DType d : {DType::BF16, DType::F16, DType::F32}) {
      Case c;
      c.layer = layer;
      c.x = d;
      c.shape = {4, 3, 100};
      cases.push_back(c);  // no scale, no offset
      c.scale = DType::F32;
      cases.push_back(c);  // f32 scale
      c.scale.reset();
      c.offset = DType::F32;
      cases.push_back(c);  // offset only
      c.scale = DType::F32;
      c.shape = {1, 300};
      cases.push_back(c);  // f32 scale and offset with narrow x
    }
  }
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) { check(c); }
}

TEST_CASE("norm: f64 x with f32 residuals", "[norm]") {
  for (bool layer : {true, false}) {
    Case c;
    c.layer = layer;
    c.x = DType::F64;
    c.shape = {5, 33};
    c.scale = DType::F64;
    c.offset = DType::F64;
    c.residual = DType::F32;
    DYNAMIC_SECTION((layer ? "layer_norm" : "rms_norm")) { check(c); }
  }
  auto f = [](DType d) { return ArgSpec{{3}, d}; };
  ArgSpec x{{3, 4}, DType::F64};
  REQUIRE_THROWS_WITH(bind_layer_norm(x, std::nullopt, std::nullopt, x, f(DType::F32), f(DType::F64), -1, 1e-5),
                      Contains("share a dtype"));
  REQUIRE_THROWS_WITH(bind_layer_norm(x, std::nullopt, std::nullopt, x, f(DType::F16), f(DType::F16), -1, 1e-5),
                      Contains("f32 or f64"));
}

TEST_CASE("norm: dscale and doffset over many rows are accurate and deterministic", "[norm]") {
  for (bool layer : {true, false}) {
    Case c;
    c.layer = layer;
    c.x = DType::BF16;
    c.shape = {8192, 16};
    c.scale = DType::F32;
    c.offset = DType::F32;
    DYNAMIC_SECTION((layer ? "layer_norm" : "rms_norm")) { check(c); }
  }
  // Two runs give the same bits (no atomics; a fixed reduction order).
  const int64_t rows = 3000, n = 24;
  HostTensor x(DType::F32, {rows, n}, randomValues(rows * n, DType::F32, 7)), dy(DType::F32, {rows, n},
                                                                                   randomValues(rows * n, DType::F32, 8));
  HostTensor mean(DType::F32, {rows}), rstd(DType::F32, {rows}), y(DType::F32, {rows, n});
  TensorView xv = x.view(), yv = y.view(), mv = mean.view(), rv = rstd.view(), dyv = dy.view();
  layer_norm_host(xv, nullptr, nullptr, yv, {}, &mv, &rv);
  std::vector<std::vector<uint64_t>> runs;
  for (int run = 0; run < 2; ++run) {
    HostTensor dx(DType::F32, {rows, n}), ds(DType::F32, {n}), dof(DType::F32, {n});
    TensorView dxv = dx.view(), dsv = ds.view(), dov = dof.view();
    layer_norm_vjp_host(dyv, xv, nullptr, mv, rv, dxv, &dsv, &dov);
    runs.push_back(ds.storage);
  }
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("norm: empty rows and the generic Op entry points", "[norm]") {
  // Zero rows: nothing to normalise, and the parameter gradients are zero.
  HostTensor x(DType::F32, {0, 8}), dy(DType::F32, {0, 8}), dx(DType::F32, {0, 8});
  HostTensor mean(DType::F32, {0}), rstd(DType::F32, {0}), ds(DType::F32, {8}), dof(DType::F32, {8});
  TensorView xv = x.view(), dyv = dy.view(), dxv = dx.view(), mv = mean.view(), rv = rstd.view();
  TensorView dsv = ds.view(), dov = dof.view();
  layer_norm_vjp_host(dyv, xv, nullptr, mv, rv, dxv, &dsv, &dov);
  CHECK(ds.values() == std::vector<double>(8, 0.0));
  CHECK(dof.values() == std::vector<double>(8, 0.0));

  // Op::interpret with views in arg_names() order, and its checks.
  const Op &op = rms_norm_op();
  CHECK(op.arg_names() == std::vector<std::string>{"x", "scale", "y", "rstd"});
  HostTensor x2(DType::F32, {3, 17}, randomValues(51, DType::F32, 9)), y2(DType::F32, {3, 17});
  BoundArgs args = bind_rms_norm(ArgSpec{{3, 17}, DType::F32}, std::nullopt, ArgSpec{{3, 17}, DType::F32},
                                 std::nullopt, -1, 1e-5);
  TensorView in[] = {x2.view(), TensorView()}, out[] = {y2.view(), TensorView()};
  REQUIRE_NOTHROW(op.interpret(args, in, out));
  std::vector<double> xs = x2.values(), ys = y2.values();
  double ss = 0;
  for (int j = 0; j < 17; ++j)
    ss += xs[j] * xs[j];
  CHECK(ys[0] == Approx(xs[0] / std::sqrt(ss / 17 + 1e-5)).epsilon(1e-5));
  TensorView wrong[] = {y2.view(), x2.view()};
  REQUIRE_THROWS_WITH(op.interpret(args, in, wrong), Contains("rstd"));
}

TEST_CASE("norm: every kernel variant compiles to PTX", "[norm][ptx]") {
  struct Variant {
    const Op *op;
    BoundArgs args;
    std::string impl;
  };
  auto f = [](std::vector<int64_t> s, DType d = DType::BF16) { return ArgSpec{std::move(s), d}; };
  ArgSpec rows{{64}, DType::F32};
  std::vector<Variant> variants = {
      {&layer_norm_op(), bind_layer_norm(f({64, 1000}), f({1000}), f({1000}, DType::F32), f({64, 1000}), rows, rows, -1, 1e-5), "tile"},
      {&layer_norm_op(), bind_layer_norm(f({64, 20000}), f({20000}), std::nullopt, f({64, 20000}), rows, rows, -1, 1e-5), "tile"},
      {&rms_norm_op(), bind_rms_norm(f({64, 1000}), f({1000}), f({64, 1000}), rows, -1, 1e-5), "reference"},
      {&layer_norm_op(), bind_layer_norm(f({4, 16, 8}, DType::F64), std::nullopt, std::nullopt, f({4, 16, 8}, DType::F64),
                                         std::nullopt, std::nullopt, 1, 1e-5), "reference"},
      {&layer_norm_vjp_op(), bind_layer_norm_vjp(f({64, 1000}), f({64, 1000}), f({1000}), rows, rows, f({64, 1000}), f({1000}, DType::F32), f({1000}), -1), "tile"},
      {&layer_norm_vjp_op(), bind_layer_norm_vjp(f({64, 9000}), f({64, 9000}), f({9000}), rows, rows, f({64, 9000}), f({9000}), f({9000}), -1), "tile"},
      {&rms_norm_vjp_op(), bind_rms_norm_vjp(f({4, 16, 8}), f({4, 16, 8}), f({16}), ArgSpec{{32}, DType::F32}, f({4, 16, 8}), f({16}), 1), "reference"},
  };
  int index = 0;
  for (const Variant &v : variants) {
    const Implementation &impl = v.op->implementation(v.impl);
    Config config = impl.heuristic(v.args);
    for (dsl::Kernel &kernel : impl.kernels(v.args, config)) {
      DYNAMIC_SECTION(index++ << " " << v.op->name() << " " << v.impl << " " << kernel.name()) {
        CompileOptions options;
        options.arch = "sm_90a";
        options.assemble = false;
        CompiledKernel compiled = compile(kernel, options);
        CHECK(compiled.ptx.find(".entry " + kernel.name()) != std::string::npos);
      }
    }
  }
}
