//===- NormFrameworkTests.cpp - The op framework, shown on the norms -------===//
//
// Implementation choice (NotSupported, auto fallback), binding errors, configs, config
// providers and the JSON forms of Config and BoundArgs.
//
//===----------------------------------------------------------------------===//
#include "unit/layer_norm/NormTestUtil.h"


//===----------------------------------------------------------------------===//
// Framework
//===----------------------------------------------------------------------===//

TEST_CASE("norm: explicit tile with f64 throws NotSupported, auto falls back to reference", "[norm]") {
  const Op &op = layer_norm_op();
  BoundArgs f64 = layerArgs(DType::F64, {3, 17});
  REQUIRE_THROWS_AS(op.select(f64, std::string("tile"), "sm_90a"), NotSupported);
  REQUIRE_THROWS_WITH(op.select(f64, std::string("tile"), "sm_90a"),
                      Contains("f64 math is not supported by the tile implementation"));
  CHECK(op.select(f64, std::nullopt, "sm_90a").name() == "reference");
  CHECK(op.select(layerArgs(DType::BF16, {3, 17}), std::nullopt, "sm_90a").name() == "tile");
  // The VJP is an op of its own, with the same choice.
  CHECK(layer_norm_vjp_op().implementations().back()->name() == "reference");
  // Older GPUs, non-last axes and overlong rows go to the reference too.
  CHECK(op.select(layerArgs(DType::BF16, {3, 17}), std::nullopt, "sm_75").name() == "reference");
  REQUIRE_THROWS_AS(op.select(layerArgs(DType::BF16, {3, 17}), std::string("tile"), "sm_75"), NotSupported);
  CHECK(op.select(layerArgs(DType::F32, {3, 17, 5}, 1), std::nullopt, "sm_90a").name() == "reference");
  REQUIRE_THROWS_WITH(op.select(layerArgs(DType::F32, {3, 17, 5}, 1), std::string("tile"), "sm_90a"),
                      Contains("last axis"));
  CHECK(op.select(layerArgs(DType::F32, {2, 100000}), std::nullopt, "sm_90a").name() == "reference");
  REQUIRE_THROWS_WITH(op.select(f64, std::string("cuda"), "sm_90a"), Contains("unknown implementation"));

  // Through the host API as well.
  HostTensor x(DType::F64, {3, 17}, randomValues(51, DType::F64, 5)), y(DType::F64, {3, 17});
  TensorView xv = x.view(), yv = y.view();
  NormOptions tile;
  tile.implementation = "tile";
  REQUIRE_THROWS_AS(layer_norm_host(xv, nullptr, nullptr, yv, tile), NotSupported);
  REQUIRE_NOTHROW(layer_norm_host(xv, nullptr, nullptr, yv));
}

TEST_CASE("norm: binding names the offending argument", "[norm]") {
  auto bf = [](std::vector<int64_t> s) { return spec(std::move(s), DType::BF16); };
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), bf({16}), std::nullopt, bf({3, 17}), std::nullopt, std::nullopt,
                                      -1, 1e-5),
                      Contains("scale") && Contains("[17]"));
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), std::nullopt, spec({17}, DType::F16), bf({3, 17}), std::nullopt,
                                      std::nullopt, -1, 1e-5),
                      Contains("offset") && Contains("f16"));
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), std::nullopt, std::nullopt, spec({3, 17}, DType::F32), std::nullopt,
                                      std::nullopt, -1, 1e-5),
                      Contains("y"));
  REQUIRE_THROWS_WITH(bind_layer_norm(bf({3, 17}), std::nullopt, std::nullopt, bf({3, 17}), bf({3}), std::nullopt, -1,
                                      1e-5),
                      Contains("mean") && Contains("f32"));
  REQUIRE_THROWS_WITH(bind_rms_norm(bf({3, 17}), std::nullopt, bf({3, 17}), spec({4}, DType::F32), -1, 1e-5),
                      Contains("rstd") && Contains("3 values"));
  REQUIRE_THROWS_WITH(bind_rms_norm(bf({3, 17}), std::nullopt, bf({3, 17}), std::nullopt, 2, 1e-5),
                      Contains("axis 2"));
  REQUIRE_THROWS_WITH(bind_rms_norm(spec({3, 17}, DType::I32), std::nullopt, spec({3, 17}, DType::I32), std::nullopt,
                                    -1, 1e-5),
                      Contains("x must be bf16, f16, f32 or f64"));
  REQUIRE_THROWS_WITH(bind_rms_norm(bf({3, 17}), std::nullopt, bf({3, 17}), std::nullopt, -1, -1.0),
                      Contains("epsilon"));
  REQUIRE_THROWS_WITH(bind_rms_norm_vjp(bf({3, 16}), bf({3, 17}), std::nullopt, spec({3}, DType::F32), bf({3, 17}),
                                        std::nullopt, -1),
                      Contains("dy"));
  // Residuals may be [rows] or x's shape without the axis.
  REQUIRE_NOTHROW(bind_layer_norm(bf({2, 3, 17}), std::nullopt, std::nullopt, bf({2, 3, 17}), spec({2, 3}, DType::F32),
                                  spec({6}, DType::F32), -1, 1e-5));
}

TEST_CASE("norm: BoundArgs are canonical and round-trip through JSON", "[norm]") {
  BoundArgs a = layerArgs(DType::BF16, {3, 17}, -1);
  BoundArgs b = layerArgs(DType::BF16, {3, 17}, 1);
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  CHECK(a.attributes.at("axis") == "1");
  CHECK(a.attributes.at("epsilon") == "1e-05");
  BoundArgs back = BoundArgs::from_json(a.to_json());
  CHECK(back == a);
  CHECK(back.hash() == a.hash());
  CHECK(back.digest() == a.digest());
  CHECK(back.to_json() == a.to_json());
  REQUIRE_NOTHROW(layer_norm_op().validate(back));
  BoundArgs noScale = bind_rms_norm(spec({4, 8}, DType::F32), std::nullopt, spec({4, 8}, DType::F32), std::nullopt, 0,
                                    1e-6);
  CHECK(BoundArgs::from_json(noScale.to_json()) == noScale);
  CHECK(noScale.to_json().find("null") != std::string::npos);
  CHECK(noScale.attributes.at("epsilon") == "1e-06");
  CHECK_FALSE(noScale == a);
  CHECK(find_op("rms_norm") == &rms_norm_op());
  CHECK(find_op("layer_norm_vjp") == &layer_norm_vjp_op());

  // A hand-edited BoundArgs is checked by the op.
  BoundArgs edited = a;
  edited.args[1]->shape = {16};
  REQUIRE_THROWS_WITH(layer_norm_op().validate(edited), Contains("scale"));
  edited = a;
  edited.attributes["axis"] = "-1";
  REQUIRE_THROWS_WITH(layer_norm_op().validate(edited), Contains("canonical"));
  edited = a;
  edited.attributes["bogus"] = "1";
  REQUIRE_THROWS_WITH(layer_norm_op().validate(edited), Contains("bogus"));

  for (const char *bad : {"{", "[]", "{\"op\": \"layer_norm\", \"args\": []}",
                          "{\"op\": 3, \"args\": [], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": {}, \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [{\"shape\": [-1], \"dtype\": \"f32\"}], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [{\"shape\": [1], \"dtype\": \"f17\"}], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [{\"shape\": [1]}], \"attributes\": {}}",
                          "{\"op\": \"x\", \"args\": [], \"attributes\": {\"axis\": 1}}",
                          "{\"op\": \"x\", \"args\": [], \"attributes\": {}, \"extra\": 1}"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(BoundArgs::from_json(bad), Error);
  }
  CHECK(ArgSpec::from_json(ArgSpec{{2, 3}, DType::F16}.to_json()) == ArgSpec{{2, 3}, DType::F16});
}

TEST_CASE("norm: Config round-trips through JSON and names missing keys", "[norm]") {
  Config c{{"block_rows", 4}, {"num_warps", 8}};
  CHECK(Config::from_json(c.to_json()) == c);
  CHECK(Config::from_json(c.to_json()).hash() == c.hash());
  CHECK(c.get("num_warps") == 8);
  CHECK(c.get_or("block_cols", 7) == 7);
  REQUIRE_THROWS_WITH(c.get("block_cols"), Contains("block_cols") && Contains("block_rows"));
  CHECK_FALSE(Config{{"block_rows", 2}}.hash() == Config{{"block_rows", 4}}.hash());
  for (const char *bad : {"{", "[1, 2]", "3", "{\"a\": 1.5}", "{\"a\": \"x\"}", "{\"a\": [1]}"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(Config::from_json(bad), Error);
  }
  CHECK(Config::from_json("{}").values.empty());
}

TEST_CASE("norm: configs come from explicit values, then providers, then the heuristic", "[norm]") {
  const Op &op = layer_norm_op();
  BoundArgs args = layerArgs(DType::BF16, {1000, 4096});
  const Implementation &tile = op.select(args, std::nullopt, "sm_90a");
  Config heuristic = tile.heuristic(args);
  CHECK(heuristic.has("block_rows"));
  CHECK(heuristic.has("num_warps"));
  CHECK(op.resolve_config(tile, args, std::nullopt) == heuristic);
  Config chosen{{"block_rows", 2}, {"num_warps", 8}};
  {
    ConfigProviderScope scope([&](const BoundArgs &a, const std::string &impl) -> std::optional<Config> {
      if (a == args && impl == "tile")
        return chosen;
      return std::nullopt;
    });
    CHECK(op.resolve_config(tile, args, std::nullopt) == chosen);
    Config inner{{"block_rows", 1}, {"num_warps", 16}};
    {
      ConfigProviderScope newer([&](const BoundArgs &, const std::string &) { return std::optional<Config>(inner); });
      CHECK(op.resolve_config(tile, args, std::nullopt) == inner);
    }
    CHECK(op.resolve_config(tile, args, std::nullopt) == chosen);
    // An invalid provided config is skipped.
    ConfigProviderScope bad([&](const BoundArgs &, const std::string &) {
      return std::optional<Config>(Config{{"block_rows", 3}, {"num_warps", 8}});
    });
    CHECK(op.resolve_config(tile, args, std::nullopt) == chosen);
    // Explicit beats providers; an invalid explicit config is an error.
    Config mine{{"block_rows", 4}, {"num_warps", 4}};
    CHECK(op.resolve_config(tile, args, mine) == mine);
    REQUIRE_THROWS_WITH(op.resolve_config(tile, args, Config{{"block_rows", 4}}), Contains("num_warps"));
  }
  CHECK(op.resolve_config(tile, args, std::nullopt) == heuristic);
  // Long rows loop over column blocks; every search-space entry is valid.
  BoundArgs wide = layerArgs(DType::BF16, {4, 65536});
  CHECK(op.implementation("tile").heuristic(wide).has("block_cols"));
  // The tile heuristic's choice is a valid config for both norms, forward and VJP, at
  // every row length it has a rule for.
  for (int64_t cols : {64, 1000, 1024, 4096, 8192, 16384, 20000, 65536})
    for (const Op *norm : {&layer_norm_op(), &rms_norm_op(), &layer_norm_vjp_op(), &rms_norm_vjp_op()}) {
      ArgSpec x{{64, cols}, DType::BF16}, s{{cols}, DType::F32}, r{{64}, DType::F32};
      BoundArgs a = norm == &layer_norm_op()       ? bind_layer_norm(x, s, s, x, r, r, -1, 1e-5)
                    : norm == &rms_norm_op()       ? bind_rms_norm(x, s, x, r, -1, 1e-5)
                    : norm == &layer_norm_vjp_op() ? bind_layer_norm_vjp(x, x, s, r, r, x, s, s, -1)
                                                   : bind_rms_norm_vjp(x, x, s, r, x, s, -1);
      const Implementation &tile = norm->implementation("tile");
      Config c = tile.heuristic(a);
      INFO(norm->name() << " cols " << cols << " heuristic " << c.to_json());
      CHECK_FALSE(tile.check_config(a, c).has_value());
    }
  for (const auto &impl : op.implementations())
    for (const BoundArgs &a : {args, wide, layerArgs(DType::F32, {3, 17, 5}, 1)}) {
      if (impl->why_not(a))
        continue;
      auto space = impl->search_space(a);
      CHECK(space.size() >= 1);
      for (const Config &c : space) {
        INFO(impl->name() << " " << c.to_json());
        CHECK_FALSE(impl->check_config(a, c));
      }
    }
}

//===----------------------------------------------------------------------===//
// Numerics on the interpreter
//===----------------------------------------------------------------------===//


TEST_CASE("norm: persistent and row-split configs are checked with a reason", "[norm]") {
  ArgSpec x{{64, 16384}, DType::BF16}, s{{16384}, DType::F32}, r{{64}, DType::F32};
  BoundArgs fwd = bind_layer_norm(x, s, s, x, r, r, -1, 1e-5);
  BoundArgs vjp = bind_layer_norm_vjp(x, x, s, r, r, x, s, s, -1);
  const Implementation &tile = layer_norm_op().implementation("tile");
  const Implementation &ref = layer_norm_op().implementation("reference");
  const Implementation &tileVjp = layer_norm_vjp_op().implementation("tile");
  auto why = [](const Implementation &impl, const BoundArgs &a, const Config &c) {
    return impl.check_config(a, c).value_or("valid");
  };
  CHECK_THAT(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"row_split", 3}}),
             Contains("row_split must be a power of two from 2 to 16, got 3"));
  CHECK_THAT(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"row_split", 2}, {"block_cols", 4096}}),
             Contains("exclude each other"));
  CHECK_THAT(why(tile, fwd, {{"block_rows", 2}, {"num_warps", 8}, {"row_split", 2}}),
             Contains("row_split takes block_rows = 1, got 2"));
  CHECK_THAT(why(ref, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"block_cols", 1024}, {"row_split", 2}}),
             Contains("row_split is a config of the tile implementation"));
  CHECK_THAT(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"programs", 0}}),
             Contains("programs must be positive, got 0"));
  CHECK_THAT(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"block_cols", 4096}, {"programs", 8}}),
             Contains("without block_cols"));
  CHECK_THAT(why(ref, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"block_cols", 4096}, {"programs", 8}}),
             Contains("needs the tile implementation"));
  // A zero column block is refused before the staged parts divide by it (it crashed).
  const Config zeroCols{{"block_rows", 1}, {"num_warps", 4}, {"programs", 8}, {"block_cols", 0}, {"staged", 1}};
  for (const Config &c : {zeroCols, Config(zeroCols).set("row_split", 2)})
    CHECK_THAT(why(tileVjp, vjp, c), Contains("block_cols must be a power of two"));
  CHECK(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 16}, {"row_split", 2}, {"programs", 8}}) == "valid");
  CHECK(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"programs", 8}, {"prefetch", 1}}) == "valid");
  CHECK_THAT(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"prefetch", 1}}), Contains("persistent programs"));
  CHECK_THAT(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"programs", 8}, {"prefetch", 2}}),
             Contains("prefetch must be 0 or 1"));
  CHECK_THAT(why(tileVjp, vjp, {{"block_rows", 1}, {"num_warps", 32}, {"programs", 8}, {"prefetch", 1}}),
             Contains("forward"));
  // chunk_rows: a config of the looping VJP only.
  const Config looping{{"block_rows", 1}, {"num_warps", 4}, {"programs", 8}, {"block_cols", 2048}};
  CHECK(why(tileVjp, vjp, Config(looping).set("chunk_rows", 16)) == "valid");
  CHECK_THAT(why(tileVjp, vjp, Config(looping).set("chunk_rows", 0)), Contains("chunk_rows must be positive"));
  CHECK_THAT(why(tileVjp, vjp, Config(looping).set("chunk_rows", 16).set("staged", 1)),
             Contains("config of the looping tile VJP"));
  CHECK_THAT(why(tile, fwd, {{"block_rows", 1}, {"num_warps", 8}, {"block_cols", 4096}, {"chunk_rows", 16}}),
             Contains("config of the looping tile VJP"));
  // The VJP holds 8192 columns a program at most: 16384 need a split or a looping config.
  CHECK_THAT(why(tileVjp, vjp, {{"block_rows", 1}, {"num_warps", 32}, {"programs", 8}}),
             Contains("set block_cols or row_split"));
  CHECK(why(tileVjp, vjp, {{"block_rows", 1}, {"num_warps", 32}, {"row_split", 2}, {"programs", 8}}) == "valid");
  ArgSpec one{{4, 1}, DType::BF16}, oneParam{{1}, DType::F32}, oneRow{{4}, DType::F32};
  BoundArgs narrow = bind_layer_norm(one, oneParam, oneParam, one, oneRow, oneRow, -1, 1e-5);
  CHECK_THAT(why(tile, narrow, {{"block_rows", 1}, {"num_warps", 1}, {"row_split", 2}}),
             Contains("row_split 2 needs rows of at least 2 columns, got 1"));
  // The one-pass variants are in the search space; the H200's search put persistent
  // programs into the layer_norm forward's heuristic from 4096 columns, not row_split.
  auto offers = [](const Implementation &impl, const BoundArgs &a, const char *key) {
    for (const Config &c : impl.search_space(a))
      if (c.has(key))
        return true;
    return false;
  };
  CHECK(offers(tile, fwd, "programs"));
  CHECK(offers(tileVjp, vjp, "row_split"));
  CHECK(offers(rms_norm_vjp_op().implementation("tile"), bind_rms_norm_vjp(x, x, s, r, x, s, -1), "row_split"));
  // Long rows: persistent programs loading the next rows during the current ones, where
  // there are more row groups than programs (64 rows are not).
  CHECK_FALSE(tile.heuristic(fwd).has("programs"));
  ArgSpec tall{{4096, 16384}, DType::BF16}, tallRows{{4096}, DType::F32};
  Config longRows = tile.heuristic(bind_layer_norm(tall, s, s, tall, tallRows, tallRows, -1, 1e-5));
  CHECK(longRows.get("programs") == 264);
  CHECK(longRows.get("prefetch") == 1);
  CHECK_FALSE(tileVjp.heuristic(vjp).has("row_split"));
}
