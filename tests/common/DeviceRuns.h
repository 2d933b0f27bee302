// What the op device tests share: host buffers (attention_test::HostBuffer) moved to and
// from the device, and a call run twice into fresh NaN-filled outputs, the second run's
// every bit checked against the first (the ops are deterministic).
#pragma once

#include "common/HostBuffers.h"

#include <catch2/catch.hpp>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace gpu_test {

/// Whether the device is sm_90a (what the Hopper kernels need); otherwise the test case
/// says it is skipped, naming `what` and the device's arch, and should return.
inline bool sm90a_or_skip(const char *what) {
  const std::string arch = tokamax::Device::get().arch();
  if (arch == "sm_90a")
    return true;
  WARN("SKIPPED: " << what << " needs sm_90a, the device is " << arch);
  return false;
}

inline tokamax::Tensor upload(const attention_test::HostBuffer &h) {
  tokamax::Tensor t = tokamax::Tensor::empty(h.shape, h.dtype);
  t.copy_from_host(h.bytes(), h.nbytes());
  return t;
}

/// A device tensor's contents on the host.
inline attention_test::HostBuffer download(const tokamax::Tensor &t) {
  attention_test::HostBuffer h(t.dtype(), std::vector<int64_t>(t.shape().begin(), t.shape().end()));
  t.copy_to_host(h.bytes(), h.nbytes());
  return h;
}

/// The op's call on `inputs` into `outputs` (both in the argument order), on `stream`.
using DeviceCall = std::function<void(tokamax::Stream &stream, const std::vector<tokamax::Tensor> &inputs,
                                      const std::vector<tokamax::Tensor> &outputs)>;

/// Runs `call` twice into NaN-filled outputs shaped as `out`; the first run's results go
/// to `out`, and any bit that differs in the second fails the test.
inline void run_twice(const std::vector<attention_test::HostBuffer *> &in,
                      const std::vector<attention_test::HostBuffer *> &out, const DeviceCall &call) {
  tokamax::Stream stream = tokamax::Stream::create(tokamax::Device::get());
  std::vector<tokamax::Tensor> inputs;
  for (attention_test::HostBuffer *h : in)
    inputs.push_back(upload(*h));
  std::vector<std::vector<uint64_t>> first;
  for (int run = 0; run < 2; ++run) {
    std::vector<tokamax::Tensor> outputs;
    for (attention_test::HostBuffer *h : out)
      outputs.push_back(upload(attention_test::HostBuffer(h->dtype, h->shape)));
    call(stream, inputs, outputs);
    stream.synchronize();
    for (size_t i = 0; i < out.size(); ++i) {
      outputs[i].copy_to_host(out[i]->bytes(), out[i]->nbytes());
      if (run == 0)
        first.push_back(out[i]->storage);
      else
        CHECK(first[i] == out[i]->storage);  // deterministic: reruns are bit for bit
    }
  }
}

} // namespace gpu_test
