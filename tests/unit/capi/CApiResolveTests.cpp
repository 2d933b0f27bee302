// tkx_call_resolve: what a run of a call on the calling thread would resolve to (the
// implementation and config a binding that runs elsewhere, as JAX's FFI handler on XLA's
// threads, binds explicitly). No device: the arch is named.
#include "unit/capi/CApiTestUtil.h"

#include <nlohmann/json.hpp>

#include <thread>

using namespace capi_test;

namespace {

struct Resolved {
  std::string implementation;
  tokamax::Config config;
};

/// tkx_call_resolve's JSON, or its error message after "error: ".
std::string resolveText(const tkx_call *call, const char *arch = "sm_90a") {
  char *text = nullptr;
  if (tkx_call_resolve(call, arch, &text) != TKX_OK)
    return std::string("error: ") + tkx_last_error();
  std::string out = text ? text : "error: NULL";
  tkx_free_string(text);
  return out;
}

Resolved parse(const std::string &text) {
  INFO(text);
  REQUIRE(text.rfind("error: ", 0) != 0);
  const nlohmann::json j = nlohmann::json::parse(text);
  REQUIRE(j.size() == 2);
  return {j.at("implementation").get<std::string>(), tokamax::Config::from_json(j.at("config").dump())};
}

Resolved resolve(const tkx_call *call, const char *arch = "sm_90a") { return parse(resolveText(call, arch)); }

/// A result JSON with one entry: `call` run by `implementation` with `config`.
std::string resultFor(const tkx_call *call, const std::string &implementation, const tokamax::Config &config) {
  return std::string(R"({"format": "tokamax-autotuning", "version": 1, "device": null, "entries": [)") +
         R"({"args": )" + tkx_call_json(call) + R"(, "implementation": ")" + implementation +
         R"(", "config": )" + config.to_json() + R"(, "candidates": []}]})";
}

/// A config of `impl`'s search space for the call other than its heuristic.
tokamax::Config otherThanHeuristic(const tkx_call *call, const std::string &implementation) {
  const tokamax::BoundArgs args = tokamax::BoundArgs::from_json(tkx_call_json(call));
  const tokamax::Implementation &impl = tokamax::find_op(args.op)->implementation(implementation);
  const tokamax::Config heuristic = impl.heuristic(args);
  for (const tokamax::Config &c : impl.search_space(args))
    if (!(c == heuristic))
      return c;
  FAIL("the search space of " << implementation << " has only its heuristic");
  return heuristic;
}

} // namespace

TEST_CASE("capi: tkx_call_resolve gives the heuristic, a scope's config on its thread, an explicit choice",
          "[capi]") {
  CTensor x = CTensor::random(DType::F32, {6, 40}, 1);
  const auto in = descs({&x, nullptr, nullptr});
  Call call = make_call("layer_norm", in);

  // No scope: auto's implementation for sm_90a and its heuristic.
  const Resolved plain = resolve(call.get());
  const tokamax::BoundArgs args = tokamax::BoundArgs::from_json(tkx_call_json(call.get()));
  const tokamax::Op &op = *tokamax::find_op("layer_norm");
  CHECK(plain.implementation == op.select(args, std::nullopt, "sm_90a").name());
  CHECK(plain.config == op.implementation(plain.implementation).heuristic(args));

  // Under a scope pushed from a result: the scope's config, on this thread only.
  const tokamax::Config tuned = otherThanHeuristic(call.get(), plain.implementation);
  uint64_t id = 0;
  const std::string result = resultFor(call.get(), plain.implementation, tuned);
  const tkx_status pushed = tkx_config_scope_push(result.c_str(), &id);
  INFO(tkx_last_error());
  REQUIRE(pushed == TKX_OK);
  const Resolved scoped = resolve(call.get());
  CHECK(scoped.implementation == plain.implementation);
  CHECK(scoped.config == tuned);
  std::string elsewhere;  // another thread sees no scope of this one
  std::thread([&] { elsewhere = resolveText(call.get()); }).join();
  CHECK(parse(elsewhere).config == plain.config);
  // An explicit config wins over the scope; an explicit implementation is kept.
  Call fixed = make_call("layer_norm", in,
                         (R"({"implementation": ")" + plain.implementation + R"(", "config": )" +
                          plain.config.to_json() + "}").c_str());
  CHECK(resolve(fixed.get()).config == plain.config);
  Call reference = make_call("layer_norm", in, R"({"implementation": "reference"})");
  CHECK(resolve(reference.get()).implementation == "reference");
  REQUIRE(tkx_config_scope_pop(id) == TKX_OK);
  CHECK(resolve(call.get()).config == plain.config);

  // Binding the resolved choice explicitly (what the JAX adapter hands its handler) runs
  // what the scope would have: the same bits as the scoped run.
  Call bound = make_call("layer_norm", in,
                         (R"({"implementation": ")" + scoped.implementation + R"(", "config": )" +
                          scoped.config.to_json() + "}").c_str());
  REQUIRE(tkx_config_scope_push(result.c_str(), &id) == TKX_OK);
  auto underScope = outputs_of(call.get());
  run_host(call.get(), in, descs(underScope));
  REQUIRE(tkx_config_scope_pop(id) == TKX_OK);
  auto explicitly = outputs_of(bound.get());
  run_host(bound.get(), in, descs(explicitly));
  CHECK(underScope[0]->same_bits(*explicitly[0]));
}

TEST_CASE("capi: tkx_call_resolve's errors name the argument", "[capi]") {
  CTensor x = CTensor::random(DType::F32, {6, 40}, 1);
  Call call = make_call("layer_norm", descs({&x, nullptr, nullptr}));
  char *text = reinterpret_cast<char *>(1);
  CHECK_STATUS(tkx_call_resolve(nullptr, "sm_90a", &text), TKX_INVALID_ARGUMENT, "tkx_call_resolve", "call");
  CHECK(text == nullptr);
  CHECK_STATUS(tkx_call_resolve(call.get(), "sm_90a", nullptr), TKX_INVALID_ARGUMENT, "json");
  CHECK_STATUS(tkx_call_resolve(call.get(), "sm90", &text), TKX_INVALID_ARGUMENT, "arch", "sm90");
  CHECK(text == nullptr);
  // An explicit implementation that cannot run on the arch says why.
  CTensor q = CTensor::random(DType::BF16, {1, 64, 2, 64}, 2);
  Call hopper = make_call("attention", descs({&q, &q, &q, nullptr, nullptr, nullptr, nullptr, nullptr}),
                          R"({"implementation": "hopper"})");
  CHECK_STATUS(tkx_call_resolve(hopper.get(), "sm_80", &text), TKX_NOT_SUPPORTED, "hopper");
}
