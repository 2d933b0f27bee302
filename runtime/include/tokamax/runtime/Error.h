//===- Error.h - Exceptions thrown by the Tokamax API -------------*- C++ -*-===//
//
// Every failure that crosses the public API is reported as a tokamax::Error (or
// a subclass), so callers can catch one type. The classes are exported so their
// typeinfo is shared across the libtokamax boundary and catch clauses work.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Export.h"

#include <stdexcept>
#include <string>

namespace tokamax {

class TOKAMAX_API Error : public std::runtime_error {
public:
  explicit Error(const std::string& message);
  ~Error() override;
};

// A feature, dtype or configuration that this build or device cannot handle.
class TOKAMAX_API NotSupported : public Error {
public:
  explicit NotSupported(const std::string& message);
  ~NotSupported() override;
};

// A CUDA driver call failed. what() is "<call>: <NAME>: <driver message>",
// optionally followed by extra detail (e.g. a JIT log).
class TOKAMAX_API DriverError : public Error {
public:
  DriverError(int code, std::string name, const std::string& message);
  ~DriverError() override;

  int code() const { return code_; }
  // The driver's enum name, e.g. "CUDA_ERROR_INVALID_VALUE".
  const std::string& name() const { return name_; }

private:
  int code_;
  std::string name_;
};

// No usable CUDA driver library, or a driver without any device.
class TOKAMAX_API NoDeviceError : public Error {
public:
  explicit NoDeviceError(const std::string& message);
  ~NoDeviceError() override;
};

} // namespace tokamax
