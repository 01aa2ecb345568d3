#include "daskcaps/wire/dask_release.h"
#include "daskcaps/recode/transcode.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "daskcaps/pickle/pickle.h"
#include "core/recode/internal/gpu_layout.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/message.h"
#include "support/dask_builder.h"
#include "support/example_streams.h"
#include "support/pickle_builder.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

// n bytes in runs of 64: every codec shrinks them far below Dask's ratio.
Buffer compressible(std::size_t n) {
  Buffer b = daskcaps::Buffer::uninitialised(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i / 64);
  return b;
}

// Blocks of `random_part` random bytes and then zeros, 100 bytes each: lz4
// shrinks them to a little over random_part percent.
Buffer partly_compressible(std::size_t n, std::size_t random_part) {
  std::mt19937 rng(7);
  Buffer b(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    if (i % 100 < random_part) b[i] = static_cast<std::uint8_t>(rng());
  return b;
}

Value raw_numpy_header(std::size_t n) {
  Value h = numpy_header("|u1", static_cast<std::int64_t>(n), 1, {Value::nil()});
  h.set("num-sub-frames", num(1));
  return h;
}

// {"op": "echo", <name>: <array>, ...}: one raw uint8 array per buffer.
Message arrays_message(const std::vector<std::pair<std::string, Buffer>>& arrays) {
  std::vector<std::pair<std::string, Value>> root{{"op", str("echo")}};
  std::vector<Buffer> frames{{}};
  for (const auto& [name, data] : arrays) {
    root.emplace_back(name, placeholder("__Serialized__", static_cast<std::int64_t>(frames.size())));
    frames.push_back(msgpack::encode(raw_numpy_header(data.size())));
    frames.push_back(data);
  }
  frames[0] = msgpack::encode(map(std::move(root)));
  auto m = parse_message(frames_of(std::move(frames)));
  REQUIRE(m);
  return std::move(*m);
}

std::vector<Bytes> recode(const Message& m, const TranscodeOptions& o, TranscodeReport& r) {
  auto out = transcode_message(m, o, r);
  if (!out) FAIL(out.error().message());
  return std::move(*out);
}

Message reparse(const std::vector<Bytes>& frames) {
  auto m = parse_message(frames);
  if (!m) FAIL(m.error().message());
  return std::move(*m);
}

const SubObject& object_at(const Message& m, std::string_view path) {
  for (const SubObject& o : m.objects)
    if (o.path == path) return o;
  FAIL("no object at " << path);
  return m.objects.front();
}

Value compression_of(const SubObject& o) {
  const Value* c = o.header.find("compression");
  REQUIRE(c != nullptr);
  return *c;
}

Buffer to_buffer(const Bytes& b) { return Buffer(b.data(), b.data() + b.size()); }

bool contains(ByteSpan hay, ByteSpan needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

std::uint64_t total(const std::vector<Bytes>& frames) {
  std::uint64_t n = 0;
  for (const Bytes& f : frames) n += f.size();
  return n;
}

TranscodeOptions with_codec(Codec c) {
  TranscodeOptions o;
  o.codec = c;
  return o;
}

TranscodeOptions with_protocol(int p) {
  TranscodeOptions o;
  o.pickle_protocol = p;
  return o;
}

}  // namespace

TEST_CASE("transcode: a codec change keeps small and incompressible frames raw, as Dask does") {
  const Buffer small = compressible(1000);      // under min_size (10000)
  const Buffer large = compressible(80000);
  const Buffer noise = random_bytes(20000, 1);  // does not shrink to 0.9
  Message m = arrays_message({{"small", small}, {"large", large}, {"noise", noise}});
  TranscodeReport rep;
  auto out = recode(m, with_codec(Codec::lz4), rep);
  Message back = reparse(out);

  CHECK(compression_of(object_at(back, "small")) == arr({Value::nil()}));
  CHECK(to_buffer(object_at(back, "small").frames[0]) == small);
  CHECK(compression_of(object_at(back, "noise")) == arr({Value::nil()}));
  CHECK(to_buffer(object_at(back, "noise").frames[0]) == noise);

  const SubObject& l = object_at(back, "large");
  CHECK(compression_of(l) == arr({str("lz4")}));
  CHECK(l.frames[0].size() < large.size() / 10);
  // Dask's own lz4 format: the size prefix, then one block.
  CHECK(declared_size(Codec::lz4, l.frames[0]) == large.size());
  auto raw = decompress(Codec::lz4, l.frames[0], large.size());
  REQUIRE(raw);
  CHECK(*raw == large);

  CHECK(rep.bytes_in == total(m.raw.memory_frames()));
  CHECK(rep.bytes_out == total(out));
  CHECK(rep.bytes_out < rep.bytes_in);
  CHECK(rep.pickles_recoded == 0);
  CHECK(rep.buffers_inlined == 0);
}

TEST_CASE("transcode: the compression ratio and size bounds are the release's") {
  const Buffer mid = partly_compressible(60000, 80);
  auto whole = compress(Codec::lz4, mid);
  REQUIRE(whole);
  const double ratio = static_cast<double>(whole->size()) / static_cast<double>(mid.size());
  INFO("lz4 ratio " << ratio);
  REQUIRE(ratio > 0.72);
  REQUIRE(ratio < 0.88);
  Message m = arrays_message({{"data", mid}});

  TranscodeOptions old_rule = with_codec(Codec::lz4);
  old_rule.rules = DaskRelease::v2022_12().maybe_compress_rules();
  TranscodeReport r1;
  Message a = reparse(recode(m, old_rule, r1));
  CHECK(compression_of(object_at(a, "data")) == arr({str("lz4")}));
  CHECK(object_at(a, "data").frames[0].size() == whole->size());

  TranscodeOptions new_rule = with_codec(Codec::lz4);
  new_rule.rules = DaskRelease::newest().maybe_compress_rules();
  TranscodeReport r2;
  Message b = reparse(recode(m, new_rule, r2));
  CHECK(compression_of(object_at(b, "data")) == arr({Value::nil()}));
  CHECK(to_buffer(object_at(b, "data").frames[0]) == mid);

  // Frames above max_size stay raw however well they compress.
  Message big = arrays_message({{"data", compressible(80000)}});
  TranscodeOptions capped = with_codec(Codec::zstd);
  capped.rules.max_size = 50000;
  TranscodeReport r3;
  Message c = reparse(recode(big, capped, r3));
  CHECK(compression_of(object_at(c, "data")) == arr({Value::nil()}));
  CHECK(object_at(c, "data").frames[0].size() == 80000);
}

TEST_CASE("transcode: real lz4 frames become zstd with the same bytes inside") {
  Message m = example_message("codec-lz4.stream", 1);
  const SubObject& in = object_at(m, "data");
  REQUIRE(compression_of(in) == arr({str("lz4")}));
  auto want = decompress(Codec::lz4, in.frames[0], 1 << 20);
  REQUIRE(want);
  REQUIRE(want->size() == 32000);
  TranscodeReport rep;
  auto out = recode(m, with_codec(Codec::zstd), rep);
  Message back = reparse(out);
  const SubObject& o = object_at(back, "data");
  CHECK(compression_of(o) == arr({str("zstd")}));
  // The zstd frame has its content size in its header (Python's
  // ZstdDecompressor().decompress needs it).
  CHECK(declared_size(Codec::zstd, o.frames[0]) == 32000);
  auto got = decompress(Codec::zstd, o.frames[0], 1 << 20);
  REQUIRE(got);
  CHECK(*got == *want);
  // Everything but the compression entry is as Dask wrote it.
  Value expect = in.header;
  expect.set("compression", arr({str("zstd")}));
  CHECK(o.header == expect);
  CHECK(out[0] == m.raw.frames[0].bytes());
}

TEST_CASE("transcode: large frames decoded to raw are decompress()'s bytes, message after message") {
  // lz4 and snappy frames of 1 MiB and more are decoded to raw into blocks
  // used again once written (core/recode/detail/decoded_blocks.cpp DecodedBlocks): each
  // output is its own frame's bytes, never what a block held before, with
  // the frames alive at once or one after the other, larger and smaller
  // than the last; zstd and zlib frames in between (decoded into Buffers)
  // change nothing of that.
  const std::size_t sizes[] = {std::size_t{3} << 20, (std::size_t{3} << 20) - 12345, std::size_t{1} << 20,
                               (std::size_t{5} << 20) + 7, std::size_t{2} << 20};
  std::vector<std::vector<Bytes>> alive;
  for (Codec c : {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    for (std::size_t k = 0; k < std::size(sizes); ++k) {
      Buffer data = partly_compressible(sizes[k], 20 + 10 * k);
      for (std::size_t i = 0; i < data.size(); i += 4093) data[i] = static_cast<std::uint8_t>(k + 3 * i);
      Message raw = arrays_message({{"x", data}});
      TranscodeReport r1;
      Message packed = reparse(recode(raw, with_codec(c), r1));
      REQUIRE(compression_of(object_at(packed, "x")) == arr({str(std::string(codec_name(c)))}));
      TranscodeReport r2;
      auto out = recode(packed, with_codec(Codec::none), r2);
      CAPTURE(codec_name(c));
      CAPTURE(k);
      const Message back = reparse(out);  // held: object_at() refers into it
      const SubObject& o = object_at(back, "x");
      REQUIRE(o.frames.size() == 1);
      CHECK(to_buffer(o.frames[0]) == data);
      if (k % 2 == 0) alive.push_back(std::move(out));  // some stay alive, some go at once
    }
  }
  // The frames kept alive still hold their own bytes.
  std::size_t j = 0;
  for (Codec c : {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    for (std::size_t k = 0; k < std::size(sizes); k += 2, ++j) {
      Buffer data = partly_compressible(sizes[k], 20 + 10 * k);
      for (std::size_t i = 0; i < data.size(); i += 4093) data[i] = static_cast<std::uint8_t>(k + 3 * i);
      CAPTURE(codec_name(c));
      CHECK(to_buffer(object_at(reparse(alive[j]), "x").frames[0]) == data);
    }
  }
}

TEST_CASE("transcode: frames already in the target codec, and cuda frames marked false, are untouched") {
  Message lz4 = example_message("codec-lz4.stream", 1);
  TranscodeReport r1;
  auto same = recode(lz4, with_codec(Codec::lz4), r1);
  REQUIRE(same.size() == lz4.raw.frames.size());
  CHECK(same[2] == lz4.raw.frames[2].bytes());
  CHECK(r1.frames_recompressed == 0);

  // The cuda family marks its frames false: never compressed (Dask sends
  // them as they are).
  Value h = map({{"serializer", str("cuda")},
                 {"sub-header", map({{"shape", arr({num(80000)})}, {"typestr", str("|u1")}})},
                 {"compression", arr({Value::boolean(false)})},
                 {"num-sub-frames", num(1)}});
  const Buffer data = compressible(80000);
  auto m = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})),
                                    msgpack::encode(h), data}));
  REQUIRE(m);
  TranscodeReport r2;
  Message back = reparse(recode(*m, with_codec(Codec::zstd), r2));
  CHECK(compression_of(object_at(back, "data")) == arr({Value::boolean(false)}));
  CHECK(to_buffer(object_at(back, "data").frames[0]) == data);
  CHECK(r2.frames_recompressed == 0);
}

TEST_CASE("transcode: protocol 4 inlines protocol-5 buffers and rebuilds the header") {
  // numpy.arange(1000, dtype="<f8") through the pickle family: one pickle,
  // one 8000-byte out-of-band buffer, writeable.
  Message m = example_message("pickle5.stream", 1);
  const SubObject& in = object_at(m, "data");
  REQUIRE(in.frames.size() == 2);
  REQUIRE(in.frames[1].size() == 8000);
  const Buffer buffer = to_buffer(in.frames[1]);

  TranscodeReport rep;
  auto out = recode(m, with_protocol(4), rep);
  REQUIRE(out.size() == 3);  // frame 0, the header, the pickle
  Message back = reparse(out);
  const SubObject& o = object_at(back, "data");
  REQUIRE(o.frames.size() == 1);
  CHECK(o.header == map({{"serializer", str("pickle")},
                         {"writeable", arr({})},
                         {"split-num-sub-frames", arr({num(1)})},
                         {"split-offsets", arr({num(0)})},
                         {"compression", arr({Value::nil()})},
                         {"num-sub-frames", num(1)}}));
  auto s = pickle::summarize(o.frames[0]);
  REQUIRE(s);
  CHECK(s->protocol == 4);
  CHECK(s->out_of_band_buffers == 0);
  // A writeable buffer comes back as a bytearray, holding the same bytes.
  CHECK(std::find(s->globals.begin(), s->globals.end(), "builtins.bytearray") != s->globals.end());
  CHECK(contains(o.frames[0], buffer));
  CHECK(rep.pickles_recoded == 1);
  CHECK(rep.buffers_inlined == 1);

  // At 5 the buffer stays out of band unless asked; with inline_buffers it
  // goes into the pickle as BYTEARRAY8.
  TranscodeReport keep_rep;
  Message kept = reparse(recode(m, with_protocol(5), keep_rep));
  CHECK(object_at(kept, "data").frames.size() == 2);
  CHECK(*object_at(kept, "data").header.find("writeable") == arr({Value::boolean(true)}));
  CHECK(keep_rep.buffers_inlined == 0);
  TranscodeOptions inline5 = with_protocol(5);
  inline5.inline_buffers = true;
  TranscodeReport inline_rep;
  Message in5 = reparse(recode(m, inline5, inline_rep));
  const SubObject& o5 = object_at(in5, "data");
  REQUIRE(o5.frames.size() == 1);
  auto s5 = pickle::summarize(o5.frames[0]);
  REQUIRE(s5);
  CHECK(s5->protocol == 5);
  CHECK(s5->out_of_band_buffers == 0);
  Buffer bytearray8{op::BYTEARRAY8, 0x40, 0x1f, 0, 0, 0, 0, 0, 0};  // 8000
  bytearray8.append(buffer);
  CHECK(contains(o5.frames[0], bytearray8));
  CHECK(inline_rep.buffers_inlined == 1);
}

TEST_CASE("transcode: an inlined read-only buffer becomes bytes, a writeable one bytearray") {
  const Buffer data = random_bytes(300, 3);
  // PROTO 5, NEXT_BUFFER, STOP: the object is the buffer itself.
  const Buffer pickled = PickleBuilder().proto(5).op(op::NEXT_BUFFER).stop().bytes();
  for (bool writeable : {false, true}) {
    CAPTURE(writeable);
    Value h = map({{"serializer", str("pickle")},
                   {"writeable", arr({Value::boolean(writeable)})},
                   {"compression", arr({Value::nil(), Value::nil()})},
                   {"num-sub-frames", num(2)}});
    auto m = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"x", placeholder("__Serialized__", 1)}})),
                                      msgpack::encode(h), pickled, data}));
    REQUIRE(m);
    TranscodeReport rep;
    Message back = reparse(recode(*m, with_protocol(4), rep));
    const SubObject& o = object_at(back, "x");
    REQUIRE(o.frames.size() == 1);
    CHECK(*o.header.find("writeable") == arr({}));
    CHECK(*o.header.find("num-sub-frames") == num(1));
    auto s = pickle::summarize(o.frames[0]);
    REQUIRE(s);
    CHECK(s->protocol == 4);
    // BINBYTES, u32 300, the bytes: as bytes, or as bytearray's argument.
    Buffer binbytes{op::BINBYTES, 0x2c, 0x01, 0, 0};
    binbytes.append(data);
    CHECK(contains(o.frames[0], binbytes));
    CHECK((std::find(s->globals.begin(), s->globals.end(), "builtins.bytearray") != s->globals.end()) == writeable);
    CHECK(rep.buffers_inlined == 1);
  }
}

TEST_CASE("transcode: __Pickled__ buffers are always written raw") {
  const Buffer data = compressible(80000);
  auto lz4 = compress(Codec::lz4, data);
  REQUIRE(lz4);
  const Buffer pickled = PickleBuilder().proto(5).op(op::NEXT_BUFFER).stop().bytes();
  Value h = map({{"pickled-obj", Value::bin(pickled)},
                 {"compression", arr({str("lz4")})},
                 {"num-sub-frames", num(1)}});
  auto m = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"data", placeholder("__Pickled__", 1)}})),
                                    msgpack::encode(h), *lz4}));
  REQUIRE(m);

  // A codec change decompresses them and does not compress them again
  // (Dask 2022.12 does not decompress __Pickled__ buffers on receipt).
  TranscodeReport r1;
  Message a = reparse(recode(*m, with_codec(Codec::zstd), r1));
  const SubObject& oa = object_at(a, "data");
  CHECK(oa.kind == Placeholder::pickled);
  CHECK(compression_of(oa) == arr({Value::nil()}));
  CHECK(to_buffer(oa.frames[0]) == data);
  CHECK(*oa.header.find("pickled-obj") == Value::bin(pickled));

  // Protocol 4: the buffer goes into pickled-obj, no frame is left.
  TranscodeReport r2;
  Message b = reparse(recode(*m, with_protocol(4), r2));
  const SubObject& ob = object_at(b, "data");
  CHECK(ob.frames.empty());
  CHECK(compression_of(ob) == arr({}));
  CHECK(*ob.header.find("num-sub-frames") == num(0));
  const Value* po = ob.header.find("pickled-obj");
  REQUIRE(po != nullptr);
  REQUIRE(po->is_bin());
  auto s = pickle::summarize(po->as_bin());
  REQUIRE(s);
  CHECK(s->protocol == 4);
  CHECK(s->out_of_band_buffers == 0);
  CHECK(contains(po->as_bin(), data));
  CHECK(r2.buffers_inlined == 1);

  // The real ToPickle message: the same at protocol 4.
  Message real = example_message("pickle5.stream", 2);
  TranscodeReport r3;
  Message c = reparse(recode(real, with_protocol(4), r3));
  const SubObject& oc = object_at(c, "data");
  CHECK(oc.frames.empty());
  auto sc = pickle::summarize(oc.header.find("pickled-obj")->as_bin());
  REQUIRE(sc);
  CHECK(sc->protocol == 4);
  CHECK(sc->out_of_band_buffers == 0);
  CHECK(std::find(sc->globals.begin(), sc->globals.end(), "numpy.core.numeric._frombuffer") != sc->globals.end());
}

TEST_CASE("transcode: the handshake advertises the target codec and protocol") {
  Message hs = example_message("pickle5.stream", 0);
  REQUIRE(hs.is_handshake());
  TranscodeOptions both = with_codec(Codec::zstd);
  both.pickle_protocol = 4;
  TranscodeReport rep;
  auto out = recode(hs, both, rep);
  REQUIRE(out.size() == 1);
  auto root = msgpack::decode_all(out[0]);
  REQUIRE(root);
  CHECK(*root == map({{"compression", str("zstd")},
                      {"python", arr({num(3), num(11), num(2)})},
                      {"pickle-protocol", num(4)}}));

  // Codec none is nil in the handshake, and a protocol not asked for stays.
  Message lz4_hs = example_message("codec-lz4.stream", 0);
  TranscodeReport rep2;
  auto none = recode(lz4_hs, with_codec(Codec::none), rep2);
  auto root2 = msgpack::decode_all(none[0]);
  REQUIRE(root2);
  CHECK(*root2 == map({{"compression", Value::nil()},
                       {"python", arr({num(3), num(11), num(2)})},
                       {"pickle-protocol", num(5)}}));
}

TEST_CASE("transcode: options that change nothing pass every frame through") {
  REQUIRE(TranscodeOptions{}.is_identity());
  CHECK(!with_codec(Codec::none).is_identity());
  CHECK(!with_protocol(5).is_identity());
  for (const char* name : {"numpy.stream", "pickle5.stream", "gpu-result.stream", "split-zstd.stream", "pandas-lz4.stream"}) {
    CAPTURE(name);
    for (const auto& em : example_messages(name)) {
      auto m = parse_message(em.frames);
      REQUIRE(m);
      TranscodeReport rep;
      auto out = recode(*m, TranscodeOptions{}, rep);
      REQUIRE(out.size() == em.frames.size());
      for (std::size_t i = 0; i < out.size(); ++i) {
        CHECK(out[i] == em.frames[i]);
        CHECK(out[i].data() == em.frames[i].data());  // the same bytes, not a copy
      }
      CHECK(rep.bytes_in == total(em.frames));
      CHECK(rep.bytes_out == rep.bytes_in);
      CHECK(rep.frames_recompressed + rep.pickles_recoded + rep.buffers_inlined + rep.arrays_converted == 0);
    }
  }
}

TEST_CASE("transcode: layout cpu turns a CuPy header into NumPy's and keeps the data frame") {
  Message m = example_message("gpu-result.stream", 1);
  TranscodeOptions o;
  o.layout_cpu = true;
  TranscodeReport rep;
  auto out = recode(m, o, rep);
  Message back = reparse(out);
  const SubObject& d = object_at(back, "data");
  CHECK(*d.header.find("type") == str("numpy.ndarray"));
  CHECK(*d.header.find("serializer") == str("dask"));
  CHECK(*d.header.find("sub-header") == map({{"dtype", arr({num(0), str("<f4")})},
                                             {"shape", arr({num(100), num(200)})},
                                             {"strides", arr({num(800), num(4)})},
                                             {"writeable", arr({Value::boolean(true)})}}));
  CHECK(d.frames[0] == m.objects[0].frames[0]);  // still the lz4 host copy
  CHECK(compression_of(d) == arr({str("lz4")}));
  CHECK(rep.arrays_converted == 1);
  CHECK(rep.unconvertible.empty());
}

TEST_CASE("transcode: errors name the object they concern") {
  // A pickle that does not parse, at a nested path.
  Value h = map({{"serializer", str("pickle")},
                 {"writeable", arr({})},
                 {"compression", arr({Value::nil()})},
                 {"num-sub-frames", num(1)}});
  const Value root = map({{"op", str("task-finished")},
                          {"result", map({{"nested", placeholder("__Serialized__", 1)}})}});
  auto bad_pickle = parse_message(frames_of({msgpack::encode(root), msgpack::encode(h), Buffer{0x80, 0x05, 0xff, 0x2e}}));
  REQUIRE(bad_pickle);
  REQUIRE(bad_pickle->objects[0].path == "result['nested']");
  TranscodeReport r1;
  auto e1 = transcode_message(*bad_pickle, with_protocol(4), r1);
  REQUIRE(!e1);
  CHECK(e1.error().code == Errc::bad_opcode);
  CHECK(e1.error().context == "result['nested']: pickle");
  // The offset is relative to a frame of a message without offsets: it is
  // said in the text, never as a file offset.
  CHECK(!e1.error().has_offset());
  CHECK(e1.error().message().rfind("result['nested']: pickle: at byte 0x2 of it: ", 0) == 0);

  // A frame that does not decompress, when the codec changes.
  Value nh = raw_numpy_header(1000);
  nh.set("compression", arr({str("lz4")}));
  Buffer garbage{0xe8, 0x03, 0, 0, 0xff, 0xff, 0xff, 0xff};  // claims 1000 bytes
  auto bad_frame = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})),
                                            msgpack::encode(nh), garbage}));
  REQUIRE(bad_frame);
  TranscodeReport r2;
  auto e2 = transcode_message(*bad_frame, with_codec(Codec::zstd), r2);
  REQUIRE(!e2);
  CHECK(e2.error().code == Errc::codec_failed);
  CHECK(e2.error().context == "data: frame 2");

  // A GPU object without a CPU form: named, with its type, unless kept.
  auto rmm_class = pickle::class_reference_pickle("rmm._lib.device_buffer", "DeviceBuffer");
  REQUIRE(rmm_class);
  Value rh = map({{"type-serialized", Value::bin(*rmm_class)},
                  {"serializer", str("cuda")},
                  {"compression", arr({Value::boolean(false)})},
                  {"num-sub-frames", num(1)}});
  auto rmm = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"buf", placeholder("__Serialized__", 1)}})),
                                      msgpack::encode(rh), Buffer(64, 1)}));
  REQUIRE(rmm);
  TranscodeOptions cpu;
  cpu.layout_cpu = true;
  TranscodeReport r3;
  auto e3 = transcode_message(*rmm, cpu, r3);
  REQUIRE(!e3);
  CHECK(e3.error().code == Errc::unsupported);
  CHECK(e3.error().context == "buf");
  const std::string why =
      "buf: rmm._lib.device_buffer.DeviceBuffer cannot become a CPU object: an RMM device buffer has no "
      "dtype or shape to give a NumPy array";
  const std::string tail = why.substr(5) + " (keep_unconvertible leaves it as it is)";
  REQUIRE(e3.error().message().size() > tail.size());
  CHECK(e3.error().message().substr(e3.error().message().size() - tail.size()) == tail);
  cpu.keep_unconvertible = true;
  TranscodeReport r4;
  auto kept = transcode_message(*rmm, cpu, r4);
  REQUIRE(kept);
  CHECK(r4.unconvertible == std::vector<std::string>{why});
  CHECK(r4.arrays_converted == 0);
  CHECK(*kept == rmm->raw.memory_frames());
}

// The error names the object once: the recoder gives its whole path as the
// error's context, and the caller's context (the same path) is not added.
TEST_CASE("transcode: an unconvertible object is named once in its error") {
  auto rmm_class = pickle::class_reference_pickle("rmm._lib.device_buffer", "DeviceBuffer");
  REQUIRE(rmm_class);
  Value rh = map({{"type-serialized", Value::bin(*rmm_class)},
                  {"serializer", str("cuda")},
                  {"compression", arr({Value::boolean(false)})},
                  {"num-sub-frames", num(1)}});
  auto rmm = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"buf", placeholder("__Serialized__", 1)}})),
                                      msgpack::encode(rh), Buffer(64, 1)}));
  REQUIRE(rmm);
  TranscodeOptions cpu;
  cpu.layout_cpu = true;
  TranscodeReport rep;
  auto e = transcode_message(*rmm, cpu, rep);
  REQUIRE(!e);
  CHECK(e.error().message() ==
        "buf: rmm._lib.device_buffer.DeviceBuffer cannot become a CPU object: an RMM device buffer has no "
        "dtype or shape to give a NumPy array (keep_unconvertible leaves it as it is)");
}
