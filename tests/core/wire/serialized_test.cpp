#include "core/wire/internal/serialized.h"

#include <doctest/doctest.h>

#include "support/dask_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {
SubObject split_object(Codec codec) {
  // 320 000 zero bytes in 4 shards of 100 000, 100 000, 100 000, 20 000
  // (docs/protocol.md §3.5 example), each compressed on its own.
  SubObject obj;
  std::vector<Value> compression;
  for (std::size_t n : {100000u, 100000u, 100000u, 20000u}) {
    Buffer shard(n, 0);
    if (codec == Codec::none) {
      obj.frames.emplace_back(std::move(shard));
      compression.push_back(Value::nil());
    } else {
      obj.frames.emplace_back(*compress(codec, shard));
      compression.push_back(str(std::string(codec_name(codec))));
    }
  }
  obj.header = numpy_header("<f8", 40000, 8, compression);
  obj.header.set("split-num-sub-frames", arr({num(4)}));
  obj.header.set("split-offsets", arr({num(0)}));
  obj.header_frame = 1;
  return obj;
}
}  // namespace

TEST_CASE("serialized: decompress and merge shards") {
  for (Codec c : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    CAPTURE(codec_name(c));
    SubObject obj = split_object(c);
    auto codecs = frame_compression(obj);
    REQUIRE(codecs);
    CHECK(codecs->size() == 4);
    auto raw = decompressed_frames(obj, {});
    REQUIRE(raw);
    auto merged = merge_frames(obj, std::move(*raw));
    REQUIRE(merged);
    REQUIRE(merged->size() == 1);
    CHECK((*merged)[0].size() == 320000);
  }
}

TEST_CASE("serialized: compression list problems") {
  SubObject obj = split_object(Codec::lz4);
  obj.header.set("compression", arr({str("lz4")}));
  CHECK(frame_compression(obj).error().code == Errc::bad_value);
  obj.header.set("compression", arr({str("brotli"), Value::nil(), Value::boolean(false), Value::nil()}));
  auto codecs = frame_compression(obj);
  REQUIRE(codecs);
  CHECK((*codecs)[2].kind == CompressionValue::Kind::false_);
  auto bad = decompressed_frames(obj, {});
  REQUIRE(!bad);
  CHECK(bad.error().code == Errc::unknown_codec);
  CHECK(bad.error().message() == "frame 2: codec \"brotli\" is not one this build decodes");
  obj.header.erase("compression");
  auto all_nil = frame_compression(obj);
  REQUIRE(all_nil);
  CHECK((*all_nil)[0] == CompressionValue::nil());
}

TEST_CASE("serialized: split layouts are checked against the frames") {
  SubObject obj = split_object(Codec::none);
  obj.header.set("split-offsets", arr({num(2)}));
  CHECK(split_layout(obj).error().code == Errc::length_out_of_range);
  obj.header.erase("split-offsets");
  CHECK(split_layout(obj).error().code == Errc::bad_value);
  obj.header.erase("split-num-sub-frames");
  auto none = split_layout(obj);
  REQUIRE(none);
  CHECK(!*none);
}

TEST_CASE("serialized: many frames that each claim a lot stop at the message limit") {
  SubObject obj = split_object(Codec::lz4);
  Limits limits;
  limits.max_message_bytes = 250000;  // three shards of 100 000 do not fit
  auto r = decompressed_frames(obj, limits);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::limit_exceeded);
}

TEST_CASE("serialized: set_frame_compression writes one entry per frame") {
  SubObject obj = split_object(Codec::none);
  std::vector<CompressionValue> v(4, CompressionValue::named("zstd"));
  set_frame_compression(obj, v);
  auto back = frame_compression(obj);
  REQUIRE(back);
  CHECK((*back)[3].name == "zstd");
}
