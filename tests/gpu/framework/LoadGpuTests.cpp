// Load: 32 threads, each with its own stream, call a random mix of every kernel family
// (tests/common/KernelCases.h, three shapes each) for TOKAMAX_LOAD_SECONDS (default 10;
// scripts/gpu-check.sh runs 60). Every result must equal bitwise the single-threaded
// run of the same call before the load, nothing may compile under load (each kernel
// compiled once, in the single-threaded pass), and half the threads run inside their
// own autotuning scope (a config provider that only they see), which must not change
// what the others compute. Device memory must stay flat (the threads' stream workspaces
// aside). Calls per second, the compile count and free memory are reported.
#include <catch2/catch.hpp>

#include "common/KernelCases.h"

#include <tokamax/jit/Jit.h>
#include <tokamax/runtime/Device.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

using namespace tokamax;

namespace {

/// Bits of every output of one call.
std::vector<std::vector<uint64_t>> bitsOf(const std::vector<std::vector<double>> &results) {
  std::vector<std::vector<uint64_t>> bits;
  for (const auto &r : results) {
    bits.emplace_back(r.size());
    std::memcpy(bits.back().data(), r.data(), r.size() * sizeof(double));
  }
  return bits;
}

/// The scoped threads' provider: the norms with another (valid) config than the
/// heuristic's; every other call falls through to the process-wide providers.
ConfigProvider scopedNorms() {
  return [](const BoundArgs &args, const std::string &impl) -> std::optional<Config> {
    if (impl != "tile" || (args.op != "layer_norm" && args.op != "rms_norm"))
      return std::nullopt;
    return Config{{"block_rows", 1}, {"num_warps", 4}};
  };
}

} // namespace

TEST_CASE("32 threads with their own streams call every kernel family at once", "[gpu][load]") {
  const double seconds = std::getenv("TOKAMAX_LOAD_SECONDS") ? std::atof(std::getenv("TOKAMAX_LOAD_SECONDS")) : 10.0;
  const bool hopper = Device::get().arch() == "sm_90a";
  std::vector<test::KernelCase> calls;
  for (int variant = 0; variant < 3; ++variant)
    for (test::KernelCase &c : test::kernel_cases(variant))
      if (hopper || c.name.find("hopper") == std::string::npos)
        calls.push_back(std::move(c));

  // Single-threaded: every call once with and once without the scope (compiling what
  // each needs), its bits the reference.
  Stream main = Stream::create(Device::get());
  std::vector<std::vector<std::vector<uint64_t>>> plain, scoped;
  for (const test::KernelCase &c : calls) {
    test::Io a(&main);
    c.call(a);
    plain.push_back(bitsOf(a.results()));
    ConfigProviderScope scope(scopedNorms());
    test::Io b(&main);
    c.call(b);
    scoped.push_back(bitsOf(b.results()));
  }
  const JitStats before = Jit::instance().stats();
  // Every buffer a call needs was allocated (and freed) once already: no growth under load.
  const size_t freeBefore = Device::get().free_memory();

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0}, mismatches{0}, errors{0};
  std::mutex firstMutex;
  std::string first;  // the first failure, for the report
  auto worker = [&](int id) {
    std::optional<ConfigProviderScope> scope;
    if (id % 2)
      scope.emplace(scopedNorms());
    try {
      Stream stream = Stream::create(Device::get());
      std::mt19937 rng(1000 + id);
      std::uniform_int_distribution<size_t> pick(0, calls.size() - 1);
      while (!stop.load(std::memory_order_relaxed)) {
        size_t i = pick(rng);
        test::Io io(&stream);
        calls[i].call(io);
        if (bitsOf(io.results()) != (id % 2 ? scoped : plain)[i]) {
          ++mismatches;
          std::lock_guard lock(firstMutex);
          if (first.empty())
            first = "thread " + std::to_string(id) + ": " + calls[i].name + " differs from its single-threaded run";
        }
        ++done;
      }
    } catch (const std::exception &e) {
      ++errors;
      std::lock_guard lock(firstMutex);
      if (first.empty())
        first = "thread " + std::to_string(id) + ": " + e.what();
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int id = 0; id < 32; ++id)
    threads.emplace_back(worker, id);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread &t : threads)
    t.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const JitStats after = Jit::instance().stats();
  const size_t freeAfter = Device::get().free_memory();
  WARN("load: " << done.load() << " calls of " << calls.size() << " kinds in " << elapsed << " s ("
                << done.load() / elapsed << " calls/s) on 32 threads; compiles " << before.compiles
                << " single-threaded, " << after.compiles - before.compiles << " under load; free device memory "
                << freeBefore / (1 << 20) << " MiB before, " << freeAfter / (1 << 20) << " MiB after");
  INFO(first);
  CHECK(errors == 0);
  CHECK(mismatches == 0);
  CHECK(after.compiles == before.compiles);
  CHECK(done > 32);
  // Each thread's stream keeps one workspace (stream_workspace) beyond the warm-up's: a
  // few MiB per thread at these shapes, not growth with the number of calls.
  CHECK(freeAfter + (size_t(256) << 20) >= freeBefore);
}
