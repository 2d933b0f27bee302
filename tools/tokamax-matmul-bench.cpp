// tokamax-matmul-bench: bf16 matmul TFLOP/s of our kernels beside cuBLAS.
//
//   shapes (M x N x K): 4096^3, 8192^3, 16384x4096x4096, 8192x8192x512 (or --shape MxNxK)
//   ours: tokamax::matmul with each implementation (--impl, default "hopper,tile" on
//         sm_90a, "tile" elsewhere): hopper = TMA + wgmma, tile = mma.sync; bf16 in,
//         bf16 out, f32 accumulation
//   cuBLAS: cublasGemmEx, CUDA_R_16BF, CUBLAS_COMPUTE_32F, loaded with dlopen
//           ("libcublas.so.13"); skipped with a message when it does not load
//   check: max |ours - cuBLAS| / max |cuBLAS| per shape
//   --sweep: TFLOP/s of explicit tile configs (block MxNxK, warps) at each shape, for
//            choosing default_config (what the autotuner will search)
//
// Usage: tokamax-matmul-bench [--shape MxNxK]... [--impl a,b] [--iters N] [--json FILE] [--sweep]
#include <tokamax/ops/Matmul.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>
#include <tokamax/runtime/Timing.h>

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace tokamax;

namespace {

// The few cuBLAS declarations we need (cublas_api.h, CUDA 13).
using cublasHandle_t = void *;
using cublasStatus_t = int;
constexpr int CUBLAS_OP_N = 0;
constexpr int CUDA_R_16BF = 14;
constexpr int CUBLAS_COMPUTE_32F = 68;
constexpr int CUBLAS_GEMM_DEFAULT = -1;
using CreateFn = cublasStatus_t (*)(cublasHandle_t *);
using DestroyFn = cublasStatus_t (*)(cublasHandle_t);
using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, void *);
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, int transa, int transb, int m, int n, int k,
                                    const void *alpha, const void *A, int Atype, int lda, const void *B,
                                    int Btype, int ldb, const void *beta, void *C, int Ctype, int ldc,
                                    int computeType, int algo);

struct Cublas {
  void *lib = nullptr;
  cublasHandle_t handle = nullptr;
  DestroyFn destroy = nullptr;
  SetStreamFn setStream = nullptr;
  GemmExFn gemmEx = nullptr;
  std::string why;

  Cublas() {
    lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      why = dlerror();
      return;
    }
    auto create = reinterpret_cast<CreateFn>(dlsym(lib, "cublasCreate_v2"));
    destroy = reinterpret_cast<DestroyFn>(dlsym(lib, "cublasDestroy_v2"));
    setStream = reinterpret_cast<SetStreamFn>(dlsym(lib, "cublasSetStream_v2"));
    gemmEx = reinterpret_cast<GemmExFn>(dlsym(lib, "cublasGemmEx"));
    if (!create || !destroy || !setStream || !gemmEx) {
      why = "missing cuBLAS entry points";
      return;
    }
    if (cublasStatus_t s = create(&handle); s != 0) {
      why = fmt::format("cublasCreate_v2 failed with status {}", s);
      handle = nullptr;
    }
  }
  ~Cublas() {
    if (handle)
      destroy(handle);
  }
  bool ok() const { return handle != nullptr; }

  /// Row-major c[M, N] = a[M, K] @ b[K, N]: column-major c^T = b^T a^T.
  void gemm(const Tensor &a, const Tensor &b, const Tensor &c, int64_t m, int64_t n, int64_t k, Stream &stream) {
    float alpha = 1.0f, beta = 0.0f;
    setStream(handle, stream.handle());
    cublasStatus_t s = gemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                              reinterpret_cast<void *>(b.data()), CUDA_R_16BF, int(n),
                              reinterpret_cast<void *>(a.data()), CUDA_R_16BF, int(k), &beta,
                              reinterpret_cast<void *>(c.data()), CUDA_R_16BF, int(n), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT);
    if (s != 0)
      throw Error(fmt::format("cublasGemmEx failed with status {}", s));
  }
};

Tensor randomTensor(int64_t rows, int64_t cols, uint32_t seed, DType dtype = DType::BF16) {
  std::vector<float> host(size_t(rows * cols));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float &v : host)
    v = dist(rng);
  int64_t shape[2] = {rows, cols};
  return Tensor::from_host_floats(host, shape, dtype, Device::get());
}

double maxAbs(const std::vector<double> &v) {
  double m = 0;
  for (double x : v)
    m = std::max(m, std::abs(x));
  return m;
}

/// TFLOP/s of explicit configurations of one implementation's kernel (bf16 in and out).
void sweep(const std::vector<std::tuple<int64_t, int64_t, int64_t>> &shapes, const std::string &impl, int iters,
           Stream &stream) {
  struct Config {
    int64_t bm, bn, bk;
    int warps;
    int64_t stages;
    bool specialized = true;
    bool persistent = true;  // one program per SM
    int64_t cluster = 1;     // hopper: CTAs per cluster sharing B (multicast)
    int64_t group_m = 8;     // block rows walked before moving along N
    bool tma_store = true;   // hopper: epilogue through shared memory and TMA (where it fits)
    bool a_regs = false;     // hopper: wgmma reads A from registers (ldmatrix from the ring)
    bool rebalance = false;  // hopper: producer 40 / consumers 232 registers (setmaxnreg)
  };
  // All of these assemble without spills for sm_90a.
  // tile: block, warps, cp.async ring depth.
  const std::vector<Config> tileConfigs = {
      {128, 128, 32, 4, 4}, {128, 128, 32, 4, 3}, {128, 128, 64, 4, 3}, {128, 128, 32, 8, 4},
      {128, 256, 32, 8, 3}, {128, 256, 32, 8, 4}, {256, 128, 32, 8, 3}, {256, 128, 32, 8, 4},
      {128, 256, 64, 8, 3}, {128, 64, 32, 4, 4},  {64, 128, 32, 4, 4},
      {128, 128, 32, 4, 5}, {128, 128, 32, 4, 6}, {128, 128, 32, 4, 4, true, true, 1, 4},
      {128, 128, 32, 4, 4, true, true, 1, 16}};
  const std::vector<Config> hopperConfigs = {
      {128, 256, 64, 8, 4},        {128, 256, 64, 8, 3},        {256, 128, 64, 8, 4},
      {128, 128, 64, 8, 6},        {128, 128, 64, 4, 6},        {64, 256, 64, 4, 4},
      {128, 256, 64, 8, 4, true, false}, {128, 256, 64, 8, 4, false, false}, {128, 128, 64, 8, 6, false, false},
      {128, 256, 64, 8, 4, true, true, 2}, {128, 256, 64, 8, 3, true, true, 2}, {256, 128, 64, 8, 4, true, true, 2},
      {128, 128, 64, 8, 6, true, true, 2}, {128, 256, 64, 8, 4, true, false, 2},
      {128, 256, 64, 8, 4, true, true, 1, 8, false}, {128, 256, 64, 8, 4, true, true, 2, 8, false},
      {128, 256, 32, 8, 8},        {128, 256, 32, 8, 6},        {128, 128, 32, 8, 8},
      {128, 256, 32, 8, 8, true, true, 1, 8, true, true},  {128, 256, 64, 8, 4, true, true, 1, 8, true, false, true},
      {128, 256, 64, 8, 4, true, true, 1, 8, true, true, true}, {128, 256, 32, 8, 8, true, true, 1, 8, true, true, true},
      {128, 256, 64, 8, 4, true, true, 2, 8, true, false, true}};
  fmt::print("\nsweep of {} (bf16 -> bf16):\n", impl);
  for (auto [m, n, k] : shapes) {
    Tensor a = randomTensor(m, k, 1), b = randomTensor(k, n, 2), c = Tensor::empty({m, n}, DType::BF16);
    for (Config cfg : impl == "hopper" ? hopperConfigs : tileConfigs) {
      MatmulOptions options;
      options.implementation = impl;
      MatmulConfig config;
      config.block_m = cfg.bm, config.block_n = cfg.bn, config.block_k = cfg.bk, config.num_warps = cfg.warps;
      config.num_stages = cfg.stages;
      config.warp_specialize = cfg.specialized;
      config.cluster_m = cfg.cluster;
      config.group_m = cfg.group_m;
      config.a_in_registers = cfg.a_regs;
      config.rebalance_registers = cfg.rebalance;
      const int64_t sharedLimit = Arch::parse("sm_90a").shared_memory_per_block();
      config.tma_store =
          cfg.tma_store && cfg.stages * (cfg.bm + cfg.bn) * cfg.bk * 2 + 2 * cfg.bm * 128 + 2048 <= sharedLimit;
      config.programs = cfg.persistent ? Device::get().sm_count() : 0;
      options.config = config;
      std::string label = fmt::format("{}x{}x{} block {}x{}x{} warps {} stages {}{}{}{}{}", m, n, k, cfg.bm, cfg.bn,
                                      cfg.bk, cfg.warps, cfg.stages, impl == "hopper" && cfg.specialized ? " ws" : "",
                                      impl == "hopper" && cfg.persistent ? " persistent" : "",
                                      cfg.cluster > 1 ? " cluster2" : "",
                                      cfg.group_m != 8 ? fmt::format(" group {}", cfg.group_m) : "") +
                          (impl == "hopper" && config.tma_store ? " tma-store" : "") + (cfg.a_regs ? " a-regs" : "") + (cfg.rebalance ? " rebalance" : "");
      try {
        Timings t = time_on_stream(stream, [&] { matmul(a, b, c, stream, options); }, 3, iters);
        fmt::print("  {:<72} {:8.3f} ms {:7.1f} TFLOP/s\n", label, t.median, 2.0 * m * n * k / t.median / 1e9);
      } catch (const std::exception &e) {
        fmt::print("  {:<72} failed: {}\n", label, std::string(e.what()).substr(0, 160));
      }
    }
  }
}

} // namespace

int main(int argc, char **argv) try {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes;
  int iters = 20;
  bool doSweep = false;
  std::string jsonPath;
  std::vector<std::string> impls;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--shape" && i + 1 < argc) {
      long long m, n, k;
      if (std::sscanf(argv[++i], "%lldx%lldx%lld", &m, &n, &k) != 3)
        throw Error("--shape takes MxNxK");
      shapes.emplace_back(m, n, k);
    } else if (arg == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--impl" && i + 1 < argc) {
      impls.clear();
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        size_t comma = std::min(list.find(',', at), list.size());
        impls.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (arg == "--sweep") {
      doSweep = true;
    } else if (arg == "--json" && i + 1 < argc) {
      jsonPath = argv[++i];
    } else {
      fmt::print(stderr,
                 "usage: tokamax-matmul-bench [--shape MxNxK]... [--impl a,b] [--iters N] [--json FILE] [--sweep]\n"
                 "  --impl: hopper, tile, reference, or hopper on the DSL's Hopper primitives (tma_ring): ring (a\n"
                 "         producer warpgroup, Kernel::specialized_loop, persistent) or ring-inorder (every warp a\n"
                 "         consumer, one program per tile)\n");
      return 2;
    }
  }
  if (shapes.empty())
    shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 4096, 4096}, {8192, 8192, 512}};

  Device &device = Device::get();
  if (impls.empty())
    impls = device.target().has_wgmma() ? std::vector<std::string>{"hopper", "tile"} : std::vector<std::string>{"tile"};
  Stream stream = Stream::create(device);
  Cublas cublas;
  fmt::print("{}\n", describe(device));
  if (!cublas.ok())
    fmt::print("cuBLAS skipped: {}\n", cublas.why);
  fmt::print("\n{:<22} {:<7} {:>9} {:>9} {:>10} {:>9} {:>8} {:>10} {:>9}\n", "bf16 M x N x K", "impl", "ours ms",
             "TFLOP/s", "cuBLAS ms", "TFLOP/s", "ratio", "max diff", "first ms");
  std::string json = "{";
  for (auto [m, n, k] : shapes) {
    Tensor a = randomTensor(m, k, 1), b = randomTensor(k, n, 2);
    Tensor c = Tensor::empty({m, n}, DType::BF16), ref = Tensor::empty({m, n}, DType::BF16);
    double flops = 2.0 * double(m) * double(n) * double(k);
    std::string label = fmt::format("{}x{}x{}", m, n, k);
    double theirMs = 0, theirTf = 0;
    std::vector<double> y;
    if (cublas.ok()) {
      Timings theirs = time_on_stream(stream, [&] { cublas.gemm(a, b, ref, m, n, k, stream); }, 3, iters);
      stream.synchronize();
      theirMs = theirs.median, theirTf = flops / theirs.median / 1e9;
      y = ref.to_host_doubles();
    }
    json += fmt::format("{}\"{}\": {{\"cublas_tflops\": {:.2f}, \"cublas_ms\": {:.4f}", json.size() > 1 ? ", " : "",
                        label, theirTf, theirMs);
    for (const std::string &impl : impls) {
      MatmulOptions options;
      options.implementation = impl;
      if (impl == "ring" || impl == "ring-inorder") {  // hopper's product on the DSL's Hopper primitives
        MatmulConfig config = default_hopper_config(MatmulSpec{m, n, k, DType::BF16, DType::BF16});
        config.tma_ring = true, config.warp_specialize = impl == "ring";
        config.programs = config.warp_specialize ? Device::get().sm_count() : 0;  // persistent as hopper's
        options.implementation = "hopper";
        options.config = config;
      }
      // The first call compiles (or reads the disk cache); time_on_stream warms up too.
      auto t0 = std::chrono::steady_clock::now();
      try {
        matmul(a, b, c, stream, options);
      } catch (const NotSupported &e) {
        fmt::print("{:<22} {:<7} not supported: {}\n", label, impl, e.what());
        continue;
      }
      stream.synchronize();
      double firstMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      Timings ours = time_on_stream(stream, [&] { matmul(a, b, c, stream, options); }, 3, iters);
      double oursTf = flops / ours.median / 1e9;
      double diff = -1;
      if (!y.empty()) {
        std::vector<double> x = c.to_host_doubles();
        diff = 0;
        for (size_t i = 0; i < x.size(); ++i)
          diff = std::max(diff, std::abs(x[i] - y[i]));
        diff /= std::max(1e-30, maxAbs(y));
      }
      fmt::print("{:<22} {:<7} {:>9.3f} {:>9.1f} {:>10.3f} {:>9.1f} {:>7.1f}% {:>10.2e} {:>9.1f}\n", label, impl,
                 ours.median, oursTf, theirMs, theirTf, theirTf > 0 ? 100 * oursTf / theirTf : 0.0, diff, firstMs);
      json += fmt::format(", \"{0}_tflops\": {1:.2f}, \"{0}_ms\": {2:.4f}, \"{0}_first_call_ms\": {3:.1f}, "
                          "\"{0}_max_rel_diff\": {4:.3e}",
                          impl, oursTf, ours.median, firstMs, diff);
    }
    json += "}";
  }
  // fp8 (e4m3, a [M, K], b [N, K]) through hopper: twice the bf16 tensor-core rate.
  if (std::find(impls.begin(), impls.end(), "hopper") != impls.end()) {
    fmt::print("\n{:<22} {:<7} {:>9} {:>9}\n", "fp8 M x N x K", "dtype", "ours ms", "TFLOP/s");
    for (auto [m, n, k] : shapes)
    for (DType fp8 : {DType::F8E4M3, DType::F8E5M2}) {
      Tensor a = randomTensor(m, k, 1, fp8), b = randomTensor(n, k, 2, fp8);
      Tensor c = Tensor::empty({m, n}, DType::BF16);
      MatmulOptions options;
      options.implementation = "hopper";
      options.trans_b = true;
      matmul(a, b, c, stream, options);
      Timings ours = time_on_stream(stream, [&] { matmul(a, b, c, stream, options); }, 3, iters);
      double tf = 2.0 * double(m) * double(n) * double(k) / ours.median / 1e9;
      fmt::print("{:<22} {:<7} {:>9.3f} {:>9.1f}\n", fmt::format("{}x{}x{}", m, n, k), dtype_name(fp8), ours.median,
                 tf);
      json += fmt::format(", \"{} {}x{}x{}\": {{\"hopper_tflops\": {:.2f}}}", dtype_name(fp8), m, n, k, tf);
    }
  }
  json += "}";
  if (doSweep)
    for (const std::string &impl : impls)
      sweep(shapes, impl, iters, stream);
  if (!jsonPath.empty())
    std::ofstream(jsonPath) << json << "\n";
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-matmul-bench: error: {}\n", e.what());
  return 1;
}
