//===- Module.h - Loaded GPU code and kernel launches --------------*- C++ -*-===//
#pragma once

#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Export.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace tokamax {

class Device;

// A kernel inside a loaded Module. Non-owning: valid while its Module lives.
class TOKAMAX_API KernelFunction {
public:
  KernelFunction() = default;
  KernelFunction(CUfunction function, std::string name)
      : function_(function), name_(std::move(name)) {}

  // The launch hot path: one cuLaunchKernel and a result check, no allocation
  // or lookup. `params` is the usual array of pointers to each argument.
  void launch(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
              uint32_t shared_bytes, CUstream stream, void** params) const;
  // Allows dynamic shared memory above the 48 KiB default (up to the device's
  // opt-in maximum).
  void set_max_dynamic_shared(uint32_t bytes);
  int num_registers() const;

  CUfunction handle() const { return function_; }
  const std::string& name() const { return name_; }

private:
  [[noreturn]] void throw_launch_error(int result, std::array<uint32_t, 3> grid,
                                       std::array<uint32_t, 3> block,
                                       uint32_t shared_bytes) const;

  CUfunction function_ = nullptr;
  std::string name_;
};

// Owns a module loaded into a device's primary context. Move-only.
class TOKAMAX_API Module {
public:
  // A cubin (or fatbin) image, e.g. from the compiler or a cache.
  static Module load_cubin(std::span<const uint8_t> image, Device& device);
  // PTX text, JIT-compiled by the driver; on failure the thrown DriverError's
  // message carries the JIT error log.
  static Module load_ptx(std::string_view ptx, Device& device);

  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  // Throws Error naming the kernel when the module has no such function.
  KernelFunction function(const std::string& name) const;
  CUmodule handle() const { return module_; }

private:
  Module(CUmodule module, Device* device) : module_(module), device_(device) {}
  static Module load(const void* image, const char* what, Device& device);
  void reset() noexcept;

  CUmodule module_ = nullptr;
  Device* device_ = nullptr;
};

} // namespace tokamax
