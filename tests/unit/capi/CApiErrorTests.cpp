//===- CApiErrorTests.cpp - Every error of the C ABI: status and message ----===//
//
// Each failure returns its status and leaves a thread-local message that names the
// offending argument; nothing throws across the ABI.
//
//===----------------------------------------------------------------------===//
#include "unit/capi/CApiTestUtil.h"

#include <thread>

using namespace capi_test;
using tokamax::DType;

namespace {

tkx_status create(const char *op, const std::vector<const tkx_tensor *> &inputs, const char *options,
                  tkx_call **call) {
  return tkx_call_create(op, inputs.data(), static_cast<int32_t>(inputs.size()), options, call);
}

} // namespace

TEST_CASE("capi: tkx_call_create names the bad op, option, input and JSON", "[capi]") {
  CTensor x = CTensor::random(DType::F32, {3, 8}, 1);
  tkx_call *call = reinterpret_cast<tkx_call *>(1);
  auto in = descs({&x, nullptr, nullptr});

  CHECK_STATUS(create("layer_nrom", in, nullptr, &call), TKX_INVALID_ARGUMENT, "unknown op \"layer_nrom\"",
               "layer_norm");
  CHECK(call == nullptr);  // set to NULL on failure
  CHECK_STATUS(create(nullptr, in, nullptr, &call), TKX_INVALID_ARGUMENT, "op is NULL");
  CHECK_STATUS(create("layer_norm", in, nullptr, nullptr), TKX_INVALID_ARGUMENT, "call");
  CHECK_STATUS(create("fill", {}, nullptr, &call), TKX_NOT_SUPPORTED, "\"fill\" has no C binding");
  CHECK_STATUS(create("layer_norm", in, R"({"epsilon": 1e-6, "axes": 1})", &call), TKX_INVALID_ARGUMENT,
               "unknown option \"axes\"", "axis", "epsilon");
  CHECK_STATUS(create("layer_norm", in, R"({"axis": -1,)", &call), TKX_INVALID_ARGUMENT,
               "options_json is not valid JSON");
  CHECK_STATUS(create("layer_norm", in, "[1, 2]", &call), TKX_INVALID_ARGUMENT, "must be a JSON object");
  CHECK_STATUS(create("layer_norm", in, R"({"axis": "last"})", &call), TKX_INVALID_ARGUMENT,
               "option \"axis\" must be an integer");
  CHECK_STATUS(create("attention", descs({&x, &x, &x, nullptr, nullptr, nullptr, nullptr, nullptr}),
                      R"({"is_causal": 1})", &call),
               TKX_INVALID_ARGUMENT, "option \"is_causal\" must be a boolean");
  // The forward takes no "deterministic" (its VJP's option); the VJP takes a boolean.
  CTensor a = CTensor::random(DType::F32, {1, 4, 2, 16}, 3);
  CHECK_STATUS(create("attention", descs({&a, &a, &a, nullptr, nullptr, nullptr, nullptr, nullptr}),
                      R"({"deterministic": false})", &call),
               TKX_INVALID_ARGUMENT, "unknown option \"deterministic\"");
  CTensor lse = CTensor::random(DType::F32, {1, 2, 4}, 4);
  CHECK_STATUS(create("attention_vjp", descs({&a, &a, &a, &a, &a, &lse, nullptr, nullptr, nullptr, nullptr, nullptr}),
                      R"({"deterministic": 0})", &call),
               TKX_INVALID_ARGUMENT, "option \"deterministic\" must be a boolean");
  CHECK_STATUS(create("layer_norm", in, R"({"config": {"block_rows": "four"}})", &call), TKX_INVALID_ARGUMENT,
               "option \"config\"");
  CHECK_STATUS(create("layer_norm", in, R"({"implementation": "cuda"})", &call), TKX_INVALID_ARGUMENT, "cuda",
               "reference");
  CHECK_STATUS(create("layer_norm", in, R"({"axis": 2})", &call), TKX_INVALID_ARGUMENT, "axis 2");
  CHECK_STATUS(create("gated_linear_unit", descs({&x, &x}), R"({"activation": "swishy"})", &call),
               TKX_INVALID_ARGUMENT, "activation");
  CHECK_STATUS(create("layer_norm", descs({&x, &x, &x, &x}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "num_inputs is 4", "takes 3");
  {  // Fewer inputs than the op takes: the missing last ones are absent (callers that
     // predate an appended optional argument keep working).
    Call shorter = make_call("layer_norm", descs({&x}));
    Call full = make_call("layer_norm", descs({&x, nullptr, nullptr}));
    CHECK(std::string(tkx_call_json(shorter.get())) == tkx_call_json(full.get()));
  }
  CHECK_STATUS(create("layer_norm", descs({nullptr, nullptr, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "input 0 (x) is required");

  // Inputs' descriptors.
  CTensor bad = CTensor::random(DType::F32, {3, 8}, 2);
  bad.desc.dtype = 42;
  CHECK_STATUS(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "input 0 (x)", "dtype 42");
  bad.desc.dtype = TKX_I32;  // a dtype the op refuses
  CHECK_STATUS(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT, "x",
               "i32");
  bad.desc.dtype = TKX_F32;
  bad.desc.rank = 9;
  CHECK_STATUS(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "input 0 (x)", "rank 9");
  bad.desc.rank = 2;
  bad.desc.shape = nullptr;
  CHECK_STATUS(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "input 0 (x)", "shape is NULL");
  bad.desc.shape = bad.shape.data();
  bad.desc.struct_size = 16;
  CHECK_STATUS(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "input 0 (x)", "struct_size 16");
  bad.desc.struct_size = sizeof(tkx_tensor) + 16;  // a newer caller's larger struct is fine
  tkx_call *ok = nullptr;
  CHECK(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &ok) == TKX_OK);
  tkx_call_destroy(ok);
  bad.desc.struct_size = sizeof(tkx_tensor);
  const int64_t transposed[] = {1, 3};
  bad.desc.strides = transposed;
  CHECK_STATUS(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "input 0 (x)", "not contiguous");
  const int64_t rowMajor[] = {8, 1};
  bad.desc.strides = rowMajor;
  CHECK(create("layer_norm", descs({&bad, nullptr, nullptr}), nullptr, &ok) == TKX_OK);
  tkx_call_destroy(ok);
  CTensor wrongScale = CTensor::random(DType::F32, {7}, 3);
  CHECK_STATUS(create("layer_norm", descs({&x, &wrongScale, nullptr}), nullptr, &call), TKX_INVALID_ARGUMENT,
               "scale", "[8]");

  CHECK_STATUS(tkx_op_args("no_such_op", nullptr, nullptr), TKX_INVALID_ARGUMENT, "tkx_op_args", "no_such_op");
}

TEST_CASE("capi: tkx_call_run checks every tensor against the bound call", "[capi]") {
  CTensor x = CTensor::random(DType::F32, {3, 8}, 1), scale = CTensor::random(DType::F32, {8}, 2);
  Call call = make_call("layer_norm", descs({&x, &scale, nullptr}));
  auto out = outputs_of(call.get());
  auto outs = descs(out);
  auto run = [&](const std::vector<const tkx_tensor *> &in, const std::vector<const tkx_tensor *> &o) {
    return tkx_call_run(call.get(), in.data(), int32_t(in.size()), o.data(), int32_t(o.size()), nullptr, nullptr, 0);
  };
  CTensor other = CTensor::random(DType::F32, {4, 8}, 3);
  CHECK_STATUS(run(descs({&other, &scale, nullptr}), outs), TKX_INVALID_ARGUMENT, "input 0 (x)",
               "\"shape\":[4,8]", "\"shape\":[3,8]");
  CTensor wrongType = CTensor::random(DType::BF16, {3, 8}, 3);
  CHECK_STATUS(run(descs({&wrongType, &scale, nullptr}), outs), TKX_INVALID_ARGUMENT, "input 0 (x)", "bf16");
  CHECK_STATUS(run(descs({&x, nullptr, nullptr}), outs), TKX_INVALID_ARGUMENT, "input 1 (scale) is NULL");
  CHECK_STATUS(run(descs({&x, &scale, &scale}), outs), TKX_INVALID_ARGUMENT, "input 2 (offset) was absent");
  CHECK_STATUS(run(descs({&x, &scale, nullptr, nullptr}), outs), TKX_INVALID_ARGUMENT, "num_inputs is 4");
  CHECK_STATUS(run(descs({&x}), outs), TKX_INVALID_ARGUMENT, "input 1 (scale) is NULL");
  CHECK(run(descs({&x, &scale}), outs) == TKX_OK);  // the absent offset left out
  CHECK_STATUS(run(descs({&x, &scale, nullptr}), {outs[0], outs[1], outs[2], nullptr}), TKX_INVALID_ARGUMENT,
               "num_outputs is 4");
  CHECK_STATUS(run(descs({&x, &scale, nullptr}), {outs[0]}), TKX_INVALID_ARGUMENT, "output 1 (mean) is NULL");
  CHECK_STATUS(run(descs({&x, &scale, nullptr}), {outs[0], outs[1], nullptr}), TKX_INVALID_ARGUMENT,
               "output 2 (rstd) is NULL");
  CHECK_STATUS(tkx_call_run(nullptr, nullptr, 0, nullptr, 0, nullptr, nullptr, 0), TKX_INVALID_ARGUMENT,
               "call is NULL");
  CHECK_STATUS(tkx_call_run(call.get(), nullptr, 3, outs.data(), 3, nullptr, nullptr, 0), TKX_INVALID_ARGUMENT,
               "inputs is NULL");
  CTensor noData = CTensor::random(DType::F32, {3, 8}, 1);
  noData.desc.data = nullptr;
  CHECK_STATUS(run(descs({&noData, &scale, nullptr}), outs), TKX_INVALID_ARGUMENT, "input 0 (x)", "data is NULL");
  // Mixed devices: the input on device 0, the rest on the host.
  CTensor onDevice = CTensor::random(DType::F32, {3, 8}, 1);
  onDevice.desc.device = 0;
  CHECK_STATUS(run(descs({&onDevice, &scale, nullptr}), outs), TKX_INVALID_ARGUMENT, "input 1 (scale)",
               "device -1", "input 0 (x) is on device 0");

  // Output queries.
  CHECK_STATUS(tkx_call_output(call.get(), 3, nullptr, nullptr, nullptr), TKX_INVALID_ARGUMENT, "output index 3");
  CHECK_STATUS(tkx_call_output(nullptr, 0, nullptr, nullptr, nullptr), TKX_INVALID_ARGUMENT, "call is NULL");
  CHECK(tkx_call_num_outputs(nullptr) == -1);
  CHECK(std::string(tkx_call_json(nullptr)).empty());
  tkx_call_destroy(nullptr);
  size_t bytes = 1;
  CHECK(tkx_call_workspace_bytes(call.get(), -1, &bytes) == TKX_OK);
  CHECK(bytes == 0);
  CHECK_STATUS(tkx_call_workspace_bytes(call.get(), -1, nullptr), TKX_INVALID_ARGUMENT, "bytes is NULL");
  CHECK_STATUS(tkx_call_precompile(call.get(), "sm_9"), TKX_INVALID_ARGUMENT, "sm_9");
}

TEST_CASE("capi: config scopes and autotuning results: errors and the scope's effect", "[capi]") {
  uint64_t id = 0;
  CHECK_STATUS(tkx_config_scope_push("{not json", &id), TKX_INVALID_ARGUMENT, "tkx_config_scope_push");
  CHECK_STATUS(tkx_config_scope_push(nullptr, &id), TKX_INVALID_ARGUMENT, "result_json is NULL");
  CHECK_STATUS(tkx_config_scope_pop(987654), TKX_INVALID_ARGUMENT, "987654");
  char *result = reinterpret_cast<char *>(1);
  CHECK_STATUS(tkx_autotune(nullptr, 0, nullptr, &result), TKX_INVALID_ARGUMENT, "num_calls is 0");
  CHECK(result == nullptr);
  tkx_free_string(nullptr);

  // A hand-written result whose config for this call the run uses (the json the call
  // prints is the result's key).
  CTensor x = CTensor::random(DType::F32, {6, 40}, 1);
  Call call = make_call("layer_norm", descs({&x, nullptr, nullptr}), R"({"implementation": "tile"})");
  const std::string text = std::string(R"({"format": "tokamax-autotuning", "version": 1, "device": null, "entries": [)") +
                           R"({"args": )" + tkx_call_json(call.get()) +
                           R"(, "implementation": "tile", "config": {"block_rows": 1, "block_cols": 8, "num_warps": 1}, "candidates": []}]})";
  const tkx_status pushed = tkx_config_scope_push(text.c_str(), &id);
  INFO(tkx_last_error());
  REQUIRE(pushed == TKX_OK);
  auto scoped = outputs_of(call.get());
  run_host(call.get(), descs({&x, nullptr, nullptr}), descs(scoped));
  // A scope is the thread's own: popping it on another thread fails.
  tkx_status elsewhere = TKX_OK;
  std::thread([&] { elsewhere = tkx_config_scope_pop(id); }).join();
  CHECK(elsewhere == TKX_INVALID_ARGUMENT);
  CHECK(tkx_config_scope_pop(id) == TKX_OK);
  CHECK(tkx_config_scope_pop(id) == TKX_INVALID_ARGUMENT);
  auto plain = outputs_of(call.get());
  run_host(call.get(), descs({&x, nullptr, nullptr}), descs(plain));
  // Same numbers (within rounding: a looping config sums in another order).
  const std::vector<double> a = scoped[0]->values(), b = plain[0]->values();
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(a[i] == Approx(b[i]).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("capi: the last error is per thread", "[capi]") {
  tkx_call *call = nullptr;
  CHECK(tkx_call_create("no_such_op", nullptr, 0, nullptr, &call) == TKX_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] { other = tkx_last_error(); }).join();
  CHECK(other.empty());
  CHECK_THAT(std::string(tkx_last_error()), Catch::Contains("no_such_op"));
}

TEST_CASE("capi: the kernel trace opens where CUPTI records, else says why, and names NULL arguments", "[capi]") {
  CHECK(tkx_kernel_trace_start(nullptr) == TKX_INVALID_ARGUMENT);
  CHECK_THAT(std::string(tkx_last_error()), Catch::Contains("trace is NULL"));
  CHECK(tkx_kernel_trace_take(nullptr, nullptr, nullptr, nullptr) == TKX_INVALID_ARGUMENT);
  tkx_kernel_trace_stop(nullptr);

  tkx_kernel_trace *trace = nullptr;
  const tkx_status started = tkx_kernel_trace_start(&trace);
  if (started != TKX_OK) {
    CHECK(started == TKX_NOT_SUPPORTED);
    CHECK(trace == nullptr);
    CHECK_THAT(std::string(tkx_last_error()), Catch::Contains("CUPTI kernel timing is unavailable"));
    return;
  }
  // Nothing ran since the start: no kernel, no time.
  int64_t kernels = -1;
  double total = -1;
  uint64_t dropped = 1;
  CHECK(tkx_kernel_trace_take(trace, &kernels, &total, &dropped) == TKX_OK);
  CHECK(kernels == 0);
  CHECK(total == 0);
  CHECK(tkx_kernel_trace_take(trace, nullptr, nullptr, nullptr) == TKX_OK);
  tkx_kernel_trace_stop(trace);
}
