//===- SharedMemory.cpp - The shared memory of a config's kernels, as compiled -===//
#include "ops/lib/framework/SharedMemory.h"

#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <mutex>
#include <unordered_map>
#include <utility>

namespace tokamax::ops_detail {

namespace {

struct KeyHash {
  size_t operator()(const KernelKey &key) const { return key.hash(); }
};

/// The figures planned so far, by kernel key (a key selects one IR).
class Figures {
public:
  KernelSharedMemory get(const KernelKey &key, const KernelExecutor::Build &build) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = figures_.find(key); it != figures_.end())
        return it->second;
    }
    const dsl::Kernel kernel = build();  // planned outside the lock: threads may plan others meanwhile
    const SharedPlan plan = planned_shared(kernel);
    KernelSharedMemory figure{kernel.name(), plan.bytes, plan.blocks_per_sm};
    std::lock_guard lock(mutex_);
    return figures_.emplace(key, std::move(figure)).first->second;
  }

private:
  std::mutex mutex_;
  std::unordered_map<KernelKey, KernelSharedMemory, KeyHash> figures_;
};

Figures &figures() {
  static Figures all;
  return all;
}

} // namespace

int64_t shared_memory_share(int64_t limit, int blocks) {
  return blocks > 1 ? (limit + 1024) / blocks - 1024 : limit;
}

std::vector<KernelSharedMemory> planned_shared_memory(const Plan &plan) {
  std::vector<KernelSharedMemory> result;
  auto planner = planning_kernel_executor([&](const KernelKey &key, const KernelExecutor::Build &build) {
    result.push_back(figures().get(key, build));
  });
  plan(*planner);
  return result;
}

std::optional<std::string> check_shared_memory(const Plan &plan, int64_t limit) {
  std::vector<KernelSharedMemory> kernels;
  try {
    kernels = planned_shared_memory(plan);
  } catch (const Error &e) {
    return std::string(e.what());  // a kernel the compiler rejects does not run either
  }
  for (const KernelSharedMemory &k : kernels)
    if (const int64_t share = shared_memory_share(limit, k.blocks_per_sm); k.bytes > share)
      return fmt::format("kernel {} needs {} bytes of shared memory a block, more than the {} a block may use{}; take "
                         "smaller blocks or fewer stages",
                         k.kernel, k.bytes, share,
                         k.blocks_per_sm > 1 ? fmt::format(" ({} blocks an SM)", k.blocks_per_sm) : "");
  return std::nullopt;
}

} // namespace tokamax::ops_detail
