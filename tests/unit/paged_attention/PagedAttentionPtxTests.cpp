// The paged attention kernels lower for sm_90a and sm_80 and assemble with ptxas
// without spills: the decode benchmark's shapes (N 32, K 8, H 128 bf16; batch 1, 8, 64;
// pages of 16 and 64; Tq 1 and 4) at the heuristic, every search-space config at batch
// 8, and the append. The hidden "[.paged-registers]" case prints ptxas' registers and
// spills for each (run it by name to see the figures).
#include <catch2/catch.hpp>

#include "common/PtxasUtil.h"

#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/PagedAttention.h>

#include <fmt/format.h>

#include <regex>
#include <string>
#include <vector>

using namespace tokamax;

namespace {

BoundArgs decodeArgs(int64_t batch, int64_t page, int64_t tq, DType dtype = DType::BF16) {
  const int64_t maxPages = 4096 / page;
  const ArgSpec q{{batch, tq, 32, 128}, dtype}, pages{{batch * maxPages, page, 8, 128}, dtype};
  return bind_paged_attention({q, pages, pages, {{batch, maxPages}, DType::I32}, {{batch}, DType::I32}, q,
                               paged_attention_lse_spec(q)});
}

BoundArgs appendArgs(int64_t batch, int64_t page) {
  const int64_t maxPages = 4096 / page;
  const ArgSpec kv{{batch, 1, 8, 128}, DType::BF16}, pages{{batch * maxPages, page, 8, 128}, DType::BF16};
  return bind_paged_kv_append(kv, kv, {{batch, maxPages}, DType::I32}, {{batch}, DType::I32}, pages, pages);
}

std::string ptxOf(const dsl::Kernel &kernel, const char *arch) {
  CompileOptions options;
  options.assemble = false;
  options.arch = arch;
  return compile(kernel, options).ptx;
}

/// Each kernel of the call at `config` for both archs, through ptxas when there is one.
void checkKernels(const std::string &ptxas, const BoundArgs &args, const Implementation &impl, const Config &config) {
  for (const dsl::Kernel &kernel : impl.kernels(args, config))
    for (const char *arch : {"sm_90a", "sm_80"}) {
      const std::string ptx = ptxOf(kernel, arch);
      INFO(args.to_json() << " " << impl.name() << " " << config.to_json() << " " << arch);
      CHECK(test::contains(ptx, ".visible .entry " + kernel.name() + "("));
      if (!ptxas.empty())
        test::check_assembles_without_spills(ptxas, ptx, arch);
    }
}

} // namespace

TEST_CASE("paged_attention: the kernels lower for sm_90a and sm_80 and assemble without spills",
          "[paged_attention][ptx]") {
  const std::string ptxas = test::ptxas_path();
  const Op &op = paged_attention_op();
  for (int64_t batch : {1, 8, 64})
    for (int64_t page : {16, 64})
      for (int64_t tq : {1, 4}) {
        const BoundArgs args = decodeArgs(batch, page, tq);
        const Implementation &tile = op.implementation("tile");
        std::vector<Config> configs{tile.heuristic(args)};
        if (batch == 8 && tq == 1)
          configs = tile.search_space(args);
        for (const Config &config : configs)
          checkKernels(ptxas, args, tile, config);
      }
  const Implementation &reference = op.implementation("reference");
  checkKernels(ptxas, decodeArgs(2, 16, 3), reference, reference.heuristic(decodeArgs(2, 16, 3)));
  for (int64_t page : {16, 64})
    for (const auto &impl : paged_kv_append_op().implementations())
      checkKernels(ptxas, appendArgs(8, page), *impl, impl->heuristic(appendArgs(8, page)));
  if (ptxas.empty())
    WARN("ptxas not found: the kernels were lowered but not assembled");
}

TEST_CASE("paged_attention: ptxas figures of the decode kernels", "[.paged-registers]") {
  const std::string ptxas = test::ptxas_path();
  REQUIRE_FALSE(ptxas.empty());
  const Implementation &tile = paged_attention_op().implementation("tile");
  const std::regex used("Used ([0-9]+) registers"), spills("([0-9]+) bytes spill stores");
  for (int64_t batch : {1, 8, 64})
    for (int64_t page : {16, 64}) {
      const BoundArgs args = decodeArgs(batch, page, 1);
      for (const Config &config : tile.search_space(args))
        for (const dsl::Kernel &kernel : tile.kernels(args, config)) {
          auto [status, log] = test::run_ptxas(ptxas, ptxOf(kernel, "sm_90a"), "sm_90a");
          std::smatch r, s;
          std::regex_search(log, r, used);
          std::regex_search(log, s, spills);
          fmt::print("batch {:2} page {:2} {} {}: {} registers, {} bytes spilled\n", batch, page, config.to_json(),
                     kernel.name(), r.size() > 1 ? r[1].str() : "?", s.size() > 1 ? s[1].str() : "?");
        }
    }
}
