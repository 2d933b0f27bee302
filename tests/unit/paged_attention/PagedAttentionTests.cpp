// paged_attention and paged_kv_append on the interpreter: tile and reference against the
// float64 reference of PagedAttentionTestCase.h (odd lengths: 1, page_size - 1,
// page_size + 1, lengths differing per sequence, a sequence of exactly Tq keys; Tq 1 and
// 5; GQA 4:1 and MQA; page sizes 8, 16, 64; one split and several, more splits than
// pages); the append then attend round trip; the ops (registration, auto order,
// configs and their checks, BoundArgs round trips); bad input naming the argument;
// bitwise reruns. The kernels' PTX: PagedAttentionPtxTests.cpp.
#include <catch2/catch.hpp>

#include "common/BadInput.h"
#include "unit/paged_attention/PagedAttentionTestCase.h"

#include <tokamax/ops/PagedAttention.h>
#include <tokamax/runtime/Error.h>

#include <cstring>
#include <string>

using namespace tokamax;
using namespace paged_test;
using Catch::Matchers::Contains;

namespace {

void expectOk(const Result &r) {
  INFO(r.message);
  CHECK(r.ok);
}

Config tileConfig(int64_t rows, int64_t pagesPerStep, int64_t splits, int64_t warps = 4, int64_t stages = 3) {
  return {{"block_rows", rows},
          {"pages_per_step", pagesPerStep},
          {"num_splits", splits},
          {"num_warps", warps},
          {"stages", stages}};
}

BoundArgs attentionArgs(const Case &c) {
  const ArgSpec q{{c.b(), c.tq, c.n, c.h}, c.dtype}, v{{c.numPages(), c.page_size, c.k, c.hv}, c.dtype};
  return bind_paged_attention({q, {{c.numPages(), c.page_size, c.k, c.h}, c.dtype}, v,
                               {{c.b(), c.maxPages()}, DType::I32}, {{c.b()}, DType::I32},
                               paged_attention_out_spec(q, v), paged_attention_lse_spec(q)});
}

} // namespace

TEST_CASE("paged_attention: tile and reference match float64 at odd lengths", "[paged_attention]") {
  uint64_t seed = 100;
  for (const char *impl : {"tile", "reference"})
    for (int64_t tq : {1, 5})
      for (int64_t ps : {16, 8}) {
        // 1 key (Tq 1) or exactly Tq keys, page_size - 1, page_size + 1, lengths differing
        // per sequence (3 pages and a bit, 2 whole pages).
        Case c;
        c.lengths = {std::max<int64_t>(1, tq), ps - 1, ps + 1, 3 * ps + 5, 2 * ps};
        c.tq = tq, c.page_size = ps, c.implementation = impl;
        expectOk(check(c, seed++));
      }
}

TEST_CASE("paged_attention: GQA 4:1 and MQA, H 128, page 64, soft cap, f16", "[paged_attention]") {
  uint64_t seed = 200;
  for (const char *impl : {"tile", "reference"}) {
    Case gqa;  // 8 query heads on 2 kv heads
    gqa.lengths = {70, 129, 5}, gqa.tq = 5, gqa.n = 8, gqa.k = 2, gqa.h = 128, gqa.hv = 128, gqa.page_size = 64;
    gqa.implementation = impl;
    expectOk(check(gqa, seed++));
    Case mqa;  // 6 query heads on one kv head (a group padded to 8), Hv != H
    mqa.lengths = {33, 1, 48}, mqa.n = 6, mqa.k = 1, mqa.hv = 32, mqa.implementation = impl;
    expectOk(check(mqa, seed++));
    Case capped = mqa;
    capped.softcap = 5.0, capped.dtype = DType::F16, capped.tq = 2, capped.lengths = {40, 2, 17};
    expectOk(check(capped, seed++));
    Case mha;  // N == K: one query head a kv head, 15 padding rows a program
    mha.lengths = {31, 9}, mha.tq = 3, mha.n = 3, mha.k = 3, mha.implementation = impl;
    expectOk(check(mha, seed++));
  }
}

TEST_CASE("paged_attention: tile's splits, pages a step and row blocks", "[paged_attention]") {
  uint64_t seed = 300;
  Case c;
  c.lengths = {5, 150, 61, 16}, c.tq = 5, c.n = 8, c.k = 2, c.page_size = 16;
  c.implementation = "tile";
  // One split (out written directly), several, more splits than any sequence has steps
  // (the empty ones must not disturb the combine), several pages a step, 64-row blocks,
  // 8 warps, rows split into blocks along the tokens (16 rows: 4 tokens x 4 heads), and
  // rings of 2 and 4 slots or none (pages loaded into registers).
  for (Config config : {tileConfig(32, 1, 1), tileConfig(32, 2, 3), tileConfig(32, 1, 40), tileConfig(32, 4, 7),
                        tileConfig(64, 3, 2), tileConfig(32, 2, 5, 8), tileConfig(16, 2, 4), tileConfig(32, 2, 3, 4, 1),
                        tileConfig(32, 1, 1, 4, 1), tileConfig(32, 1, 6, 4, 2), tileConfig(16, 3, 2, 4, 4)}) {
    c.config = config;
    expectOk(check(c, seed++));
  }
  // One new token: a row block of 32 holds 8 token slots of which one is live, so the
  // partials keep 4 rows; the combine folds 8 splits a step over 2 chunks of Hv 64,
  // with a tail (9, 19 splits) and without a whole step (3).
  Case one;
  one.lengths = {300, 47, 1}, one.tq = 1, one.n = 8, one.k = 2, one.page_size = 8, one.implementation = "tile";
  for (int64_t splits : {3, 9, 19}) {
    one.config = tileConfig(32, 1, splits);
    expectOk(check(one, seed++));
  }
  // A group larger than a row block: 32 query heads on one kv head in blocks of 16.
  Case wide;
  wide.lengths = {20, 3}, wide.tq = 2, wide.n = 32, wide.k = 1, wide.implementation = "tile";
  wide.config = tileConfig(16, 1, 3);
  expectOk(check(wide, seed++));
}

TEST_CASE("paged_attention: every search-space config matches float64", "[paged_attention]") {
  uint64_t seed = 400;
  Case c;
  c.lengths = {37, 100, 2}, c.tq = 2, c.n = 8, c.k = 2, c.page_size = 16;
  const BoundArgs args = attentionArgs(c);
  for (const auto &impl : paged_attention_op().implementations())
    for (const Config &config : impl->search_space(args)) {
      c.implementation = impl->name(), c.config = config;
      expectOk(check(c, seed++));
    }
}

TEST_CASE("paged_attention: f32 and f64 on reference", "[paged_attention]") {
  uint64_t seed = 500;
  for (DType dtype : {DType::F32, DType::F64}) {
    Case c;
    c.lengths = {19, 1, 40}, c.n = 4, c.k = 2, c.dtype = dtype, c.implementation = "reference";
    expectOk(check(c, seed++));
  }
}

TEST_CASE("paged_kv_append: append then attend matches attending the whole cache", "[paged_attention]") {
  // Sequences of 30 and 7 keys: the cache holds all but the last Tq; the append writes
  // them through the page table, then paged_attention reads the whole cache.
  for (const char *impl : {"tile", "reference"})
    for (int64_t tq : {1, 5}) {
      Case c;
      c.lengths = {30, 7}, c.tq = tq, c.n = 4, c.k = 2, c.page_size = 8, c.implementation = "tile";
      Paged full = makePaged(c, 600 + uint64_t(tq));
      Paged before = full;
      HostBuffer kNew(c.dtype, {c.b(), tq, c.k, c.h}), vNew(c.dtype, {c.b(), tq, c.k, c.hv});
      for (int64_t s = 0; s < c.b(); ++s)
        for (int64_t t = 0; t < tq; ++t) {
          const int64_t j = c.lengths[size_t(s)] - tq + t;
          const int64_t page = full.pages[size_t(s)][size_t(j / c.page_size)], slot = j % c.page_size;
          for (int64_t kh = 0; kh < c.k; ++kh) {
            for (int64_t d = 0; d < c.h; ++d) {
              const int64_t at = ((page * c.page_size + slot) * c.k + kh) * c.h + d;
              kNew.set(((s * tq + t) * c.k + kh) * c.h + d, full.kPages.at(at));
              before.kPages.set(at, std::nan(""));
            }
            for (int64_t d = 0; d < c.hv; ++d) {
              const int64_t at = ((page * c.page_size + slot) * c.k + kh) * c.hv + d;
              vNew.set(((s * tq + t) * c.k + kh) * c.hv + d, full.vPages.at(at));
              before.vPages.set(at, std::nan(""));
            }
          }
        }
      paged_kv_append_host(kNew.view(), vNew.view(), before.table.view(), before.lengths.view(), before.kPages.view(),
                           before.vPages.view(), {impl, std::nullopt});
      // The cache is now bit for bit the full one (NaN slots compared by their bits).
      CHECK(before.kPages.storage == full.kPages.storage);
      CHECK(before.vPages.storage == full.vPages.storage);
      HostBuffer out(c.dtype, {c.b(), tq, c.n, c.hv}), lse(DType::F32, {c.b(), c.n, tq});
      const TensorView lseView = lse.view();
      paged_attention_host(before.q.view(), before.kPages.view(), before.vPages.view(), before.table.view(),
                           before.lengths.view(), out.view(), c.options(), &lseView);
      const Expected e = reference(c, full);
      const Comparison co = attention_test::compare("out", out.values(), e.out, out.shape,
                                                    attention_test::tolerance(c.dtype), 1e-3);
      INFO(impl << " Tq " << tq << ": " << co.message);
      CHECK(co.ok);
    }
}

TEST_CASE("paged_attention: reruns are bitwise identical, no sequences is a no-op", "[paged_attention]") {
  Case c;
  c.lengths = {45, 3, 90}, c.tq = 3, c.n = 8, c.k = 2, c.implementation = "tile", c.config = tileConfig(32, 2, 4);
  const Result first = check(c, 700), second = check(c, 700);
  expectOk(first);
  CHECK(first.out.storage == second.out.storage);
  CHECK(first.lse.storage == second.lse.storage);
  for (const char *impl : {"tile", "reference"}) {
    HostBuffer q(DType::BF16, {0, 1, 4, 64}), kp(DType::BF16, {2, 16, 1, 64}), vp(DType::BF16, {2, 16, 1, 64}),
        table(DType::I32, {0, 2}), lengths(DType::I32, {0}), out(DType::BF16, {0, 1, 4, 64});
    CHECK_NOTHROW(paged_attention_host(q.view(), kp.view(), vp.view(), table.view(), lengths.view(), out.view(),
                                       {std::nullopt, std::nullopt, impl, std::nullopt}));
  }
}

TEST_CASE("paged_attention: ops, auto order, configs and their checks", "[paged_attention]") {
  const Op &op = paged_attention_op(), &append = paged_kv_append_op();
  CHECK(find_op("paged_attention") == &op);
  CHECK(find_op("paged_kv_append") == &append);
  CHECK(op.arg_names() == std::vector<std::string>{"q", "k_pages", "v_pages", "page_table", "seq_lengths", "out",
                                                   "lse"});
  CHECK(append.arg_names() ==
        std::vector<std::string>{"k", "v", "page_table", "seq_lengths", "k_pages", "v_pages"});
  for (const Op *o : {&op, &append}) {
    REQUIRE(o->implementations().size() == 2);
    CHECK(o->implementations()[0]->name() == "tile");
    CHECK(o->implementations()[1]->name() == "reference");
  }
  Case c;
  c.lengths = std::vector<int64_t>(1, 4096), c.n = 32, c.k = 8, c.h = 128, c.hv = 128;
  const BoundArgs args = attentionArgs(c);
  CHECK(op.select(args, std::nullopt, "sm_90a").name() == "tile");
  CHECK(op.select(args, std::nullopt, "sm_75").name() == "reference");
  Case f32 = c;
  f32.dtype = DType::F32;
  CHECK(op.select(attentionArgs(f32), std::nullopt, "sm_90a").name() == "reference");
  CHECK_THROWS_WITH(op.select(attentionArgs(f32), std::string("tile"), "sm_90a"),
                    Contains("tile serves bf16 and f16"));
  const Implementation &tile = op.implementation("tile");
  // Batch 1, 8 kv heads at 4096 keys, page 16: 2 pages (32 keys, 16 KiB) a step through
  // a ring of 4 slots, 33 splits (264 programs wanted).
  CHECK(tile.heuristic(args) == tileConfig(16, 2, 33, 4, 4));
  for (int64_t batch : {1, 8, 64})
    for (int64_t page : {16, 64}) {
      Case b = c;
      b.lengths = std::vector<int64_t>(size_t(batch), 4096), b.page_size = page;
      const BoundArgs a = attentionArgs(b);
      for (const auto &impl : op.implementations()) {
        const std::vector<Config> space = impl->search_space(a);
        CHECK(space.front() == impl->heuristic(a));
        for (const Config &config : space) {
          INFO(impl->name() << " batch " << batch << " page " << page << " " << config.to_json());
          CHECK_FALSE(impl->check_config(a, config).has_value());
        }
      }
    }
  Case big = c;
  big.lengths = std::vector<int64_t>(64, 4096);
  CHECK(tile.heuristic(attentionArgs(big)).get("num_splits") == 1);
  CHECK_THAT(*tile.check_config(args, tileConfig(24, 4, 2)), Contains("block_rows must be a power of two"));
  CHECK_THAT(*tile.check_config(args, tileConfig(16, 64, 2)), Contains("at most 512 keys a step"));
  CHECK_THAT(*tile.check_config(args, tileConfig(16, 4, 0)), Contains("num_splits must be in [1, 4096]"));
  CHECK_THAT(*tile.check_config(args, tileConfig(16, 4, 2, 3)), Contains("num_warps must be 1, 2, 4 or 8"));
  CHECK_THAT(*tile.check_config(args, tileConfig(128, 4, 2, 1)), Contains("accumulator elements a thread"));
  CHECK_THAT(*tile.check_config(args, Config(tileConfig(16, 4, 2)).set("block_kv", 64)),
             Contains("unknown key \"block_kv\""));
  CHECK_THAT(*op.implementation("reference").check_config(args, {{"block_kv", 48}}),
             Contains("block_kv must be a power of two"));
}

TEST_CASE("paged_attention: BoundArgs round-trip JSON and validate", "[paged_attention]") {
  Case c;
  c.lengths = {10, 20}, c.n = 4, c.k = 2;
  BoundArgs attention = attentionArgs(c);
  const BoundArgs append = bind_paged_kv_append({{2, 3, 2, 64}, DType::BF16}, {{2, 3, 2, 64}, DType::BF16},
                                                {{2, 4}, DType::I32}, {{2}, DType::I32},
                                                {{9, 16, 2, 64}, DType::BF16}, {{9, 16, 2, 64}, DType::BF16});
  for (const BoundArgs &b : {attention, append}) {
    const BoundArgs again = BoundArgs::from_json(b.to_json());
    CHECK(again == b);
    find_op(b.op)->validate(again);
    BoundArgs bad = b;
    bad.attributes["is_causal"] = "1";
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("unknown attribute \"is_causal\""));
    bad = b;
    bad.args[4] = std::nullopt;
    CHECK_THROWS_WITH(find_op(b.op)->validate(bad), Contains("is required"));
  }
  // The soft cap is an attribute present only when set.
  CHECK(attention.attributes.count("logits_soft_cap") == 0);
  PagedAttentionOptions capped;
  capped.logits_soft_cap = 30.0;
  const ArgSpec q{{2, 1, 4, 64}, DType::BF16}, pages{{9, 16, 2, 64}, DType::BF16};
  CHECK(bind_paged_attention({q, pages, pages, {{2, 4}, DType::I32}, {{2}, DType::I32}, q, std::nullopt}, capped)
            .attribute("logits_soft_cap") == "30");
}

TEST_CASE("bad input: paged_attention_host / paged_kv_append_host name the argument",
          "[bad-input][paged_attention]") {
  using namespace tokamax::bad_input;
  constexpr DType BF16 = DType::BF16, I32 = DType::I32;
  // A valid call: 2 sequences of 20 and 9 keys, pages of 16, 4 query heads on 2 kv heads.
  Case c;
  c.lengths = {20, 9}, c.n = 4, c.k = 2, c.spare_pages = 1;
  Paged p = makePaged(c, 900);
  HostBuffer out(BF16, {2, 1, 4, 64}), lse(DType::F32, {2, 4, 1});
  const HostBuffer kNew(BF16, {2, 1, 2, 64}, std::vector<double>(256, 1.0));
  Arena a;
  const TensorView q = p.q.view(), kp = p.kPages.view(), vp = p.vPages.view(), table = p.table.view(),
                   lengths = p.lengths.view(), o = out.view(), l = lse.view(), kn = kNew.view();
  auto attend = [&](TensorView q_, TensorView kp_, TensorView vp_, TensorView table_, TensorView lengths_,
                    TensorView out_, std::optional<TensorView> lse_ = std::nullopt, PagedAttentionOptions opt = {}) {
    return [=] {
      paged_attention_host(q_, kp_, vp_, table_, lengths_, out_, opt, lse_ ? &*lse_ : nullptr);
    };
  };
  auto append = [&](TensorView k_, TensorView v_, TensorView table_, TensorView lengths_, TensorView kp_,
                    TensorView vp_) { return [=] { paged_kv_append_host(k_, v_, table_, lengths_, kp_, vp_); }; };
  HostBuffer longLengths(I32, {2}, {20, 49}), shortLengths(I32, {2}, {20, 0}), badTable = p.table;
  badTable.set(1, 7);  // sequence 0's second page: past the 4 pages there are
  PagedAttentionOptions nanScale, negativeCap, tileOnF32;
  nanScale.scale = std::nan("");
  negativeCap.logits_soft_cap = -1.0;
  tileOnF32.implementation = "tile";
  check_refusals({
      {"q of rank 3", attend(a.view(BF16, {2, 4, 64}), kp, vp, table, lengths, o),
       {"paged_attention: q must be [B, Tq, heads, head_dim]"}},
      {"int q", attend(a.view(I32, {2, 1, 4, 64}), kp, vp, table, lengths, o), {"q must be bf16, f16, f32 or f64"}},
      {"f16 k_pages", attend(q, a.view(DType::F16, {4, 16, 2, 64}), vp, table, lengths, o),
       {"k_pages must have q's dtype bf16, got f16"}},
      {"v_pages of other pages", attend(q, kp, a.view(BF16, {5, 16, 2, 64}), table, lengths, o),
       {"v_pages must be [4, 16, 2, Hv]"}},
      {"page size 12", attend(q, a.view(BF16, {4, 12, 2, 64}), a.view(BF16, {4, 12, 2, 64}), table, lengths, o),
       {"page_size (k_pages' dim 1) must be a power of two in [8, 256], got 12"}},
      {"head dim 48", attend(a.view(BF16, {2, 1, 4, 48}), a.view(BF16, {4, 16, 2, 48}), vp, table, lengths, o),
       {"H (k_pages' head dim) must be a power of two in [16, 256], got 48"}},
      {"17 new tokens", attend(a.view(BF16, {2, 17, 4, 64}), kp, vp, table, lengths, a.view(BF16, {2, 17, 4, 64})),
       {"q must hold 1 to 16 new tokens per sequence (Tq, q's dim 1), got 17"}},
      {"q's head dim", attend(a.view(BF16, {2, 1, 4, 32}), kp, vp, table, lengths, o),
       {"q's head dim 32 must equal k_pages' 64"}},
      {"3 heads on 2", attend(a.view(BF16, {2, 1, 3, 64}), kp, vp, table, lengths, a.view(BF16, {2, 1, 3, 64})),
       {"q's heads (3) must be a multiple of k_pages' heads (2)"}},
      {"i64 page_table", attend(q, kp, vp, a.view(DType::I64, {2, 3}), lengths, o),
       {"page_table must be i32 [2, max_pages] with max_pages >= 1, got i64 [2, 3]"}},
      {"page_table of another batch", attend(q, kp, vp, a.view(I32, {3, 3}), lengths, o),
       {"page_table must be i32 [2, max_pages]"}},
      {"seq_lengths of another batch", attend(q, kp, vp, table, a.view(I32, {3}), o),
       {"seq_lengths must be i32 [2], got i32 [3]"}},
      {"out of another head dim", attend(q, kp, vp, table, lengths, a.view(BF16, {2, 1, 4, 32})),
       {"out must be bf16 [2, 1, 4, 64], got bf16 [2, 1, 4, 32]"}},
      {"bf16 lse", attend(q, kp, vp, table, lengths, o, a.view(BF16, {2, 4, 1})),
       {"lse must be f32 [2, 4, 1], got bf16 [2, 4, 1]"}},
      {"strided q", attend(a.strided(BF16, {2, 1, 4, 64}), kp, vp, table, lengths, o), {"q must be contiguous"}},
      {"null k_pages", attend(q, null_view(BF16, {4, 16, 2, 64}), vp, table, lengths, o), {"k_pages has no data"}},
      {"a length past the pages", attend(q, kp, vp, table, longLengths.view(), o),
       {"seq_lengths[1] = 49 must be in [Tq = 1, max_pages x page_size = 48]"}},
      {"a length shorter than Tq", attend(q, kp, vp, table, shortLengths.view(), o),
       {"seq_lengths[1] = 0 must be in [Tq = 1"}},
      {"a page out of range", attend(q, kp, vp, badTable.view(), lengths, o),
       {"page_table[0, 1] = 7 must be a page of k_pages, in [0, 4)"}},
      {"NaN scale", attend(q, kp, vp, table, lengths, o, std::nullopt, nanScale), {"scale must be finite"}},
      {"negative soft cap", attend(q, kp, vp, table, lengths, o, std::nullopt, negativeCap),
       {"logits_soft_cap must be positive and finite"}},
      {"tile for f32",
       attend(a.view(DType::F32, {2, 1, 4, 64}), a.view(DType::F32, {4, 16, 2, 64}), a.view(DType::F32, {4, 16, 2, 64}),
              table, lengths, a.view(DType::F32, {2, 1, 4, 64}), std::nullopt, tileOnF32),
       {"tile serves bf16 and f16"}, true},
      {"unknown implementation", attend(q, kp, vp, table, lengths, o, std::nullopt, {{}, {}, "hopper", {}}),
       {"hopper"}},
      {"tile config missing a key",
       attend(q, kp, vp, table, lengths, o, std::nullopt, {{}, {}, "tile", Config{{"block_rows", 16}}}),
       {"missing \"pages_per_step\""}},
      {"append: k of other heads", append(a.view(BF16, {2, 1, 4, 64}), kn, table, lengths, kp, vp),
       {"paged_kv_append: k must be bf16 [2, 1, 2, 64], got bf16 [2, 1, 4, 64]"}},
      {"append: f16 v", append(kn, a.view(DType::F16, {2, 1, 2, 64}), table, lengths, kp, vp),
       {"v must be bf16 [2, 1, 2, 64], got f16 [2, 1, 2, 64]"}},
      {"append: no new tokens", append(a.view(BF16, {2, 0, 2, 64}), a.view(BF16, {2, 0, 2, 64}), table, lengths, kp, vp),
       {"k must hold at least one new token per sequence"}},
      {"append: a length past the pages", append(kn, kn, table, longLengths.view(), kp, vp),
       {"paged_kv_append: seq_lengths[1] = 49 must be in"}},
      {"append: a page out of range", append(kn, kn, badTable.view(), lengths, kp, vp),
       {"paged_kv_append: page_table[0, 1] = 7 must be a page of k_pages"}},
  });
  // Nothing ran: out is still NaN, the pages untouched.
  CHECK(std::isnan(out.at(0)));
  CHECK(p.kPages.storage == makePaged(c, 900).kPages.storage);
}

TEST_CASE("paged_attention: the decode benchmark's heads at 1000 keys, auto", "[paged_attention]") {
  // GQA 32:8, H 128, pages of 16 and 64, Tq 1 and 4, two sequences: the heuristic's
  // splits (about 16) and ring on the interpreter.
  uint64_t seed = 1000;
  for (int64_t page : {16, 64})
    for (int64_t tq : {1, 4}) {
      Case c;
      c.lengths = {1000, 1000 - page - 3}, c.tq = tq, c.n = 32, c.k = 8, c.h = 128, c.hv = 128, c.page_size = page;
      expectOk(check(c, seed++));
    }
}
