//===- Graph.cpp - CUDA graphs: capture, instantiate, update, launch --------===//
#include "tokamax/runtime/Graph.h"

#include "tokamax/runtime/Error.h"
#include "tokamax/runtime/Stream.h"
#include "tokamax/runtime/detail/DriverApi.h"

#include <fmt/format.h>

#include <utility>

namespace tokamax {

Graph Graph::capture(const Stream& stream, const std::function<void()>& work, std::string_view what) {
  if (!stream.handle())
    throw Error(fmt::format("{}: a CUDA graph needs a created stream (Stream::create): the legacy default "
                            "stream cannot be captured",
                            what));
  const detail::DriverApi& api = detail::driver();
  check(api.cuStreamBeginCapture(stream.handle(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  std::string why;
  try {
    work();
  } catch (const std::exception& e) {
    why = e.what();
  }
  CUgraph graph = nullptr;
  const CUresult ended = api.cuStreamEndCapture(stream.handle(), &graph);
  Graph owned(graph);  // destroyed on every path below that throws
  if (ended != CUDA_SUCCESS) {
    const char* name = nullptr;
    api.cuGetErrorName(ended, &name);
    why += fmt::format("{}cuStreamEndCapture: {}", why.empty() ? "" : "; ", name ? name : "unknown error");
  }
  if (!why.empty())
    throw Error(fmt::format("{}: capturing into a CUDA graph failed ({}); a graph can only hold work that "
                            "enqueues asynchronous operations on the captured stream: no synchronisation, "
                            "allocation, module load or other stream",
                            what, why));
  return owned;
}

Graph::Graph(Graph&& other) noexcept : graph_(std::exchange(other.graph_, nullptr)) {}
Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (graph_)
      (void)detail::driver().cuGraphDestroy(graph_);
    graph_ = std::exchange(other.graph_, nullptr);
  }
  return *this;
}
Graph::~Graph() {
  if (graph_)
    (void)detail::driver().cuGraphDestroy(graph_);
}

GraphExec::GraphExec(const Graph& graph) {
  check(detail::driver().cuGraphInstantiate(&exec_, graph.handle(), 0), "cuGraphInstantiate");
}
GraphExec::GraphExec(GraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
  if (this != &other) {
    if (exec_)
      (void)detail::driver().cuGraphExecDestroy(exec_);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}
GraphExec::~GraphExec() {
  if (exec_)
    (void)detail::driver().cuGraphExecDestroy(exec_);
}

bool GraphExec::update(const Graph& graph) {
  CUgraphExecUpdateResultInfo info{};
  const CUresult r = detail::driver().cuGraphExecUpdate(exec_, graph.handle(), &info);
  if (r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    return false;
  check(r, "cuGraphExecUpdate");
  return info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

void GraphExec::launch(CUstream stream) const { check(detail::driver().cuGraphLaunch(exec_, stream), "cuGraphLaunch"); }

void GraphExec::upload(CUstream stream) const { check(detail::driver().cuGraphUpload(exec_, stream), "cuGraphUpload"); }

} // namespace tokamax
