//===- HostTile.cpp - Element conversions and host tiles of the interpreter --===//
#include "compiler/Interpreter/HostTile.h"

#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <limits>

namespace tokamax::interp {

using namespace mlir;

Kind kindOf(Type elem) {
  if (isa<tile::PointerType>(elem))
    return Kind::Ptr;
  if (isa<FloatType>(elem))
    return Kind::Float;
  if (isa<IntegerType, IndexType>(elem))
    return Kind::Int;
  throw Error("interpreter: unsupported element type " + typeName(elem));
}

unsigned intBits(Type elem) {
  if (isa<IndexType>(elem))
    return 64;
  if (auto it = dyn_cast<IntegerType>(elem))
    return it.getWidth();
  return 64;
}

int64_t wrapInt(unsigned bits, int64_t v) {
  if (bits >= 64)
    return v;
  if (bits == 1)
    return v & 1;
  uint64_t mask = (uint64_t(1) << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (u >> (bits - 1))
    u |= ~mask;
  return static_cast<int64_t>(u);
}

int64_t asSigned(unsigned bits, int64_t v) { return bits == 1 ? -(v & 1) : v; }

uint64_t asUnsigned(unsigned bits, int64_t v) {
  if (bits >= 64)
    return static_cast<uint64_t>(v);
  return static_cast<uint64_t>(v) & ((uint64_t(1) << bits) - 1);
}

static DType dtypeOf(Type elem) {
  if (auto d = tile::fromMlirType(elem))
    return *d;
  throw Error("interpreter: unsupported element type " + typeName(elem));
}

double castFloat(Type elem, double x) {
  if (elem.isF64())
    return x;
  if (elem.isF32())
    return static_cast<double>(static_cast<float>(x));
  DType d = dtypeOf(elem);
  alignas(8) unsigned char buf[8];
  store_from_double(d, buf, x);
  return load_as_double(d, buf);
}

double roundFloat(Type elem, double x) {
  if (elem.isF64())
    return x;
  double f = static_cast<double>(static_cast<float>(x));
  return elem.isF32() ? f : castFloat(elem, f);
}

int64_t floatToInt(unsigned bits, double x) {
  if (bits == 1)
    return x != 0 ? 1 : 0;
  if (std::isnan(x))
    return 0;
  if (bits >= 64) {
    if (x >= 9223372036854775808.0)
      return std::numeric_limits<int64_t>::max();
    if (x <= -9223372036854775808.0)
      return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(x);
  }
  double hi = std::ldexp(1.0, static_cast<int>(bits) - 1);
  if (x >= hi)
    return static_cast<int64_t>(hi) - 1;
  if (x <= -hi)
    return -static_cast<int64_t>(hi);
  return static_cast<int64_t>(x);
}

std::string typeName(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

std::vector<int64_t> shapeOf(Type type) {
  if (auto t = dyn_cast<RankedTensorType>(type))
    return std::vector<int64_t>(t.getShape().begin(), t.getShape().end());
  return {};
}

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

HostTile HostTile::make(Type elem, std::vector<int64_t> shape) {
  HostTile t;
  t.elem = elem;
  t.kind = kindOf(elem);
  t.shape = std::move(shape);
  size_t n = t.numel();
  switch (t.kind) {
  case Kind::Float: t.f.assign(n, 0.0); break;
  case Kind::Int: t.i.assign(n, 0); break;
  case Kind::Ptr:
    t.i.assign(n, 0);
    t.arg.assign(n, 0);
    break;
  }
  return t;
}

HostTile HostTile::of(Type type) { return make(getElementTypeOrSelf(type), shapeOf(type)); }

size_t HostTile::numel() const {
  size_t n = 1;
  for (int64_t d : shape)
    n *= static_cast<size_t>(d);
  return n;
}

double HostTile::asDouble(size_t k) const {
  switch (kind) {
  case Kind::Float: return f[k];
  case Kind::Int: return static_cast<double>(i[k]);
  case Kind::Ptr: break;
  }
  throw Error("interpreter: a pointer is used as a number");
}

int64_t HostTile::asInt(size_t k) const {
  switch (kind) {
  case Kind::Float: return floatToInt(64, f[k]);
  case Kind::Int: return i[k];
  case Kind::Ptr: break;
  }
  throw Error("interpreter: a pointer is used as a number");
}

void HostTile::copyElem(size_t to, const HostTile &src, size_t from) {
  switch (kind) {
  case Kind::Float: f[to] = src.f[from]; break;
  case Kind::Int: i[to] = src.i[from]; break;
  case Kind::Ptr:
    i[to] = src.i[from];
    arg[to] = src.arg[from];
    break;
  }
}

void HostTile::setFromDouble(size_t k, double v) {
  switch (kind) {
  case Kind::Float: f[k] = castFloat(elem, v); break;
  case Kind::Int: i[k] = floatToInt(bits(), v); break;
  case Kind::Ptr: throw Error("interpreter: cannot set a pointer from a number");
  }
}

} // namespace tokamax::interp
