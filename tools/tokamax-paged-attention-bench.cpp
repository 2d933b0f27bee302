// tokamax-paged-attention-bench: paged_attention decode, GB/s of KV bytes read beside the
// device's copy bandwidth (issue 39's target: >= 80 % of it).
//
//   shapes:  batch 1, 8, 64 x context 4096, 32768 keys x pages of 16, 64; N 32, K 8,
//            H 128, bf16, one new token a sequence, every sequence at the full context,
//            its pages scattered through the cache (a random permutation);
//            --quick: batch 1 and 8 at 4096 keys
//   time:    median of tokamax::benchmark() with CUDA events, L2 flushed before each run
//            (a call's host launches count where they outlast its kernels), and the
//            median of its kernels' own durations (CUPTI, where it records; else events
//            again): the time a decode step takes inside a CUDA graph
//   GB/s:    the K and V bytes the call must read, B x context x K x (H + Hv) x 2, per
//            second; "% of copy" against cuMemcpyDtoD's bytes read and written per
//            second (2 GiB, measured first), for either time
//   --impl a,b: the implementations (default tile); --config JSON: one config for every
//   row; --json FILE: the rows
//
// Usage: tokamax-paged-attention-bench [--impl tile,reference] [--iters N] [--config JSON]
//                                      [--json FILE] [--quick]
#include "OpBenchUtil.h"

#include <tokamax/ops/PagedAttention.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>
#include <tokamax/runtime/Timing.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace tokamax;

namespace {

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128;

struct Shape {
  int64_t batch, context, page;
  std::string name() const { return fmt::format("B{} ctx{} page{}", batch, context, page); }
  /// The bytes of K and V the call reads.
  double kvBytes() const { return double(batch) * double(context) * kKvHeads * 2.0 * kHeadDim * 2.0; }
};

/// cuMemcpyDtoD's bandwidth: bytes read and written per second, in GB/s.
double copyGbs(Stream &stream) {
  const size_t bytes = size_t(2) << 30;
  Device &device = Device::get();
  DeviceBuffer a(bytes, device), b(bytes, device);
  memset_d8(a.ptr(), 1, bytes);
  Timings t = time_on_stream(stream, [&] { copy_device_to_device(b.ptr(), a.ptr(), bytes, stream.handle()); }, 3, 20,
                             false);
  return 2.0 * double(bytes) / t.median / 1e6;
}

/// One row: the cache filled with one small bf16 value (the values do not change the
/// time), q random, the page table a random permutation of the pages.
void measureRow(const Shape &s, const tools::OpBenchArgs &args, Stream &stream, tools::OpRow &row,
                BenchmarkData &kernels) {
  const int64_t maxPages = s.context / s.page, numPages = s.batch * maxPages;
  Tensor q = tools::randomTensor({s.batch, 1, kHeads, kHeadDim}, 1.0, stream, 1);
  Tensor kPages = Tensor::empty({numPages, s.page, kKvHeads, kHeadDim}, DType::BF16);
  Tensor vPages = Tensor::empty({numPages, s.page, kKvHeads, kHeadDim}, DType::BF16);
  memset_d8(kPages.data(), 0x3c, kPages.nbytes(), stream.handle());
  memset_d8(vPages.data(), 0x3c, vPages.nbytes(), stream.handle());
  std::vector<int32_t> table(static_cast<size_t>(numPages)), lengths(static_cast<size_t>(s.batch), int32_t(s.context));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(7));
  Tensor pageTable = Tensor::empty({s.batch, maxPages}, DType::I32), seqLengths = Tensor::empty({s.batch}, DType::I32);
  pageTable.copy_from_host(table.data(), table.size() * sizeof(int32_t));
  seqLengths.copy_from_host(lengths.data(), lengths.size() * sizeof(int32_t));
  Tensor out = Tensor::empty({s.batch, 1, kHeads, kHeadDim}, DType::BF16);
  stream.synchronize();
  PagedAttentionOptions options;
  options.implementation = row.impl;
  options.config = args.config;
  auto call = [&] { paged_attention(q, kPages, vPages, pageTable, seqLengths, out, stream, options); };
  row.first_call_ms = tools::syncedMs(stream, call);
  const double flops = 4.0 * double(s.batch) * kHeads * double(s.context) * kHeadDim;
  tools::timeCalls(row, stream, call, args.iters, flops);
  kernels = benchmark(stream, call, TimingMethod::Auto, row.iterations, /*warmup=*/1, /*flush_l2=*/true);
}

} // namespace

int main(int argc, char **argv) try {
  const char *tool = "tokamax-paged-attention-bench";
  const tools::OpBenchArgs args = tools::parseOpBenchArgs(tool, argc, argv);
  std::vector<Shape> shapes;
  for (int64_t context : {4096, 32768})
    for (int64_t batch : {1, 8, 64})
      for (int64_t page : {16, 64})
        if (!args.quick || (context == 4096 && batch <= 8))
          shapes.push_back({batch, context, page});
  Stream stream = Stream::create(Device::get());
  fmt::print(stderr, "measuring the copy bandwidth ...\n");
  const double copy = copyGbs(stream);
  fmt::print("paged_attention decode bf16, N {} K {} H {}, one new token, on {}; cuMemcpyDtoD {:.0f} GB/s\n", kHeads,
             kKvHeads, kHeadDim, Device::get().name(), copy);
  fmt::print("{:<24} {:<10} {:>10} {:>9} {:>10} {:>11} {:>9} {:>10} {:>14}\n", "shape", "impl", "ms", "GB/s",
             "% of copy", "kernel ms", "GB/s", "% of copy", "first call ms");
  std::fflush(stdout);
  nlohmann::json rows = nlohmann::json::array();
  for (const Shape &s : shapes)
    for (const std::string &impl : args.impls) {
      tools::OpRow r{.shape = s.name(), .pass = "decode", .impl = impl};
      BenchmarkData kernels;
      fmt::print(stderr, "measuring {} {} ...\n", r.shape, impl);
      tools::measureInto(r, [&] {
        Stream rowStream = Stream::create(Device::get());
        measureRow(s, args, rowStream, r, kernels);
      });
      nlohmann::json j = tools::rowJson(r);
      if (r.status != "ok") {
        fmt::print("{:<24} {:<10} {}\n", r.shape, r.impl, r.status);
      } else {
        const double gbs = s.kvBytes() / r.ms / 1e6, kernelGbs = s.kvBytes() / kernels.median / 1e6;
        j["kv_gbs"] = gbs;
        j["copy_fraction"] = gbs / copy;
        j["kernel_ms"] = kernels.median;
        j["kernel_timing"] = std::string(timing_method_name(kernels.method));
        j["kernel_kv_gbs"] = kernelGbs;
        j["kernel_copy_fraction"] = kernelGbs / copy;
        fmt::print("{:<24} {:<10} {:>10.4f} {:>9.0f} {:>9.1f}% {:>11.4f} {:>9.0f} {:>9.1f}% {:>14.0f}{}\n", r.shape,
                   r.impl, r.ms, gbs, 100 * gbs / copy, kernels.median, kernelGbs, 100 * kernelGbs / copy,
                   r.first_call_ms, kernels.method == TimingMethod::Cupti ? "" : " (kernel time: events)");
      }
      std::fflush(stdout);
      rows.push_back(j);
    }
  tools::writeRows(args.json, rows);
  return 0;
} catch (const std::exception &e) {
  fmt::print(stderr, "tokamax-paged-attention-bench: {}\n", e.what());
  return 1;
}
