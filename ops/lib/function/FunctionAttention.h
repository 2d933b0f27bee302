//===- FunctionAttention.h - What grad reads back from a traced attention -*- C++ -*-===//
#pragma once

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/Function.h>

namespace tokamax {

/// The options a traced attention call (dense or packed) was bound with, its VJP's
/// "deterministic" included: what its VJP binds again (FunctionAttention.cpp).
AttentionOptions attention_options_of(const Function::Call &call);

} // namespace tokamax
