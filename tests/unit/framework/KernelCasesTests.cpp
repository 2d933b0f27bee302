// The kernel cases the GPU sanitizer sweep and load test run (tests/common/KernelCases.h)
// are valid calls: each runs on the interpreter and writes every output it declares.
#include <catch2/catch.hpp>

#include "common/KernelCases.h"

#include <algorithm>
#include <cmath>

TEST_CASE("every GPU kernel case runs on the interpreter and writes its outputs", "[kernel-cases]") {
  for (const test::KernelCase &c : test::kernel_cases()) {
    INFO(c.name);
    test::Io host(nullptr);
    c.call(host);
    std::vector<std::vector<double>> outputs = host.results();
    for (size_t k = 0; k < outputs.size(); ++k) {
      INFO("output " << k);
      REQUIRE_FALSE(outputs[k].empty());
      CHECK(host.poisoned(k) == 0);
      CHECK(std::all_of(outputs[k].begin(), outputs[k].end(), [](double v) { return std::isfinite(v); }));
    }
  }
}
