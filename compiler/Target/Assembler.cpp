//===- Assembler.cpp - PTX -> cubin through nvJitLink or ptxas --------------===//
//
// nvJitLink is loaded with dlopen at first use (it is part of the CUDA toolkit, not of
// the driver); when it is missing, a `ptxas` process does the job. Either way the
// assembler's identity goes into the kernel cache key.
//
//===----------------------------------------------------------------------===//
#include <tokamax/compiler/Compiler.h>
#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace tokamax {

namespace {

using Handle = void *;
struct NvJitLink {
  int (*create)(Handle *, uint32_t, const char **) = nullptr;
  int (*destroy)(Handle *) = nullptr;
  int (*addData)(Handle, int, const void *, size_t, const char *) = nullptr;
  int (*complete)(Handle) = nullptr;
  int (*cubinSize)(Handle, size_t *) = nullptr;
  int (*cubin)(Handle, void *) = nullptr;
  int (*errorLogSize)(Handle, size_t *) = nullptr;
  int (*errorLog)(Handle, char *) = nullptr;
  int (*version)(unsigned *, unsigned *) = nullptr;
  bool loaded = false;
  unsigned major = 0, minor = 0;
};

constexpr int kInputPtx = 2; // NVJITLINK_INPUT_PTX

std::vector<std::string> cudaRoots() {
  std::vector<std::string> roots;
  for (const char *var : {"TOKAMAX_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"})
    if (const char *v = std::getenv(var); v && *v)
      roots.emplace_back(v);
  roots.emplace_back("/usr/local/cuda");
  return roots;
}

const NvJitLink &nvJitLink() {
  static NvJitLink api;
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char *off = std::getenv("TOKAMAX_DISABLE_NVJITLINK"); off && *off == '1')
      return;
    void *lib = dlopen("libnvJitLink.so.13", RTLD_NOW | RTLD_LOCAL);
    for (const std::string &root : cudaRoots())
      if (!lib)
        lib = dlopen((root + "/lib64/libnvJitLink.so.13").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    bool ok = sym(api.create, "__nvJitLinkCreate_13_0") && sym(api.destroy, "__nvJitLinkDestroy_13_0") &&
              sym(api.addData, "__nvJitLinkAddData_13_0") && sym(api.complete, "__nvJitLinkComplete_13_0") &&
              sym(api.cubinSize, "__nvJitLinkGetLinkedCubinSize_13_0") &&
              sym(api.cubin, "__nvJitLinkGetLinkedCubin_13_0") &&
              sym(api.errorLogSize, "__nvJitLinkGetErrorLogSize_13_0") &&
              sym(api.errorLog, "__nvJitLinkGetErrorLog_13_0") && sym(api.version, "nvJitLinkVersion");
    if (ok && api.version(&api.major, &api.minor) == 0)
      api.loaded = true;
  });
  return api;
}

std::string findPtxas() {
  if (const char *v = std::getenv("TOKAMAX_PTXAS"); v && *v)
    return v;
  for (const std::string &root : cudaRoots())
    if (std::filesystem::exists(root + "/bin/ptxas"))
      return root + "/bin/ptxas";
  return {};
}

std::string runCapture(const std::string &command, int &status) {
  std::string out;
  FILE *pipe = popen(command.c_str(), "r");
  if (!pipe) {
    status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0)
    out.append(buf, n);
  status = pclose(pipe);
  return out;
}

const std::string &ptxasVersion() {
  static std::string version = [] {
    std::string ptxas = findPtxas();
    if (ptxas.empty())
      return std::string();
    int status = 0;
    std::string text = runCapture("'" + ptxas + "' --version 2>&1", status);
    auto pos = text.find("release ");
    return pos == std::string::npos ? std::string("unknown")
                                    : text.substr(pos + 8, text.find(',', pos) - pos - 8);
  }();
  return version;
}

std::vector<uint8_t> assembleWithNvJitLink(const NvJitLink &api, const std::string &ptx,
                                           const std::string &arch) {
  std::string archOption = "-arch=" + arch;
  const char *options[] = {archOption.c_str(), "-O3"};
  Handle handle = nullptr;
  if (api.create(&handle, 2, options) != 0)
    throw Error(fmt::format("nvJitLink: cannot create a link for {}", arch));
  struct Guard {
    const NvJitLink &api;
    Handle &h;
    ~Guard() { api.destroy(&h); }
  } guard{api, handle};
  auto fail = [&](const char *what) {
    size_t size = 0;
    std::string log;
    if (api.errorLogSize(handle, &size) == 0 && size > 0) {
      log.resize(size);
      api.errorLog(handle, log.data());
    }
    throw Error(fmt::format("nvJitLink {} failed for {}:\n{}", what, arch, log));
  };
  if (api.addData(handle, kInputPtx, ptx.data(), ptx.size(), "kernel.ptx") != 0)
    fail("adding PTX");
  if (api.complete(handle) != 0)
    fail("linking");
  size_t size = 0;
  if (api.cubinSize(handle, &size) != 0)
    fail("reading the cubin size");
  std::vector<uint8_t> cubin(size);
  if (api.cubin(handle, cubin.data()) != 0)
    fail("reading the cubin");
  return cubin;
}

std::vector<uint8_t> assembleWithPtxas(const std::string &ptx, const std::string &arch) {
  std::string ptxas = findPtxas();
  if (ptxas.empty())
    throw Error("no PTX assembler: neither libnvJitLink.so.13 nor ptxas was found (set "
                "CUDA_HOME or TOKAMAX_PTXAS)");
  char dir[] = "/tmp/tokamax-ptxas-XXXXXX";
  if (!mkdtemp(dir))
    throw Error("cannot create a temporary directory for ptxas");
  std::filesystem::path root(dir);
  std::ofstream(root / "kernel.ptx") << ptx;
  int status = 0;
  std::string log = runCapture(fmt::format("'{}' -arch={} -O3 '{}' -o '{}' 2>&1", ptxas, arch,
                                           (root / "kernel.ptx").string(),
                                           (root / "kernel.cubin").string()),
                               status);
  std::vector<uint8_t> cubin;
  if (status == 0) {
    std::ifstream in(root / "kernel.cubin", std::ios::binary);
    cubin.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  if (status != 0 || cubin.empty())
    throw Error(fmt::format("ptxas failed for {}:\n{}", arch, log));
  return cubin;
}

/// nvJitLink compiles its input as a separate compilation unit: ptxas then ignores
/// setmaxnreg (C7504: "to maintain compatibility across compilation units") and
/// serializes wgmma (C7509: every product waited for), with spills where the register
/// split was counted on. Kernels using either go through ptxas (whole program) where it
/// is found.
bool needsWholeProgram(const std::string &ptx) {
  return ptx.find("setmaxnreg") != std::string::npos || ptx.find("wgmma.") != std::string::npos;
}

} // namespace

// "cuda-13.wp": Hopper kernels assembled as whole programs (entries cached before,
// assembled by nvJitLink, are not reused).
std::string assembler_key() { return "cuda-13.wp"; }

std::string assembler_identity() {
  const NvJitLink &api = nvJitLink();
  const bool ptxas = !ptxasVersion().empty();
  if (api.loaded && ptxas)
    return fmt::format("nvJitLink {}.{} + ptxas {}", api.major, api.minor, ptxasVersion());
  if (api.loaded)
    return fmt::format("nvJitLink {}.{}", api.major, api.minor);
  if (ptxas)
    return "ptxas " + ptxasVersion();
  return "none";
}

std::vector<uint8_t> assemble_ptx(const std::string &ptx, const std::string &arch) {
  const NvJitLink &api = nvJitLink();
  if (api.loaded && !(needsWholeProgram(ptx) && !findPtxas().empty()))
    return assembleWithNvJitLink(api, ptx, arch);
  return assembleWithPtxas(ptx, arch);
}

} // namespace tokamax
