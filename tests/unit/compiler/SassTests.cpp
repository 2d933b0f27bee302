//===- SassTests.cpp - The matmul and attention kernels' machine code ------===//
//
// The cubins the compiler makes for sm_90a (nvJitLink or ptxas; no GPU needed),
// disassembled with cuobjdump where the toolkit has it: the hopper kernel runs on
// Hopper's warpgroup tensor-core instructions (HGMMA) fed by TMA (UTMALDG) and
// mbarriers (SYNCS), the tile kernel on mma.sync (HMMA.16816) fed by cp.async (LDGSTS)
// and ldmatrix (LDSM); the hopper attention kernels on HGMMA, TMA and mbarriers too.
// Without cuobjdump the case says so and checks nothing.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Attention.h>
#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/ops/Matmul.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <utility>

#include "common/PtxasUtil.h"

using namespace tokamax;
using test::contains;

namespace {

/// cuobjdump -sass of `kernel` assembled for sm_90a (its PTX in `ptx` when asked).
std::string sassOf(const std::string &cuobjdump, const dsl::Kernel &kernel, std::string *ptx = nullptr) {
  CompileOptions options;
  options.arch = "sm_90a";
  CompiledKernel compiled = compile(kernel, options);
  if (ptx)
    *ptx = compiled.ptx;
  REQUIRE(!compiled.cubin.empty());
  auto [status, sass] = test::run_cuobjdump_sass(cuobjdump, compiled.cubin);
  INFO(sass.substr(0, 2000));
  REQUIRE(status == 0);
  return sass;
}

/// The lines of `sass` that order wgmma: its products, fences, waits, branches and
/// barrier waits, with their offsets (where an unexpected wait sits in the loop).
std::string wgmmaOrder(const std::string &sass) {
  std::string out;
  size_t start = 0, exps = 0;  // a run of exponentials (the softmax) shows as one line
  while (start < sass.size()) {
    size_t end = sass.find('\n', start);
    if (end == std::string::npos)
      end = sass.size();
    const std::string line = sass.substr(start, end - start);
    start = end + 1;
    if (line.find("/*0") == std::string::npos)
      continue;
    if (line.find("MUFU.EX2") != std::string::npos) {
      ++exps;
      continue;
    }
    for (const char *what : {"HGMMA", "WARPGROUP", "BRA", "SYNCS.PHASECHK", "BAR."})
      if (line.find(what) != std::string::npos) {
        if (exps)
          out += fmt::format("        ... {} x MUFU.EX2\n", std::exchange(exps, 0));
        out += line.substr(0, std::min<size_t>(line.size(), 110)) + "\n";
        break;
      }
  }
  return out;
}

} // namespace

TEST_CASE("matmul SASS: hopper on HGMMA fed by TMA, tile on HMMA fed by cp.async and ldmatrix", "[matmul][sass]") {
  const std::string cuobjdump = test::cuobjdump_path();
  if (cuobjdump.empty()) {
    WARN("cuobjdump not found (set TOKAMAX_CUOBJDUMP): the SASS is not checked");
    return;
  }
  MatmulSpec spec{4096, 4096, 4096, DType::BF16, DType::BF16};
  std::string hopper = sassOf(cuobjdump, matmul_hopper_kernel(spec, default_hopper_config(spec, 132)));
  CHECK(contains(hopper, "HGMMA.64x256x16.F32.BF16"));
  CHECK(contains(hopper, "UTMALDG.2D"));
  CHECK(contains(hopper, "SYNCS."));
  CHECK_FALSE(contains(hopper, "HMMA."));
  std::string tile = sassOf(cuobjdump, matmul_kernel(spec, default_config(spec)));
  CHECK(contains(tile, "HMMA.16816.F32.BF16"));
  CHECK(contains(tile, "LDGSTS"));
  CHECK(contains(tile, "LDSM.16.M88.4"));
  CHECK(contains(tile, "LDSM.16.MT88.4"));
  CHECK_FALSE(contains(tile, "HGMMA"));
}

TEST_CASE("attention SASS: the hopper forward, dk/dv and dq on HGMMA fed by TMA and mbarriers", "[attention][sass]") {
  const ArgSpec x{{4, 2048, 8, 128}, DType::BF16};
  BoundArgs forward = bind_attention({x, x, x, {}, {}, {}, {}, x, attention_lse_spec(x)});
  BoundArgs vjp = bind_attention_vjp({x, x, x, x, x, attention_lse_spec(x), {}, {}, {}, {}, x, x, x, {}});
  std::vector<dsl::Kernel> kernels = attention_op().implementation("hopper").kernels(
      forward, attention_op().implementation("hopper").heuristic(forward));
  for (dsl::Kernel &kernel : attention_vjp_op().implementation("hopper").kernels(
           vjp, attention_vjp_op().implementation("hopper").heuristic(vjp)))
    if (kernel.name().find("delta") == std::string::npos)
      kernels.push_back(std::move(kernel));
  REQUIRE(kernels.size() == 3u);  // forward, dk/dv, dq
  const std::string cuobjdump = test::cuobjdump_path();
  if (cuobjdump.empty()) {
    WARN("cuobjdump not found (set TOKAMAX_CUOBJDUMP): the SASS is not checked");
    return;
  }
  for (const dsl::Kernel &kernel : kernels) {
    INFO(kernel.name());
    std::string sass = sassOf(cuobjdump, kernel);
    CHECK(contains(sass, "HGMMA.64x"));
    CHECK((contains(sass, "UTMALDG.2D") || contains(sass, "UTMALDG.3D")));
    CHECK(contains(sass, "SYNCS."));
    CHECK_FALSE(contains(sass, "HMMA."));
  }
}

TEST_CASE("warpgroup waits in SASS: ptxas injects none beyond the PTX's own", "[sass]") {
  // Kernels that keep products in flight across steps: a wait ptxas adds inside the loop
  // (C7517, or one it does not report) would complete every product at once. The PTX's
  // waits (wgmma.wait_group) against the machine code's (WARPGROUP.DEPBAR) tell whether
  // one landed there. On the H200 the persistent ring matmul and the cross-entropy tma
  // rows kernel (tiles holding their steps) matched; the GLU tma kernel and the
  // attention forward held 16, one per product: nvJitLink had assembled them as separate
  // compilation units (wgmma serialized). The same PTX through ptxas held 6 and 2, as
  // many as its waits; such kernels now go to ptxas where one is found.
  const std::string cuobjdump = test::cuobjdump_path();
  if (cuobjdump.empty()) {
    WARN("cuobjdump not found (set TOKAMAX_CUOBJDUMP): the SASS is not checked");
    return;
  }
  std::vector<dsl::Kernel> kernels;
  MatmulSpec spec{4096, 4096, 4096, DType::BF16, DType::BF16};
  MatmulConfig ring = default_hopper_config(spec, 132);
  ring.tma_ring = true;
  ring.warp_specialize = true;
  kernels.push_back(matmul_hopper_kernel(spec, ring));
  BoundArgs glu = bind_gated_linear_unit({{8192, 4096}, DType::BF16}, {{4096, 2, 14336}, DType::BF16},
                                         {{8192, 14336}, DType::BF16}, GluActivation::Swish);
  for (dsl::Kernel &k : gated_linear_unit_op().implementation("tile").kernels(
           glu, Config{{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"num_warps", 8}, {"async_copy", 1},
                       {"stages", 3}, {"tma", 1}}))
    kernels.push_back(std::move(k));
  const ArgSpec x{{8192, 4096}, DType::BF16}, w{{4096, 131072}, DType::BF16};
  BoundArgs xent = bind_linear_softmax_cross_entropy_loss(x, w, {{8192}, DType::I32},
                                                          cross_entropy_loss_spec(x, w, LossReduction::Mean),
                                                          cross_entropy_lse_spec(x, w), LossReduction::Mean, -100);
  for (dsl::Kernel &k : find_op(xent.op)->implementation("tile").kernels(
           xent, Config{{"block_b", 128}, {"block_v", 128}, {"block_k", 64}, {"num_warps", 8}, {"tma", 1},
                        {"split_v", 5}}))
    if (k.name() == "xent_rows")
      kernels.push_back(std::move(k));
  const ArgSpec q{{4, 2048, 8, 128}, DType::BF16};
  BoundArgs forward = bind_attention({q, q, q, {}, {}, {}, {}, q, attention_lse_spec(q)});
  // The heuristic's forward (ping-pong) and the overlapped one.
  // (The two forwards share a kernel name: each is labelled with its config.)
  std::vector<std::string> labels(kernels.size());
  const Implementation &hopper = attention_op().implementation("hopper");
  for (const Config &config : {hopper.heuristic(forward), Config{{"block_q", 128}, {"block_kv", 128}, {"num_warps", 8},
                                                                  {"stages", 2}, {"overlap", 1}}})
    for (dsl::Kernel &k : hopper.kernels(forward, config)) {
      labels.push_back(config.to_json());
      kernels.push_back(std::move(k));
    }
  for (size_t i = 0; i < kernels.size(); ++i) {
    const dsl::Kernel &kernel = kernels[i];
    const std::string name = labels[i].empty() ? kernel.name() : kernel.name() + " " + labels[i];
    std::string ptx;
    const std::string sass = sassOf(cuobjdump, kernel, &ptx);
    const size_t ptxWaits = test::count(ptx, "wgmma.wait_group"), sassWaits = test::count(sass, "WARPGROUP.DEPBAR");
    WARN(name << ": " << ptxWaits << " wgmma.wait_group in PTX, " << sassWaits << " WARPGROUP.DEPBAR in SASS");
    INFO(name);
    CHECK(sassWaits > 0);
    if (sassWaits > ptxWaits)  // where they sit, for the log
      WARN(name << " in SASS (products, waits, branches):\n" << wgmmaOrder(sass));
    CHECK(sassWaits <= ptxWaits);
  }
}
