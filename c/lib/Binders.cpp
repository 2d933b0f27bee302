//===- Binders.cpp - Op name + input specs + options JSON -> BoundArgs ------===//
//
// One binder per op family: it reads the op's attributes from the options (each key
// once, type-checked), infers the outputs' specs from the inputs, and calls the op's
// public bind function, which validates the whole call. Keys a binder did not read are
// errors, as are "implementation" / "config" of the wrong type.
//
//===----------------------------------------------------------------------===//
#include "c/lib/CApi.h"

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/AttentionFp8.h>
#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/PagedAttention.h>
#include <tokamax/ops/RaggedDot.h>
#include <tokamax/ops/SoftmaxCrossEntropy.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <ranges>
#include <map>
#include <set>

namespace tokamax::capi {

namespace {

using json = nlohmann::json;
using Spec = std::optional<ArgSpec>;

/// The options object of one tkx_call_create, read key by key.
class Options {
public:
  Options(const std::string &op, const char *text) : op_(op) {
    if (!text)
      return;
    try {
      object_ = json::parse(text);
    } catch (const json::parse_error &e) {
      throw Error(fmt::format("{}: options_json is not valid JSON: {}", op, e.what()));
    }
    if (!object_.is_object())
      throw Error(fmt::format("{}: options_json must be a JSON object, got {}", op, object_.type_name()));
  }

  bool boolean(const char *key, bool fallback) {
    const json *v = take(key);
    if (!v || v->is_null())
      return fallback;
    if (!v->is_boolean())
      throw wrongType(key, "a boolean", *v);
    return v->get<bool>();
  }
  int64_t integer(const char *key, int64_t fallback) { return optionalInteger(key).value_or(fallback); }
  std::optional<int64_t> optionalInteger(const char *key) {
    const json *v = take(key);
    if (!v || v->is_null())
      return std::nullopt;
    if (!v->is_number_integer())
      throw wrongType(key, "an integer", *v);
    return v->get<int64_t>();
  }
  double number(const char *key, double fallback) { return optionalNumber(key).value_or(fallback); }
  std::optional<double> optionalNumber(const char *key) {
    const json *v = take(key);
    if (!v || v->is_null())
      return std::nullopt;
    if (!v->is_number())
      throw wrongType(key, "a number", *v);
    return v->get<double>();
  }
  std::optional<std::string> string(const char *key) {
    const json *v = take(key);
    if (!v || v->is_null())
      return std::nullopt;
    if (!v->is_string())
      throw wrongType(key, "a string", *v);
    return v->get<std::string>();
  }
  std::optional<Config> config() {
    const json *v = take("config");
    if (!v || v->is_null())
      return std::nullopt;
    try {
      return Config::from_json(v->dump());
    } catch (const Error &e) {
      throw Error(fmt::format("{}: option \"config\": {}", op_, e.what()));
    }
  }
  /// Throws on a key no binder read, naming the keys the op knows.
  void finish() const {
    for (const auto &[key, value] : object_.items())
      if (!read_.count(key))
        throw Error(fmt::format("{}: unknown option \"{}\" (this op takes: {})", op_, key, fmt::join(read_, ", ")));
  }

private:
  const json *take(const char *key) {
    read_.insert(key);
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  Error wrongType(const char *key, const char *expected, const json &v) const {
    return Error(fmt::format("{}: option \"{}\" must be {}, got {}", op_, key, expected, v.dump()));
  }

  std::string op_;
  json object_ = json::object();
  std::set<std::string> read_;
};

/// The inputs of one call with the op's names, for required / optional reads.
class Inputs {
public:
  Inputs(const Op &op, std::span<const Spec> specs) : op_(op), specs_(specs) {}
  const ArgSpec &required(size_t i) const {
    if (!specs_[i])
      throw Error(fmt::format("{}: input {} ({}) is required, got NULL", op_.name(), i, op_.arg_names()[i]));
    return *specs_[i];
  }
  const Spec &optional(size_t i) const { return specs_[i]; }

private:
  const Op &op_;
  std::span<const Spec> specs_;
};

DType accumulation(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }
Spec when(bool present, const ArgSpec &spec) { return present ? Spec(spec) : std::nullopt; }

//===--- norms: layer_norm, rms_norm and their VJPs ---===//

BoundArgs bindNorm(const Op &op, const Inputs &in, Options &o) {
  const bool layer = op.name().starts_with("layer_norm"), vjp = op.name().ends_with("_vjp");
  const int axis = static_cast<int>(o.integer("axis", -1));
  if (!vjp) {
    const ArgSpec &x = in.required(0);
    const double epsilon = o.number("epsilon", NormOptions{}.epsilon);
    const bool residuals = o.boolean("residuals", true);
    // One residual per row: x's shape without the normalised axis (bind checks the axis).
    const int rank = static_cast<int>(x.shape.size());
    ArgSpec row{x.shape, accumulation(x.dtype)};
    if (axis >= -rank && axis < rank)
      row.shape.erase(row.shape.begin() + (axis < 0 ? axis + rank : axis));
    if (layer)
      return bind_layer_norm(x, in.optional(1), in.optional(2), x, when(residuals, row), when(residuals, row), axis,
                             epsilon);
    return bind_rms_norm(x, in.optional(1), x, when(residuals, row), axis, epsilon);
  }
  const ArgSpec &dy = in.required(0), &x = in.required(1);
  const Spec &scale = in.optional(2);
  if (layer) {
    const bool doffset = o.boolean("doffset", true);
    // doffset in scale's dtype where there is a scale, else the accumulation dtype.
    const int rank = static_cast<int>(x.shape.size());
    const int64_t n = axis >= -rank && axis < rank ? x.shape[axis < 0 ? axis + rank : axis] : 0;
    ArgSpec offset = scale ? *scale : ArgSpec{{n}, accumulation(x.dtype)};
    return bind_layer_norm_vjp(dy, x, scale, in.required(3), in.required(4), x, scale, when(doffset, offset), axis);
  }
  return bind_rms_norm_vjp(dy, x, scale, in.required(3), x, scale, axis);
}

//===--- dot_product_attention ("attention") and its VJP ---===//

AttentionOptions attentionOptions(Options &o) {
  AttentionOptions options;
  options.scale = o.optionalNumber("scale");
  options.is_causal = o.boolean("is_causal", false);
  std::optional<int64_t> left = o.optionalInteger("window_left"), right = o.optionalInteger("window_right");
  if (left || right)
    options.local_window = LocalWindow{left, right};
  options.logits_soft_cap = o.optionalNumber("logits_soft_cap");
  if (std::optional<std::string> layout = o.string("layout")) {
    if (*layout != "bnth" && *layout != "btnh")
      throw Error(fmt::format("attention: option layout must be \"btnh\" or \"bnth\", got \"{}\"", *layout));
    options.layout = *layout == "bnth" ? AttentionLayout::BNTH : AttentionLayout::BTNH;
  }
  return options;
}

/// An attention call's out: q's shape with v's head dim (bind checks the ranks).
ArgSpec attentionOut(const ArgSpec &q, const ArgSpec &v, DType dtype) {
  ArgSpec out{q.shape, dtype};
  if (!out.shape.empty() && !v.shape.empty())
    out.shape.back() = v.shape.back();
  return out;
}

BoundArgs bindAttention(const Op &op, const Inputs &in, Options &o) {
  AttentionOptions options = attentionOptions(o);
  if (op.name() == "attention") {
    const bool residuals = o.boolean("residuals", true);
    AttentionSpecs s{in.required(0), in.required(1), in.required(2), in.optional(3), in.optional(4), in.optional(5),
                     in.optional(6), {}, {}, in.optional(7)};
    s.out = attentionOut(s.q, s.v, s.q.dtype);  // [B..., T, N, Hv]
    if (residuals)
      s.lse = attention_lse_spec(s.q, options.layout);
    return bind_attention(s, options);
  }
  options.deterministic = o.boolean("deterministic", true);  // the VJP's alone
  AttentionVjpSpecs s{in.required(0), in.required(1), in.required(2), in.required(3), in.required(4), in.required(5),
                      in.optional(6), in.optional(7), in.optional(8), in.optional(9), {}, {}, {}, {}, in.optional(10),
                      {}};
  s.dq = s.q;
  s.dk = s.k;
  s.dv = s.v;
  s.dbias = s.bias;
  s.dsinks = s.sinks;
  return bind_attention_vjp(s, options);
}

/// attention_varlen (q, k, v, cu_seqlens_q, cu_seqlens_kv, sinks? | out, lse) and its VJP
/// (dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_kv, sinks? | dq, dk, dv, dsinks?):
/// attention's options without "layout", plus "max_seqlen_q" and "max_seqlen_kv"
/// (required).
BoundArgs bindAttentionVarlen(const Op &op, const Inputs &in, Options &o) {
  AttentionOptions options = attentionOptions(o);
  options.max_seqlen_q = o.optionalInteger("max_seqlen_q");
  options.max_seqlen_kv = o.optionalInteger("max_seqlen_kv");
  if (op.name() == "attention_varlen") {
    AttentionVarlenSpecs s{in.required(0), in.required(1), in.required(2), in.required(3), in.required(4),
                           in.optional(5), {}, {}};
    s.out = attentionOut(s.q, s.v, s.q.dtype);  // [total_q, N, Hv]
    if (o.boolean("residuals", true))
      s.lse = attention_varlen_lse_spec(s.q);
    return bind_attention_varlen(s, options);
  }
  options.deterministic = o.boolean("deterministic", true);
  AttentionVarlenVjpSpecs s{in.required(0), in.required(1), in.required(2), in.required(3), in.required(4),
                            in.required(5), in.required(6), in.required(7), in.optional(8), {}, {}, {}, {}};
  s.dq = s.q;
  s.dk = s.k;
  s.dv = s.v;
  s.dsinks = s.sinks;
  return bind_attention_varlen_vjp(s, options);
}

/// attention_fp8 (q, k, v, q_descale?, k_descale?, v_descale?, q_seq_lengths?,
/// kv_seq_lengths? | out, lse?): attention's options; out bf16 [B..., T, N, Hv], lse f32
/// with the option "lse" (forward only: no residuals to keep by default).
BoundArgs bindAttentionFp8(const Op &, const Inputs &in, Options &o) {
  AttentionOptions options = attentionOptions(o);
  AttentionFp8Specs s{in.required(0), in.required(1), in.required(2), in.optional(3), in.optional(4),
                      in.optional(5), in.optional(6), in.optional(7), {}, {}};
  s.out = attentionOut(s.q, s.v, DType::BF16);
  if (o.boolean("lse", false))
    s.lse = attention_lse_spec(s.q, options.layout);
  return bind_attention_fp8(s, options);
}

//===--- gated_linear_unit, ragged_dot, the cross-entropies ---===//

BoundArgs bindGlu(const Op &op, const Inputs &in, Options &o) {
  const GluActivation activation = parse_glu_activation(o.string("activation").value_or(GluOptions{}.activation));
  if (op.name() == "gated_linear_unit") {
    // The pre-activations only with "residuals": true ([..., 2, N], twice out's size).
    const ArgSpec &x = in.required(0), &w = in.required(1);
    return bind_gated_linear_unit(x, w, gated_linear_unit_out_spec(x, w), activation,
                                  when(o.boolean("residuals", false), gated_linear_unit_preactivations_spec(x, w)));
  }
  const ArgSpec &x = in.required(1), &w = in.required(2);
  return bind_gated_linear_unit_vjp(in.required(0), x, w, x, w, activation, in.optional(3));
}

BoundArgs bindRaggedDot(const Op &op, const Inputs &in, Options &) {
  if (op.name() == "ragged_dot") {
    const ArgSpec &lhs = in.required(0), &rhs = in.required(1);
    return bind_ragged_dot(lhs, rhs, in.required(2), ragged_dot_out_spec(lhs, rhs));
  }
  const ArgSpec &lhs = in.required(1), &rhs = in.required(2);
  return bind_ragged_dot_vjp(in.required(0), lhs, rhs, in.required(3), lhs, rhs);
}

BoundArgs bindLinearCrossEntropy(const Op &op, const Inputs &in, Options &o) {
  const CrossEntropyOptions defaults;
  const std::optional<std::string> name = o.string("reduction");
  const LossReduction reduction = name ? parse_loss_reduction(*name) : defaults.reduction;
  const int64_t ignore = o.integer("ignore_index", defaults.ignore_index);
  if (op.name() == "linear_softmax_cross_entropy_loss") {
    const ArgSpec &x = in.required(0), &w = in.required(1);
    return bind_linear_softmax_cross_entropy_loss(x, w, in.required(2), cross_entropy_loss_spec(x, w, reduction),
                                                  cross_entropy_lse_spec(x, w), reduction, ignore);
  }
  const ArgSpec &x = in.required(1), &w = in.required(2);
  return bind_linear_softmax_cross_entropy_loss_vjp(in.required(0), x, w, in.required(3), in.required(4), x, w,
                                                    reduction, ignore);
}

BoundArgs bindSoftmaxCrossEntropy(const Op &op, const Inputs &in, Options &) {
  if (op.name() == "softmax_cross_entropy") {
    const ArgSpec &logits = in.required(0);
    const ArgSpec row = softmax_cross_entropy_row_spec(logits);
    return bind_softmax_cross_entropy(logits, in.required(1), row, row);
  }
  const ArgSpec &logits = in.required(1);
  return bind_softmax_cross_entropy_vjp(in.required(0), logits, in.required(2), in.required(3), logits);
}

//===--- paged_attention and paged_kv_append ---===//

BoundArgs bindPagedAttention(const Op &op, const Inputs &in, Options &o) {
  if (op.name() == "paged_attention") {
    PagedAttentionOptions options;
    options.scale = o.optionalNumber("scale");
    options.logits_soft_cap = o.optionalNumber("logits_soft_cap");
    const bool lse = o.boolean("lse", false);
    const ArgSpec &q = in.required(0), &vPages = in.required(2);
    return bind_paged_attention({q, in.required(1), vPages, in.required(3), in.required(4),
                                 paged_attention_out_spec(q, vPages),
                                 when(lse, paged_attention_lse_spec(q))},
                                options);
  }
  // The pages are the append's outputs (updated in place): their count and size are
  // options, the rest comes from k and v.
  const ArgSpec &k = in.required(0), &v = in.required(1);
  const std::optional<int64_t> pages = o.optionalInteger("num_pages"), size = o.optionalInteger("page_size");
  if (!pages || !size)
    throw Error(fmt::format("{}: options \"num_pages\" and \"page_size\" are required (the shape of k_pages and "
                            "v_pages, which the call updates in place)",
                            op.name()));
  auto pagesOf = [&](const ArgSpec &x) {
    return ArgSpec{{*pages, *size, x.shape.size() == 4 ? x.shape[2] : 0, x.shape.size() == 4 ? x.shape[3] : 0},
                   x.dtype};
  };
  return bind_paged_kv_append(k, v, in.required(2), in.required(3), pagesOf(k), pagesOf(v));
}

using Binder = std::function<BoundArgs(const Op &, const Inputs &, Options &)>;

const std::map<std::string, Binder> &binders() {
  static const std::map<std::string, Binder> table = {
      {"layer_norm", bindNorm},
      {"layer_norm_vjp", bindNorm},
      {"rms_norm", bindNorm},
      {"rms_norm_vjp", bindNorm},
      {"attention", bindAttention},
      {"attention_vjp", bindAttention},
      {"attention_varlen", bindAttentionVarlen},
      {"attention_varlen_vjp", bindAttentionVarlen},
      {"attention_fp8", bindAttentionFp8},
      {"gated_linear_unit", bindGlu},
      {"gated_linear_unit_vjp", bindGlu},
      {"ragged_dot", bindRaggedDot},
      {"ragged_dot_vjp", bindRaggedDot},
      {"linear_softmax_cross_entropy_loss", bindLinearCrossEntropy},
      {"linear_softmax_cross_entropy_loss_vjp", bindLinearCrossEntropy},
      {"softmax_cross_entropy", bindSoftmaxCrossEntropy},
      {"softmax_cross_entropy_vjp", bindSoftmaxCrossEntropy},
      {"paged_attention", bindPagedAttention},
      {"paged_kv_append", bindPagedAttention},
  };
  return table;
}

} // namespace

bool has_binder(const std::string &op) { return binders().count(op) != 0; }

void bind_call(tkx_call &call, std::span<const std::optional<ArgSpec>> inputs, const char *options_json) {
  const Op &op = *call.op;
  auto binder = binders().find(op.name());
  if (binder == binders().end())
    throw NotSupported(fmt::format("op \"{}\" has no C binding (a Function's glue op; the C ABI binds: {})", op.name(),
                                   fmt::join(std::views::keys(binders()), ", ")));
  Options options(op.name(), options_json);
  call.implementation = options.string("implementation");
  call.config = options.config();
  call.args = binder->second(op, Inputs(op, inputs), options);
  options.finish();
  if (call.implementation)
    op.implementation(*call.implementation);  // an unknown name is an error now, not at the first run
  call.json = call.args.to_json();
}

} // namespace tokamax::capi
