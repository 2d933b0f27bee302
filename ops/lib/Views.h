//===- Views.h - Checking an op call's tensors against its binding -*- C++ -*-===//
#pragma once

#include <tokamax/ops/Op.h>

#include <span>
#include <string>
#include <vector>

namespace tokamax::ops_detail {

/// The views of a call (inputs then outputs, in `names` order) must match the bound
/// specs, since a generic Op::run / Op::interpret caller may pass anything: absent where
/// bound absent, the bound dtype and shape, contiguous, with data (no null pointer for a
/// non-empty tensor), and on the device tensors on one device (`host`: host views).
/// Throws Error naming the argument; nothing is launched before it returns.
void check_views(const BoundArgs &args, const std::vector<std::string> &names, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs, bool host);

} // namespace tokamax::ops_detail
