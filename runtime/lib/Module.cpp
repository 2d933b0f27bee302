//===- Module.cpp - Loaded GPU code and kernel launches -------------------===//
#include "tokamax/runtime/Module.h"

#include "tokamax/runtime/Device.h"
#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/detail/DeviceScope.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace tokamax {

namespace {

/// TOKAMAX_LAUNCH_TRACE=1: every launch is printed and waited for, so a kernel that
/// never finishes is named by the last line (streams being captured are not waited for).
bool launch_trace() {
  static const bool on = [] {
    const char *v = std::getenv("TOKAMAX_LAUNCH_TRACE");
    return v && *v == '1';
  }();
  return on;
}

void trace_launch(std::string_view name, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                  uint32_t shared_bytes, CUstream stream) {
  std::fputs(fmt::format("tokamax: launch {} grid ({}, {}, {}) block {} shared {} B ...", name, grid[0], grid[1],
                         grid[2], block[0] * block[1] * block[2], shared_bytes)
                 .c_str(),
             stderr);
  std::fflush(stderr);
  const auto& api = detail::driver();
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (api.cuStreamIsCapturing(stream, &capturing) == CUDA_SUCCESS &&
      capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
    std::fputs(" (captured)\n", stderr);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const CUresult r = api.cuStreamSynchronize(stream);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::fputs(fmt::format(" {} in {:.3f} ms\n", r == CUDA_SUCCESS ? "done" : "FAILED", ms).c_str(), stderr);
}

} // namespace

void KernelFunction::launch(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                            uint32_t shared_bytes, CUstream stream, void** params) const {
  const CUresult r =
      detail::driver().cuLaunchKernel(function_, grid[0], grid[1], grid[2], block[0], block[1],
                                      block[2], shared_bytes, stream, params, nullptr);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_launch_error(r, grid, block, shared_bytes);
  detail::note_launch(name_);
  if (launch_trace()) [[unlikely]]
    trace_launch(name_, grid, block, shared_bytes, stream);
}

void KernelFunction::throw_launch_error(int result, std::array<uint32_t, 3> grid,
                                        std::array<uint32_t, 3> block,
                                        uint32_t shared_bytes) const {
  detail::throw_driver_error(
      result, "cuLaunchKernel",
      fmt::format("kernel '{}' with grid ({}, {}, {}), block ({}, {}, {}), {} bytes of "
                  "dynamic shared memory",
                  name_, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                  shared_bytes));
}

void KernelFunction::set_max_dynamic_shared(uint32_t bytes) {
  const CUresult r = detail::driver().cuFuncSetAttribute(
      function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes));
  if (r != CUDA_SUCCESS)
    detail::throw_driver_error(
        r, "cuFuncSetAttribute",
        fmt::format("setting {} bytes of dynamic shared memory for kernel '{}'", bytes, name_));
}

int KernelFunction::num_registers() const {
  int regs = 0;
  check(detail::driver().cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, function_),
        "cuFuncGetAttribute");
  return regs;
}

Module Module::load_cubin(std::span<const uint8_t> image, Device& device) {
  // The driver reads the image without a size; never hand it an empty one.
  if (image.empty())
    throw Error("load_cubin: the image is empty");
  return load(image.data(), "cubin", device);
}

Module Module::load_ptx(std::string_view ptx, Device& device) {
  const std::string text(ptx); // The driver needs a NUL-terminated string.
  return load(text.c_str(), "PTX", device);
}

Module Module::load(const void* image, const char* what, Device& device) {
  const detail::DeviceScope scope(device.ordinal());
  std::array<char, 16384> error_log{};
  std::array<CUjit_option, 2> options = {CU_JIT_ERROR_LOG_BUFFER,
                                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  // Option values are passed as pointer-sized slots; the size goes by value.
  std::array<void*, 2> values = {
      error_log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(error_log.size()))};
  CUmodule module = nullptr;
  const CUresult r = detail::driver().cuModuleLoadDataEx(
      &module, image, static_cast<unsigned>(options.size()), options.data(), values.data());
  if (r != CUDA_SUCCESS) {
    error_log.back() = '\0';
    const std::string log = error_log.data();
    detail::throw_driver_error(
        r, "cuModuleLoadDataEx",
        fmt::format("while loading {} on device {} ({}){}", what, device.ordinal(),
                    device.arch(), log.empty() ? std::string() : "; JIT log:\n" + log));
  }
  return Module(module, &device);
}

Module::Module(Module&& other) noexcept
    : module_(std::exchange(other.module_, nullptr)),
      device_(std::exchange(other.device_, nullptr)) {}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    reset();
    module_ = std::exchange(other.module_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
  }
  return *this;
}

Module::~Module() { reset(); }

void Module::reset() noexcept {
  if (module_) {
    // Destructors cannot report failure; at worst the module stays loaded.
    detail::release_in_context(device_->context(),
                               [&](const detail::DriverApi& api) { (void)api.cuModuleUnload(module_); });
  }
  module_ = nullptr;
  device_ = nullptr;
}

KernelFunction Module::function(const std::string& name) const {
  CUfunction fn = nullptr;
  const CUresult r = detail::driver().cuModuleGetFunction(&fn, module_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    throw Error(fmt::format("kernel '{}' not found in the loaded module", name));
  if (r != CUDA_SUCCESS)
    detail::throw_driver_error(r, "cuModuleGetFunction", fmt::format("kernel '{}'", name));
  return KernelFunction(fn, name);
}

} // namespace tokamax
