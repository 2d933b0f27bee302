//===- PtxTests.cpp - PTX of the registered kernels, assembling, layouts --===//
//
// Every registered kernel compiles to PTX for sm_80 and sm_90a with the pinned ISA
// version, an entry point and (for bf16 row and copy kernels) 16-byte vector accesses;
// ptxas accepts the PTX. The assembler produces a cubin, malformed IR is reported with
// the parser's diagnostic, and the layout algebra (Layout.h) places every element of a
// tile exactly once.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/compiler/Layout.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Registry.h>
#include <tokamax/runtime/Error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace tokamax;
using Catch::Contains;

namespace {

constexpr const char *kArchs[] = {"sm_80", "sm_90a"};

/// The ptxas the build found (TOKAMAX_PTXAS), else the default CUDA location; empty
/// when neither exists.
std::string ptxasPath() {
  std::vector<std::string> candidates;
#ifdef TOKAMAX_PTXAS
  candidates.emplace_back(TOKAMAX_PTXAS);
#endif
  candidates.emplace_back("/usr/local/cuda/bin/ptxas");
  for (const std::string &path : candidates) {
    std::error_code ec;
    if (!path.empty() && std::filesystem::is_regular_file(path, ec))
      return path;
  }
  return {};
}

/// A file under the temporary directory, removed with this object.
class TempFile {
public:
  explicit TempFile(const std::string &suffix) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tokamax-ptx-test-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter++) + suffix);
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::filesystem::path &path() const { return path_; }
  std::string read() const {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

private:
  std::filesystem::path path_;
};

struct PtxasResult {
  int status = 0;
  std::string log;
};

/// `ptxas -arch=<arch> file.ptx -o /dev/null`, with its output captured.
PtxasResult runPtxas(const std::string &ptxas, const std::string &ptx, const std::string &arch) {
  TempFile source(".ptx"), log(".log");
  std::ofstream(source.path(), std::ios::binary) << ptx;
  std::string command = "'" + ptxas + "' -arch=" + arch + " '" + source.path().string() +
                        "' -o /dev/null > '" + log.path().string() + "' 2>&1";
  PtxasResult result;
  result.status = std::system(command.c_str());
  result.log = log.read();
  return result;
}

bool hasLine(const std::string &text, const std::string &line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t'))
      l.pop_back();
    if (l == line)
      return true;
  }
  return false;
}

bool contains(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

} // namespace

//===----------------------------------------------------------------------===//
// PTX of the registered kernels
//===----------------------------------------------------------------------===//

TEST_CASE("every registered kernel compiles to valid PTX for sm_80 and sm_90a", "[ptx]") {
  const std::string ptxas = ptxasPath();
  if (ptxas.empty())
    WARN("ptxas not found (TOKAMAX_PTXAS or /usr/local/cuda/bin/ptxas): the PTX is "
         "checked textually only, not assembled");
  REQUIRE(std::string(ptx_isa_version()) == "8.0");

  std::vector<RegisteredKernel> kernels = registered_kernels();
  REQUIRE(kernels.size() >= 6);
  for (const RegisteredKernel &registered : kernels) {
    for (const char *arch : kArchs) {
      if (!registered.only_arch.empty() && registered.only_arch != arch)
        continue;
      DYNAMIC_SECTION(registered.name << " " << arch) {
        dsl::Kernel kernel = registered.build();
        CompileOptions options;
        options.arch = arch;
        options.assemble = false;
        CompiledKernel compiled = compile(kernel, options);
        const std::string &ptx = compiled.ptx;
        INFO("kernel " << registered.name << " for " << arch);

        CHECK(compiled.arch == arch);
        CHECK(compiled.cubin.empty());
        CHECK(hasLine(ptx, ".version 8.0"));
        CHECK(hasLine(ptx, std::string(".target ") + arch));
        CHECK(hasLine(ptx, ".address_size 64"));
        CHECK(contains(ptx, ".visible .entry " + kernel.name() + "("));
        // Kernels on TMA rings may add a producer warpgroup to the kernel's warps: the
        // hopper matmul and the hopper attention's flash kernels do (not its VJP's
        // delta, nor its fp8 forward's V transpose); the other hopper ops' elementwise or
        // register-loop kernels (the gated linear unit's gate, ragged_dot's drhs) do not.
        // The PTX's .maxntid is the launch's.
        const uint32_t threads = compiled.launch.block_threads, base = 32 * uint32_t(kernel.num_warps());
        CHECK((threads == base || threads == base + 128));
        if (registered.name.rfind("matmul_hopper", 0) == 0 ||
            (registered.name.rfind("attention", 0) == 0 && contains(registered.name, "[hopper]") &&
             !contains(kernel.name(), "delta") && !contains(kernel.name(), "v_transpose")))
          CHECK(threads == base + 128);
        CHECK(contains(ptx, ".maxntid " + std::to_string(threads) + ", 1, 1"));
        CHECK(compiled.launch.kernel_name == kernel.name());
        CHECK(compiled.launch.grid[0] == uint64_t(kernel.grid_size()[0]));

        // bf16 rows (softmax) and copies move 8 elements per 16-byte access, both ways.
        bool bf16 = contains(registered.name, "bf16");
        // The example kernels by their registry prefix (an op name may contain "softmax").
        const bool rowKernel = registered.name.rfind("softmax[", 0) == 0 || registered.name.rfind("copy[", 0) == 0;
        if (bf16 && rowKernel) {
          CHECK(contains(ptx, "ld.global.v4.b32"));
          CHECK(contains(ptx, "st.global.v4.b32"));
          CHECK_FALSE(contains(ptx, "ld.global.b16"));
        }

        if (!ptxas.empty()) {
          PtxasResult r = runPtxas(ptxas, ptx, arch);
          INFO("ptxas -arch=" << arch << ":\n" << r.log);
          CHECK(r.status == 0);
        }
      }
    }
  }
}

TEST_CASE("compiling is deterministic and depends on the target", "[ptx]") {
  RegisteredKernel registered = registered_kernels().front();
  CompileOptions options;
  options.assemble = false;
  options.arch = "sm_90a";
  std::string a = compile(registered.build(), options).ptx;
  std::string b = compile(registered.build(), options).ptx;
  CHECK(a == b);
  options.arch = "sm_80";
  std::string c = compile(registered.build(), options).ptx;
  CHECK(c != a);
  CHECK(hasLine(c, ".target sm_80"));
}

TEST_CASE("the stages of the pipeline run in order and are timed", "[ptx]") {
  CompileOptions options;
  options.assemble = false;
  CompiledKernel compiled = compile(registered_kernels().front().build(), options);
  std::vector<std::string> names;
  for (const StageTime &s : compiled.stages)
    names.push_back(s.stage);
  CHECK(names == std::vector<std::string>{"parse", "canonical", "layouts", "shared", "tile-to-llvm",
                                          "llvm-dialect", "llvm-ir", "ptx"});
  CHECK_FALSE(compiled.canonical_ir.empty());
}

//===----------------------------------------------------------------------===//
// Assembling and malformed input
//===----------------------------------------------------------------------===//

TEST_CASE("assemble_ptx gives a non-empty cubin", "[ptx]") {
  std::string assembler = assembler_identity();
  INFO("assembler: " << assembler);
  if (assembler == "none") {
    WARN("no PTX assembler (nvJitLink or ptxas): assemble_ptx is not checked");
    CHECK_THROWS_AS(assemble_ptx(".version 8.0\n.target sm_90a\n.address_size 64\n", "sm_90a"), Error);
    return;
  }
  for (const char *arch : kArchs) {
    INFO("arch " << arch);
    CompileOptions options;
    options.arch = arch;
    options.assemble = false;
    std::string ptx = compile(registered_kernels().front().build(), options).ptx;
    std::vector<uint8_t> cubin = assemble_ptx(ptx, arch);
    REQUIRE(cubin.size() > 4);
    // An ELF file.
    CHECK(cubin[0] == 0x7f);
    CHECK(cubin[1] == 'E');
    CHECK(cubin[2] == 'L');
    CHECK(cubin[3] == 'F');

    // compile() with assemble = true does the same.
    options.assemble = true;
    CompiledKernel compiled = compile(registered_kernels().front().build(), options);
    CHECK_FALSE(compiled.cubin.empty());
  }
  // Invalid PTX is an error with the assembler's log.
  CHECK_THROWS_AS(assemble_ptx("this is not PTX", "sm_90a"), Error);
}

TEST_CASE("malformed tile IR throws with the parser's diagnostic", "[ptx]") {
  CompileOptions options;
  options.assemble = false;
  CHECK_THROWS_AS(compile_ir("module { func.func @k( }", options), Error);
  // The parser's message, at its line and column.
  CHECK_THROWS_WITH(compile_ir("module { func.func @k( }", options),
                    Contains("tile IR does not parse or verify") &&
                        Contains("\"-\":1:23): expected non-function type"));
  // An unknown operation names the operation.
  CHECK_THROWS_WITH(compile_ir("module { func.func @k() { \"tile.nonsense\"() : () -> () return } }", options),
                    Contains("tile IR does not parse or verify") &&
                        Contains("unregistered operation 'tile.nonsense'"));
  CHECK_THROWS_WITH(compile_ir("func.func @k() {\n  %0 = tile.frobnicate 0 : i32\n  return\n}\n", options),
                    Contains("tile.frobnicate"));
  // A verifier error comes with the op's message and its location.
  const char *badArange = "func.func @k() {\n  %0 = tile.arange 0 to 16 : tensor<8xi32>\n  return\n}\n";
  CHECK_THROWS_WITH(compile_ir(badArange, options),
                    Contains("'tile.arange' op result must be a 1-D tile of end - start = 16 elements") &&
                        Contains(":2:"));
}

TEST_CASE("tile IR without a kernel is rejected", "[ptx]") {
  CompileOptions options;
  options.assemble = false;
  CHECK_THROWS_AS(compile_ir("", options), Error);
  CHECK_THROWS_AS(compile_ir("module {}", options), Error);
}

TEST_CASE("lowering failures name the kernel, the stage and the target", "[ptx]") {
  // f64 dots have no tensor-core lowering.
  dsl::Kernel k("mm");
  auto a = k.input("a", DType::F64, {16, 16});
  auto c = k.output("c", DType::F64, {16, 16});
  dsl::Value t = a.load({0, 0}, {16, 16});
  c.store({0, 0}, dsl::dot(t, t, 0.0));
  CompileOptions options;
  options.assemble = false;
  CHECK_THROWS_WITH(compile(k, options), Contains("kernel mm: stage 'tile-to-llvm' failed for sm_90a") &&
                                             Contains("'tile.dot' op runs on the CPU interpreter only"));

  dsl::Kernel f8("f8");
  auto q = f8.input("q", DType::F8E4M3, {256});
  auto o = f8.output("o", DType::F32, {256});
  o.store({0}, q.load({0}, {256}).to(DType::F32));
  options.arch = "sm_80";
  CHECK_THROWS_WITH(compile(f8, options), Contains("fp8 conversions need sm_89 or newer, the target is sm_80"));
  options.arch = "sm_90a";
  CHECK_NOTHROW(compile(f8, options));
}

//===----------------------------------------------------------------------===//
// Layout algebra
//===----------------------------------------------------------------------===//

namespace {

using compiler::BlockedLayout;
using compiler::Distribution;

bool isPowerOfTwo(int64_t v) { return v > 0 && !(v & (v - 1)); }

std::vector<int64_t> powersOfTwo(int64_t max) {
  std::vector<int64_t> v;
  for (int64_t p = 1; p <= max; p *= 2)
    v.push_back(p);
  return v;
}

/// Row-major index of `coords` in a tile of `shape`; -1 when outside.
int64_t linearIndex(const std::vector<int64_t> &coords, const std::vector<int64_t> &shape) {
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (coords[d] < 0 || coords[d] >= shape[d])
      return -1;
    index = index * shape[d] + coords[d];
  }
  return index;
}

/// Checks that every element of `dist`'s tile is held by some (lane, warp, register)
/// and that the canonical owners hold each element exactly once. Returns a description
/// of the first violation, or "".
std::string checkOwnership(const Distribution &dist, const std::vector<int64_t> &shape,
                           unsigned numWarps) {
  int64_t elements = 1;
  for (int64_t s : shape)
    elements *= s;
  std::vector<int> held(elements, 0), owned(elements, 0);
  for (unsigned warp = 0; warp < numWarps; ++warp) {
    for (unsigned lane = 0; lane < 32; ++lane) {
      bool threadOwns = dist.thread_owns(lane, warp);
      for (int64_t r = 0; r < dist.num_registers(); ++r) {
        std::vector<int64_t> c = dist.coords(lane, warp, r);
        int64_t i = linearIndex(c, shape);
        if (i < 0) {
          std::ostringstream os;
          os << "lane " << lane << " warp " << warp << " register " << r
             << " holds a coordinate outside the tile";
          return os.str();
        }
        ++held[i];
        if (threadOwns && dist.register_owns(r))
          ++owned[i];
      }
    }
  }
  for (int64_t i = 0; i < elements; ++i) {
    if (held[i] == 0)
      return "element " + std::to_string(i) + " is held by no thread";
    if (owned[i] != 1)
      return "element " + std::to_string(i) + " has " + std::to_string(owned[i]) +
             " canonical owners";
  }
  return "";
}

/// Registers [g * vec, (g + 1) * vec) of every thread are consecutive along the last
/// dimension (and agree on the others), starting at a multiple of vec.
std::string checkContiguous(const Distribution &dist, unsigned numWarps) {
  unsigned vec = dist.contiguous_registers();
  if (vec == 0 || dist.num_registers() % vec != 0)
    return "num_registers " + std::to_string(dist.num_registers()) + " is not a multiple of " +
           std::to_string(vec);
  size_t last = dist.rank() - 1;
  for (unsigned warp = 0; warp < numWarps; ++warp) {
    for (unsigned lane = 0; lane < 32; ++lane) {
      for (int64_t r0 = 0; r0 < dist.num_registers(); r0 += vec) {
        std::vector<int64_t> first = dist.coords(lane, warp, r0);
        if (first[last] % vec != 0)
          return "lane " + std::to_string(lane) + " register " + std::to_string(r0) +
                 " starts a vector at unaligned column " + std::to_string(first[last]);
        for (unsigned i = 1; i < vec; ++i) {
          std::vector<int64_t> expected = first;
          expected[last] += i;
          if (dist.coords(lane, warp, r0 + i) != expected)
            return "lane " + std::to_string(lane) + " warp " + std::to_string(warp) +
                   " register " + std::to_string(r0 + i) +
                   " is not the next element along the last dimension";
        }
      }
    }
  }
  return "";
}

std::string describe(const std::vector<int64_t> &shape, unsigned bytes, unsigned warps,
                     const BlockedLayout &layout) {
  std::ostringstream os;
  os << "shape [";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "], " << bytes << "-byte elements, " << warps << " warps: " << layout.to_string();
  return os.str();
}

} // namespace

TEST_CASE("default blocked layouts are well formed", "[ptx][layout]") {
  int checked = 0;
  for (int64_t rows : powersOfTwo(64))
    for (int64_t cols : powersOfTwo(256))
      for (unsigned bytes : {1u, 2u, 4u, 8u})
        for (unsigned warps : {1u, 2u, 4u, 8u}) {
          std::vector<int64_t> shape{rows, cols};
          BlockedLayout layout = compiler::default_blocked_layout(shape, bytes, warps);
          INFO(describe(shape, bytes, warps, layout));
          REQUIRE(layout.rank() == 2);
          REQUIRE(layout.threads_per_warp.size() == 2);
          REQUIRE(layout.warps_per_cta.size() == 2);
          CHECK(layout.order == std::vector<unsigned>{1, 0});
          CHECK(layout.threads_per_warp[0] * layout.threads_per_warp[1] == 32u);
          CHECK(layout.num_warps() == warps);
          for (size_t d = 0; d < 2; ++d) {
            CHECK(isPowerOfTwo(layout.size_per_thread[d]));
            CHECK(isPowerOfTwo(layout.threads_per_warp[d]));
            CHECK(isPowerOfTwo(layout.warps_per_cta[d]));
          }
          // One access of at most 16 bytes along the last dimension, as wide as fits.
          CHECK(layout.size_per_thread[0] == 1u);
          CHECK(layout.size_per_thread[1] * bytes <= 16u);
          CHECK(int64_t(layout.size_per_thread[1]) == std::min<int64_t>(16 / bytes, cols));
          ++checked;
        }
  CHECK(checked == 7 * 9 * 4 * 4);
  // The documented example.
  int64_t shape[] = {4, 256};
  BlockedLayout l = compiler::default_blocked_layout(shape, 2, 4);
  CHECK(l.size_per_thread == std::vector<unsigned>{1, 8});
  CHECK(l.threads_per_warp == std::vector<unsigned>{1, 32});
  CHECK(l.warps_per_cta == std::vector<unsigned>{4, 1});
}

TEST_CASE("default blocked layouts place every element exactly once", "[ptx][layout]") {
  for (int64_t rows : powersOfTwo(64))
    for (int64_t cols : powersOfTwo(256))
      for (unsigned bytes : {1u, 2u, 4u, 8u})
        for (unsigned warps : {1u, 2u, 4u, 8u}) {
          std::vector<int64_t> shape{rows, cols};
          BlockedLayout layout = compiler::default_blocked_layout(shape, bytes, warps);
          Distribution dist = Distribution::blocked(layout, shape);
          std::string ownership = checkOwnership(dist, shape, warps);
          std::string contiguous = checkContiguous(dist, warps);
          if (!ownership.empty() || !contiguous.empty()) {
            INFO(describe(shape, bytes, warps, layout));
            CHECK(ownership == "");
            CHECK(contiguous == "");
          }
          // A thread holds each distinct element once: registers = elements / distinct threads.
          int64_t distinct = 1;
          for (size_t d = 0; d < 2; ++d)
            distinct *= int64_t(dist.distinct_lanes(d)) * dist.distinct_warps(d);
          if (dist.num_registers() * distinct != rows * cols) {
            INFO(describe(shape, bytes, warps, layout));
            CHECK(dist.num_registers() * distinct == rows * cols);
          }
        }
}

TEST_CASE("1-D default layouts place every element exactly once", "[ptx][layout]") {
  for (int64_t n : powersOfTwo(8192))
    for (unsigned bytes : {1u, 2u, 4u, 8u})
      for (unsigned warps : {1u, 2u, 4u, 8u, 16u}) {
        std::vector<int64_t> shape{n};
        BlockedLayout layout = compiler::default_blocked_layout(shape, bytes, warps);
        Distribution dist = Distribution::blocked(layout, shape);
        std::string ownership = checkOwnership(dist, shape, warps);
        std::string contiguous = checkContiguous(dist, warps);
        if (!ownership.empty() || !contiguous.empty() || layout.num_warps() != warps) {
          INFO(describe(shape, bytes, warps, layout));
          CHECK(layout.num_warps() == warps);
          CHECK(ownership == "");
          CHECK(contiguous == "");
        }
      }
}

TEST_CASE("slices of default layouts place every element exactly once", "[ptx][layout]") {
  // The layouts of reduction results: the parent with one dimension dropped.
  for (int64_t rows : powersOfTwo(64))
    for (int64_t cols : powersOfTwo(256))
      for (unsigned bytes : {2u, 4u})
        for (unsigned warps : {1u, 4u, 8u}) {
          std::vector<int64_t> parentShape{rows, cols};
          BlockedLayout layout = compiler::default_blocked_layout(parentShape, bytes, warps);
          for (unsigned dropped : {0u, 1u}) {
            unsigned kept = 1 - dropped;
            std::vector<int64_t> shape{parentShape[kept]};
            Distribution dist(layout, shape, {kept});
            std::string ownership = checkOwnership(dist, shape, warps);
            if (!ownership.empty()) {
              INFO(describe(parentShape, bytes, warps, layout) << ", dimension " << dropped << " dropped");
              CHECK(ownership == "");
            }
          }
        }
}

TEST_CASE("layouts larger than their tile wrap around onto replicas", "[ptx][layout]") {
  // 32 lanes x 4 warps over a 2x4 tile: most threads hold replicas; exactly one owns
  // each element, and needs_wrap says the coordinates must be reduced modulo the extent.
  BlockedLayout layout{{1, 1}, {4, 8}, {4, 1}, {1, 0}};
  std::vector<int64_t> shape{2, 4};
  Distribution dist = Distribution::blocked(layout, shape);
  CHECK(dist.needs_wrap(0));
  CHECK(dist.needs_wrap(1));
  CHECK(dist.distinct_lanes(0) == 2u);
  CHECK(dist.distinct_lanes(1) == 4u);
  CHECK(dist.distinct_warps(0) == 1u);
  CHECK(checkOwnership(dist, shape, 4) == "");
  int owners = 0;
  for (unsigned warp = 0; warp < 4; ++warp)
    for (unsigned lane = 0; lane < 32; ++lane)
      owners += dist.thread_owns(lane, warp);
  CHECK(owners == 8);
}

TEST_CASE("transposed default layouts hold the transposed elements in the same threads", "[ptx][layout]") {
  // tile-assign-layouts gives trans(x, [1, 0]) the permuted layout of x, and the lowering
  // only renames registers: each thread must already hold exactly the elements it needs.
  for (int64_t rows : powersOfTwo(64))
    for (int64_t cols : powersOfTwo(256))
      for (unsigned bytes : {2u, 4u})
        for (unsigned warps : {1u, 4u, 8u}) {
          std::vector<int64_t> shape{rows, cols}, tshape{cols, rows};
          BlockedLayout layout = compiler::default_blocked_layout(shape, bytes, warps);
          BlockedLayout t = layout;
          const unsigned perm[2] = {1, 0};
          for (size_t i = 0; i < 2; ++i) {
            t.size_per_thread[i] = layout.size_per_thread[perm[i]];
            t.threads_per_warp[i] = layout.threads_per_warp[perm[i]];
            t.warps_per_cta[i] = layout.warps_per_cta[perm[i]];
          }
          for (unsigned &d : t.order)
            d = d == perm[0] ? 0 : 1;
          Distribution source = Distribution::blocked(layout, shape);
          Distribution result = Distribution::blocked(t, tshape);
          INFO(describe(shape, bytes, warps, layout) << " -> " << t.to_string());
          std::string ownership = checkOwnership(result, tshape, warps);
          if (!ownership.empty())
            CHECK(ownership == "");
          REQUIRE(result.num_registers() == source.num_registers());
          bool same = true;
          for (unsigned warp = 0; warp < warps && same; ++warp)
            for (unsigned lane = 0; lane < 32 && same; ++lane) {
              std::vector<std::vector<int64_t>> held, needed;
              for (int64_t r = 0; r < source.num_registers(); ++r) {
                std::vector<int64_t> c = source.coords(lane, warp, r);
                held.push_back({c[1], c[0]});
                needed.push_back(result.coords(lane, warp, r));
              }
              std::sort(held.begin(), held.end());
              std::sort(needed.begin(), needed.end());
              same = held == needed;
            }
          CHECK(same);
        }
}
