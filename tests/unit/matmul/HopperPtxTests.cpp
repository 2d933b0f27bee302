//===- HopperPtxTests.cpp - the hopper matmul kernel's PTX ----------------===//
//
// The sm_90a PTX of the `hopper` matmul kernel (tile.tma_dot, tile.tma_store): TMA,
// mbarriers and wgmma (descriptors, or A in registers), the tensor maps with their boxes
// and swizzles as parameters, dynamic shared memory, 2-CTA clusters, TMA stores, fp8;
// it passes ptxas without spills or serialized wgmma; warpgroup-wide instructions stay
// out of lane-dependent code; warp roles may rebalance registers (setmaxnreg); the same
// product on the DSL's Hopper primitives (tma_ring); other architectures are refused
// with a clear error.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <unistd.h>

#include "unit/matmul/MatmulTestUtil.h"
#include "common/PtxasUtil.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

using namespace tokamax;
using Catch::Contains;
using test::describe;
using test::contains;

namespace {

/// The hopper kernel's PTX for sm_90a (not assembled: checkAssembles runs ptxas -v).
CompiledKernel compileHopper(const MatmulSpec &spec, const MatmulConfig &config) {
  CompileOptions options;
  options.arch = "sm_90a";
  options.assemble = false;
  return compile(matmul_hopper_kernel(spec, config), options);
}

/// ptxas (when found) assembles `ptx` for sm_90a: without spills unless `maySpill`, and
/// with the wgmma chain asynchronous (no serialization warning) unless `maySerialize`.
void checkAssembles(const std::string &ptxas, const std::string &ptx, bool maySpill = false,
                    bool maySerialize = false) {
  if (ptxas.empty())
    return;
  auto [status, log] = test::run_ptxas(ptxas, ptx, "sm_90a");
  INFO(log);
  CHECK(status == 0);
  if (!maySpill) {
    CHECK(contains(log, "0 bytes spill stores"));
    CHECK(contains(log, "0 bytes spill loads"));
  }
  if (!maySerialize) {
    CHECK_FALSE(contains(log, "serialized"));
    // C7517: a wait ptxas adds where registers of a product in flight meet another path.
    CHECK_FALSE(contains(log, "warpgroup.wait is injected"));
  }
}

} // namespace

TEST_CASE("hopper matmul PTX: TMA, mbarriers, wgmma, tensor maps, dynamic shared memory", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  if (ptxas.empty())
    WARN("ptxas not found: the PTX is checked textually only");
  for (DType dtype : {DType::BF16, DType::F16})
    for (int t = 0; t < 8; ++t) {
      MatmulSpec spec{256, 512, 320, dtype, dtype, bool(t & 1), bool(t & 2), t == 2};
      MatmulConfig config = default_hopper_config(spec);
      config.warp_specialize = t < 4;
      config.tma_store = t % 3 != 0;
      INFO(describe(spec, 1.0) << (config.warp_specialize ? " warp-specialized" : " in order")
                               << (config.tma_store ? ", TMA stores" : ", thread stores"));
      REQUIRE(config.block_m == 128);
      REQUIRE(config.block_n == 256);
      CompiledKernel compiled = compileHopper(spec, config);
      const std::string &ptx = compiled.ptx;
      const std::string types = dtype == DType::BF16 ? ".f32.bf16.bf16" : ".f32.f16.f16";
      CHECK(contains(ptx, "wgmma.mma_async.sync.aligned.m64n256k16" + types));
      CHECK(contains(ptx, "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"));
      CHECK(contains(ptx, "mbarrier.try_wait.parity"));
      // The epilogue: 16-byte stores per thread, or swizzled strips in shared memory
      // handed to TMA in bulk groups (two buffers: the reuse waits for reads only), all
      // waited for before the kernel returns.
      CHECK(contains(ptx, "st.global.v4.b32") == !config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.commit_group;") == config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.wait_group.read 1;") == config.tma_store);
      CHECK(contains(ptx, "cp.async.bulk.wait_group 0;") == config.tma_store);
      CHECK(contains(ptx, ".param .align 64 .b8"));

      const LaunchInfo &launch = compiled.launch;
      // A warp-specialized kernel has a producer warpgroup beside its 8 warps; the
      // epilogue's barriers count only the 256 consumer threads.
      CHECK(launch.block_threads == (config.warp_specialize ? 384u : 256u));
      CHECK(contains(ptx, ".maxntid 384, 1, 1") == config.warp_specialize);
      // 2 x 2 tiles: fewer than the 132 persistent programs, so one program each.
      CHECK(launch.grid[0] == 2 * 2);
      CHECK(launch.dynamic_shared);
      CHECK(launch.shared_bytes > 48 * 1024);
      CHECK(launch.shared_bytes <= 227 * 1024);
      REQUIRE(launch.tensor_maps.size() == (config.tma_store ? 3u : 2u));
      const TensorMapParam &ma = launch.tensor_maps[0], &mb = launch.tensor_maps[1];
      if (config.tma_store) {  // c: [block_m rows][64 columns] strips
        CHECK(launch.tensor_maps[2].param == (spec.has_bias ? 3u : 2u));
        CHECK(launch.tensor_maps[2].box_inner == 64);
        CHECK(launch.tensor_maps[2].box_outer == uint32_t(config.block_m));
      }
      CHECK(ma.param == 0);
      CHECK(mb.param == 1);
      // K-major operands (a [M, K], b [N, K]) take one [rows][64] box; MN-major ones
      // [64 K][64] boxes.
      CHECK(ma.box_inner == 64);
      CHECK(ma.box_outer == (spec.trans_a ? 64u : uint32_t(config.block_m)));
      CHECK(mb.box_inner == 64);
      CHECK(mb.box_outer == (spec.trans_b ? uint32_t(config.block_n) : 64u));
      // The launch info survives its JSON form.
      LaunchInfo back = LaunchInfo::from_json(launch.to_json());
      CHECK(back.dynamic_shared == launch.dynamic_shared);
      REQUIRE(back.tensor_maps.size() == launch.tensor_maps.size());
      CHECK(back.tensor_maps[1].box_outer == mb.box_outer);

      checkAssembles(ptxas, ptx);
    }
}

TEST_CASE("hopper matmul PTX on the DSL's Hopper primitives (tma_ring)", "[hopper][ptx]") {
  // TMA copies completing on mbarriers (initialized once, before any copy), waits on
  // their phases, wgmma with both operands from shared memory (no ldmatrix, no mma.sync),
  // one product left in flight per step; the same tensor-map boxes as tma_dot's.
  // With warp_specialize: a producer warpgroup (384 threads) runs only the copies and
  // its waits on the consumers' releases, after setmaxnreg.dec; the consumers wait,
  // multiply and release, after setmaxnreg.inc; the epilogue's barriers count only them.
  const std::string ptxas = test::ptxas_path();
  for (DType dtype : {DType::BF16, DType::F16})
    for (int t = 0; t < 8; ++t) {
      MatmulSpec spec{256, 512, 320, dtype, dtype, bool(t & 1), bool(t & 2), t == 2};
      MatmulConfig config = default_hopper_config(spec);
      config.tma_ring = true, config.programs = 0, config.num_stages = t % 2 ? 3 : 4;
      config.warp_specialize = t >= 4;
      config.programs = t >= 6 ? 3 : 0;  // persistent: 3 programs over the 4 tiles
      INFO(describe(spec, 1.0) << " stages " << config.num_stages
                               << (config.warp_specialize ? " warp-specialized" : " in order") << " programs "
                               << config.programs);
      CompiledKernel compiled = compileHopper(spec, config);
      const std::string &ptx = compiled.ptx;
      const std::string types = dtype == DType::BF16 ? ".f32.bf16.bf16" : ".f32.f16.f16";
      CHECK(contains(ptx, "wgmma.mma_async.sync.aligned.m64n256k16" + types));
      CHECK_FALSE(contains(ptx, "ldmatrix"));
      CHECK_FALSE(contains(ptx, "mma.sync"));
      CHECK(contains(ptx, "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"));
      CHECK(contains(ptx, "mbarrier.init.shared::cta.b64"));
      CHECK(contains(ptx, "fence.mbarrier_init.release.cluster"));
      CHECK(contains(ptx, "mbarrier.arrive.expect_tx.shared::cta.b64"));
      CHECK(contains(ptx, "mbarrier.try_wait.parity"));
      // One product in flight across steps, the persistent loop's too: a tile's first
      // product restarts the accumulator through wgmma's scale-d (dot_async's `fresh`),
      // and its store follows the tile's steps (nested loops); checkAssembles finds no
      // serialized wgmma chain and no injected wait. The persistent producer keeps 40.
      const bool persistent = config.warp_specialize && config.programs;
      CHECK(contains(ptx, "wgmma.wait_group.sync.aligned 1"));
      CHECK(std::regex_search(ptx, std::regex(persistent ? "setmaxnreg\\.dec\\.sync\\.aligned\\.u32\\s+40;"
                                                         : "setmaxnreg\\.dec\\.sync\\.aligned\\.u32\\s+24;")) ==
            config.warp_specialize);
      CHECK(std::regex_search(ptx, std::regex(persistent ? "setmaxnreg\\.inc\\.sync\\.aligned\\.u32\\s+232;"
                                                         : "setmaxnreg\\.inc\\.sync\\.aligned\\.u32\\s+240;")) ==
            config.warp_specialize);
      CHECK(std::regex_search(ptx, std::regex("\\.maxnreg\\s+168")) == config.warp_specialize);
      CHECK(contains(ptx, "mbarrier.arrive.shared::cta.b64") == config.warp_specialize);
      const LaunchInfo &launch = compiled.launch;
      CHECK(launch.block_threads == (config.warp_specialize ? 384u : 256u));
      CHECK(launch.grid[0] == (config.programs ? 3u : 4u));
      CHECK(launch.dynamic_shared);
      CHECK(launch.shared_bytes <= 227 * 1024);
      REQUIRE(launch.tensor_maps.size() >= 2u);
      const TensorMapParam &ma = launch.tensor_maps[0], &mb = launch.tensor_maps[1];
      CHECK(ma.param == 0);
      CHECK(mb.param == 1);
      CHECK(ma.box_inner == 64);
      CHECK(ma.box_outer == (spec.trans_a ? 64u : uint32_t(config.block_m)));
      CHECK(mb.box_inner == 64);
      CHECK(mb.box_outer == (spec.trans_b ? uint32_t(config.block_n) : 64u));
      CHECK(ma.swizzle == 128);
      checkAssembles(ptxas, ptx);
    }
}

TEST_CASE("hopper matmul PTX with 64- and 32-byte swizzled K slices", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (int64_t bk : {32, 16})
    for (int t = 0; t < 4; ++t) {
      MatmulSpec spec{256, 512, 320, DType::BF16, DType::BF16, bool(t & 1), bool(t & 2), false};
      MatmulConfig config = default_hopper_config(spec);
      config.block_k = bk;
      config.num_stages = 8;
      INFO(describe(spec, 1.0) << " block_k " << bk);
      CompiledKernel compiled = compileHopper(spec, config);
      CHECK(contains(compiled.ptx, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"));
      const LaunchInfo &launch = compiled.launch;
      REQUIRE(launch.tensor_maps.size() >= 2);
      // K-major operands: [rows][block_k] boxes swizzled by their 2 * block_k-byte rows;
      // MN-major ones: [block_k][64] boxes with the 128-byte swizzle.
      for (auto [map, kMajor, rows] : {std::tuple{launch.tensor_maps[0], !spec.trans_a, config.block_m},
                                      std::tuple{launch.tensor_maps[1], spec.trans_b, config.block_n}}) {
        CHECK(map.box_inner == uint32_t(kMajor ? bk : 64));
        CHECK(map.box_outer == uint32_t(kMajor ? rows : bk));
        CHECK(map.swizzle == uint32_t(kMajor ? 2 * bk : 128));
      }
      LaunchInfo back = LaunchInfo::from_json(launch.to_json());
      REQUIRE(back.tensor_maps.size() == launch.tensor_maps.size());
      CHECK(back.tensor_maps[0].swizzle == launch.tensor_maps[0].swizzle);
      CHECK(back.tensor_maps[1].swizzle == launch.tensor_maps[1].swizzle);
      checkAssembles(ptxas, compiled.ptx);
    }
}

TEST_CASE("hopper matmul PTX with A in registers: ldmatrix from the ring, wgmma RS", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (DType dtype : {DType::BF16, DType::F8E4M3})
    for (int64_t bytes : {128, 64, 32})
      for (bool specialized : {true, false}) {
        const bool fp8 = dtype == DType::F8E4M3;
        MatmulSpec spec{256, 512, 320, dtype, DType::BF16, false, fp8, false};
        MatmulConfig config = default_hopper_config(spec);
        config.block_k = bytes / int64_t(dtype_size(dtype));
        config.num_stages = bytes == 128 ? 4 : 8;
        config.a_in_registers = true;
        config.warp_specialize = specialized;
        INFO(describe(spec, 1.0) << " block_k " << config.block_k << (specialized ? " warp-specialized" : ""));
        CompiledKernel compiled = compileHopper(spec, config);
        const std::string &ptx = compiled.ptx;
        CHECK(contains(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
        // A is a brace list of four registers, B a descriptor; no transpose immediate for A.
        const std::string type = fp8 ? "k32.f32.e4m3.e4m3" : "k16.f32.bf16.bf16";
        std::regex rs("wgmma\\.mma_async\\.sync\\.aligned\\.m64n256" + std::regex_replace(type, std::regex("\\."), "\\.") +
                      " \\{[^}]*\\}, \\{%r\\d+, %r\\d+, %r\\d+, %r\\d+\\}, %rd\\d+, acc, 1, 1" + (fp8 ? ";" : ", [01];"));
        CHECK(std::regex_search(ptx, rs));
        if (!fp8)
          CHECK_THROWS_WITH(matmul_hopper_kernel({256, 512, 320, dtype, DType::BF16, true, false, false}, config),
                            Contains("a_in_registers needs a as [M, K]"));
        // wgmma reads A's registers until its group completes, and two slices' groups
        // are in flight: with 128-byte slices (16 words per slice) beside the 128-word
        // accumulator that outgrows the 168 registers a thread of a warp-specialized
        // 384-thread program has, and ptxas serializes the wgmma; narrower slices fit.
        checkAssembles(ptxas, ptx, false, bytes == 128 && specialized);
      }
}

TEST_CASE("hopper matmul PTX with registers rebalanced between warp roles (setmaxnreg)", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  // a [M, K] with A from shared memory or registers, a^T, and a 2-CTA cluster with a bias:
  // each persistent (2 programs for 4 or 8 tiles) and once with one program per tile.
  for (int variant = 0; variant < 4; ++variant)
    for (int64_t programs : {2, 0}) {
      MatmulSpec spec{variant == 3 ? 1000 : 256, 512, 320, DType::BF16, DType::BF16, variant == 2, false, variant == 3};
      MatmulConfig config = default_hopper_config(spec);
      config.rebalance_registers = true;
      config.a_in_registers = variant == 1;
      config.cluster_m = variant == 3 ? 2 : 1;
      config.programs = programs;
      INFO(describe(spec, 1.0) << (config.a_in_registers ? " A in registers" : "")
                               << (config.cluster_m == 2 ? " cluster 2" : "") << " programs " << programs);
      const std::string ptx = compileHopper(spec, config).ptx;
      CHECK(contains(ptx, "wgmma.mma_async.sync.aligned.m64n256k16"));
      if (programs == 0) {  // no loop over tiles: nothing to split
        CHECK_FALSE(contains(ptx, "setmaxnreg"));
        continue;
      }
      // 384 threads launch with 168 registers each; the producer warpgroup gives 128
      // of them back per thread, the two consumer warpgroups take 64 more.
      CHECK(test::count(ptx, "setmaxnreg.dec.sync.aligned.u32") == 1);
      CHECK(test::count(ptx, "setmaxnreg.inc.sync.aligned.u32") == 1);
      CHECK(std::regex_search(ptx, std::regex("setmaxnreg\\.dec\\.sync\\.aligned\\.u32\\s+40;")));
      CHECK(std::regex_search(ptx, std::regex("setmaxnreg\\.inc\\.sync\\.aligned\\.u32\\s+232;")));
      // With 232 registers the consumers keep even 128-byte A fragments of two slices in
      // flight (ptxas serialized those wgmma at 168) and the cluster's bias epilogue
      // fits without spills.
      checkAssembles(ptxas, ptx);
    }
}

TEST_CASE("hopper matmul PTX with 2-CTA clusters: multicast TMA, remote releases, cluster barriers", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (int t = 0; t < 4; ++t)
    for (int64_t programs : {0, 6}) {
      MatmulSpec spec{1000, 512, 320, DType::BF16, DType::BF16, bool(t & 1), bool(t & 2), t == 1};
      MatmulConfig config = default_hopper_config(spec);
      config.cluster_m = 2;
      config.programs = programs;
      INFO(describe(spec, 1.0) << " programs " << programs);
      CompiledKernel compiled = compileHopper(spec, config);
      const std::string &ptx = compiled.ptx;
      CHECK(contains(ptx, ".reqnctapercluster 2, 1, 1"));
      CHECK(contains(ptx, "mbarrier::complete_tx::bytes.multicast::cluster"));
      CHECK(contains(ptx, "%cluster_ctarank"));
      CHECK(contains(ptx, "fence.mbarrier_init.release.cluster"));
      CHECK(contains(ptx, "barrier.cluster.arrive.aligned"));
      CHECK(contains(ptx, "barrier.cluster.wait.aligned"));
      CHECK(contains(ptx, "mapa.shared::cluster.u32"));
      CHECK(contains(ptx, "mbarrier.arrive.shared::cluster.b64"));
      const LaunchInfo &launch = compiled.launch;
      CHECK(launch.cluster == 2);
      // 8 block rows (1000 / 128) in 4 pairs x 2 block columns: 16 programs, or 6 persistent ones.
      CHECK(launch.grid[0] == (programs ? 6u : 16u));
      CHECK(LaunchInfo::from_json(launch.to_json()).cluster == 2);
      // Each CTA loads half of b's rows: a K-major b's box is [128][64].
      REQUIRE(launch.tensor_maps.size() == 3);
      CHECK(launch.tensor_maps[1].box_outer == (spec.trans_b ? 128u : 64u));
      // At 168 registers (384 threads, one CTA per SM) the persistent loop with a bias
      // and a transposed a spills a few words; the others fit.
      checkAssembles(ptxas, ptx, spec.has_bias && programs);
    }
}

TEST_CASE("hopper matmul stores c through TMA only where c's rows and shared memory allow", "[hopper][ptx]") {
  CompileOptions options;
  options.arch = "sm_90a";
  options.assemble = false;
  auto tmaStores = [&](const MatmulSpec &spec, const MatmulConfig &config) {
    CompiledKernel compiled = compile(matmul_hopper_kernel(spec, config), options);
    INFO(describe(spec, 1.0) << " blocks " << config.block_m << "x" << config.block_n << " stages "
                             << config.num_stages);
    CHECK(compiled.launch.shared_bytes <= 227 * 1024);
    bool tma = contains(compiled.ptx, "cp.async.bulk.tensor.2d.global.shared::cta");
    CHECK(tma == (compiled.launch.tensor_maps.size() == 3));
    CHECK(tma != contains(compiled.ptx, "st.global"));
    return tma;
  };
  MatmulSpec spec{512, 512, 256, DType::BF16, DType::BF16};
  MatmulConfig config = default_hopper_config(spec);
  CHECK(tmaStores(spec, config));
  // 256 x 128 blocks: four 48 KiB stages leave no room for two [256][128 B] strips.
  config.block_m = 256, config.block_n = 128;
  CHECK_FALSE(tmaStores(spec, config));
  config.num_stages = 3;
  CHECK(tmaStores(spec, config));
  // c's rows of 1000 bytes are not whole 16-byte chunks: TMA cannot address them.
  MatmulSpec ragged{512, 500, 256, DType::BF16, DType::BF16, false, true};  // b as [N, K]
  CHECK_FALSE(tmaStores(ragged, default_hopper_config(ragged)));
  config = default_hopper_config(spec);
  config.tma_store = false;
  CHECK_FALSE(tmaStores(spec, config));
}

TEST_CASE("fp8 hopper matmul PTX: wgmma k32 on e4m3 / e5m2, 128-element TMA boxes", "[hopper][ptx]") {
  const std::string ptxas = test::ptxas_path();
  for (auto [dtype, name] : {std::pair{DType::F8E4M3, "e4m3"}, std::pair{DType::F8E5M2, "e5m2"}}) {
    MatmulSpec spec{256, 512, 384, dtype, DType::BF16, false, true};
    CompileOptions options;
    options.arch = "sm_90a";
    options.assemble = false;
    CompiledKernel compiled = compile(matmul_hopper_kernel(spec, default_hopper_config(spec)), options);
    INFO(name);
    CHECK(contains(compiled.ptx, std::string("wgmma.mma_async.sync.aligned.m64n256k32.f32.") + name + "." + name));
    REQUIRE(compiled.launch.tensor_maps.size() == 3);  // a, b and c (bf16 strips of 64 columns)
    for (const TensorMapParam &map : compiled.launch.tensor_maps)
      CHECK(map.box_inner == (map.param == 2 ? 64u : 128u));  // 128 one-byte elements: one swizzle row
    checkAssembles(ptxas, compiled.ptx);
  }
}

TEST_CASE("hopper matmul PTX keeps warpgroup-wide instructions out of lane-dependent code", "[hopper][ptx]") {
  // wgmma.fence / commit_group / wait_group are .aligned: every thread of the warp must
  // reach the same instruction. With a short K the consumer loop is unrolled, and
  // branching around the lanes' mbarrier arrivals once let LLVM copy the final
  // wait_group into both sides of such a branch (a hang on the GPU). Each instruction
  // must appear once per unrolled K step, the final wait once.
  auto count = [](const std::string &text, const std::regex &re) {
    return std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
  };
  const std::regex fence(R"(wgmma\.fence\.sync\.aligned)"), commit(R"(wgmma\.commit_group\.sync\.aligned)"),
      wait1(R"(wgmma\.wait_group\.sync\.aligned\s+1;)"), wait0(R"(wgmma\.wait_group\.sync\.aligned\s+0;)");
  for (DType dtype : {DType::BF16, DType::F8E4M3})
    for (int64_t k : {64, 128, 192, 256, 320, 512, 528, 4096}) {
      MatmulSpec spec{4097, 520, k, dtype, DType::BF16, false, true};
      for (bool specialized : {true, false}) {
        MatmulConfig config = default_hopper_config(spec);
        config.warp_specialize = specialized;
        CompileOptions options;
        options.arch = "sm_90a";
        options.assemble = false;
        std::string ptx = compile(matmul_hopper_kernel(spec, config), options).ptx;
        INFO(dtype_name(dtype) << " K = " << k << (specialized ? " warp-specialized" : " in order"));
        CHECK(count(ptx, wait0) == 1);
        CHECK(count(ptx, fence) >= 1);
        CHECK(count(ptx, fence) == count(ptx, commit));
        CHECK(count(ptx, commit) == count(ptx, wait1));
        CHECK(ptx.find("@p mbarrier.arrive.shared::cta.b64") != std::string::npos);  // predicated, not branched
      }
    }
}

TEST_CASE("hopper matmul compiles for sm_90a only", "[hopper][ptx]") {
  MatmulSpec spec{256, 512, 320, DType::BF16, DType::BF16};
  for (const char *arch : {"sm_80", "sm_90"}) {
    INFO(arch);
    CompileOptions options;
    options.arch = arch;
    options.assemble = false;
    CHECK_THROWS_AS(compile(matmul_hopper_kernel(spec, default_hopper_config(spec)), options), Error);
    CHECK_THROWS_WITH(compile(matmul_hopper_kernel(spec, default_hopper_config(spec)), options),
                      Contains("sm_90a") && Contains(arch));
  }
}

TEST_CASE("hopper matmul with fewer rows than its warpgroups cover is refused at lowering", "[hopper][ptx]") {
  // 8 warps (2 warpgroups) need block M >= 128: each warpgroup owns 64-row slabs.
  MatmulSpec spec{256, 512, 320, DType::BF16, DType::BF16};
  MatmulConfig config = default_hopper_config(spec);
  config.block_m = 64;
  config.num_warps = 8;
  CompileOptions options;
  options.arch = "sm_90a";
  options.assemble = false;
  CHECK_THROWS_WITH(compile(matmul_hopper_kernel(spec, config), options),
                    Contains("block M a multiple of 16 * num_warps") && Contains("8 warps for block M 64"));
  config.num_warps = 4;
  CHECK_NOTHROW(compile(matmul_hopper_kernel(spec, config), options));
}

TEST_CASE("warp-specialized wgmma kernels are assembled as whole programs (as ptxas does)", "[hopper][ptx]") {
  // nvJitLink compiles its input as a separate compilation unit: ptxas ignores setmaxnreg
  // there (C7504) and serializes wgmma (C7509). assemble_ptx takes such kernels to ptxas
  // where one is found, so the cubin is ptxas's own.
  const std::string ptxas = test::ptxas_path();
  if (ptxas.empty() || assembler_identity() == "none") {
    WARN("ptxas not found: which assembler takes Hopper kernels is not checked");
    return;
  }
  MatmulSpec spec{4096, 4096, 4096, DType::BF16, DType::BF16};
  MatmulConfig ring = default_hopper_config(spec, 132);
  ring.tma_ring = true;
  CompileOptions options;
  options.arch = "sm_90a";
  const CompiledKernel compiled = compile(matmul_hopper_kernel(spec, ring), options);
  REQUIRE(test::contains(compiled.ptx, "setmaxnreg"));
  REQUIRE_FALSE(compiled.cubin.empty());
  const std::string dir = std::filesystem::temp_directory_path() / ("tokamax-wp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/k.ptx") << compiled.ptx;
  REQUIRE(std::system(("'" + ptxas + "' -arch=sm_90a -O3 '" + dir + "/k.ptx' -o '" + dir + "/k.cubin'").c_str()) == 0);
  std::ifstream in(dir + "/k.cubin", std::ios::binary);
  const std::vector<uint8_t> reference((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove_all(dir);
  CHECK(compiled.cubin == reference);
}
