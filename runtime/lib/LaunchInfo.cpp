//===- LaunchInfo.cpp - Launch metadata as JSON (cache entries, export files) ===//
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/LaunchInfo.h>

#include <nlohmann/json.hpp>

namespace tokamax {

std::string LaunchInfo::to_json() const {
  nlohmann::json j;
  j["kernel"] = kernel_name;
  j["grid"] = {grid[0], grid[1], grid[2]};
  j["block_threads"] = block_threads;
  j["shared_bytes"] = shared_bytes;
  j["assembler"] = assembler;
  nlohmann::json ps = nlohmann::json::array();
  for (const KernelParam &p : params)
    ps.push_back({{"name", p.name},
                  {"tensor", p.is_tensor},
                  {"output", p.is_output},
                  {"dtype", std::string(dtype_name(p.dtype))},
                  {"shape", p.shape}});
  j["params"] = ps;
  j["dynamic_shared"] = dynamic_shared;
  j["cluster"] = cluster;
  nlohmann::json maps = nlohmann::json::array();
  for (const TensorMapParam &m : tensor_maps) {
    nlohmann::json map = {m.param, m.box_inner, m.box_outer, m.swizzle};
    if (m.batch_rows)  // only where batched: older readers see the 2-D maps they know
      map.push_back(m.batch_rows);
    maps.push_back(std::move(map));
  }
  j["tensor_maps"] = maps;
  return j.dump();
}

LaunchInfo LaunchInfo::from_json(const std::string &text) {
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    LaunchInfo info;
    info.kernel_name = j.at("kernel").get<std::string>();
    for (int i = 0; i < 3; ++i)
      info.grid[i] = j.at("grid").at(i).get<uint32_t>();
    info.block_threads = j.at("block_threads").get<uint32_t>();
    info.shared_bytes = j.at("shared_bytes").get<uint32_t>();
    info.assembler = j.value("assembler", "");
    for (const auto &p : j.at("params")) {
      KernelParam param;
      param.name = p.at("name").get<std::string>();
      param.is_tensor = p.at("tensor").get<bool>();
      param.is_output = p.at("output").get<bool>();
      param.dtype = parse_dtype(p.at("dtype").get<std::string>());
      param.shape = p.at("shape").get<std::vector<int64_t>>();
      info.params.push_back(std::move(param));
    }
    info.dynamic_shared = j.value("dynamic_shared", false);
    info.cluster = j.value("cluster", 1u);
    if (j.contains("tensor_maps"))
      for (const auto &m : j.at("tensor_maps"))
        info.tensor_maps.push_back({m.at(0).get<uint32_t>(), m.at(1).get<uint32_t>(), m.at(2).get<uint32_t>(),
                                    m.size() > 3 ? m.at(3).get<uint32_t>() : 128u,
                                    m.size() > 4 ? m.at(4).get<uint32_t>() : 0u});
    return info;
  } catch (const nlohmann::json::exception &e) {
    throw Error(std::string("invalid kernel launch metadata: ") + e.what());
  }
}

} // namespace tokamax
