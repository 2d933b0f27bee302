// The seeded mutations of the fuzz tests: bit flips, byte changes, insertions,
// deletions, truncation, repeated spans, digits grown huge, JSON tokens swapped in. The
// sequences are fixed by the generator's seed, so a failure names the iteration that
// reproduces it. TOKAMAX_FUZZ_ITERATIONS overrides every loop's count.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>

namespace test {

inline int iterations(int base) {
  if (const char *env = std::getenv("TOKAMAX_FUZZ_ITERATIONS"))
    return std::max(1, std::atoi(env));
  return base;
}

/// One random edit of `s` (never empty unless `s` was).
inline std::string mutate(std::string s, std::mt19937 &rng) {
  auto pick = [&](size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng) : 0; };
  const int edits = 1 + int(pick(4));
  for (int e = 0; e < edits; ++e) {
    switch (pick(9)) {
    case 0:  // flip a bit
      if (!s.empty())
        s[pick(s.size())] ^= char(1u << pick(8));
      break;
    case 1:  // any byte
      if (!s.empty())
        s[pick(s.size())] = char(pick(256));
      break;
    case 2:  // insert bytes
      s.insert(pick(s.size() + 1), std::string(1 + pick(4), char(pick(256))));
      break;
    case 3:  // delete a span
      if (!s.empty())
        s.erase(pick(s.size()), 1 + pick(8));
      break;
    case 4:  // truncate
      s.resize(pick(s.size() + 1));
      break;
    case 5: {  // repeat a span
      if (s.empty())
        break;
      size_t at = pick(s.size()), n = 1 + pick(std::min<size_t>(32, s.size() - at));
      s.insert(at, s.substr(at, n));
      break;
    }
    case 6: {  // grow a number
      size_t at = s.find_first_of("0123456789", pick(s.size() + 1));
      if (at != std::string::npos)
        s.insert(at, pick(2) ? "99999999999999999999" : "-");
      break;
    }
    case 7: {  // replace a JSON token with another kind of value
      static const char *tokens[] = {"null", "true", "[]", "{}", "\"\"", "-1", "1e308", "0.5", "\"\\u0000\""};
      size_t at = s.find_first_of(":,[", pick(s.size() + 1));
      if (at != std::string::npos)
        s.insert(at + 1, tokens[pick(std::size(tokens))]);
      break;
    }
    default:  // swap two bytes
      if (s.size() > 1)
        std::swap(s[pick(s.size())], s[pick(s.size())]);
    }
  }
  return s;
}

} // namespace test
