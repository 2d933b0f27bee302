//===- DslTests.cpp - DSL misuse diagnostics and deterministic IR ---------===//
//
// Every misuse of the DSL throws tokamax::Error at the offending call, and the message
// names the operation and the offending shapes or dtypes. The IR a kernel prints is a
// pure function of the calls that built it.
//
//===----------------------------------------------------------------------===//
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Elementwise.h>
#include <tokamax/ops/Softmax.h>
#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace tokamax;
using namespace tokamax::dsl;
using Catch::Contains;

namespace {

/// A kernel with a bf16 input x [64, 256], an f32 input w [64, 256], a bf16 output y
/// [64, 256], and tiles loaded from them.
struct Fixture {
  Kernel k{"k"};
  TensorArg x = k.input("x", DType::BF16, {64, 256});
  TensorArg w = k.input("w", DType::F32, {64, 256});
  TensorArg y = k.output("y", DType::BF16, {64, 256});
  Value row = k.program_id(0) * 4;
  Value xb = x.load({row, 0}, {4, 256});        // bf16 [4, 256]
  Value wf = w.load({row, 0}, {4, 256});        // f32 [4, 256]
  Value xf = xb.to(DType::F32);                 // f32 [4, 256]
};

int countOf(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1))
    ++n;
  return n;
}

} // namespace

//===----------------------------------------------------------------------===//
// Arithmetic: dtypes, shapes, literals
//===----------------------------------------------------------------------===//

TEST_CASE("arithmetic on different dtypes names the op and both dtypes", "[dsl]") {
  Fixture f;
  CHECK_THROWS_AS(f.xb + f.wf, Error);
  CHECK_THROWS_WITH(f.xb + f.wf, Contains("+: operand dtypes bf16 and f32 differ") &&
                                     Contains("cast one with .to()"));
  CHECK_THROWS_WITH(f.wf * f.xb, Contains("*: operand dtypes f32 and bf16 differ"));
  CHECK_THROWS_WITH(f.xb - f.wf, Contains("-: operand dtypes bf16 and f32"));
  CHECK_THROWS_WITH(f.xb / f.wf, Contains("/: operand dtypes bf16 and f32"));
  CHECK_THROWS_WITH(maximum(f.xb, f.wf), Contains("maximum: operand dtypes bf16 and f32"));
  CHECK_THROWS_WITH(f.xb < f.wf, Contains("<: operand dtypes bf16 and f32"));
  // A scalar of another dtype is no different.
  Value s = f.k.scalar("s", DType::F64);
  CHECK_THROWS_WITH(f.xf * s, Contains("*: operand dtypes f32 and f64 differ"));
  // Once cast, it works.
  Value ok = f.xb.to(DType::F32) + f.wf;
  CHECK(ok.dtype() == DType::F32);
  CHECK(ok.shape() == std::vector<int64_t>{4, 256});
}

TEST_CASE("unbroadcastable shapes name the op and both shapes", "[dsl]") {
  Fixture f;
  Value narrow = f.w.load({f.row, 0}, {4, 128});
  CHECK_THROWS_AS(f.wf + narrow, Error);
  CHECK_THROWS_WITH(f.wf + narrow, Contains("+: shapes [4, 256] and [4, 128] cannot be broadcast"));
  Value rows = f.w.load({f.row, 0}, {8, 256});
  CHECK_THROWS_WITH(f.wf * rows, Contains("*: shapes [4, 256] and [8, 256] cannot be broadcast"));
  Value row1d = f.wf.sum(0);  // [256]
  CHECK_THROWS_WITH(f.wf - row1d, Contains("-: shapes [4, 256] and [256] have different ranks"));
  CHECK_THROWS_WITH(f.wf.broadcast_to({8, 256}),
                    Contains("broadcast_to: cannot broadcast [4, 256] to [8, 256]"));
  CHECK_THROWS_WITH(f.wf.broadcast_to({4, 300}),
                    Contains("broadcast_to: tile dimensions must be powers of two, got [4, 300]"));
  // Unit dimensions and scalars do broadcast.
  Value col = f.wf.max(1).expand(1);  // [4, 1]
  CHECK((f.wf - col).shape() == std::vector<int64_t>{4, 256});
  CHECK((col + f.wf.sum(0).expand(0)).shape() == std::vector<int64_t>{4, 256});
  CHECK((f.wf * f.k.scalar("t", DType::F32)).shape() == std::vector<int64_t>{4, 256});
  CHECK((f.wf * 2.0).dtype() == DType::F32);
}

TEST_CASE("expressions of literals only are rejected", "[dsl]") {
  Fixture f;
  CHECK_THROWS_AS(Value(1) + Value(2), Error);
  CHECK_THROWS_WITH(Value(1) + Value(2.5),
                    Contains("+: every operand is a literal") && Contains("k.constant"));
  CHECK_THROWS_WITH(Value(3.0) * Value(2.0), Contains("*: every operand is a literal"));
  CHECK_THROWS_WITH(-Value(1.0), Contains("-: every operand is a literal"));
  CHECK_THROWS_WITH(exp(Value(1.0)), Contains("exp: every operand is a literal"));
  CHECK_THROWS_WITH(maximum(Value(1.0), Value(2.0)), Contains("maximum: every operand is a literal"));
  CHECK_THROWS_WITH(where(Value(1), Value(1.0), Value(2.0)), Contains("where: every operand is a literal"));
  CHECK_THROWS_WITH(Value(2.0).to(DType::F32), Contains("to: every operand is a literal"));
  CHECK_THROWS_WITH(Value(2.0).sum(0), Contains("sum: every operand is a literal"));
  // With a kernel value on either side, literals take its dtype.
  CHECK((Value(1.0) + f.xf).dtype() == DType::F32);
  CHECK((f.k.constant(1.0, DType::F16) * 3).dtype() == DType::F16);
}

TEST_CASE("values of one kernel cannot be used in another", "[dsl]") {
  Fixture f;
  Kernel other("other");
  Value v = other.constant(1.0, DType::F32);
  CHECK_THROWS_WITH(f.xf + v, Contains("kernel k: a value of another kernel was used"));
}

//===----------------------------------------------------------------------===//
// Math, fp8
//===----------------------------------------------------------------------===//

TEST_CASE("math on integer tiles names the function and the dtype", "[dsl]") {
  Fixture f;
  Value i = f.k.arange(0, 256);
  CHECK_THROWS_AS(exp(i), Error);
  CHECK_THROWS_WITH(exp(i), Contains("exp: needs a floating-point operand, got i32"));
  CHECK_THROWS_WITH(log(i), Contains("log: needs a floating-point operand, got i32"));
  CHECK_THROWS_WITH(sqrt(i), Contains("sqrt: needs a floating-point operand, got i32"));
  CHECK_THROWS_WITH(rsqrt(i), Contains("rsqrt: needs a floating-point operand"));
  CHECK_THROWS_WITH(tanh(i), Contains("tanh: needs a floating-point operand"));
  CHECK_THROWS_WITH(erf(i), Contains("erf: needs a floating-point operand"));
  CHECK_THROWS_WITH(exp2(f.k.scalar("n", DType::I64)), Contains("exp2: needs a floating-point operand, got i64"));
  CHECK_THROWS_WITH(abs(i.to(DType::I8)), Contains("abs: needs a floating-point operand, got i8"));
  // Bitwise operators are the converse.
  CHECK_THROWS_WITH(f.xf & f.xf, Contains("&: needs bool or integer operands"));
  CHECK_THROWS_WITH(f.xf | f.xf, Contains("|: needs bool or integer operands"));
  CHECK((i & 7).dtype() == DType::I32);
  CHECK(exp(i.to(DType::F32)).dtype() == DType::F32);
}

TEST_CASE("exp2 with a share on the FMA pipes checks its tile and its share", "[dsl]") {
  Fixture f;
  CHECK_THROWS_WITH(exp2(f.xb, 1, 8), Contains("exp2 with a share on the FMA pipes: needs an f32 tile, got a tile of "
                                               "bf16"));
  CHECK_THROWS_WITH(exp2(f.k.scalar("s", DType::F32), 1, 8), Contains("needs an f32 tile, got a scalar of f32"));
  CHECK_THROWS_WITH(exp2(f.xf, 5, 4), Contains("exp2: fma_count 5 of every fma_period 4 registers"));
  CHECK_THROWS_WITH(exp2(f.xf, 1, 0), Contains("need 1 <= fma_period <= 64"));
  CHECK_THROWS_WITH(exp2(f.xf, -1, 8), Contains("0 <= fma_count <= fma_period"));
  // A share of 0 is plain exp2; any other is tile.exp2.
  CHECK(countOf(f.k.ir(), "tile.exp2 ") == 0);
  exp2(f.xf, 0, 8);
  CHECK(countOf(f.k.ir(), "tile.exp2 ") == 0);
  CHECK(exp2(f.xf, 3, 8).dtype() == DType::F32);
  CHECK(countOf(f.k.ir(), "tile.exp2 ") == 1);
}

TEST_CASE("fp8 tiles hold data only", "[dsl]") {
  for (DType fp8 : {DType::F8E4M3, DType::F8E5M2}) {
    INFO(dtype_name(fp8));
    Kernel k("fp8");
    TensorArg q = k.input("q", fp8, {1024});
    Value t = q.load({0}, {1024});
    CHECK(t.dtype() == fp8);
    CHECK_THROWS_AS(t + t, Error);
    CHECK_THROWS_WITH(t + t, Contains("+: fp8 tiles hold data only; cast to f32 with .to() first"));
    CHECK_THROWS_WITH(t * 2.0, Contains("*: fp8 tiles hold data only"));
    CHECK_THROWS_WITH(t < t, Contains("<: fp8 tiles hold data only"));
    CHECK_THROWS_WITH(exp(t), Contains("exp: fp8 tiles hold data only"));
    CHECK_THROWS_WITH(t.sum(0), Contains("sum: fp8 tiles hold data only"));
    CHECK_THROWS_WITH(t.max(0), Contains("max: fp8 tiles hold data only"));
    CHECK_THROWS_WITH(-t, Contains("-: fp8 tiles hold data only"));
    // Casting is the supported path, both ways.
    Value wide = t.to(DType::F32) * 2.0;
    CHECK(wide.to(fp8).dtype() == fp8);
  }
}

//===----------------------------------------------------------------------===//
// Block loads and stores
//===----------------------------------------------------------------------===//

TEST_CASE("block loads need power-of-two blocks of the tensor's rank", "[dsl]") {
  Fixture f;
  CHECK_THROWS_AS(f.x.load({0, 0}, {4, 100}), Error);
  CHECK_THROWS_WITH(f.x.load({0, 0}, {4, 100}),
                    Contains("load x: block dimensions must be powers of two, got [4, 100]"));
  CHECK_THROWS_WITH(f.x.load({0, 0}, {3, 256}),
                    Contains("load x: block dimensions must be powers of two, got [3, 256]"));
  CHECK_THROWS_WITH(f.x.load({0, 0}, {0, 256}), Contains("load x: block dimensions must be powers of two"));
  CHECK_THROWS_WITH(f.x.load({0}, {256}), Contains("load x: block [256] must have the tensor's rank 2"));
  CHECK_THROWS_WITH(f.k.arange(0, 100), Contains("arange(0, 100): the length must be a power of two"));
  CHECK_THROWS_WITH(f.k.full({3, 4}, 0.0, DType::F32),
                    Contains("full: tile dimensions must be powers of two, got [3, 4]"));
  CHECK_THROWS_WITH(f.wf.reshape({3, 4}), Contains("reshape: tile dimensions must be powers of two, got [3, 4]"));
}

TEST_CASE("asynchronous copies check their block, dtype, buffer and slot", "[dsl]") {
  Kernel k("async");
  auto x = k.input("x", DType::BF16, {4, 100, 64});
  auto odd = k.input("odd", DType::BF16, {100, 30});
  auto bytes = k.input("bytes", DType::I8, {100, 64});
  dsl::SharedBuffer ring = k.shared_buffer(2);
  Value slot = k.constant(0, DType::I32);
  CHECK_NOTHROW(x.load_async({0, 0, 0}, {1, 32, 64}, ring, slot));
  CHECK_THROWS_WITH(x.load_async({0, 0, 0}, {2, 32, 64}, ring, slot),
                    Contains("load_async x: the block [2, 32, 64] must have at most two non-unit dims"));
  CHECK_THROWS_WITH(x.load_async({0, 0, 0}, {1, 64, 1}, ring, slot), Contains("the last one of them"));
  CHECK_THROWS_WITH(x.load_async({0, 0, 0}, {1, 24, 64}, ring, slot),
                    Contains("load_async x: block dimensions must be powers of two"));
  CHECK_THROWS_WITH(x.load_async({0, 0}, {1, 32, 64}, ring, slot),
                    Contains("load_async x: needs 3 offsets (one per dimension), got 2"));
  CHECK_THROWS_WITH(odd.load_async({0, 0}, {32, 32}, ring, slot),
                    Contains("load_async odd: the block's and the tensor's last dims must be multiples of 8 "
                             "(16 bytes), got 32 and 30"));
  CHECK_THROWS_WITH(bytes.load_async({0, 0}, {32, 64}, ring, slot),
                    Contains("load_async bytes: copies fp8, 16- or 32-bit elements, got i8"));
  CHECK_THROWS_WITH(x.load_async({0, 0, 0}, {1, 32, 64}, dsl::SharedBuffer{}, slot),
                    Contains("load_async x: the buffer does not come from this kernel's shared_buffer()"));
  CHECK_THROWS_WITH(x.load_async({0, 0, 0}, {1, 32, 64}, ring, k.constant(0, DType::F32)),
                    Contains("load_async: expected an i32 scalar, got f32 scalar"));
  CHECK_THROWS_WITH(k.shared_buffer(0), Contains("shared_buffer needs 1 to 8 slots, got 0"));
  CHECK_THROWS_WITH(k.wait_async(-1), Contains("wait_async takes 0 to 7 pending copies, got -1"));
}

TEST_CASE("block accesses need one i32 offset per dimension", "[dsl]") {
  Fixture f;
  CHECK_THROWS_AS(f.x.load({0}, {4, 256}), Error);
  CHECK_THROWS_WITH(f.x.load({0}, {4, 256}), Contains("load x: needs 2 offsets (one per dimension), got 1"));
  CHECK_THROWS_WITH(f.x.load({0, 0, 0}, {4, 256}),
                    Contains("load x: needs 2 offsets (one per dimension), got 3"));
  CHECK_THROWS_WITH(f.y.store({0}, f.xb), Contains("store y: needs 2 offsets (one per dimension), got 1"));
  CHECK_THROWS_WITH(f.y.store({0, 0, 0}, f.xb),
                    Contains("store y: needs 2 offsets (one per dimension), got 3"));
  // Offsets are i32 scalars.
  Value fs = f.k.scalar("fs", DType::F32);
  CHECK_THROWS_WITH(f.x.load({fs, 0}, {4, 256}), Contains("load: expected an i32 scalar, got f32 scalar"));
  CHECK_THROWS_WITH(f.x.load({f.k.arange(0, 4), 0}, {4, 256}),
                    Contains("load: expected an i32 scalar, got i32 [4]"));
  CHECK_THROWS_WITH(f.y.store({f.k.scalar("l", DType::I64), 0}, f.xb),
                    Contains("store: expected an i32 scalar, got i64 scalar"));
}

TEST_CASE("stores need the tensor's dtype and rank", "[dsl]") {
  Fixture f;
  CHECK_THROWS_AS(f.y.store({f.row, 0}, f.xf), Error);
  CHECK_THROWS_WITH(f.y.store({f.row, 0}, f.xf),
                    Contains("store y: tile dtype f32 does not match the tensor dtype bf16") &&
                        Contains("cast with .to()"));
  CHECK_THROWS_WITH(f.y.store({f.row, 0}, f.k.arange(0, 256).expand(0)),
                    Contains("store y: tile dtype i32 does not match the tensor dtype bf16"));
  CHECK_THROWS_WITH(f.y.store({f.row, 0}, f.xb.sum(0).to(DType::BF16)),
                    Contains("store y: needs a tile of rank 2, got [256]"));
  CHECK_THROWS_WITH(f.y.store({f.row, 0}, f.k.scalar("b", DType::BF16)),
                    Contains("store y: needs a tile of rank 2, got scalar"));
  // Pointer-tile stores name the pointee.
  Value ptrs = f.y.ptr() + f.k.arange(0, 256);
  CHECK_THROWS_WITH(store(ptrs, f.xf.sum(0)),
                    Contains("store: value dtype f32 does not match the pointee dtype bf16"));
  CHECK_THROWS_WITH(load(f.xf), Contains("load: needs a tile of pointers (x.ptr() + offsets), got f32 [4, 256]"));
  CHECK_THROWS_WITH(f.y.ptr() + f.k.scalar("o", DType::F32),
                    Contains("pointer + offset: offsets must be i32 or i64, got f32"));
  CHECK_THROWS_WITH(f.y.ptr().to(DType::F32), Contains("to: pointers cannot be cast"));
  // A literal takes the tensor's dtype.
  f.y.store({f.row, 0}, f.k.full({4, 256}, 1.0, DType::BF16));
  store(ptrs, 0.5);
}

TEST_CASE("store_below drops the rows at or past a run-time limit", "[dsl]") {
  // y [6, 8] = x's rows 1.. below `limit` (an i32 parameter), from row offset 1: rows 1
  // to limit - 1 are written, the rest keep their -1; a limit past the tensor changes
  // nothing the bounds do not.
  Kernel k{"store_below"};
  TensorArg x = k.input("x", DType::F32, {6, 8});
  TensorArg y = k.output("y", DType::F32, {6, 8});
  Value limit = k.scalar("limit", DType::I32);
  y.store_below({1, 0}, x.load({1, 0}, {8, 8}), 0, limit);
  for (int32_t bound : {0, 3, 6, 100}) {
    std::vector<float> memory(48), out(48, -1.0f);
    for (size_t i = 0; i < memory.size(); ++i)
      memory[i] = float(i);
    const std::vector<int64_t> shape{6, 8};
    std::vector<HostArg> args{HostArg::tensor(memory.data(), memory.size() * 4, shape),
                              HostArg::tensor(out.data(), out.size() * 4, shape), HostArg::value(double(bound))};
    tokamax::interpret(k, args);
    for (int i = 0; i < 6; ++i) {
      INFO("limit " << bound << ", row " << i);
      const bool written = i >= 1 && i < bound;
      CHECK(out[size_t(i * 8)] == (written ? memory[size_t(i * 8)] : -1.0f));
      CHECK(out[size_t(i * 8 + 7)] == (written ? memory[size_t(i * 8 + 7)] : -1.0f));
    }
  }
  CHECK_THAT(k.ir(), Contains("below"));
  Kernel bad{"bad"};
  TensorArg z = bad.output("z", DType::F32, {6, 8});
  CHECK_THROWS_WITH(z.store_below({0, 0}, bad.full({8, 8}, 0.0, DType::F32), 1, bad.scalar("l", DType::I32)),
                    Contains("store_below z: dim must be a dimension before the last, got 1 of 2"));
}

TEST_CASE("atomics support f32, f64, i32 and i64", "[dsl]") {
  Fixture f;
  Value ptrs = f.x.ptr() + f.k.arange(0, 256);
  Value v = f.xb.sum(0);
  CHECK_THROWS_WITH(atomic_add(ptrs, v), Contains("atomic_add: supports f32, f64, i32 and i64, got bf16"));
  Value wptrs = f.w.ptr() + f.k.arange(0, 256);
  CHECK_THROWS_WITH(atomic_max(wptrs, v), Contains("atomic_max: value dtype bf16 does not match the pointee dtype f32"));
  CHECK_THROWS_WITH(atomic_cas(wptrs, 0, 1), Contains("atomic_cas: supports i32 and i64 tensors, got f32"));
  CHECK(atomic_add(wptrs, 1.0).dtype() == DType::F32);
}

//===----------------------------------------------------------------------===//
// Reductions and shapes
//===----------------------------------------------------------------------===//

TEST_CASE("reductions name the axis and the shape when the axis is out of range", "[dsl]") {
  Fixture f;
  CHECK_THROWS_AS(f.xf.sum(2), Error);
  CHECK_THROWS_WITH(f.xf.sum(2), Contains("sum: axis 2 is out of range for shape [4, 256]"));
  CHECK_THROWS_WITH(f.xf.max(7), Contains("max: axis 7 is out of range for shape [4, 256]"));
  CHECK_THROWS_WITH(f.xf.min(2), Contains("min: axis 2 is out of range"));
  CHECK_THROWS_WITH(f.xf.argmax(5), Contains("argmax: axis 5 is out of range"));
  CHECK_THROWS_WITH(f.k.scalar("z", DType::F32).sum(0), Contains("sum: needs a tile, got a scalar"));
  CHECK_THROWS_WITH(f.xf.expand(3), Contains("expand: axis 3 is out of range for shape [4, 256]"));
  CHECK_THROWS_WITH(f.xf.reshape({512}), Contains("reshape: cannot reshape [4, 256] to [512]"));
  CHECK_THROWS_WITH(f.xf.trans({0, 0}), Contains("trans: order [0, 0] is not a permutation"));
  CHECK_THROWS_WITH(f.xf.trans({1, 0, 2}), Contains("trans: order [1, 0, 2] does not match shape [4, 256]"));
  // Negative axes count from the end.
  CHECK(f.xf.sum(-1).shape() == std::vector<int64_t>{4});
  CHECK(f.xf.sum(-2).shape() == std::vector<int64_t>{256});
  CHECK(f.xf.argmax(1).dtype() == DType::I32);
  CHECK(f.xf.sum(0).sum(0).shape().empty());
  CHECK(f.xf.max(1).expand(-1).shape() == std::vector<int64_t>{4, 1});
}

TEST_CASE("an out-of-range negative axis is reported as passed", "[dsl]") {
  Fixture f;
  CHECK_THROWS_WITH(f.xf.sum(-3), Contains("sum: axis -3 is out of range for shape [4, 256]"));
  CHECK_THROWS_WITH(f.xf.expand(-4), Contains("expand: axis -4 is out of range for shape [4, 256]"));
}

TEST_CASE("dot checks its operand shapes and dtypes", "[dsl]") {
  Kernel k("mm");
  TensorArg a = k.input("a", DType::BF16, {64, 64});
  TensorArg b = k.input("b", DType::F16, {64, 64});
  Value ta = a.load({0, 0}, {16, 32});
  Value tb = a.load({0, 0}, {16, 16});
  CHECK_THROWS_WITH(dot(ta, tb, 0.0), Contains("dot: needs 2-D tiles [M, K] @ [K, N], got [16, 32] @ [16, 16]"));
  CHECK_THROWS_WITH(dot(tb, b.load({0, 0}, {16, 16}), 0.0), Contains("dot: a and b dtypes differ (bf16 and f16)"));
  Value acc = k.full({16, 32}, 0.0, DType::F32);
  CHECK_THROWS_WITH(dot(tb, tb, acc), Contains("dot: the accumulator must be f32 [16, 16], got f32 [16, 32]"));
  CHECK(dot(ta, a.load({0, 0}, {32, 16}), 0.0).shape() == std::vector<int64_t>{16, 16});
}

//===----------------------------------------------------------------------===//
// Kernels, parameters, control flow
//===----------------------------------------------------------------------===//

TEST_CASE("parameter names are unique C identifiers", "[dsl]") {
  Kernel k("params");
  k.input("x", DType::F32, {16});
  CHECK_THROWS_AS(k.input("x", DType::F32, {16}), Error);
  CHECK_THROWS_WITH(k.input("x", DType::F32, {16}), Contains("kernel params: parameter 'x' is declared twice"));
  CHECK_THROWS_WITH(k.output("x", DType::BF16, {16}), Contains("parameter 'x' is declared twice"));
  CHECK_THROWS_WITH(k.scalar("x", DType::I32), Contains("parameter 'x' is declared twice"));
  CHECK_THROWS_WITH(k.input("my-x", DType::F32, {16}), Contains("parameter name 'my-x' must be a C identifier"));
  CHECK_THROWS_WITH(k.scalar("1n", DType::I32), Contains("parameter name '1n' must be a C identifier"));
  CHECK_THROWS_WITH(k.input("e", DType::F32, {}), Contains("kernel params: tensor 'e' needs at least one dimension"));
  CHECK_THROWS_WITH(k.input("big", DType::F32, {int64_t(1) << 31}),
                    Contains("kernel params: tensor 'big' has dimension 2147483648 outside [0, 2^31)"));
  CHECK_THROWS_WITH(Kernel("my kernel"), Contains("kernel name 'my kernel' must be a C identifier"));
  // The failed declarations added nothing: a new name is still free.
  k.scalar("n", DType::I32);
  CHECK(countOf(k.ir(), "tile.name = \"x\"") == 1);
}

TEST_CASE("num_warps must be a power of two in [1, 32]", "[dsl]") {
  for (int warps : {0, -1, 3, 6, 64}) {
    INFO("num_warps = " << warps);
    CHECK_THROWS_AS(Kernel("k", KernelOptions{warps}), Error);
    CHECK_THROWS_WITH(Kernel("k", KernelOptions{warps}),
                      Contains("kernel k: num_warps must be a power of two in [1, 32], got " +
                               std::to_string(warps)));
  }
  for (int warps : {1, 2, 4, 8, 16, 32}) {
    Kernel k("k", KernelOptions{warps});
    CHECK(k.num_warps() == warps);
    CHECK_THAT(k.ir(), Contains("tile.num_warps = " + std::to_string(warps) + " : i32"));
  }
}

TEST_CASE("blocks_per_sm is 1, 2 or 4 and reaches the kernel's IR where not 1", "[dsl]") {
  for (int blocks : {0, 3, 8, -1})
    CHECK_THROWS_WITH(Kernel("k", KernelOptions{.blocks_per_sm = blocks}),
                      Contains("kernel k: blocks_per_sm must be 1, 2 or 4, got " + std::to_string(blocks)));
  CHECK_THAT(Kernel("k", KernelOptions{.blocks_per_sm = 2}).ir(), Contains("tile.blocks_per_sm = 2 : i32"));
  CHECK_THAT(Kernel("k", KernelOptions{}).ir(), !Contains("tile.blocks_per_sm"));
}

TEST_CASE("a specialized loop's producer register limit is a multiple of 8 from 24", "[dsl]") {
  for (int registers : {0, 16, 30, 264}) {
    INFO("producer_registers = " << registers);
    CHECK_THROWS_WITH(Kernel("k", KernelOptions{.num_warps = 8, .producer_registers = registers}),
                      Contains("kernel k: producer_registers must be a multiple of 8 in [24, 256], got " +
                               std::to_string(registers)));
  }
  CHECK_THAT(Kernel("k", KernelOptions{.num_warps = 8, .producer_registers = 40}).ir(),
             Contains("tile.producer_registers = 40 : i32"));
  CHECK_THAT(Kernel("k", KernelOptions{.num_warps = 8}).ir(), !Contains("tile.producer_registers"));
}

TEST_CASE("grid and program ids are range-checked", "[dsl]") {
  Kernel k("g");
  CHECK_THROWS_WITH(k.grid(0), Contains("kernel g: grid (0, 1, 1) must be positive and below 2^31"));
  CHECK_THROWS_WITH(k.grid(1, int64_t(1) << 31), Contains("must be positive and below 2^31"));
  CHECK_THROWS_WITH(k.grid(1, 70000), Contains("kernel g: grid y and z are limited to 65535, got (1, 70000, 1)"));
  CHECK_THROWS_WITH(k.program_id(3), Contains("program_id: axis must be 0, 1 or 2, got 3"));
  CHECK_THROWS_WITH(k.num_programs(-1), Contains("num_programs: axis must be 0, 1 or 2, got -1"));
  k.grid(7, 3, 2);
  CHECK(k.grid_size() == std::vector<int64_t>{7, 3, 2});
  CHECK_THAT(k.ir(), Contains("tile.grid = array<i64: 7, 3, 2>"));
}

TEST_CASE("loops and branches check the values they carry", "[dsl]") {
  Fixture f;
  Value acc = f.k.full({4, 256}, 0.0, DType::F32);
  CHECK_THROWS_WITH(f.k.loop(0, 8, 1, {acc}, [&](Value, std::vector<Value> c) { return std::vector<Value>{c[0].to(DType::BF16)}; }),
                    Contains("loop: carried value 0 enters as f32 [4, 256] but the body returns bf16 [4, 256]"));
  CHECK_THROWS_WITH(f.k.loop(0, 8, 1, {Value(0.0)}, [&](Value, std::vector<Value> c) { return c; }),
                    Contains("loop: carried values must be kernel values, not literals"));
  CHECK_THROWS_WITH(f.k.loop(0, f.k.scalar("hi", DType::F32), 1, {}, [&](Value, std::vector<Value>) { return std::vector<Value>{}; }),
                    Contains("loop upper bound: expected an i32 scalar, got f32 scalar"));
  Value c = f.k.scalar("c", DType::I32);
  CHECK_THROWS_WITH(f.k.if_else(c, [&] { return std::vector<Value>{f.xf}; }, [&] { return std::vector<Value>{f.xf}; }),
                    Contains("if_else: the condition must be a bool scalar, got i32 scalar"));
  Value cond = c > 0;
  CHECK_THROWS_WITH(f.k.if_else(cond, [&] { return std::vector<Value>{f.xf}; }, [&] { return std::vector<Value>{f.xb}; }),
                    Contains("if_else: value 0 is f32 [4, 256] in one branch and bf16 [4, 256] in the other"));
  CHECK_THROWS_WITH(where(f.xf, f.xf, f.xf), Contains("where: the condition must be bool, got f32"));
}

TEST_CASE("a misuse inside a loop body leaves the kernel usable", "[dsl]") {
  Fixture f;
  Value acc = f.k.full({4, 256}, 0.0, DType::F32);
  CHECK_THROWS_AS(f.k.loop(0, 8, 1, {acc}, [&](Value, std::vector<Value> c) { return std::vector<Value>{c[0] + f.xb}; }),
                  Error);
  f.y.store({f.row, 0}, f.xb);
  std::string ir;
  REQUIRE_NOTHROW(ir = f.k.ir());
  CHECK(countOf(ir, "scf.for") == 0);
}

TEST_CASE("a caught misuse leaves the kernel usable", "[dsl]") {
  Fixture f;
  CHECK_THROWS_AS(f.xb + f.wf, Error);
  CHECK_THROWS_AS(f.x.load({0}, {4, 256}), Error);
  CHECK_THROWS_AS(f.y.store({f.row, 0}, f.xf), Error);
  f.y.store({f.row, 0}, (f.xf * 2.0).to(DType::BF16));
  std::string ir;
  REQUIRE_NOTHROW(ir = f.k.ir());
  CHECK(countOf(ir, "tile.block_store") == 1);
}

//===----------------------------------------------------------------------===//
// Deterministic IR
//===----------------------------------------------------------------------===//

namespace {
Kernel buildScale(int64_t block, int warps, DType dtype) {
  Kernel k("scale", KernelOptions{warps});
  TensorArg x = k.input("x", dtype, {1 << 20});
  TensorArg y = k.output("y", dtype, {1 << 20});
  Value s = k.scalar("s", DType::F32);
  k.grid(cdiv(1 << 20, block));
  Value off = k.program_id(0) * Value(block);
  Value t = x.load({off}, {block}).to(DType::F32);
  Value r = k.loop(0, 4, 1, {t}, [&](Value, std::vector<Value> c) { return std::vector<Value>{c[0] * s + 1.0}; })[0];
  y.store({off}, where(r > 0.0, r, -r).to(dtype));
  return k;
}
} // namespace

TEST_CASE("the same kernel built twice prints identical IR", "[dsl]") {
  std::string a = buildScale(1024, 4, DType::BF16).ir();
  std::string b = buildScale(1024, 4, DType::BF16).ir();
  CHECK(a == b);
  // Printing is repeatable too.
  Kernel k = buildScale(1024, 4, DType::BF16);
  CHECK(k.ir() == k.ir());
  CHECK(k.ir() == a);
  // Interleaved construction of two kernels does not change either.
  Kernel k1("scale", KernelOptions{4});
  Kernel k2("scale", KernelOptions{4});
  for (Kernel *kk : {&k1, &k2}) {
    kk->input("x", DType::BF16, {1 << 20});
  }
  CHECK(k1.ir() == k2.ir());

  // The library's kernels.
  SoftmaxSpec spec{4096, 1000, DType::BF16};
  CHECK(softmax_kernel(spec, default_config(spec)).ir() == softmax_kernel(spec, default_config(spec)).ir());
  ElementwiseSpec es{(int64_t(1) << 24) + 17, DType::F32};
  CHECK(gelu_kernel(es, default_config(es)).ir() == gelu_kernel(es, default_config(es)).ir());
}

TEST_CASE("a different configuration gives different IR", "[dsl]") {
  std::string base = buildScale(1024, 4, DType::BF16).ir();
  CHECK(buildScale(2048, 4, DType::BF16).ir() != base);
  CHECK(buildScale(1024, 8, DType::BF16).ir() != base);
  CHECK(buildScale(1024, 4, DType::F16).ir() != base);
  CHECK_THAT(buildScale(2048, 8, DType::BF16).ir(),
             Contains("tensor<2048xbf16>") && Contains("tile.num_warps = 8 : i32") &&
                 Contains("tile.grid = array<i64: 512, 1, 1>"));

  SoftmaxSpec spec{4096, 1000, DType::BF16};
  SoftmaxConfig config = default_config(spec);
  SoftmaxConfig more = config;
  more.block_rows *= 2;
  SoftmaxConfig warps = config;
  warps.num_warps = config.num_warps == 4 ? 8 : 4;
  std::string ir = softmax_kernel(spec, config).ir();
  CHECK(softmax_kernel(spec, more).ir() != ir);
  CHECK(softmax_kernel(spec, warps).ir() != ir);
  CHECK(softmax_kernel(SoftmaxSpec{4096, 1000, DType::F32}, config).ir() != ir);
  CHECK(softmax_kernel(SoftmaxSpec{4096, 1024, DType::BF16}, config).ir() != ir);
}

TEST_CASE("kernel IR carries the parameters and launch attributes", "[dsl]") {
  Kernel k = buildScale(1024, 4, DType::BF16);
  std::string ir = k.ir();
  CHECK_THAT(ir, Contains("func.func @scale(") && Contains("tile.kernel") &&
                     Contains("tile.name = \"x\"") && Contains("tile.output") &&
                     Contains("tile.shape = array<i64: 1048576>") &&
                     Contains("tile.grid = array<i64: 1024, 1, 1>"));
  CHECK(countOf(ir, "tile.output") == 1);
  CHECK(countOf(ir, "tile.block_load") == 1);
  CHECK(countOf(ir, "scf.for") == 1);
  CHECK(k.name() == "scale");
}

//===----------------------------------------------------------------------===//
// Strided tensor parameters
//===----------------------------------------------------------------------===//

TEST_CASE("a tensor parameter may take its dims in another memory order", "[dsl]") {
  // x [3, 4] over [4, 3] memory (a transposed view): x[i][j] = memory[j * 3 + i].
  Kernel k{"transposed_copy"};
  TensorArg x = k.input("x", DType::F32, {3, 4}, {1, 3});
  TensorArg y = k.output("y", DType::F32, {3, 4});
  y.store({0, 0}, x.load({0, 0}, {4, 4}));
  std::vector<float> memory(12), out(12, -1.0f);
  for (size_t i = 0; i < memory.size(); ++i)
    memory[i] = float(i);
  const std::vector<int64_t> shape{3, 4};
  std::vector<HostArg> args{HostArg::tensor(memory.data(), memory.size() * 4, shape),
                            HostArg::tensor(out.data(), out.size() * 4, shape)};
  tokamax::interpret(k, args);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      INFO("y[" << i << "][" << j << "]");
      CHECK(out[size_t(i * 4 + j)] == memory[size_t(j * 3 + i)]);
    }
  // Strides that are no contiguous tensor's (gaps, overlaps, the wrong count) are refused.
  for (std::vector<int64_t> bad : {std::vector<int64_t>{1, 4}, {2, 1}, {4, 2}, {1}, {12, 3, 1}}) {
    Kernel other{"bad"};
    CHECK_THROWS_WITH(other.input("x", DType::F32, {3, 4}, bad),
                      Contains("strides must be a contiguous tensor's with the dims in some order"));
  }
}
