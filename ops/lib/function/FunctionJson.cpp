//===- FunctionJson.cpp - A Function as JSON (format version 2) ------------===//
#include <tokamax/ops/Function.h>

#include "ops/lib/framework/ArgsAdded.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <optional>

namespace tokamax {

using json = nlohmann::json;

namespace {

constexpr int kFunctionJsonVersion = 2;

json parseFunctionJson(const std::string &text) {
  try {
    return json::parse(text);
  } catch (const json::exception &e) {
    throw Error(fmt::format("Function JSON: not valid JSON: {}", e.what()));
  }
}

const json &field(const json &j, const char *key, const std::string &where) {
  if (!j.is_object() || !j.contains(key))
    throw Error(fmt::format("Function JSON: {} needs \"{}\"", where, key));
  return j.at(key);
}

int valueId(const json &j, size_t count, const std::string &where, bool absentAllowed = false) {
  if (!j.is_number_integer())
    throw Error(fmt::format("Function JSON: {} must be a value id (an integer), got {}", where, j.dump()));
  const int64_t id = j.get<int64_t>();
  if ((absentAllowed && id == -1) || (id >= 0 && id < static_cast<int64_t>(count)))
    return static_cast<int>(id);
  throw Error(fmt::format("Function JSON: {} = {} is not a value id (0 to {}{})", where, id,
                          static_cast<int64_t>(count) - 1, absentAllowed ? ", or -1 for an absent argument" : ""));
}

/// The attributes a call's VJP takes that its op does not (Call::vjp_attributes), with
/// the one value each is written with (absent: the default).
const std::map<std::string, std::map<std::string, std::string>> kVjpAttributes{
    {"attention", {{"deterministic", "0"}}}};

} // namespace

std::string Function::to_json() const {
  json j;
  j["format"] = "tokamax-function";
  j["version"] = kFunctionJsonVersion;
  j["values"] = json::array();
  for (const ArgSpec &v : values_)
    j["values"].push_back(json::parse(v.to_json()));
  j["inputs"] = inputs_;
  j["outputs"] = outputs_;
  j["calls"] = json::array();
  for (const Call &c : calls_) {
    json call;
    call["args"] = json::parse(c.args.to_json());
    call["slots"] = c.slots;
    call["implementation"] = c.implementation ? json(*c.implementation) : json(nullptr);
    if (!c.vjp_attributes.empty())  // (absent from every other call, which reads as before)
      call["vjp_attributes"] = c.vjp_attributes;
    j["calls"].push_back(std::move(call));
  }
  return j.dump();
}

Function Function::from_json(const std::string &text) {
  const json j = parseFunctionJson(text);
  if (!j.is_object() || !j.contains("format") || j["format"] != "tokamax-function")
    throw Error("Function JSON: not a function (needs \"format\": \"tokamax-function\")");
  const json &version = field(j, "version", "the function");
  if (!version.is_number_integer() || version.get<int64_t>() < 1)
    throw Error(fmt::format("Function JSON: \"version\" must be a positive integer, got {}", version.dump()));
  if (version.get<int64_t>() != kFunctionJsonVersion)
    throw Error(fmt::format("Function JSON: format version {} {}; this library reads version {}", version.get<int64_t>(),
                            version.get<int64_t>() > kFunctionJsonVersion ? "comes from a newer library"
                                                                         : "lists the calls only (trace it again)",
                            kFunctionJsonVersion));
  for (const auto &item : j.items())
    if (item.key() != "format" && item.key() != "version" && item.key() != "values" && item.key() != "inputs" &&
        item.key() != "outputs" && item.key() != "calls")
      throw Error(fmt::format("Function JSON: unknown key \"{}\"", item.key()));
  Function f;
  const json &values = field(j, "values", "the function");
  if (!values.is_array())
    throw Error("Function JSON: \"values\" must be an array of specs");
  for (size_t i = 0; i < values.size(); ++i) {
    try {
      f.values_.push_back(ArgSpec::from_json(values[i].dump()));
    } catch (const Error &e) {
      throw Error(fmt::format("Function JSON: values[{}]: {}", i, e.what()));
    }
  }
  const size_t count = f.values_.size();
  std::vector<bool> written(count, false);
  for (const char *key : {"inputs", "outputs"}) {
    const json &ids = field(j, key, "the function");
    if (!ids.is_array())
      throw Error(fmt::format("Function JSON: \"{}\" must be an array of value ids", key));
    for (size_t i = 0; i < ids.size(); ++i) {
      int id = valueId(ids[i], count, fmt::format("{}[{}]", key, i));
      if (std::string(key) == "inputs") {
        if (written[id])
          throw Error(fmt::format("Function JSON: inputs[{}] = {} is listed twice", i, id));
        written[id] = true;
        f.inputs_.push_back(id);
      } else {
        f.outputs_.push_back(id);
      }
    }
  }
  const json &calls = field(j, "calls", "the function");
  if (!calls.is_array())
    throw Error("Function JSON: \"calls\" must be an array");
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::string where = fmt::format("calls[{}]", c);
    const json &call = calls[c];
    for (const auto &item : call.items())
      if (item.key() != "args" && item.key() != "slots" && item.key() != "implementation" &&
          item.key() != "vjp_attributes")
        throw Error(fmt::format("Function JSON: {}: unknown key \"{}\"", where, item.key()));
    Call out;
    try {
      out.args = BoundArgs::from_json(field(call, "args", where).dump());
    } catch (const Error &e) {
      throw Error(fmt::format("Function JSON: {}.args: {}", where, e.what()));
    }
    out.op = find_op(out.args.op);
    if (!out.op)
      throw Error(fmt::format("Function JSON: {}: unknown op \"{}\"", where, out.args.op));
    try {
      out.op->validate(out.args);
    } catch (const Error &e) {
      throw Error(fmt::format("Function JSON: {}.args: {}", where, e.what()));
    }
    const json &impl = field(call, "implementation", where);
    if (impl.is_string()) {
      try {
        out.op->implementation(impl.get<std::string>());
      } catch (const Error &e) {
        throw Error(fmt::format("Function JSON: {}.implementation: {}", where, e.what()));
      }
      out.implementation = impl.get<std::string>();
    } else if (!impl.is_null()) {
      throw Error(fmt::format("Function JSON: {}.implementation must be a name or null, got {}", where, impl.dump()));
    }
    if (call.contains("vjp_attributes")) {
      const json &vjp = call.at("vjp_attributes");
      auto known = kVjpAttributes.find(out.args.op);
      if (!vjp.is_object())
        throw Error(fmt::format("Function JSON: {}.vjp_attributes must be an object, got {}", where, vjp.dump()));
      for (const auto &item : vjp.items()) {
        std::optional<std::string> value;
        if (known != kVjpAttributes.end() && known->second.count(item.key()))
          value = known->second.at(item.key());
        if (!value)
          throw Error(fmt::format("Function JSON: {}.vjp_attributes: {}'s VJP takes no attribute \"{}\" of its own",
                                  where, out.args.op, item.key()));
        if (item.value() != *value)
          throw Error(fmt::format("Function JSON: {}.vjp_attributes.{} must be \"{}\" (absent: the default), got {}",
                                  where, item.key(), *value, item.value().dump()));
        out.vjp_attributes[item.key()] = *value;
      }
    }
    json slots = field(call, "slots", where);
    const size_t arity = out.op->arg_names().size();
    if (slots.is_array())  // a call saved before its op gained arguments: absent there
      ops_detail::insert_added(*slots.get_ptr<json::array_t *>(), ops_detail::args_added(out.args.op, slots.size()),
                               json(-1));
    if (!slots.is_array() || slots.size() != arity || out.args.args.size() != arity)
      throw Error(fmt::format("Function JSON: {}: {} takes {} arguments; got {} slots and {} argument specs", where,
                              out.args.op, arity, slots.is_array() ? slots.size() : 0, out.args.args.size()));
    for (size_t i = 0; i < arity; ++i) {
      const std::string slotWhere = fmt::format("{}.slots[{}] ({})", where, i, out.op->arg_names()[i]);
      int id = valueId(slots[i], count, slotWhere, /*absentAllowed=*/true);
      if ((id < 0) != !out.args.args[i].has_value())
        throw Error(fmt::format("Function JSON: {}: {} value but the argument spec is {}", slotWhere,
                                id < 0 ? "no" : "a", out.args.args[i] ? "present" : "absent"));
      out.slots.push_back(id);
      if (id < 0)
        continue;
      if (!(f.values_[id] == *out.args.args[i]))
        throw Error(fmt::format("Function JSON: {}: value {} is {} but the argument is {}", slotWhere, id,
                                f.values_[id].to_json(), out.args.args[i]->to_json()));
      const bool isInput = i < out.op->num_inputs();
      if (isInput && !written[id])
        throw Error(fmt::format("Function JSON: {}: value {} is read before any call writes it", slotWhere, id));
      if (!isInput && written[id])
        throw Error(fmt::format("Function JSON: {}: value {} is written twice (or is an input)", slotWhere, id));
      if (!isInput)
        written[id] = true;
    }
    f.calls_.push_back(std::move(out));
  }
  for (size_t i = 0; i < f.outputs_.size(); ++i)
    if (!written[f.outputs_[i]])
      throw Error(fmt::format("Function JSON: outputs[{}] = {} is neither an input nor written by a call", i,
                              f.outputs_[i]));
  return f;
}

} // namespace tokamax
