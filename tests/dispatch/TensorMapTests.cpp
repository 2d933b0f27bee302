// Tensor maps as the driver is asked to encode them (the null driver records its
// arguments in the map's words: rank, dims, byte strides, box): 2-D maps, and 3-D maps
// whose boxes stay within a batch of rows.
#include <catch2/catch.hpp>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/TensorMap.h>

using namespace tokamax;

TEST_CASE("tensor maps: 2-D, and rows in batches as 3-D maps", "[runtime][tma]") {
  // The words checked below are the null driver's record; a real driver's map is opaque.
  if (Device::get().name() != "tokamax null device") {
    WARN("skipped: checks the null driver's record of the encoding, not " << Device::get().name() << "'s map");
    return;
  }
  // [24, 64] bf16 in boxes of 8 rows x 64 columns.
  const TensorMap flat = encode_tensor_map("t", 0x1000, DType::BF16, 24, 64, 64, 8);
  CHECK(flat.words[0] == 2u);
  CHECK(flat.words[1] == 64u);   // columns
  CHECK(flat.words[2] == 24u);   // rows
  CHECK(flat.words[3] == 128u);  // a row's bytes
  CHECK(flat.words[4] == 64u);   // box: columns
  CHECK(flat.words[5] == 8u);    // box: rows
  // The same rows as 3 batches of 8: [3, 8, 64], boxes of one batch.
  const TensorMap batched = encode_tensor_map("t", 0x1000, DType::BF16, 24, 64, 64, 8, 128, 8);
  CHECK(batched.words[0] == 3u);
  CHECK(batched.words[1] == 64u);
  CHECK(batched.words[2] == 8u);     // rows within a batch
  CHECK(batched.words[3] == 3u);     // batches
  CHECK(batched.words[4] == 128u);   // a row's bytes
  CHECK(batched.words[5] == 1024u);  // a batch's bytes
  CHECK(batched.words[6] == 64u);
  CHECK(batched.words[7] == 8u);
  CHECK(batched.words[8] == 1u);  // one batch a box
}
