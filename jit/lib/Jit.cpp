//===- Jit.cpp - Compile on first use, cache in memory and on disk ----------===//
#include <tokamax/jit/Jit.h>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/DiskCache.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>
#include <tokamax/runtime/PrivateFiles.h>

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace tokamax {

namespace {

CacheKey makeKey(const std::string &name, const std::string &ir, const CompileOptions &options) {
  CacheKey key;
  key.kernel_name = name;
  key.canonical_ir = ir;
  key.target_arch = options.arch;
  key.ptx_isa = ptx_isa_version();
  key.compile_options = options.key();
  key.tokamax_version = TOKAMAX_VERSION_STRING;
  key.llvm_version = llvm_version();
  // The toolkit generation, not the exact assembler found here: a cache precompiled on a
  // build machine must be found on a production machine without the toolkit. The exact
  // assembler is recorded in the entry's metadata.
  key.assembler = assembler_key();
  return key;
}

CacheEntry toEntry(const CompiledKernel &kernel) {
  LaunchInfo info = kernel.launch;
  info.assembler = kernel.cubin.empty() ? "" : assembler_identity();
  return CacheEntry{kernel.launch.kernel_name, kernel.ptx, kernel.cubin, info.to_json()};
}

} // namespace

// One allocation for the fields of any op's key on the hot path (attention's has ~40).
KernelKey::KernelKey(std::string_view op) : op_(op), hash_(hash64(op)) { fields_.reserve(48); }

KernelKey::KernelKey(std::string_view op, std::initializer_list<int64_t> fields) : op_(op), hash_(hash64(op)) {
  fields_.reserve(fields.size());
  for (int64_t f : fields)
    add(f);
}

KernelKey &KernelKey::add(uint64_t field) {
  fields_.push_back(field);
  hash_ = hash_combine(hash_, field);
  return *this;
}

KernelKey &KernelKey::add(double field) { return add(std::bit_cast<uint64_t>(field)); }

KernelKey KernelKey::with_hash(uint64_t hash) const {
  KernelKey key = *this;
  key.hash_ = hash;
  return key;
}

namespace {

/// A kernel key on one device: looked up by reference (no copy on the hot path).
struct SlotRef {
  const KernelKey *key;
  int ordinal;
};
struct SlotKey {
  KernelKey key;
  int ordinal;
};
struct SlotHash {
  using is_transparent = void;
  static size_t mix(uint64_t hash, int ordinal) {
    return hash ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(ordinal + 1));
  }
  size_t operator()(const SlotKey &k) const { return mix(k.key.hash(), k.ordinal); }
  size_t operator()(const SlotRef &k) const { return mix(k.key->hash(), k.ordinal); }
};
struct SlotEqual {
  using is_transparent = void;
  static bool same(const KernelKey &a, int oa, const KernelKey &b, int ob) { return oa == ob && a == b; }
  bool operator()(const SlotKey &a, const SlotKey &b) const { return same(a.key, a.ordinal, b.key, b.ordinal); }
  bool operator()(const SlotRef &a, const SlotKey &b) const { return same(*a.key, a.ordinal, b.key, b.ordinal); }
  bool operator()(const SlotKey &a, const SlotRef &b) const { return same(a.key, a.ordinal, *b.key, b.ordinal); }
};

/// A kernel key on one architecture.
struct CodeKey {
  KernelKey key;
  std::string arch;
  bool operator==(const CodeKey &) const = default;
};
struct CodeHash {
  size_t operator()(const CodeKey &k) const { return hash_combine(k.key.hash(), hash64(k.arch)); }
};

} // namespace

/// A kernel's code for one architecture: what every device of that architecture loads.
struct Jit::Code {
  std::vector<uint8_t> cubin;
  LaunchInfo info;
  std::string digest;
  KernelSource from = KernelSource::Compiled;  // Disk or Compiled
};

struct Jit::State {
  struct Slot {
    std::shared_future<std::shared_ptr<LoadedKernel>> future;
    const LoadedKernel *ready = nullptr;
  };
  mutable std::shared_mutex mutex;
  // The whole key is kept and compared: a hash collision is a miss, not another kernel.
  std::unordered_map<SlotKey, Slot, SlotHash, SlotEqual> kernels;
  // Code is per architecture, not per device: devices of one kind compile (or read from
  // disk) a kernel once, even when their first calls come at the same time, and each
  // loads it into its own context.
  std::mutex codeMutex;
  std::unordered_map<CodeKey, std::shared_future<std::shared_ptr<const Code>>, CodeHash> code;
  std::mutex statsMutex;
  JitStats stats;
  std::atomic<uint64_t> generation{1};
  std::unique_ptr<DiskCache> disk;
};

Jit::Jit() : state_(std::make_unique<State>()) {
  if (!DiskCache::disabled_by_environment())
    state_->disk = std::make_unique<DiskCache>(DiskCache::default_directory());
}
Jit::~Jit() = default;

Jit &Jit::instance() {
  static Jit jit;
  return jit;
}

const LoadedKernel *Jit::find(const KernelKey &key, const Device &device) const {
  std::shared_lock lock(state_->mutex);
  auto it = state_->kernels.find(SlotRef{&key, device.ordinal()});
  return it == state_->kernels.end() ? nullptr : it->second.ready;
}

/// The kernel's name in its IR ("func.func @name(").
static std::string kernelName(const std::string &ir) {
  size_t at = ir.find("func.func @");
  if (at == std::string::npos)
    throw Error("tile IR without a kernel function");
  at += 11;
  return ir.substr(at, ir.find('(', at) - at);
}

const LoadedKernel &Jit::get_ir(const KernelKey &key, Device &device, const std::function<std::string()> &irSource,
                                KernelSource *source) {
  const SlotRef slot{&key, device.ordinal()};
  std::promise<std::shared_ptr<LoadedKernel>> promise;
  std::shared_future<std::shared_ptr<LoadedKernel>> future;
  bool owner = false;
  {
    std::unique_lock lock(state_->mutex);
    auto it = state_->kernels.find(slot);
    if (it != state_->kernels.end()) {
      if (it->second.ready) {
        if (source)
          *source = KernelSource::Memory;
        std::lock_guard s(state_->statsMutex);
        ++state_->stats.memory_hits;
        return *it->second.ready;
      }
      future = it->second.future;
    } else {
      future = promise.get_future().share();
      state_->kernels[SlotKey{key, device.ordinal()}].future = future;
      owner = true;
    }
  }
  if (!owner) {
    if (source)
      *source = KernelSource::Memory;
    return *future.get(); // rethrows the owner's error
  }
  try {
    bool codeOwner = false;
    const std::shared_ptr<const Code> code = codeFor(key, device.arch(), irSource, codeOwner);
    Module module = Module::load_cubin(code->cubin, device);
    auto loaded = std::make_shared<LoadedKernel>(std::move(module), code->info, code->digest);
    promise.set_value(loaded);
    {
      std::unique_lock lock(state_->mutex);
      auto it = state_->kernels.find(slot);
      if (it == state_->kernels.end())  // clear() ran meanwhile
        it = state_->kernels.emplace(SlotKey{key, device.ordinal()}, State::Slot{future, nullptr}).first;
      it->second.ready = loaded.get();
    }
    const KernelSource from = codeOwner ? code->from : KernelSource::Memory;
    {
      std::lock_guard s(state_->statsMutex);
      if (codeOwner)
        ++(from == KernelSource::Disk ? state_->stats.disk_hits : state_->stats.compiles);
      ++state_->stats.loads;
    }
    if (source)
      *source = from;
    return *loaded;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::unique_lock lock(state_->mutex);
    if (auto it = state_->kernels.find(slot); it != state_->kernels.end())
      state_->kernels.erase(it);
    throw;
  }
}

std::shared_ptr<const Jit::Code> Jit::codeFor(const KernelKey &key, const std::string &arch,
                                         const std::function<std::string()> &irSource, bool &owner) {
  const CodeKey codeKey{key, arch};
  std::promise<std::shared_ptr<const Code>> promise;
  std::shared_future<std::shared_ptr<const Code>> future;
  {
    std::lock_guard lock(state_->codeMutex);
    auto [it, added] = state_->code.try_emplace(codeKey);
    if (added)
      it->second = promise.get_future().share();
    future = it->second;
    owner = added;
  }
  if (!owner)
    return future.get();  // rethrows the owner's error
  try {
    std::string ir = irSource();
    std::string name = kernelName(ir);
    CompileOptions options;
    options.arch = arch;
    CacheKey cacheKey = makeKey(name, ir, options);
    auto code = std::make_shared<Code>();
    code->digest = cacheKey.digest();
    std::optional<CacheEntry> entry;
    if (state_->disk)
      entry = state_->disk->load(cacheKey);
    code->from = KernelSource::Disk;
    if (!entry) {
      if (DiskCache::must_hit_by_environment())
        throw Error(fmt::format("kernel {} ({}) is not in the kernel cache and "
                                "TOKAMAX_CACHE_MUST_HIT=1 forbids compiling it; precompile it with "
                                "tokamax-compile",
                                name, code->digest.substr(0, 16)));
      CompiledKernel compiled = compile_ir(ir, options);
      entry = toEntry(compiled);
      if (state_->disk)  // a full or read-only disk warns once; the call still succeeds
        state_->disk->try_store(cacheKey, *entry);
      code->from = KernelSource::Compiled;
    }
    code->info = LaunchInfo::from_json(entry->metadata_json);
    code->cubin = std::move(entry->cubin);
    promise.set_value(code);
    return code;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard lock(state_->codeMutex);
    state_->code.erase(codeKey);  // the next call tries again
    throw;
  }
}

JitStats Jit::stats() const {
  std::lock_guard s(state_->statsMutex);
  return state_->stats;
}

void Jit::clear() {
  {
    std::lock_guard lock(state_->codeMutex);
    state_->code.clear();
  }
  std::unique_lock lock(state_->mutex);
  state_->kernels.clear();
  state_->generation.fetch_add(1, std::memory_order_release);
}

uint64_t Jit::generation() const { return state_->generation.load(std::memory_order_acquire); }

PrecompileResult precompile_ir(const std::string &name, const std::string &ir,
                               const CompileOptions &options, const std::string &cacheDir) {
  CacheKey key = makeKey(name, ir, options);
  DiskCache disk(cacheDir);
  // Precompiling into a cache nobody may load from would only look like success.
  if (!disk.usable())
    throw Error(fmt::format("cannot precompile into {}: {}", cacheDir, private_files::why_untrusted(cacheDir)));
  PrecompileResult result;
  result.digest = key.digest();
  if (std::optional<CacheEntry> entry = disk.load(key)) {
    // Already read and verified: the cubin and launch metadata cost nothing more here.
    result.cache_hit = true;
    result.kernel.cubin = std::move(entry->cubin);
    result.kernel.launch = LaunchInfo::from_json(entry->metadata_json);
    return result;
  }
  result.kernel = compile_ir(ir, options);
  disk.store(key, toEntry(result.kernel));
  return result;
}

} // namespace tokamax
