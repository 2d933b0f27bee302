//===- Pipeline.cpp - Hopper pipeline kit: rings, ring loops, block order --===//
#include <tokamax/dsl/Pipeline.h>

#include <algorithm>

namespace tokamax::dsl {

std::pair<Value, Value> grouped_block(Value pid, int64_t gridM, int64_t gridN, int64_t groupM, int64_t bm,
                                     int64_t bn) {
  groupM = std::max<int64_t>(1, groupM);
  Value inGroup = Value(groupM * gridN);
  Value firstM = (pid / inGroup) * Value(groupM);
  Value sizeM = minimum(Value(gridM) - firstM, Value(groupM));
  Value local = pid % inGroup;
  return {(firstM + local % sizeM) * Value(bm), (local / sizeM) * Value(bn)};
}

std::vector<Value> ring_loop(Kernel &k, const Value &lo, const Value &hi, int64_t step, int64_t stages,
                             std::vector<Value> accs, const RingCopies &copies, const RingProducts &products,
                             const Mbarriers *tma) {
  const size_t numAccs = accs.size();
  std::vector<Value> carried = std::move(accs);
  size_t perStep = 0;
  for (int64_t ahead = 0; ahead + 1 < stages; ++ahead) {
    Value k0 = lo.is_literal() ? Value(int64_t(*lo.literal()) + ahead * step) : lo + Value(ahead * step);
    std::vector<Value> blocks = copies(k0, k.constant(double(ahead), DType::I32));
    perStep = blocks.size();
    carried.insert(carried.end(), blocks.begin(), blocks.end());
  }
  carried.push_back(k.constant(0, DType::I32));  // this step's slot
  std::vector<Value> out = k.loop(lo, hi, step, carried, [&](Value k0, std::vector<Value> c) {
    Value slot = c.back();
    auto blocks = c.begin() + numAccs;
    auto refill = [&] { return copies(k0 + Value((stages - 1) * step), (slot + Value(stages - 1)) % Value(stages)); };
    std::vector<Value> next, result;
    if (!tma) {
      k.wait_async(static_cast<int>((stages - 2) * perStep));
      next = refill();
      result = products(k0, {c.begin(), blocks}, {blocks, blocks + perStep});
    } else {
      // Step j's copies complete phase j / stages of its slot's barrier.
      k.wait(*tma, slot, ((k0 - lo) / Value(step * stages)) % Value(2));
      result = products(k0, {c.begin(), blocks}, {blocks, blocks + perStep});
      k.wait_async(0);  // every warp is past step j - 1: its slot may be refilled
      next = refill();
    }
    result.insert(result.end(), blocks + perStep, c.end() - 1);  // later steps' blocks, in flight
    result.insert(result.end(), next.begin(), next.end());
    result.push_back((slot + Value(1)) % Value(stages));
    return result;
  });
  if (!tma) {
    k.wait_async(0);  // the last copies land before the program ends
  } else {
    // Steps n .. n + stages - 2 were copied and not used: wait for them too.
    Value n = lo.is_literal() && hi.is_literal()
                  ? Value(int64_t(cdiv(int64_t(*hi.literal()) - int64_t(*lo.literal()), step)))
                  : (hi - lo + Value(step - 1)) / Value(step);
    for (int64_t i = 0; i + 1 < stages; ++i) {
      Value j = n.is_literal() ? Value(int64_t(*n.literal()) + i) : n + Value(i);
      if (j.is_literal())
        k.wait(*tma, Value(int64_t(*j.literal()) % stages), Value(int64_t(*j.literal()) / stages % 2));
      else
        k.wait(*tma, j % Value(stages), (j / Value(stages)) % Value(2));
    }
  }
  out.resize(numAccs);
  return out;
}

TmaRing TmaRing::make(Kernel &k, int64_t stages, int64_t copies, int consumer_warps) {
  return {stages, k.mbarriers(stages, copies), k.mbarriers(stages, 32 * int64_t(consumer_warps))};
}

void TmaRing::wait_free(Kernel &k, const Value &step) const {
  k.wait(empty, slot(step), (step / Value(stages) + Value(1)) % Value(2));
}

void TmaRing::wait_full(Kernel &k, const Value &step) const {
  k.wait(full, slot(step), (step / Value(stages)) % Value(2));
}

void TmaRing::release(Kernel &k, const Value &step) const { k.arrive(empty, slot(step)); }

std::vector<Value> tma_ring_loop(Kernel &k, const Value &steps, int64_t step, const TmaRing &ring,
                                 std::vector<Value> accs, const TmaRingCopies &copies, const RingProducts &products) {
  std::vector<Value> out = k.specialized_loop(
      0, steps, 1, std::move(accs),
      [&](Value i) {
        ring.wait_free(k, i);
        return copies(i * Value(step), ring.slot(i));
      },
      [&](Value i, std::vector<Value> carried, std::vector<Value> blocks) {
        ring.wait_full(k, i);
        std::vector<Value> result = products(i * Value(step), std::move(carried), std::move(blocks));
        k.when(i > Value(0), [&] { ring.release(k, i - Value(1)); });  // step i - 1's dots are done
        return result;
      });
  for (Value &acc : out)
    acc = dot_wait(acc, 0);
  return out;
}

std::vector<Value> tma_tile_loop(Kernel &k, const Value &tiles, int64_t steps, int64_t step, const TmaRing &ring,
                                 const std::vector<Value> &zeros, std::vector<Value> extras, const TmaTileLoop &body) {
  const Value perTile(steps);
  const int inFlight = static_cast<int>(zeros.size());  // one commit group per product
  // Tiles outside, each tile's K steps inside: the producer walks the steps of every
  // tile in turn (step i = tile x steps + s of the ring), the consumers complete a tile's
  // products before its epilogue on every path.
  return k.specialized_loop(
      0, tiles, 1, std::move(extras), [](Value) { return std::vector<Value>{}; },
      [&](Value tile, std::vector<Value> carried, std::vector<Value>) {
        Value first = tile * perTile;
        std::vector<Value> accs = k.specialized_steps(
            0, perTile, 1, zeros,
            [&](Value s) {
              ring.wait_free(k, first + s);
              return body.copies(tile, s * Value(step), ring.slot(first + s));
            },
            [&](Value s, std::vector<Value> c, std::vector<Value> blocks) {
              ring.wait_full(k, first + s);
              std::vector<Value> products = body.products(blocks, c, s == Value(0));
              for (Value &product : products)  // step s - 1's products are done
                product = dot_wait(product, inFlight);
              k.when(s > Value(0), [&] { ring.release(k, first + s - Value(1)); });
              return products;
            });
        for (Value &acc : accs)
          acc = dot_wait(acc, 0);
        ring.release(k, first + perTile - Value(1));
        return body.done(tile, accs, std::move(carried));
      });
}

} // namespace tokamax::dsl
