// tokamax-compile: fills and maintains kernel caches and builds exports ahead of time,
// with no GPU needed.
//
//   tokamax-compile precompile --arch sm_90a --cache-dir DIR [--dump-dir DIR] [--filter S]
//                              [--function F.json [--autotune R.json]]
//   tokamax-compile export --function F.json --target sm_90a [--device-kind "NVIDIA H200:9.0"]
//                          [--autotune R.json] [--no-ptx] [--no-ir] -o F.tkx
//   tokamax-compile inspect F.tkx
//   tokamax-compile ls [--cache-dir DIR]
//   tokamax-compile verify [--cache-dir DIR] [--remove-bad]
//   tokamax-compile prune --max-size 1G [--cache-dir DIR]
#include <tokamax/autotune/Autotune.h>
#include <tokamax/jit/Jit.h>
#include <tokamax/export/ExportFunction.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/ops/Function.h>
#include <tokamax/ops/Registry.h>
#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <unistd.h>

namespace {

uint64_t parseSize(const std::string &text) {
  size_t pos = 0;
  double value = std::stod(text, &pos);
  std::string unit = text.substr(pos);
  double scale = 1;
  if (unit == "K" || unit == "KB") scale = 1e3;
  else if (unit == "M" || unit == "MB") scale = 1e6;
  else if (unit == "G" || unit == "GB") scale = 1e9;
  else if (!unit.empty()) throw tokamax::Error("--max-size: unknown unit '" + unit + "' (use K, M or G)");
  return static_cast<uint64_t>(value * scale);
}

std::string human(uint64_t bytes) {
  if (bytes >= 1000000) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (bytes >= 1000) return fmt::format("{:.1f} KB", bytes / 1e3);
  return fmt::format("{} B", bytes);
}

std::string readFile(const std::string &path, const char *what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw tokamax::Error(fmt::format("{}: cannot read '{}'", what, path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The kernels of a traced Function (its JSON) for `arch`, with an autotuning result's
/// configs where it has them, as registered kernels.
std::vector<tokamax::RegisteredKernel> functionKernels(const std::string &path, const std::string &autotunePath,
                                                       const std::string &arch) {
  tokamax::Function f = tokamax::Function::from_json(readFile(path, "--function"));
  std::unique_ptr<tokamax::AutotuningScope> scope;
  if (!autotunePath.empty())
    scope = std::make_unique<tokamax::AutotuningScope>(
        tokamax::AutotuningResult::loads(readFile(autotunePath, "--autotune")));
  std::vector<tokamax::RegisteredKernel> kernels;
  for (tokamax::dsl::Kernel &k : f.kernels(arch)) {
    auto shared = std::make_shared<tokamax::dsl::Kernel>(std::move(k));
    kernels.push_back({shared->name(), [shared] { return std::move(*shared); }, ""});
  }
  fmt::print("{}: {} calls, {} kernels for {}\n", path, f.calls().size(), kernels.size(), arch);
  return kernels;
}

int precompile(const std::string &arch, const std::string &cacheDir, const std::string &dumpDir,
               const std::string &filter, const std::string &functionPath, const std::string &autotunePath) {
  tokamax::Arch::parse(arch, "--arch");
  tokamax::CompileOptions options;
  options.arch = arch;
  options.dump_dir = dumpDir;
  if (!autotunePath.empty() && functionPath.empty())
    throw tokamax::Error("--autotune needs --function (the calls whose configs it holds)");
  auto kernels = functionPath.empty() ? tokamax::registered_kernels()
                                      : functionKernels(functionPath, autotunePath, arch);
  bool tty = isatty(STDERR_FILENO);
  size_t done = 0, hits = 0, selected = 0;
  auto wanted = [&](const tokamax::RegisteredKernel &k) {
    return k.name.find(filter) != std::string::npos && (k.only_arch.empty() || k.only_arch == arch);
  };
  for (const auto &k : kernels) {
    selected += wanted(k);
    if (k.name.find(filter) != std::string::npos && !wanted(k))
      fmt::print("{:<36} {}  skipped: compiles for {} only\n", k.name, arch, k.only_arch);
  }
  auto start = std::chrono::steady_clock::now();
  for (const auto &k : kernels) {
    if (!wanted(k))
      continue;
    if (tty)
      fmt::print(stderr, "\r[{}/{}] {:<40}", done + 1, selected, k.name);
    auto t0 = std::chrono::steady_clock::now();
    tokamax::PrecompileResult r = tokamax::precompile(k.build(), options, cacheDir);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++done;
    hits += r.cache_hit;
    if (tty)
      fmt::print(stderr, "\r{:<60}\r", "");
    if (r.cache_hit)
      fmt::print("{:<36} {}  cached ({})\n", k.name, arch, r.digest.substr(0, 12));
    else
      fmt::print("{:<36} {}  compiled in {:.1f} ms: {} B PTX, {} B cubin ({})\n", k.name, arch, ms,
                 r.kernel.ptx.size(), r.kernel.cubin.size(), r.digest.substr(0, 12));
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("precompiled {} kernels for {} into {} ({} already cached) in {:.2f} s\n", done, arch,
             cacheDir, hits, total);
  return 0;
}

/// Builds an export of the function in `functionPath` for a target, with progress on a
/// terminal.
int exportFunction(const std::string &functionPath, const std::string &arch, const std::string &deviceKind,
                   const std::string &autotunePath, const std::string &output, bool ptx, bool ir) {
  tokamax::Function f = tokamax::Function::from_json(readFile(functionPath, "--function"));
  tokamax::ExportOptions options;
  options.target = tokamax::ExportTarget::parse(arch, deviceKind);
  if (!autotunePath.empty())
    options.autotuning = std::make_shared<const tokamax::AutotuningResult>(
        tokamax::AutotuningResult::loads(readFile(autotunePath, "--autotune")));
  options.include_ptx = ptx;
  options.include_ir = ir;
  const bool tty = isatty(STDERR_FILENO);
  options.progress = [&](const tokamax::ExportProgress &p) {
    if (tty)
      fmt::print(stderr, "\r{:<70}\r", p.done < p.total ? fmt::format("[{}/{}] compiling {}", p.done + 1, p.total,
                                                                         p.kernel)
                                                          : std::string());
  };
  auto start = std::chrono::steady_clock::now();
  tokamax::ExportedFunction e = tokamax::export_function(f, options);
  e.save(output);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("exported {} calls, {} kernels ({} launches) for {} to {}: {} in {:.2f} s\n", e.calls().size(),
             e.kernels().size(), e.launch_count(), e.target().to_string(), output, human(e.bytes().size()), seconds);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"tokamax-compile: precompile and maintain Tokamax kernel caches, build exports (no GPU needed)"};
  app.require_subcommand(1);
  std::string cacheDir = tokamax::DiskCache::default_directory().string();

  auto *pre = app.add_subcommand("precompile", "compile the registered kernels into a cache");
  std::string arch = "sm_90a", dumpDir, filter;
  pre->add_option("--arch", arch, "target GPU architecture (sm_80, sm_90a, ...)");
  pre->add_option("--cache-dir", cacheDir, "kernel cache directory")->capture_default_str();
  pre->add_option("--dump-dir", dumpDir, "write every pipeline stage of every kernel here");
  pre->add_option("--filter", filter, "only kernels whose name contains this");
  std::string functionPath, autotunePath;
  pre->add_option("--function", functionPath,
                  "the kernels of this traced function (Function::to_json) instead of the registered ones");
  pre->add_option("--autotune", autotunePath, "an AutotuningResult (JSON) whose configs the function's calls use");

  auto *exp = app.add_subcommand("export", "compile a traced function into one export file (no GPU needed)");
  std::string exportArch = "sm_90a", deviceKind, output;
  bool noPtx = false, noIr = false;
  exp->add_option("--function", functionPath, "the traced function (Function::to_json)")->required();
  exp->add_option("--target", exportArch, "target GPU architecture (sm_80, sm_90a, ...)")->capture_default_str();
  exp->add_option("--device-kind", deviceKind,
                  "the exact device it runs on, \"NAME:MAJOR.MINOR\" (e.g. \"NVIDIA H200:9.0\"); "
                  "default: any device of the arch");
  exp->add_option("--autotune", autotunePath, "an AutotuningResult (JSON) whose configs the calls use");
  exp->add_option("-o,--output", output, "the export file to write")->required();
  exp->add_flag("--no-ptx", noPtx, "leave out each kernel's PTX");
  exp->add_flag("--no-ir", noIr, "leave out each kernel's tile IR (interpret() of an export needs it)");

  auto *inspect = app.add_subcommand("inspect", "print what an export file holds");
  std::string inspectPath;
  inspect->add_option("file", inspectPath, "the export file")->required();

  auto *ls = app.add_subcommand("ls", "list cache entries");
  ls->add_option("--cache-dir", cacheDir, "kernel cache directory")->capture_default_str();

  auto *verify = app.add_subcommand("verify", "check every cache entry's checksum");
  bool removeBad = false;
  verify->add_option("--cache-dir", cacheDir, "kernel cache directory")->capture_default_str();
  verify->add_flag("--remove-bad", removeBad, "delete entries that fail");

  auto *prune = app.add_subcommand("prune", "delete least recently used entries above a size");
  std::string maxSize;
  prune->add_option("--cache-dir", cacheDir, "kernel cache directory")->capture_default_str();
  prune->add_option("--max-size", maxSize, "e.g. 500M, 2G")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*pre)
      return precompile(arch, cacheDir, dumpDir, filter, functionPath, autotunePath);
    if (*exp)
      return exportFunction(functionPath, exportArch, deviceKind, autotunePath, output, !noPtx, !noIr);
    if (*inspect) {
      fmt::print("{}", tokamax::ExportedFunction::load(inspectPath).describe());
      return 0;
    }
    tokamax::DiskCache cache(cacheDir);
    if (*ls) {
      auto entries = cache.list();
      for (const auto &e : entries)
        fmt::print("{}  {:<8} {:>10}  {}{}\n", e.digest.substr(0, 16), e.target_arch, human(e.bytes),
                   e.kernel_name, e.valid ? "" : "  INVALID: " + e.problem);
      fmt::print("{} entries, {} in {}\n", entries.size(), human(cache.total_bytes()), cacheDir);
      return 0;
    }
    if (*verify) {
      auto bad = cache.verify(removeBad);
      for (const auto &e : bad)
        fmt::print("bad: {} ({}){}\n", e.path.string(), e.problem, removeBad ? " removed" : "");
      fmt::print("{} bad entries in {}\n", bad.size(), cacheDir);
      return bad.empty() ? 0 : 1;
    }
    auto r = cache.prune(parseSize(maxSize));
    fmt::print("removed {} entries ({}), {} kept\n", r.removed, human(r.bytes_freed), human(r.bytes_kept));
    return 0;
  } catch (const std::exception &e) {
    fmt::print(stderr, "tokamax-compile: error: {}\n", e.what());
    return 1;
  }
}
