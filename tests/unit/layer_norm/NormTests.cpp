//===- NormTests.cpp - layer_norm / rms_norm numerics on the interpreter ---===//
//
// The norms' kernels run on the CPU interpreter (the *_host functions go through the same
// op, implementation choice, configs and kernels as device calls) and are compared with
// float64 references written from the formulas, independently of the kernels.
//
//===----------------------------------------------------------------------===//
#include "common/PtxasUtil.h"
#include "unit/layer_norm/NormTestUtil.h"

TEST_CASE("norm: forward and VJP match float64 for every dtype and shape", "[norm]") {
  for (bool layer : {true, false})
    for (DType d : {DType::BF16, DType::F16, DType::F32, DType::F64})
      for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 1}, {3, 17}, {37, 1000}, {9, 3000}, {5, 4097}}) {
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

TEST_CASE("norm: the chunked looping VJP's kernels assemble for sm_90a without spills", "[norm][ptx]") {
  // 4096x16384 bf16 with f32 parameters (the bench shape) in chunks of 256 rows: the
  // coefficient kernel, the dx kernels storing and adding to the partial rows, the sums.
  const std::string ptxas = test::ptxas_path();
  const ArgSpec x{{4096, 16384}, DType::BF16}, p{{16384}, DType::F32}, r{{4096}, DType::F32};
  for (bool layer : {true, false}) {
    const BoundArgs args = layer ? bind_layer_norm_vjp(x, x, p, r, r, x, p, p, -1) : bind_rms_norm_vjp(x, x, p, r, x, p, -1);
    const Implementation &tile = find_op(args.op)->implementation("tile");
    const Config chunked = Config(tile.heuristic(args)).set("chunk_rows", 256);
    REQUIRE_FALSE(tile.check_config(args, chunked).has_value());
    const std::vector<dsl::Kernel> kernels = tile.kernels(args, chunked);
    REQUIRE(kernels.size() == 4u);  // coefficients, dx storing, dx adding, the sums
    for (const dsl::Kernel &kernel : kernels) {
      INFO(args.op << " " << kernel.name());
      CompileOptions options;
      options.arch = "sm_90a";
      options.assemble = false;
      const CompiledKernel compiled = compile(kernel, options);
      if (!ptxas.empty())
        test::check_assembles_without_spills(ptxas, compiled.ptx);
    }
  }
}

namespace {

/// A tile case of x [rows, cols], with f32 scale and offset when `params`.
Case tileCase(bool layer, DType d, int64_t rows, int64_t cols, bool params) {
  Case c;
  c.layer = layer;
  c.x = d;
  c.shape = {rows, cols};
  c.implementation = "tile";
  if (params) {
    c.scale = DType::F32;
    c.offset = DType::F32;
  }
  return c;
}

} // namespace

TEST_CASE("norm: persistent and row-split tile kernels on odd shapes", "[norm][split]") {
  std::vector<Case> cases;
  for (bool layer : {true, false})
    for (DType d : {DType::BF16, DType::F16, DType::F32})
      for (int64_t rows : {1, 3, 17})
        for (int64_t cols : {1, 4095, 8193, 16383})
          for (bool params : {false, true}) {
            Case c = tileCase(layer, d, rows, cols, params);
            // Two persistent programs (rows 3 and 17 loop over row groups; a partial last
            // one with four rows a group); rows of several columns split over programs
            // (8193: three blocks of 4096, the last with one column).
            if (cols == 1) {
              c.fwd_config = Config{{"block_rows", rows == 17 ? 4 : 1}, {"num_warps", 1}, {"programs", 2}};
              c.vjp_config = Config{{"block_rows", rows == 17 ? 4 : 1}, {"num_warps", 1}, {"programs", 2}};
            } else {
              int64_t split = cols == 8193 ? 4 : 2;
              c.fwd_config = Config{{"block_rows", 1}, {"num_warps", 4}, {"row_split", split}, {"programs", 2}};
              c.vjp_config = Config{{"block_rows", 1}, {"num_warps", 4}, {"row_split", split}, {"programs", 2}};
            }
            cases.push_back(c);
            if (cols == 4095) {  // the whole row in registers, persistent programs
              c.fwd_config = Config{{"block_rows", 1}, {"num_warps", 8}, {"programs", 2}};
              c.vjp_config = Config{{"block_rows", 1}, {"num_warps", 8}, {"programs", 2}};
              cases.push_back(c);
              // ... loading each program's next row during the current one (the last
              // load past the rows reads nothing).
              c.fwd_config->set("prefetch", 1);
              cases.push_back(c);
            }
            if (cols == 1 && rows == 17) {  // row groups of four, the last partial
              c.fwd_config = Config{{"block_rows", 4}, {"num_warps", 1}, {"programs", 2}, {"prefetch", 1}};
              cases.push_back(c);
            }
          }
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) { check(c); }
}

TEST_CASE("norm: the looping VJP in row chunks (chunk_rows) on odd shapes", "[norm][split]") {
  // Each chunk's coefficient and dx kernels back to back, the later chunks adding their
  // column sums to the first's partial rows: chunks that divide the rows and a partial
  // last one (17 rows in chunks of 4 and 5), more programs than a chunk's rows, one
  // chunk (chunk_rows past the rows), rows past the fused VJP's 8192 columns and short.
  std::vector<Case> cases;
  for (bool layer : {true, false})
    for (DType d : {DType::BF16, DType::F32})
      for (int64_t rows : {1, 16, 17})
        for (int64_t cols : {40, 8200})
          for (int64_t chunk : {4, 5, 64}) {
            Case c = tileCase(layer, d, rows, cols, /*params=*/chunk != 5);
            c.vjp_config = Config{{"block_rows", 1}, {"block_cols", cols > 40 ? 2048 : 16}, {"num_warps", cols > 40 ? 4 : 1},
                                  {"programs", chunk == 4 ? 3 : 8}, {"chunk_rows", chunk}};
            cases.push_back(c);
          }
  // The heuristic's looping config at 16384 columns (49 programs a column block) in
  // chunks of 128 rows: three chunks, the last of 44 rows with 44 programs.
  for (bool layer : {true, false}) {
    Case c = tileCase(layer, DType::BF16, 300, 16384, /*params=*/true);
    c.vjp_config = Config{{"block_rows", 1}, {"block_cols", 2048}, {"num_warps", 4}, {"programs", 49}, {"chunk_rows", 128}};
    cases.push_back(c);
  }
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) { check(c); }
}

TEST_CASE("norm: the staged VJP (each row in shared memory) on odd shapes", "[norm][split]") {
  // Rows past the fused VJP's 8192 columns, not multiples of the column block (the last
  // block partial); one row, and more rows than the two persistent programs (each program
  // copies its next row during the current one; the copy past the last row reads zeros).
  std::vector<Case> cases;
  for (bool layer : {true, false})
    for (DType d : {DType::BF16, DType::F32})
      for (int64_t rows : {1, 3, 17})
        for (int64_t cols : {8200, 16376})
          for (bool params : {false, true}) {
            if (d == DType::F32 && cols > 8200)  // two f32 rows of x and dy past a block's 227 KiB
              continue;
            Case c = tileCase(layer, d, rows, cols, params);
            c.vjp_config = Config{{"block_rows", 1}, {"block_cols", cols > 8200 ? 4096 : 2048}, {"num_warps", 4},
                                  {"staged", 1}, {"programs", 2}};
            cases.push_back(c);
            // The row in parts on adjacent programs (each stages its own blocks, reads the
            // others' for the statistics): 8200 columns in 2 parts of one 8192-column block
            // (the second holds 8 columns), 16376 in 4 of two 2048-column blocks.
            c.vjp_config = Config{{"block_rows", 1}, {"block_cols", cols > 8200 ? 2048 : 8192}, {"num_warps", 4},
                                  {"staged", 1}, {"row_split", cols > 8200 ? 4 : 2}, {"programs", 2}};
            cases.push_back(c);
          }
  for (const Case &c : cases)
    DYNAMIC_SECTION(describe(c)) { check(c); }
}
