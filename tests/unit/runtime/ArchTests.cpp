//===- ArchTests.cpp - GPU architectures: names, properties, the one error -===//
// Arch::parse's one rule and one error, what sm_80 / sm_90a / sm_100a have, the shared
// memory table and the default SM counts; the callers that parse through it (compile,
// the autotuner's and export's targets) report the same error.
#include <tokamax/autotune/Autotune.h>
#include <tokamax/compiler/Compiler.h>
#include <tokamax/export/ExportedFunction.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <string>

using namespace tokamax;
using Catch::Contains;

TEST_CASE("arch names parse by one rule and read back", "[runtime][arch]") {
  struct Good {
    const char *name;
    int number, major, minor;
    bool specific;
  };
  for (const Good &g : {Good{"sm_70", 70, 7, 0, false}, Good{"sm_75", 75, 7, 5, false}, Good{"sm_80", 80, 8, 0, false},
                        Good{"sm_86", 86, 8, 6, false}, Good{"sm_89", 89, 8, 9, false}, Good{"sm_90", 90, 9, 0, false},
                        Good{"sm_90a", 90, 9, 0, true}, Good{"sm_100a", 100, 10, 0, true},
                        Good{"sm_103a", 103, 10, 3, true}, Good{"sm_120", 120, 12, 0, false},
                        Good{"sm_121a", 121, 12, 1, true}}) {
    INFO(g.name);
    const Arch arch = Arch::parse(g.name);
    CHECK(arch.name() == g.name);
    CHECK(arch.number() == g.number);
    CHECK(arch.cc_major() == g.major);
    CHECK(arch.cc_minor() == g.minor);
    CHECK(arch.arch_specific() == g.specific);
    REQUIRE(Arch::try_parse(g.name));
    CHECK(*Arch::try_parse(g.name) == arch);
  }
}

TEST_CASE("anything else is one error naming the text and the form", "[runtime][arch]") {
  for (const char *bad : {"", "sm", "sm_", "sm_9", "sm90", "sm_90b", "sm_90A", "sm_90aa", "sm_a", "sm_x0", "sm_08",
                          "sm_1000", "sm_-90", "sm_90 ", " sm_90", "SM_90", "compute_90", "gfx90a", "90a", "hopper"}) {
    INFO('"' << bad << '"');
    const std::string expected = "arch must look like sm_80 or sm_90a, got '" + std::string(bad) + "'";
    CHECK_THROWS_AS(Arch::parse(bad), Error);
    CHECK_THROWS_WITH(Arch::parse(bad), expected);
    CHECK_THROWS_WITH(Arch::parse(bad, "export target"), "export target: " + expected);
    CHECK_FALSE(Arch::try_parse(bad));
  }
}

TEST_CASE("sm_80, sm_90a and sm_100a: features, shared memory, SMs", "[runtime][arch]") {
  const Arch a100 = Arch::parse("sm_80");
  CHECK_FALSE(a100.has_tma());
  CHECK_FALSE(a100.has_wgmma());
  CHECK_FALSE(a100.has_clusters());
  CHECK(a100.shared_memory_per_block() == 163 * 1024);
  CHECK(a100.sm_count() == 108);

  const Arch h100 = Arch::parse("sm_90a");
  CHECK(h100.has_tma());
  CHECK(h100.has_wgmma());
  CHECK(h100.has_clusters());
  CHECK(h100.shared_memory_per_block() == 227 * 1024);
  CHECK(h100.sm_count() == 132);

  // sm_90 without the "a": TMA and clusters, but no wgmma (arch-specific).
  const Arch sm90 = Arch::parse("sm_90");
  CHECK(sm90.has_tma());
  CHECK_FALSE(sm90.has_wgmma());
  CHECK(sm90.has_clusters());
  CHECK(sm90.sm_count() == 132);
  CHECK_FALSE(sm90 == h100);

  const Arch b200 = Arch::parse("sm_100a");
  CHECK(b200.has_tma());
  CHECK_FALSE(b200.has_wgmma());
  CHECK(b200.has_clusters());
  CHECK(b200.shared_memory_per_block() == 227 * 1024);
  CHECK(b200.sm_count() == 148);

  CHECK(Arch::parse("sm_90a") == h100);
  CHECK_FALSE(a100 == h100);
}

TEST_CASE("shared memory per block and SM counts by arch", "[runtime][arch]") {
  struct Row {
    const char *name;
    int64_t shared;
    int sms;
  };
  for (const Row &r : {Row{"sm_70", 96 * 1024, 0}, Row{"sm_72", 96 * 1024, 0}, Row{"sm_75", 64 * 1024, 0},
                       Row{"sm_80", 163 * 1024, 108}, Row{"sm_86", 99 * 1024, 0}, Row{"sm_87", 163 * 1024, 0},
                       Row{"sm_89", 99 * 1024, 0}, Row{"sm_90", 227 * 1024, 132}, Row{"sm_90a", 227 * 1024, 132},
                       Row{"sm_100", 227 * 1024, 148}, Row{"sm_103a", 227 * 1024, 0}, Row{"sm_120", 99 * 1024, 0},
                       Row{"sm_121", 99 * 1024, 0}, Row{"sm_61", 0, 0}, Row{"sm_110", 0, 0}}) {
    INFO(r.name);
    CHECK(Arch::parse(r.name).shared_memory_per_block() == r.shared);
    CHECK(Arch::parse(r.name).sm_count() == r.sms);
  }
  // Compile-time constants: the ops' budgets are derived from these.
  static_assert(Arch::parse("sm_90a").shared_memory_per_block() == 227 * 1024);
  static_assert(Arch::parse("sm_90a").sm_count() == 132);
  static_assert(Arch::parse("sm_90a").has_wgmma() && !Arch::parse("sm_80").has_wgmma());
}

TEST_CASE("the callers that take an arch name report Arch's error", "[runtime][arch]") {
  const std::string expected = "arch must look like sm_80 or sm_90a, got 'sm90'";
  CHECK_THROWS_WITH(ExportTarget::parse("sm90"), "export target: " + expected);
  CHECK_THROWS_WITH(AutotuneTarget::for_arch("sm90"), "AutotuneTarget::for_arch: " + expected);
  CompileOptions options;
  options.arch = "sm90";
  options.assemble = false;
  CHECK_THROWS_WITH(compile_ir("module {}", options), "CompileOptions::arch: " + expected);
  // Their targets come from the same table.
  const uint64_t hopperShared = uint64_t(Arch::parse("sm_90a").shared_memory_per_block());
  CHECK(AutotuneTarget::for_arch("sm_90a").max_shared_bytes == hopperShared);
  const ExportTarget b200 = ExportTarget::parse("sm_100a");
  CHECK((b200.arch == "sm_100a" && b200.cc_major == 10 && b200.cc_minor == 0));
}
