//===- Status.cpp - Exceptions to tkx_status, the thread's last error -------===//
#include "c/lib/CApi.h"

#include <tokamax/ops/Workspace.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <new>

namespace tokamax::capi {

namespace {
thread_local std::string lastError;

tkx_status fail(tkx_status status, const char *function, const char *what) noexcept {
  try {
    lastError = fmt::format("{}: {}", function, what);
  } catch (...) {
    lastError.clear();  // no memory for the message: the status still says what happened
  }
  return status;
}
} // namespace

void set_last_error(std::string message) noexcept { lastError = std::move(message); }

tkx_status status_of_current_exception(const char *function) noexcept {
  try {
    throw;
  } catch (const WorkspaceTooSmall &e) {
    return fail(TKX_WORKSPACE_TOO_SMALL, function, e.what());
  } catch (const NotSupported &e) {
    return fail(TKX_NOT_SUPPORTED, function, e.what());
  } catch (const NoDeviceError &e) {
    return fail(TKX_DRIVER_ERROR, function, e.what());
  } catch (const DriverError &e) {
    return fail(e.name() == "CUDA_ERROR_OUT_OF_MEMORY" ? TKX_OUT_OF_MEMORY : TKX_DRIVER_ERROR, function, e.what());
  } catch (const Error &e) {
    return fail(TKX_INVALID_ARGUMENT, function, e.what());
  } catch (const nlohmann::json::exception &e) {
    return fail(TKX_INVALID_ARGUMENT, function, e.what());
  } catch (const std::bad_alloc &) {
    return fail(TKX_OUT_OF_MEMORY, function, "out of host memory");
  } catch (const std::exception &e) {
    return fail(TKX_INTERNAL, function, e.what());
  } catch (...) {
    return fail(TKX_INTERNAL, function, "an unknown exception");
  }
}

void require_pointer(const void *p, std::string_view what) {
  if (!p)
    throw Error(fmt::format("{} is NULL", what));
}

} // namespace tokamax::capi

extern "C" const char *tkx_last_error(void) { return tokamax::capi::lastError.c_str(); }
