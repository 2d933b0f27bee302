//===- ArgsAdded.h - Reading calls bound before an op grew arguments -*- C++ -*-===//
//
// An op that gains optional arguments changes the length of its BoundArgs, which are
// the keys of autotuning results and the calls of Functions kept as JSON. The op
// registers where its new arguments sit; BoundArgs::from_json (and the Function JSON's
// slots) then read a call of the old length with those arguments absent, so results
// tuned and Functions saved before still match the calls bound now.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace tokamax::ops_detail {

/// Calls of `op` with `old_count` arguments gain absent arguments at `added` (ascending
/// positions in the op's current argument list).
void register_args_added(const std::string &op, size_t old_count, std::vector<size_t> added);

/// Where a call of `op` with `count` arguments gains absent ones (empty: none registered).
std::vector<size_t> args_added(const std::string &op, size_t count);

/// `values` with `absent` inserted at each position of `added` (ascending).
template <class T> void insert_added(std::vector<T> &values, const std::vector<size_t> &added, const T &absent) {
  for (size_t at : added)
    values.insert(values.begin() + static_cast<std::ptrdiff_t>(std::min(at, values.size())), absent);
}

} // namespace tokamax::ops_detail
