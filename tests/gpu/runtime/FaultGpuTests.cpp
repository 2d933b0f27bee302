// Device faults reported as tokamax::Error, never an abort: an allocation the device
// cannot hold (names the size and the free memory, leaks nothing), a kernel that stores
// through a wild pointer (names the driver error and the kernel; run in a child process
// of its own, since the sticky error poisons the CUDA context for the whole process), and
// a must-hit miss (names the kernel and its cache key).
#include <catch2/catch.hpp>

#include "common/ScopedState.h"

#include <tokamax/jit/Jit.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

using namespace tokamax;
using namespace tokamax::dsl;
using Catch::Contains;
using test::EnvGuard;

namespace {

// Set for the child that runs the faulting kernel; the child's test does nothing without it.
constexpr const char *kChildEnv = "TOKAMAX_FAULT_CHILD";
constexpr const char *kChildTest = "faults: child: a kernel stores through a wild pointer";
constexpr const char *kWildKernel = "fault_wild_store";

/// This test binary run again on one test case, in a fresh process (a forked child may
/// not use CUDA after the parent initialized it), its stdout and stderr captured. The
/// destructor kills and reaps it if it is still running.
class SpawnedTest {
public:
  explicit SpawnedTest(const std::string &test_name) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    read_ = fds[0];
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    ::posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    ::posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::string exe = "/proc/self/exe", name = test_name;
    char *argv[] = {exe.data(), name.data(), nullptr};
    int err = ::posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv, environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);  // the child's copy alone keeps the pipe open
    REQUIRE(err == 0);
  }
  ~SpawnedTest() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      (void)finish(std::chrono::seconds(0));
    }
    if (read_ >= 0)
      ::close(read_);
  }
  SpawnedTest(const SpawnedTest &) = delete;
  SpawnedTest &operator=(const SpawnedTest &) = delete;

  /// Everything the child printed until it exited, or until `limit` (then it is killed).
  /// `status` is its wait status.
  std::string finish(std::chrono::seconds limit, int *status = nullptr) {
    std::string output;
    auto deadline = std::chrono::steady_clock::now() + limit;
    char buffer[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{read_, POLLIN, 0};
      int ready = ::poll(&p, 1, int(std::max<int64_t>(left.count(), 0)));
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready <= 0) {  // time is up: a hang is a failure too
        ::kill(pid_, SIGKILL);
        output += "\n[killed: still running after the time limit]\n";
        break;
      }
      ssize_t n = ::read(read_, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      output.append(buffer, size_t(n));
    }
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (status)
      *status = st;
    return output;
  }

private:
  pid_t pid_ = -1;
  int read_ = -1;
};

/// The line of `text` that starts with `prefix` (empty if none).
std::string lineStarting(const std::string &text, const std::string &prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0)
      return line;
  return {};
}

/// A number no earlier run is likely to have used, for kernels that must miss every cache.
uint64_t fresh() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

} // namespace

TEST_CASE("an absurd device allocation: an Error naming the size and the free memory, nothing leaked",
          "[gpu][faults]") {
  Device &dev = Device::get();
  { DeviceBuffer warm(1 << 20, dev); }  // the context's lazy setup happens before `before`
  const size_t before = dev.free_memory();
  const size_t absurd = size_t(1) << 50;  // 1 PiB
  try {
    DeviceBuffer buffer(absurd, dev);
    FAIL("allocated 1 PiB");
  } catch (const DriverError &e) {
    INFO(e.what());
    CHECK(e.name() == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK_THAT(e.what(), Contains(fmt::format("allocating {} bytes", absurd)));
    CHECK_THAT(e.what(), Contains("free of"));
  }
  // Through the tensor API, and a shape whose byte count would wrap to a small size.
  CHECK_THROWS_WITH(Tensor::empty({int64_t(1) << 48}, DType::F32, dev),
                    Contains(fmt::format("{} bytes", size_t(1) << 50)) && Contains("free of"));
  CHECK_THROWS_WITH(Tensor::empty({int64_t(1) << 62}, DType::F64, dev), Contains("more than 2^64 bytes"));

  // The device is fine afterwards: a normal buffer allocates and round-trips.
  {
    std::vector<float> values(1 << 20, 3.5f);
    const int64_t n = int64_t(values.size());
    Tensor t = Tensor::from_host_floats(values, std::vector<int64_t>{n}, DType::F32, dev);
    const std::vector<double> back = t.to_host_doubles();
    CHECK(back.front() == 3.5);
    CHECK(back.back() == 3.5);
  }
  // Free memory is back (a little slack for the driver's own bookkeeping).
  const size_t after = dev.free_memory();
  INFO("free before " << before << ", after " << after);
  CHECK(after + (size_t(2) << 20) >= before);
}

TEST_CASE("a kernel that faults: an Error naming the driver error and the kernel, not an abort", "[gpu][faults]") {
  // The child must not write the faulting kernel into the shared disk cache.
  EnvGuard child(kChildEnv, "1"), noCache("TOKAMAX_CACHE_DISABLE", "1");
  SpawnedTest run(kChildTest);
  int status = 0;
  const std::string output = run.finish(std::chrono::seconds(300), &status);
  INFO("child output:\n" << output);
  REQUIRE(WIFEXITED(status));  // not killed by SIGABRT or SIGSEGV
  CHECK(WEXITSTATUS(status) == 0);
  // The driver names a store through a wild pointer by where the address falls: outside
  // every allocation (ILLEGAL_ADDRESS) or outside the global window (INVALID_ADDRESS_SPACE,
  // seen on the H200 with driver 580).
  const std::string caught = lineStarting(output, "caught: ");
  std::string error;
  for (const char *name : {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE"})
    if (caught.find(name) != std::string::npos)
      error = name;
  INFO("caught: " << caught);
  REQUIRE(!error.empty());
  CHECK_THAT(output, Contains(fmt::format("last kernel launched on this thread was '{}'", kWildKernel)));
  // Every later call reports the same sticky error, still naming the kernel.
  const std::string after = lineStarting(output, "after: ");
  CHECK_THAT(after, Contains(error));
  CHECK_THAT(output.substr(output.find("after: ")), Contains(kWildKernel));
}

TEST_CASE("faults: child: a kernel stores through a wild pointer", "[.][gpu][faults-child]") {
  if (!std::getenv(kChildEnv)) {
    WARN("runs only in the child process that its parent test spawns: its fault poisons the CUDA context");
    return;
  }
  // 128 lanes 64 MiB apart, up to 8 GiB past a 512-byte buffer: far outside any allocation.
  Kernel k(kWildKernel);
  TensorArg y = k.output("y", DType::F32, {128});
  k.grid(1);
  store(y.ptr() + k.arange(0, 128) * Value(int64_t(1) << 24), k.full({128}, 1.0, DType::F32));
  std::vector<float> host(128);
  HostArg args[] = {HostArg::tensor(host.data(), host.size() * sizeof(float))};
  bool threw = false;
  try {
    run_on_device(k, args, Device::get());
  } catch (const DriverError &e) {
    threw = true;
    std::printf("caught: %s\n", e.what());
  }
  CHECK(threw);
  try {
    (void)Tensor::empty({16}, DType::F32, Device::get()).to_host_doubles();
    std::printf("after: no error\n");
  } catch (const Error &e) {
    std::printf("after: %s\n", e.what());
  }
  std::fflush(stdout);
}

TEST_CASE("must-hit mode: a missing entry is an Error naming the kernel and its cache key", "[gpu][faults]") {
  Device &dev = Device::get();
  const uint64_t id = fresh();
  // A kernel name (part of the IR, so of the cache key) that no earlier run compiled.
  const std::string name = fmt::format("fault_must_hit_{:x}", id);
  Kernel k(name);
  TensorArg x = k.input("x", DType::F32, {256});
  TensorArg y = k.output("y", DType::F32, {256});
  k.grid(1);
  y.store({0}, x.load({0}, {256}) * 2.0);
  const KernelKey key("fault-must-hit", {int64_t(id >> 1)});
  auto ir = [&] { return k.ir(); };
  std::string message;
  {
    EnvGuard mustHit("TOKAMAX_CACHE_MUST_HIT", "1");
    try {
      (void)Jit::instance().get_ir(key, dev, ir);
      FAIL("compiled in must-hit mode");
    } catch (const Error &e) {
      message = e.what();
    }
  }
  INFO(message);
  CHECK_THAT(message, Contains(name));
  CHECK_THAT(message, Contains("TOKAMAX_CACHE_MUST_HIT"));
  // Allowed to compile now; the digest it was cached under is the key the error named.
  const LoadedKernel &loaded = Jit::instance().get_ir(key, dev, ir);
  CHECK_THAT(message, Contains(loaded.digest().substr(0, 16)));
}
