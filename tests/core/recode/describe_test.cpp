#include "daskcaps/recode/describe.h"

#include <doctest/doctest.h>

#include "core/recode/detail/describe_parts.h"
#include "daskcaps/pickle/pickle.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "support/dask_builder.h"
#include "support/example_streams.h"
#include "support/pickle_builder.h"
#include "support/stored_frames.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

ObjectReport only_object(const MessageReport& r) {  // a copy: callers pass temporaries
  REQUIRE(r.objects.size() == 1);
  return r.objects[0];
}

MessageReport describe_example(const std::string& name, std::size_t index, const DescribeOptions& o = {}) {
  return describe_message(example_message(name, index), o);
}

// A message with one object whose sub-header is `header` and data `frames`,
// placed at file offset `at` (so that offsets in problems are absolute).
struct Built {
  std::vector<Bytes> frames;
  std::vector<std::uint64_t> offsets;
  Message message;
};
Built build(const Value& header, std::vector<Buffer> data, const char* placeholder_key = "__Serialized__",
            std::uint64_t at = 0x1000) {
  std::vector<Buffer> frames{msgpack::encode(map({{"op", str("echo")}, {"data", placeholder(placeholder_key, 1)}})),
                             msgpack::encode(header)};
  for (auto& d : data) frames.push_back(std::move(d));
  Built b;
  b.frames = frames_of(std::move(frames));
  b.offsets = frame_offsets_for(at, b.frames);
  auto m = parse_message(b.frames, {}, b.offsets);
  REQUIRE(m);
  b.message = std::move(*m);
  return b;
}

Value pickle_header(std::size_t frames) {
  msgpack::Array compression(frames, Value::nil());
  return map({{"serializer", str("pickle")},
              {"writeable", arr({})},
              {"compression", Value::array(std::move(compression))},
              {"num-sub-frames", num(static_cast<std::int64_t>(frames))}});
}

}  // namespace

TEST_CASE("describe: a NumPy array as the real Dask sends it") {
  const ObjectReport& o = only_object(describe_example("numpy.stream", 1));
  CHECK(o.path == "data");
  CHECK(o.placeholder == "__Serialized__");
  CHECK(o.header_frame == 1);
  CHECK(o.serializer == "dask");
  CHECK(o.type == "numpy.ndarray");
  CHECK(o.layout == "cpu");
  REQUIRE(o.array);
  CHECK(o.array->library == "numpy");
  CHECK(o.array->dtype == "<i8");
  CHECK(o.array->shape == std::vector<std::int64_t>{3});
  CHECK(o.array->strides == std::vector<std::int64_t>{8});
  CHECK(o.array->order == "C+F");
  CHECK(o.array->writeable == true);
  REQUIRE(o.frames.size() == 1);
  CHECK(o.frames[0].index == 2);
  CHECK(o.frames[0].compression == "null");
  CHECK(o.frames[0].wire_bytes == 24);
  CHECK(o.frames[0].raw_bytes == 24u);
  CHECK(o.wire_bytes == 24);
  CHECK(o.raw_bytes == 24u);
  REQUIRE(o.split);
  CHECK(o.split->counts == std::vector<std::uint64_t>{1});
  CHECK(o.split->offsets == std::vector<std::uint64_t>{0});
  REQUIRE(o.pickles.size() == 1);
  CHECK(o.pickles[0].where == "type-serialized");
  CHECK(o.pickles[0].protocol == 5);
  CHECK(o.pickles[0].globals == std::vector<std::string>{"numpy.ndarray"});
  CHECK(o.pickle_protocol == 5);
  CHECK(o.globals == std::vector<std::string>{"numpy.ndarray"});
  CHECK(!o.collection);
  CHECK(o.problems.empty());
}

TEST_CASE("describe: array orders, pickled dtypes and object arrays") {
  // np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3))
  const ObjectReport& f = only_object(describe_example("numpy.stream", 2));
  REQUIRE(f.array);
  CHECK(f.array->shape == std::vector<std::int64_t>{2, 3});
  CHECK(f.array->strides == std::vector<std::int64_t>{4, 8});
  CHECK(f.array->order == "F");
  // A structured dtype travels pickled: a second pickle, in the sub-header.
  const ObjectReport& s = only_object(describe_example("numpy.stream", 3));
  REQUIRE(s.array);
  CHECK(s.array->dtype == "pickled dtype");
  CHECK(s.array->order == "strided");  // no type string to know the item size from
  REQUIRE(s.pickles.size() == 2);
  CHECK(s.pickles[1].where == "dtype");
  CHECK(s.pickles[1].protocol == 5);
  // np.array([1, "x"], dtype=object): the data frame is a pickle.
  const ObjectReport& obj = only_object(describe_example("numpy.stream", 4));
  REQUIRE(obj.array);
  CHECK(obj.array->object_pickle);
  CHECK(obj.array->dtype == "object");
  CHECK(obj.array->order == "pickle");
  REQUIRE(obj.pickles.size() == 2);
  CHECK(obj.pickles[1].where == "object array data");
  // np.broadcast_to(np.arange(3, dtype="i1"), (4, 3)): read-only, stride 0.
  const ObjectReport& b = only_object(describe_example("numpy.stream", 5));
  REQUIRE(b.array);
  CHECK(b.array->dtype == "|i1");
  CHECK(b.array->shape == std::vector<std::int64_t>{4, 3});
  CHECK(b.array->strides == std::vector<std::int64_t>{0, 1});
  CHECK(b.array->order == "broadcast");
  CHECK(b.array->writeable == false);
  CHECK(b.raw_bytes == 3u);
}

TEST_CASE("describe: split, compressed frames add up to the object's raw size") {
  const ObjectReport& o = only_object(describe_example("split-zstd.stream", 1));
  REQUIRE(o.frames.size() == 4);
  for (const FrameReport& fr : o.frames) CHECK(fr.compression == "zstd");
  CHECK(o.frames[0].raw_bytes == 16384u);
  CHECK(o.frames[3].raw_bytes == 14848u);
  CHECK(o.frames[3].wire_bytes == 362);
  CHECK(o.wire_bytes == 395 * 3 + 362);
  CHECK(o.raw_bytes == 8000u * 8);
  REQUIRE(o.split);
  CHECK(o.split->counts == std::vector<std::uint64_t>{4});
  CHECK(o.array->shape == std::vector<std::int64_t>{8000});
}

TEST_CASE("describe: a CuPy array is gpu layout, with its CAI read") {
  const ObjectReport& o = only_object(describe_example("gpu-result.stream", 2));
  CHECK(o.type == "cupy.ndarray");
  CHECK(o.layout == "gpu");
  REQUIRE(o.array);
  CHECK(o.array->library == "cupy");
  CHECK(o.array->dtype == "<f4");
  CHECK(o.array->shape == std::vector<std::int64_t>{50, 200});
  CHECK(o.array->strides == std::vector<std::int64_t>{4, 200});
  CHECK(o.array->order == "F");
  CHECK(!o.array->writeable);
  REQUIRE(o.frames.size() == 1);
  CHECK(o.frames[0].compression == "lz4");
  CHECK(o.frames[0].wire_bytes == 371);
  CHECK(o.frames[0].raw_bytes == 40000u);
}

TEST_CASE("describe: pickles of the pickle family and of __Pickled__, with their buffers") {
  const ObjectReport& p = only_object(describe_example("pickle5.stream", 1));
  CHECK(p.serializer == "pickle");
  CHECK(p.layout.empty());
  REQUIRE(p.pickles.size() == 1);
  CHECK(p.pickles[0].where == "pickle data");
  CHECK(p.pickles[0].protocol == 5);
  CHECK(p.pickles[0].out_of_band_buffers == 1);
  CHECK(p.pickles[0].globals == std::vector<std::string>{"numpy.core.numeric._frombuffer", "numpy.dtype"});
  CHECK(p.raw_bytes == 118u + 8000u);

  const ObjectReport& t = only_object(describe_example("pickle5.stream", 2));
  CHECK(t.placeholder == "__Pickled__");
  CHECK(!t.serializer);
  REQUIRE(t.pickles.size() == 1);
  CHECK(t.pickles[0].where == "pickled-obj");
  CHECK(t.pickles[0].out_of_band_buffers == 1);
  CHECK(!t.split);

  DescribeOptions dis;
  dis.disassemble = true;
  const ObjectReport& d = only_object(describe_example("pickle5.stream", 2, dis));
  REQUIRE(d.pickles[0].disassembly);
  CHECK(d.pickles[0].disassembly->find("NEXT_BUFFER") != std::string::npos);
  CHECK(!t.pickles[0].disassembly);
}

TEST_CASE("describe: the handshake, batched ops and frames no object claims") {
  MessageReport hs = describe_example("pickle5.stream", 0);
  REQUIRE(hs.handshake);
  CHECK(*hs.handshake->pickle_protocol == 5);
  CHECK(hs.frame_sizes == std::vector<std::uint64_t>{42});
  CHECK(!hs.op);
  CHECK(hs.objects.empty());

  Value batch = arr({map({{"op", str("task-finished")}}), map({{"op", str("heartbeat-worker")}})});
  auto b = parse_message(frames_of({msgpack::encode(batch), Buffer(5, 1)}));
  REQUIRE(b);
  MessageReport r = describe_message(*b);
  CHECK(r.batched_ops == std::vector<std::string>{"task-finished", "heartbeat-worker"});
  CHECK(r.loose_frames == std::vector<std::size_t>{1});
  CHECK(r.frame_sizes == std::vector<std::uint64_t>{b->raw.frames[0].size(), 5});
  CHECK(!r.handshake);
}

TEST_CASE("describe: a pickle that does not parse is a problem at its absolute offset") {
  Built b = build(pickle_header(1), {Buffer{0x80, 0x05, 0xff, 0x2e}});
  const ObjectReport& o = only_object(describe_message(b.message));
  REQUIRE(o.problems.size() == 1);
  const Diagnostic& d = o.problems[0];
  CHECK(d.kind == DiagnosticKind::pickle_unreadable);
  CHECK(d.offset == b.offsets[2] + 2);  // the 0xff opcode
  CHECK(d.text.rfind("pickle data: pickle does not parse: @" + hex_offset(b.offsets[2] + 2) + ": ", 0) == 0);
  REQUIRE(o.pickles.size() == 1);
  REQUIRE(o.pickles[0].error);
  CHECK(d.text == "pickle data: pickle does not parse: " + *o.pickles[0].error);
}

TEST_CASE("describe: frames that do not decompress, unknown codecs and limits have their own kinds") {
  Value h = numpy_header("|u1", 1000, 1, {str("lz4")});
  h.set("num-sub-frames", num(1));
  Built corrupt = build(h, {Buffer{0xe8, 0x03, 0, 0, 0xff, 0xff, 0xff, 0xff}});
  const ObjectReport& c = only_object(describe_message(corrupt.message));
  REQUIRE(c.problems.size() == 1);
  CHECK(c.problems[0].kind == DiagnosticKind::codec_failed);
  CHECK(c.problems[0].offset == corrupt.offsets[2]);
  CHECK(c.problems[0].text.rfind("frame 2 @" + hex_offset(corrupt.offsets[2]) + ": lz4 ", 0) == 0);
  CHECK(!c.raw_bytes);
  CHECK(!c.frames[0].raw_bytes);

  h.set("compression", arr({str("blosc")}));
  Built blosc = build(h, {Buffer(10, 0)});
  const ObjectReport& u = only_object(describe_message(blosc.message));
  REQUIRE(u.problems.size() == 1);
  CHECK(u.problems[0] == Diagnostic{DiagnosticKind::unknown_codec, blosc.offsets[2],
                                    "frame 2 @" + hex_offset(blosc.offsets[2]) +
                                        ": codec \"blosc\" is not one this build decodes"});
  CHECK(u.frames[0].compression == "blosc");

  auto packed = compress(Codec::zstd, Buffer(5000, 0));
  REQUIRE(packed);
  h.set("compression", arr({str("zstd")}));
  Built big = build(h, {*packed});
  DescribeOptions tight;
  tight.limits.max_decompressed_bytes = 4096;
  const ObjectReport& l = only_object(describe_message(big.message, tight));
  REQUIRE(l.problems.size() == 1);
  CHECK(l.problems[0].kind == DiagnosticKind::limit_exceeded);
  CHECK(l.problems[0].offset == big.offsets[2]);
  CHECK(l.problems[0].text.find("(limit max_decompressed_bytes)") != std::string::npos);
}

TEST_CASE("describe: sub-headers that lack what they need are bad-sub-header or bad-split") {
  Value h = numpy_header("|u1", 4, 1, {Value::nil()});
  h.set("num-sub-frames", num(1));
  h.set("compression", num(5));
  Built list = build(h, {Buffer(4, 0)});
  const ObjectReport& a = only_object(describe_message(list.message));
  REQUIRE(!a.problems.empty());
  CHECK(a.problems[0].kind == DiagnosticKind::bad_sub_header);
  CHECK(a.problems[0].offset == list.offsets[1]);  // the sub-header frame
  CHECK(a.problems[0].text.rfind("sub-header \"compression\" is a msgpack ", 0) == 0);

  Value split = numpy_header("|u1", 4, 1, {Value::nil()});
  split.set("num-sub-frames", num(1));
  split.set("split-offsets", arr({num(5)}));
  Built bad_split = build(split, {Buffer(4, 0)});
  const ObjectReport& s = only_object(describe_message(bad_split.message));
  REQUIRE(s.problems.size() == 1);
  CHECK(s.problems[0] == Diagnostic{DiagnosticKind::bad_split, bad_split.offsets[1],
                                    "split range 0 (offset 5, 1 shards) runs past the 1 frames of the object"});
  CHECK(!s.split);

  Built pickled = build(map({{"compression", arr({})}, {"num-sub-frames", num(0)}}), {}, "__Pickled__");
  const ObjectReport& p = only_object(describe_message(pickled.message));
  REQUIRE(p.problems.size() == 1);
  CHECK(p.problems[0] == Diagnostic{DiagnosticKind::bad_sub_header, pickled.offsets[1],
                                    "__Pickled__ sub-header has no bin \"pickled-obj\""});

  Built coll = build(map({{"is-collection", Value::boolean(true)},
                          {"type-serialized", str("tuple")},
                          {"compression", arr({})},
                          {"num-sub-frames", num(0)}}),
                     {});
  const ObjectReport& t = only_object(describe_message(coll.message));
  CHECK(t.collection);
  CHECK(t.type == "tuple");
  REQUIRE(t.problems.size() == 1);
  CHECK(t.problems[0] == Diagnostic{DiagnosticKind::bad_sub_header, coll.offsets[1],
                                    "collection without a \"sub-headers\" list"});
}

TEST_CASE("describe: a type-serialized that names no class is type-unreadable, without a file offset") {
  Value h = numpy_header("|u1", 4, 1, {Value::nil()});
  h.set("num-sub-frames", num(1));
  // A pickled int, not a class reference.
  h.set("type-serialized", Value::bin(PickleBuilder().proto(5).binint1(7).stop().bytes()));
  Built b = build(h, {Buffer(4, 0)});
  const ObjectReport& o = only_object(describe_message(b.message));
  REQUIRE(o.problems.size() == 1);
  CHECK(o.problems[0].kind == DiagnosticKind::type_unreadable);
  CHECK(!o.problems[0].has_offset());
  CHECK(o.problems[0].text.rfind("type-serialized: ", 0) == 0);
  CHECK(o.type == "numpy.ndarray");  // from "type"

  // One that does not even parse: its pickle is unreadable too; offsets
  // inside a msgpack header are said in the text.
  h.set("type-serialized", Value::bin(Buffer{0x80, 0x05, 0xff}));
  Built g = build(h, {Buffer(4, 0)});
  const ObjectReport& go = only_object(describe_message(g.message));
  REQUIRE(go.problems.size() == 2);
  CHECK(go.problems[0].kind == DiagnosticKind::pickle_unreadable);
  CHECK(!go.problems[0].has_offset());
  CHECK(go.problems[0].text.rfind("type-serialized: pickle does not parse: at byte 0x2 of it: ", 0) == 0);
  CHECK(go.problems[1].kind == DiagnosticKind::type_unreadable);
}

TEST_CASE("describe: problems of collection elements stay with the element") {
  Value good = numpy_header("|u1", 2, 1, {Value::nil()});
  Value bad = pickle_header(1);
  Value h = map({{"is-collection", Value::boolean(true)},
                 {"type-serialized", str("list")},
                 {"sub-headers", arr({good, bad})},
                 {"frame-lengths", arr({num(1), num(1)})},
                 {"compression", arr({Value::nil(), Value::nil()})},
                 {"num-sub-frames", num(2)}});
  Built b = build(h, {Buffer(2, 1), Buffer{0x80, 0x05, 0xff, 0x2e}});
  const ObjectReport& o = only_object(describe_message(b.message));
  CHECK(o.problems.empty());
  REQUIRE(o.elements.size() == 2);
  CHECK(o.elements[0].path == "data[0]");
  CHECK(o.elements[0].problems.empty());
  CHECK(o.elements[0].array->shape == std::vector<std::int64_t>{2});
  REQUIRE(o.elements[1].problems.size() == 1);
  CHECK(o.elements[1].problems[0].kind == DiagnosticKind::pickle_unreadable);
  // Merged element frames are not where they were on the wire.
  CHECK(!o.elements[1].problems[0].has_offset());
}

TEST_CASE("describe: numpy and CuPy layouts from their headers alone") {
  CHECK(!numpy_layout(num(1)));
  CHECK(!numpy_layout(map({{"dtype", arr({num(0), str("<f8")})}})));  // no shape/strides
  auto descr = numpy_layout(map({{"dtype", arr({num(0), arr({arr({str("a"), str("<i4")})})})},
                                 {"shape", arr({num(2)})},
                                 {"strides", arr({num(4)})}}));
  REQUIRE(descr);
  CHECK(descr->dtype.rfind("descr ", 0) == 0);
  auto c = numpy_layout(map({{"dtype", arr({num(0), str("<U3")})},  // 12-byte items
                             {"shape", arr({num(2), num(5)})},
                             {"strides", arr({num(60), num(12)})},
                             {"broadcast_to", arr({num(3), num(2), num(5)})}}));
  REQUIRE(c);
  CHECK(c->order == "C");
  CHECK(c->shape == std::vector<std::int64_t>{3, 2, 5});
  CHECK(!c->writeable);

  CHECK(!cupy_layout(map({{"shape", arr({num(2)})}})));
  auto cu = cupy_layout(map({{"shape", arr({num(4), num(4)})}, {"typestr", str("<f8")}}));
  REQUIRE(cu);
  CHECK(cu->library == "cupy");
  CHECK(cu->order == "C");  // CuPy's nil strides mean C order
  CHECK(cu->strides.empty());
}

namespace {

// Everything a report says about an object, as text, to compare reports.
std::string flat(const ObjectReport& o) {
  std::string s = o.path + "|" + o.placeholder + "|" + o.serializer.value_or("-") + "|" + o.type.value_or("-") + "|" +
                  o.layout + "|" + std::to_string(o.wire_bytes) + "|" +
                  (o.raw_bytes ? std::to_string(*o.raw_bytes) : "-") + "|" + std::to_string(o.pickle_protocol) + "|" +
                  (o.array ? o.array->dtype + o.array->order : "-") + "\n";
  for (const FrameReport& f : o.frames)
    s += " frame " + std::to_string(f.index) + " " + std::to_string(f.wire_bytes) + " " +
         (f.raw_bytes ? std::to_string(*f.raw_bytes) : "-") + " " + f.compression + "\n";
  for (const PickleReport& p : o.pickles) {
    s += " pickle " + p.where + " " + std::to_string(p.protocol) + " " + std::to_string(p.out_of_band_buffers) + " " +
         p.error.value_or("") + " " + p.disassembly.value_or("").substr(0, 200) + ":";
    for (const std::string& g : p.globals) s += g + ",";
    s += "\n";
  }
  for (const std::string& g : o.globals) s += " global " + g + "\n";
  for (const Diagnostic& d : o.problems)
    s += " problem " + std::string(to_string(d.kind)) + " " + std::to_string(d.offset) + " " + d.text + "\n";
  for (const ObjectReport& e : o.elements) s += " element " + flat(e);
  return s;
}
std::string flat(const MessageReport& r) {
  std::string s;
  for (std::uint64_t n : r.frame_sizes) s += std::to_string(n) + ",";
  s += '\n';  // appended: "\n" + std::string&& sets off GCC 12's -Wrestrict at -O3 (bug 105651)
  s += r.op.value_or("-");
  s += '\n';
  for (const ObjectReport& o : r.objects) s += flat(o);
  return s;
}

}  // namespace

TEST_CASE("describe: measuring frames in windows, and reading them from a store, say what decoding them whole says") {
  DescribeOptions whole;
  DescribeOptions windows;
  windows.decode_whole_bytes = 0;
  windows.disassemble = whole.disassemble = true;
  std::size_t objects = 0;
  for (const char* name : {"codec-lz4.stream", "codec-snappy.stream", "codec-zlib.stream", "codec-zstd.stream",
                           "gpu-result.stream", "numpy.stream", "pandas-lz4.stream", "pickle5.stream",
                           "split-zstd.stream"}) {
    CAPTURE(name);
    const auto msgs = example_messages(name);
    for (const auto& em : msgs) {
      const auto offsets = em.frame_offsets();
      auto m = parse_message(em.frames, {}, offsets);
      REQUIRE(m);
      const std::string expected = flat(describe_message(*m, whole));
      objects += m->objects.size();
      CHECK(flat(describe_message(*m, windows)) == expected);
      CHECK(flat(describe_message(stored(*m), windows)) == expected);
      CHECK(flat(describe_message(stored(*m), whole)) == expected);
    }
  }
  CHECK(objects >= 15);
}

TEST_CASE("describe: an object that decodes to more than the limit keeps only the frames its pickles are in") {
  // A protocol 5 pickle with one out-of-band buffer of 40 MiB of zeros (lz4):
  // the buffer is measured, never held.
  auto zeros = compress(Codec::lz4, Buffer(40 << 20, 0));
  REQUIRE(zeros);
  Value h = pickle_header(2);
  h.set("compression", arr({Value::nil(), str("lz4")}));
  Built b = build(h, {Buffer{0x80, 0x05, 0x97, 0x2e}, *zeros});
  const ObjectReport o = only_object(describe_message(b.message));
  CHECK(o.problems.empty());
  REQUIRE(o.pickles.size() == 1);
  CHECK(o.pickles[0].protocol == 5);
  CHECK(o.pickles[0].out_of_band_buffers == 1);
  REQUIRE(o.frames.size() == 2);
  CHECK(o.frames[1].raw_bytes == std::uint64_t{40} << 20);
  CHECK(o.raw_bytes == (std::uint64_t{40} << 20) + 4);
  CHECK(flat(describe_message(stored(b.message))) == flat(describe_message(b.message)));

  // A protocol 4 pickle of 20 MiB (its bytes in band), lz4: kept and read.
  Buffer p4{0x80, 0x04, 0x8e};
  const std::uint64_t n = std::uint64_t{20} << 20;
  for (int i = 0; i < 8; ++i) p4.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  p4.resize(p4.size() + n, 0);
  p4.push_back(0x2e);
  auto packed = compress(Codec::lz4, p4);
  REQUIRE(packed);
  Value h4 = pickle_header(1);
  h4.set("compression", arr({str("lz4")}));
  Built b4 = build(h4, {*packed});
  const ObjectReport o4 = only_object(describe_message(b4.message));
  CHECK(o4.problems.empty());
  REQUIRE(o4.pickles.size() == 1);
  CHECK(o4.pickles[0].protocol == 4);
  CHECK(o4.frames[0].raw_bytes == p4.size());
  DescribeOptions windows;
  windows.decode_whole_bytes = 0;
  CHECK(flat(describe_message(stored(b4.message), windows)) == flat(describe_message(b4.message)));
}
