// What the C ABI's tests share: host tensors with their tkx_tensor descriptors, calls
// made and run through the ABI, and the status + message checks of its errors.
#pragma once

#include "common/Numerics.h"

#include <tokamax/c/tokamax.h>
#include <tokamax/ops/Op.h>
#include <tokamax/runtime/Device.h>

#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace capi_test {

using tokamax::DType;

/// A tensor in 16-byte aligned host memory (device -1 unless set: the null driver's
/// device memory is host memory too), poisoned with 0xA5 bytes until written.
struct CTensor {
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<Chunk> storage;
  tkx_tensor desc{};

  CTensor(DType d, std::vector<int64_t> s, int device = -1) : dtype(d), shape(std::move(s)) {
    storage.resize((numel() * tokamax::dtype_size(d) + 15) / 16 + 1);
    std::memset(storage.data(), 0xA5, storage.size() * sizeof(Chunk));
    desc.struct_size = sizeof(tkx_tensor);
    desc.dtype = static_cast<int32_t>(d);
    desc.rank = static_cast<int32_t>(shape.size());
    desc.device = device;
    desc.shape = shape.data();
    desc.strides = nullptr;
    desc.data = storage.data();
  }
  /// Random non-zero values exactly representable in `d`.
  static CTensor random(DType d, std::vector<int64_t> s, uint32_t seed, double lo = 0.05, double hi = 3.0) {
    CTensor t(d, std::move(s));
    std::vector<uint8_t> bytes = test::to_bytes(test::random_values(t.numel(), d, seed, lo, hi), d);
    std::memcpy(t.storage.data(), bytes.data(), bytes.size());
    return t;
  }
  static CTensor of(DType d, std::vector<int64_t> s, const std::vector<double> &values) {
    CTensor t(d, std::move(s));
    std::vector<uint8_t> bytes = test::to_bytes(values, d);
    std::memcpy(t.storage.data(), bytes.data(), bytes.size());
    return t;
  }
  CTensor(CTensor &&) = default;  // the descriptor points into heap buffers, which moves keep

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  size_t nbytes() const { return numel() * tokamax::dtype_size(dtype); }
  const tkx_tensor *c() const { return &desc; }
  tokamax::TensorView view() const { return tokamax::host_view(storage.data(), dtype, shape); }
  std::vector<double> values() const {
    return test::from_bytes(reinterpret_cast<const uint8_t *>(storage.data()), numel(), dtype);
  }
  bool same_bits(const CTensor &other) const {
    return nbytes() == other.nbytes() && std::memcmp(storage.data(), other.storage.data(), nbytes()) == 0;
  }
};

/// The descriptors of some tensors, null where a tensor is absent.
inline std::vector<const tkx_tensor *> descs(std::initializer_list<const CTensor *> tensors) {
  std::vector<const tkx_tensor *> out;
  for (const CTensor *t : tensors)
    out.push_back(t ? t->c() : nullptr);
  return out;
}

struct CallDeleter {
  void operator()(tkx_call *c) const { tkx_call_destroy(c); }
};
using Call = std::unique_ptr<tkx_call, CallDeleter>;

/// tkx_call_create that must succeed.
inline Call make_call(const char *op, const std::vector<const tkx_tensor *> &inputs, const char *options = nullptr) {
  tkx_call *call = nullptr;
  tkx_status s = tkx_call_create(op, inputs.data(), static_cast<int32_t>(inputs.size()), options, &call);
  INFO(tkx_last_error());
  REQUIRE(s == TKX_OK);
  REQUIRE(call != nullptr);
  return Call(call);
}

/// Output i of a call as a host tensor of its inferred spec (std::nullopt: not produced).
inline std::unique_ptr<CTensor> output_of(const tkx_call *call, int32_t i) {
  int32_t dtype = 0, rank = 0;
  int64_t shape[TKX_MAX_RANK];
  REQUIRE(tkx_call_output(call, i, &dtype, &rank, shape) == TKX_OK);
  if (rank < 0)
    return nullptr;
  return std::make_unique<CTensor>(static_cast<DType>(dtype), std::vector<int64_t>(shape, shape + rank));
}

/// Every output of a call, allocated from the inferred specs.
inline std::vector<std::unique_ptr<CTensor>> outputs_of(const tkx_call *call) {
  std::vector<std::unique_ptr<CTensor>> out;
  for (int32_t i = 0; i < tkx_call_num_outputs(call); ++i)
    out.push_back(output_of(call, i));
  return out;
}

inline std::vector<const tkx_tensor *> descs(const std::vector<std::unique_ptr<CTensor>> &tensors) {
  std::vector<const tkx_tensor *> out;
  for (const auto &t : tensors)
    out.push_back(t ? t->c() : nullptr);
  return out;
}

/// tkx_call_run on host tensors that must succeed.
inline void run_host(const tkx_call *call, const std::vector<const tkx_tensor *> &inputs,
                     const std::vector<const tkx_tensor *> &outputs) {
  tkx_status s = tkx_call_run(call, inputs.data(), static_cast<int32_t>(inputs.size()), outputs.data(),
                              static_cast<int32_t>(outputs.size()), nullptr, nullptr, 0);
  INFO(tkx_last_error());
  REQUIRE(s == TKX_OK);
}

/// Whether a driver reports a device; when not, the test says so and returns.
inline bool haveDevice() {
  try {
    if (tokamax::Device::count() > 0)
      return true;
  } catch (const std::exception &) {
  }
  WARN("SKIPPED: no CUDA driver or device (ctest runs these under the null driver: capi-unit-tests-null-driver)");
  return false;
}

/// A function the null driver exports (tests/nulldriver), or null under another driver.
template <class Fn> Fn *nullDriverFunction(const char *name) {
  const char *path = std::getenv("TOKAMAX_CUDA_DRIVER");
  void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  Fn *fn = lib ? reinterpret_cast<Fn *>(dlsym(lib, name)) : nullptr;
  if (lib)
    dlclose(lib);  // the library stays loaded: the process loaded it as its driver
  return fn;
}

/// The null driver's count of cuMemAlloc calls, or -1 under another driver.
inline long deviceAllocations() {
  auto *count = nullDriverFunction<size_t()>("tokamax_null_cuda_allocations");
  return count ? static_cast<long>(count()) : -1;
}

/// Checks a failed status and that the thread's message holds every one of `parts`.
#define CHECK_STATUS(expr, status, ...)                                                                            \
  do {                                                                                                            \
    const tkx_status got_ = (expr);                                                                               \
    const std::string message_ = tkx_last_error();                                                                \
    INFO(#expr << " -> " << int(got_) << ": " << message_);                                                       \
    CHECK(got_ == (status));                                                                                      \
    for (const char *part_ : {__VA_ARGS__})                                                                       \
      CHECK_THAT(message_, Catch::Contains(part_));                                                               \
  } while (0)

} // namespace capi_test
