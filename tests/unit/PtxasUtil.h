//===- PtxasUtil.h - Running ptxas from the unit tests ------------*- C++ -*-===//
//
// Finds ptxas (TOKAMAX_PTXAS from the build, else /usr/local/cuda/bin/ptxas) and runs
// `ptxas -v` on PTX text, returning the exit status and the log (register and spill
// counts), so tests can check that kernels assemble without spills; and the text
// searches those tests make in PTX and logs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace test {

/// Whether `text` (PTX, a ptxas log) contains `what`, and how many times.
inline bool contains(const std::string &text, const std::string &what) { return text.find(what) != std::string::npos; }
inline size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1))
    ++n;
  return n;
}

/// The ptxas the build found, else the default CUDA location; empty when neither exists.
inline std::string ptxas_path() {
  std::error_code ec;
#ifdef TOKAMAX_PTXAS
  if (std::filesystem::is_regular_file(TOKAMAX_PTXAS, ec))
    return TOKAMAX_PTXAS;
#endif
  return std::filesystem::is_regular_file("/usr/local/cuda/bin/ptxas", ec) ? "/usr/local/cuda/bin/ptxas" : "";
}

/// `ptxas -v -arch=<arch>` on `ptx`: {exit status, log}.
inline std::pair<int, std::string> run_ptxas(const std::string &ptxas, const std::string &ptx,
                                             const std::string &arch) {
  static std::atomic<int> counter{0};
  auto base = std::filesystem::temp_directory_path() /
              ("tokamax-ptxas-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::string src = base.string() + ".ptx", log = base.string() + ".log";
  std::ofstream(src, std::ios::binary) << ptx;
  std::string command = "'" + ptxas + "' -v -arch=" + arch + " '" + src + "' -o /dev/null > '" + log + "' 2>&1";
  int status = std::system(command.c_str());
  std::ifstream in(log, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::error_code ec;
  std::filesystem::remove(src, ec);
  std::filesystem::remove(log, ec);
  return {status, text};
}

} // namespace test
