//===- BadInput.h - Helpers for the bad-input tests ----------------*- C++ -*-===//
//
// A bad call must throw tokamax::Error (NotSupported where that is the contract) whose
// message names the argument and what was expected. Refusals are listed as tables and
// checked by one function, so a case is one line: what is wrong, the call, the words.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Tensor.h>

#include <catch2/catch.hpp>

#include <cctype>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tokamax::bad_input {

struct Refusal {
  std::string what;                   ///< the mistake, shown when the case fails
  std::function<void()> call;
  std::vector<std::string> message;   ///< every one must appear in what()
  bool not_supported = false;         ///< the contract is NotSupported, not just Error
};

inline void check_refusals(const std::vector<Refusal> &cases) {
  for (const Refusal &c : cases) {
    INFO(c.what);
    CHECK_THROWS_AS(c.call(), Error);
    if (c.not_supported)
      CHECK_THROWS_AS(c.call(), NotSupported);
    for (const std::string &needle : c.message)
      CHECK_THROWS_WITH(c.call(), Catch::Contains(needle));
  }
}

/// Host memory for views of any dtype: doubles, so every element type is aligned.
class Arena {
public:
  explicit Arena(size_t elements = 4096) : data_(elements, 0.5) {}
  uint64_t address(size_t byteOffset = 0) const {
    return reinterpret_cast<uint64_t>(data_.data()) + byteOffset;
  }
  TensorView view(DType dtype, std::vector<int64_t> shape) const { return TensorView(address(), dtype, shape); }
  /// Rows twice as far apart as the shape needs: not contiguous.
  TensorView strided(DType dtype, std::vector<int64_t> shape) const {
    std::vector<int64_t> strides(shape.size(), 1);
    for (int i = int(shape.size()) - 2, s = 2 * int(shape.back()); i >= 0; s *= int(shape[i]), --i)
      strides[i] = s;
    return TensorView(address(), dtype, shape, strides);
  }
  const double &operator[](size_t i) const { return data_[i]; }

private:
  std::vector<double> data_;
};

/// A view with a null data pointer (a non-empty one is always a caller's bug).
inline TensorView null_view(DType dtype, std::vector<int64_t> shape) { return TensorView(0, dtype, shape); }

/// A view claiming to live on another device than the others of a call.
inline TensorView on_device(const TensorView &t, int device) {
  return TensorView(t.data(), t.dtype(), t.shape(), t.strides(), device);
}

/// Whether an error message has `name` as a word of its own (not inside a longer
/// identifier): `CHECK_THAT(message, NamesArgument("k"))`.
class NamesArgument : public Catch::MatcherBase<std::string> {
public:
  explicit NamesArgument(std::string name) : name_(std::move(name)) {}
  bool match(const std::string &message) const override {
    auto identifier = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t at = message.find(name_); at != std::string::npos; at = message.find(name_, at + 1))
      if ((at == 0 || !identifier(message[at - 1])) &&
          (at + name_.size() == message.size() || !identifier(message[at + name_.size()])))
        return true;
    return false;
  }
  std::string describe() const override { return "names the argument \"" + name_ + "\""; }

private:
  std::string name_;
};

} // namespace tokamax::bad_input
