//===- PtxasUtil.h - Running ptxas from the unit tests ------------*- C++ -*-===//
//
// Finds ptxas (TOKAMAX_PTXAS from the build, else /usr/local/cuda/bin/ptxas) and runs
// `ptxas -v` on PTX text, returning the exit status and the log (register and spill
// counts), so tests can check that kernels assemble without spills; finds cuobjdump and
// disassembles cubins with it (SASS); and the text searches those tests make in PTX,
// SASS and logs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <unistd.h>
#include <utility>
#include <vector>

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

/// cuobjdump: TOKAMAX_CUOBJDUMP from the environment, else beside the build's ptxas, else
/// in /usr/local/cuda*/bin; empty when none exists (not every toolkit install has it).
inline std::string cuobjdump_path() {
  std::error_code ec;
  if (const char *env = std::getenv("TOKAMAX_CUOBJDUMP"); env && *env)
    return std::filesystem::is_regular_file(env, ec) ? env : "";
  if (std::string ptxas = ptxas_path(); !ptxas.empty()) {
    auto beside = std::filesystem::path(ptxas).parent_path() / "cuobjdump";
    if (std::filesystem::is_regular_file(beside, ec))
      return beside.string();
  }
  for (const auto &entry : std::filesystem::directory_iterator("/usr/local", ec))
    if (entry.path().filename().string().rfind("cuda", 0) == 0 &&
        std::filesystem::is_regular_file(entry.path() / "bin" / "cuobjdump", ec))
      return (entry.path() / "bin" / "cuobjdump").string();
  return "";
}

/// Runs `command` with a temporary file holding `input` in place of `{}`:
/// {exit status, stdout and stderr}.
inline std::pair<int, std::string> run_on_file(const std::string &command, const void *input, size_t bytes,
                                               const std::string &suffix) {
  static std::atomic<int> counter{0};
  auto base = std::filesystem::temp_directory_path() /
              ("tokamax-tool-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::string src = base.string() + suffix, log = base.string() + ".log";
  std::ofstream(src, std::ios::binary).write(static_cast<const char *>(input), static_cast<std::streamsize>(bytes));
  std::string line = command;
  line.replace(line.find("{}"), 2, "'" + src + "'");
  int status = std::system((line + " > '" + log + "' 2>&1").c_str());
  std::ifstream in(log, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::error_code ec;
  std::filesystem::remove(src, ec);
  std::filesystem::remove(log, ec);
  return {status, text};
}

/// `cuobjdump -sass` of a cubin: {exit status, the SASS listing}.
inline std::pair<int, std::string> run_cuobjdump_sass(const std::string &cuobjdump,
                                                      const std::vector<uint8_t> &cubin) {
  return run_on_file("'" + cuobjdump + "' -sass {}", cubin.data(), cubin.size(), ".cubin");
}

/// `ptxas -v -arch=<arch>` on `ptx`: {exit status, log}.
inline std::pair<int, std::string> run_ptxas(const std::string &ptxas, const std::string &ptx,
                                             const std::string &arch) {
  return run_on_file("'" + ptxas + "' -v -arch=" + arch + " {} -o /dev/null", ptx.data(), ptx.size(), ".ptx");
}

/// ptxas assembles `ptx` for `arch` and reports no spill stores (its log in the failure).
inline void check_assembles_without_spills(const std::string &ptxas, const std::string &ptx,
                                           const std::string &arch = "sm_90a") {
  auto [status, log] = run_ptxas(ptxas, ptx, arch);
  INFO(log);
  CHECK(status == 0);
  CHECK(contains(log, " 0 bytes spill stores"));
}

/// The spill-store bytes a `ptxas -v` log reports (the largest, over its functions).
inline int64_t spill_store_bytes(const std::string &log) {
  int64_t most = 0;
  for (size_t at = log.find(" bytes spill stores"); at != std::string::npos;
       at = log.find(" bytes spill stores", at + 1)) {
    size_t begin = log.rfind(' ', at - 1);
    most = std::max<int64_t>(most, std::stoll(log.substr(begin + 1, at - begin - 1)));
  }
  return most;
}

} // namespace test
