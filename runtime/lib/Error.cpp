//===- Error.cpp - Exception classes --------------------------------------===//
//
// Destructors are defined out of line so each class's vtable and typeinfo are
// emitted once, in libtokamax_runtime.
//
//===----------------------------------------------------------------------===//
#include "tokamax/runtime/Error.h"

#include <utility>

namespace tokamax {

Error::Error(const std::string& message) : std::runtime_error(message) {}
Error::~Error() = default;

NotSupported::NotSupported(const std::string& message) : Error(message) {}
NotSupported::~NotSupported() = default;

DriverError::DriverError(int code, std::string name, const std::string& message)
    : Error(message), code_(code), name_(std::move(name)) {}
DriverError::~DriverError() = default;

NoDeviceError::NoDeviceError(const std::string& message) : Error(message) {}
NoDeviceError::~NoDeviceError() = default;

} // namespace tokamax
