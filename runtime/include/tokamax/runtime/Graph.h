//===- Graph.h - CUDA graphs: captured work replayed by one launch -*- C++ -*-===//
//
// Graph::capture records what a piece of work enqueues on a stream (kernel launches,
// memsets, copies) without running it; GraphExec instantiates it once and replays it
// with one cuGraphLaunch, and can take the parameters of a later capture of the same
// work (other addresses) without instantiating again. Both own their driver handles.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Driver.h"
#include "tokamax/runtime/Export.h"

#include <functional>
#include <string_view>

#ifndef __cuda_cuda_h__
struct CUgraph_st;
struct CUgraphExec_st;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
#endif

namespace tokamax {

class Stream;

/// A captured CUDA graph. Move-only.
class TOKAMAX_API Graph {
public:
  /// Captures what `work` enqueues on `stream`; nothing runs. The capture is the
  /// calling thread's: anything in `work` that cannot be captured (a synchronisation,
  /// an allocation, a module load, work on another stream) makes it fail. Throws Error
  /// naming `what` and the reason (the work's own exception or the driver's error);
  /// the capture is ended either way. The legacy default stream cannot be captured.
  static Graph capture(const Stream& stream, const std::function<void()>& work, std::string_view what);

  Graph() = default;
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  CUgraph handle() const { return graph_; }

private:
  explicit Graph(CUgraph graph) : graph_(graph) {}
  CUgraph graph_ = nullptr;
};

/// An instantiated graph. Move-only.
class TOKAMAX_API GraphExec {
public:
  GraphExec() = default;
  explicit GraphExec(const Graph& graph);
  GraphExec(GraphExec&& other) noexcept;
  GraphExec& operator=(GraphExec&& other) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec();

  /// Takes the node parameters of `graph`, a capture of the same work (same nodes and
  /// kernels; other addresses or scalars), in place (cuGraphExecUpdate). False when the
  /// driver refuses (the work changed shape); this graph then stays as it was.
  bool update(const Graph& graph);
  /// Enqueues one replay on `stream`.
  void launch(CUstream stream) const;
  /// Uploads the graph to the device ahead of its first launch.
  void upload(CUstream stream) const;
  CUgraphExec handle() const { return exec_; }

private:
  CUgraphExec exec_ = nullptr;
};

} // namespace tokamax
