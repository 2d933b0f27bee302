//===- Jit.h - Compile on first use, cache in memory and on disk --*- C++ -*-===//
//
// The first call of a kernel specialisation builds its tile IR, looks it up in the
// on-disk cache (or compiles it), loads the cubin and keeps it in memory. Later calls
// cost one hash lookup under a shared lock and one launch. The JIT takes IR text; the
// entries that take a dsl::Kernel are in <tokamax/jit/DslKernel.h>.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/compiler/Compiler.h>
#include <tokamax/runtime/LoadedKernel.h>
#include <tokamax/runtime/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tokamax {

class Device;
class Stream;

/// The identity of a kernel specialisation: the op's name and the values that select
/// its IR. The in-memory cache finds a kernel by the key's hash and compares the whole
/// key on a hit, so two keys whose hashes collide never share a kernel.
class TOKAMAX_API KernelKey {
public:
  explicit KernelKey(std::string_view op);
  KernelKey(std::string_view op, std::initializer_list<int64_t> fields);

  KernelKey &add(uint64_t field);
  KernelKey &add(int64_t field) { return add(static_cast<uint64_t>(field)); }
  KernelKey &add(int field) { return add(static_cast<uint64_t>(static_cast<int64_t>(field))); }
  KernelKey &add(bool field) { return add(static_cast<uint64_t>(field)); }
  KernelKey &add(double field);  ///< by its bit pattern

  uint64_t hash() const { return hash_; }
  const std::string &op() const { return op_; }
  std::span<const uint64_t> fields() const { return fields_; }
  bool operator==(const KernelKey &other) const {
    return hash_ == other.hash_ && op_ == other.op_ && fields_ == other.fields_;
  }
  /// The same key under another hash (tests force collisions with it).
  KernelKey with_hash(uint64_t hash) const;

private:
  std::string op_;
  std::vector<uint64_t> fields_;
  uint64_t hash_;
};

/// Where the kernel of a call came from (for logs, tests and benchmarks).
enum class KernelSource { Memory, Disk, Compiled };

/// disk_hits and compiles count a kernel's code once per architecture (devices of one
/// kind share it); loads count its loads, once per device that runs it.
struct TOKAMAX_API JitStats {
  uint64_t memory_hits = 0, disk_hits = 0, compiles = 0, loads = 0;
};

class TOKAMAX_API Jit {
public:
  static Jit &instance();

  /// Hot path: the kernel already loaded for (key, device), or null.
  const LoadedKernel *find(const KernelKey &key, const Device &device) const;
  /// Cold path: builds the kernel's tile IR text, compiles it (or reads it from disk) and
  /// loads it, once even when many threads ask at the same time. Throws tokamax::Error on
  /// failure (and the next call tries again).
  const LoadedKernel &get_ir(const KernelKey &key, Device &device, const std::function<std::string()> &ir,
                             KernelSource *source = nullptr);

  JitStats stats() const;
  /// Drops every loaded kernel (tests and benchmarks of cold paths).
  void clear();
  /// Changes whenever clear() runs: kernel pointers kept from another generation are stale.
  uint64_t generation() const;

  Jit();
  ~Jit();

private:
  struct State;
  struct Code;
  /// The kernel's code for `arch`: built, read from disk or compiled by the first caller
  /// (`owner`), which the others wait for.
  std::shared_ptr<const Code> codeFor(const KernelKey &key, const std::string &arch,
                                             const std::function<std::string()> &ir, bool &owner);
  std::unique_ptr<State> state_;
};

/// Compiles (or reads from `cache_dir`'s disk cache) the kernel `name` of tile IR `ir`
/// without a GPU: the work of `tokamax-compile precompile`. Returns the cache entry digest
/// and whether it was a hit.
struct TOKAMAX_API PrecompileResult {
  std::string digest;
  bool cache_hit = false;
  CompiledKernel kernel;  ///< on a hit: only the cached cubin and launch metadata
};
TOKAMAX_API PrecompileResult precompile_ir(const std::string &name, const std::string &ir,
                                           const CompileOptions &options, const std::string &cache_dir);

} // namespace tokamax
