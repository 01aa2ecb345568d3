// Objects that Dask nests: collections of collections, three levels deep
// (core/wire/internal/serialized_tree.h), through the GPU layout and the pickle
// recode; and the pickles of Dask's plain fields (core/recode/internal/field_pickles.h).
#include <doctest/doctest.h>

#include <algorithm>

#include "daskcaps/pickle/pickle.h"
#include "daskcaps/recode/engine.h"
#include "core/recode/internal/field_pickles.h"
#include "core/recode/internal/gpu_layout.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/message.h"
#include "core/wire/internal/serialized_tree.h"
#include "support/dask_builder.h"
#include "support/example_streams.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

Result<ClassRef> read_class(ByteSpan type_serialized) {
  auto ref = pickle::class_reference(type_serialized);
  if (!ref) return std::move(ref).error();
  return ClassRef{ref->first, ref->second};
}

// A CuPy dask-family element header as serialize() leaves it inside a
// collection (no split or compression keys: those are the object's).
Value cupy_element(std::int64_t n) {
  auto cls = pickle::class_reference_pickle("cupy", "ndarray");
  REQUIRE(cls);
  return map({{"sub-header", map({{"shape", arr({num(n)})},
                                  {"typestr", str("<f8")},
                                  {"strides", arr({num(8)})},
                                  {"data", arr({num(140000000000000), Value::boolean(false)})},
                                  {"version", num(3)}})},
              {"type", str("cupy.ndarray")},
              {"type-serialized", Value::bin(*cls)},
              {"serializer", str("dask")}});
}

Value collection(const char* type, std::vector<Value> elements, std::vector<std::int64_t> lengths) {
  std::vector<Value> ls;
  for (std::int64_t l : lengths) ls.push_back(num(l));
  return map({{"sub-headers", arr(std::move(elements))},
              {"is-collection", Value::boolean(true)},
              {"frame-lengths", arr(std::move(ls))},
              {"type-serialized", str(type)}});
}

Value keyed(Value header, const char* key) {
  header.set("key", str(key));
  return header;
}

// {"op": "echo", "data": <header with `frames` frames>}.
Message object_message(Value header, std::vector<Buffer> frames) {
  header.set("num-sub-frames", num(static_cast<std::int64_t>(frames.size())));
  std::vector<Buffer> all{msgpack::encode(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})),
                          msgpack::encode(header)};
  for (Buffer& f : frames) all.push_back(std::move(f));
  auto m = parse_message(frames_of(std::move(all)));
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

// Every leaf header of an object, depth first.
std::vector<Value> leaves(Value header) {
  std::vector<Value> out;
  auto st = for_each_leaf(header, nullptr, 1024, [&](Value& leaf, std::vector<Bytes>&, const std::string&) -> Status {
    out.push_back(leaf);
    return {};
  });
  REQUIRE(st);
  return out;
}

int protocol_of(ByteSpan pickled) {
  auto s = pickle::summarize(pickled);
  REQUIRE(s);
  return s->protocol;
}

// pickle.dumps("text", protocol=5)
const Buffer kTextPickle5{0x80, 0x05, 0x95, 0x08, 0, 0, 0, 0, 0, 0, 0, 0x8c, 0x04, 't', 'e', 'x', 't', 0x94, 0x2e};
// pickle.dumps(int, protocol=5)
const Buffer kIntClassPickle5{0x80, 0x05, 0x95, 0x14, 0,    0,    0,    0,    0,    0,    0,    0x8c,
                              0x08, 'b',  'u',  'i',  'l',  't',  'i',  'n',  's',  0x94, 0x8c, 0x03,
                              'i',  'n',  't',  0x94, 0x93, 0x94, 0x2e};

// {"a": x, "b": [y, (z, {w}), 5-as-pickle]}: three levels, every kind of
// collection, a CuPy array at each level.
Value three_levels() {
  Value set = collection("set", {cupy_element(4)}, {1});
  Value tuple = collection("tuple", {cupy_element(3), set}, {1, 1});
  Value list = collection("list", {cupy_element(2), tuple, map({{"serializer", str("pickle")}, {"writeable", arr({})}})},
                          {1, 2, 1});
  return collection("dict", {keyed(cupy_element(1), "a"), keyed(list, "b")}, {1, 4});
}

}  // namespace

TEST_CASE("nested: layout cpu converts CuPy arrays at every depth of dicts, lists, tuples and sets") {
  Message m = object_message(three_levels(), {Buffer(8, 1), Buffer(16, 2), Buffer(24, 3), Buffer(32, 4), kTextPickle5});
  auto got = convert_object_to_cpu(m.objects[0], &read_class);
  REQUIRE(got);
  REQUIRE(got->size() == 4);
  std::vector<std::string> paths;
  for (const LayoutResult& r : *got) {
    CHECK(r.outcome == LayoutOutcome::converted);
    paths.push_back(r.path);
  }
  CHECK(paths == std::vector<std::string>{"['a']", "['b'][0]", "['b'][1][0]", "['b'][1][1][0]"});
  std::size_t numpy = 0;
  for (const Value& leaf : leaves(m.objects[0].header)) {
    const Value* t = leaf.find("type");
    if (t == nullptr) continue;
    CHECK(*t == str("numpy.ndarray"));
    CHECK(*leaf.find("type-serialized") == Value::bin(numpy_ndarray_type_serialized()));
    ++numpy;
  }
  CHECK(numpy == 4);

  // Through transcode: the same, with the data frames as they were.
  TranscodeOptions o;
  o.layout_cpu = true;
  TranscodeReport rep;
  Message fresh = object_message(three_levels(), {Buffer(8, 1), Buffer(16, 2), Buffer(24, 3), Buffer(32, 4), kTextPickle5});
  Message back = reparse(recode(fresh, o, rep));
  CHECK(rep.arrays_converted == 4);
  REQUIRE(back.objects[0].frames.size() == 5);
  CHECK(back.objects[0].frames[3].size() == 32);
  for (const Value& leaf : leaves(back.objects[0].header))
    if (const Value* t = leaf.find("type")) CHECK(*t == str("numpy.ndarray"));
}

TEST_CASE("nested: an unconvertible element deep down is named by its path") {
  Value bad = cupy_element(1);
  bad.find("sub-header")->set("typestr", str("|V8"));
  Value h = collection("dict", {keyed(collection("list", {collection("tuple", {bad}, {1})}, {1}), "x")}, {1});
  Message m = object_message(h, {Buffer(8, 0)});
  TranscodeOptions o;
  o.layout_cpu = true;
  TranscodeReport rep;
  auto out = transcode_message(m, o, rep);
  REQUIRE(!out);
  CHECK(out.error().message().find("data['x'][0][0]: cupy.ndarray cannot become a CPU object") != std::string::npos);
}

TEST_CASE("nested: pickle protocol 4 recodes data pickles at every depth and rebuilds frame-lengths") {
  // {"a": [<numpy array through the pickle family, one out-of-band buffer>, "text"]}
  Message p5 = example_message("pickle5.stream", 1);
  const SubObject* arr_obj = nullptr;
  for (const SubObject& o : p5.objects)
    if (o.path == "data") arr_obj = &o;
  REQUIRE(arr_obj != nullptr);
  REQUIRE(arr_obj->frames.size() == 2);
  Value leaf = map({{"serializer", str("pickle")}, {"writeable", arr({Value::boolean(true)})}});
  Value text = map({{"serializer", str("pickle")}, {"writeable", arr({})}});
  Value h = collection("dict", {keyed(collection("list", {leaf, text}, {2, 1}), "a")}, {3});
  Buffer pickled(arr_obj->frames[0].span()), buffer(arr_obj->frames[1].span());
  Message m = object_message(h, {pickled, buffer, kTextPickle5});

  TranscodeOptions o;
  o.pickle_protocol = 4;
  TranscodeReport rep;
  Message back = reparse(recode(m, o, rep));
  CHECK(rep.pickles_recoded == 2);
  CHECK(rep.buffers_inlined == 1);
  const SubObject& out = back.objects[0];
  REQUIRE(out.frames.size() == 2);  // the array's buffer went into its pickle
  CHECK(protocol_of(out.frames[0].span()) == 4);
  CHECK(protocol_of(out.frames[1].span()) == 4);
  CHECK(*out.header.find("frame-lengths") == arr({num(2)}));
  const Value& inner = out.header.find("sub-headers")->as_array()[0];
  CHECK(*inner.find("frame-lengths") == arr({num(1), num(1)}));
  CHECK(*inner.find("sub-headers")->as_array()[0].find("writeable") == arr({}));
}

TEST_CASE("nested: type-serialized pickles deep down go to protocol 4 too") {
  Value leaf = map({{"serializer", str("pickle")}, {"writeable", arr({})}, {"type-serialized", Value::bin(kIntClassPickle5)}});
  Value h = collection("list", {collection("tuple", {collection("set", {leaf}, {1})}, {1})}, {1});
  Message m = object_message(h, {kTextPickle5});
  TranscodeOptions o;
  o.pickle_protocol = 4;
  TranscodeReport rep;
  Message back = reparse(recode(m, o, rep));
  std::vector<Value> ls = leaves(back.objects[0].header);
  REQUIRE(ls.size() == 1);
  CHECK(protocol_of(ls[0].find("type-serialized")->as_bin()) == 4);
  CHECK(protocol_of(back.objects[0].frames[0].span()) == 4);
}

TEST_CASE("nested: malformed and too deep collections are errors, not crashes") {
  // Deeper than the walk's limit.
  Value h = map({{"serializer", str("pickle")}, {"writeable", arr({})}});
  for (int i = 0; i < 40; ++i) h = collection("list", {h}, {1});
  std::vector<Bytes> frames;
  frames.emplace_back(Buffer(kTextPickle5));
  Status st = for_each_leaf(h, &frames, 32, [](Value&, std::vector<Bytes>&, const std::string&) -> Status { return {}; });
  REQUIRE(!st);
  CHECK(st.error().code == Errc::limit_exceeded);
  CHECK(for_each_leaf(h, &frames, 1024, [](Value&, std::vector<Bytes>&, const std::string&) -> Status { return {}; }));

  // Frames claimed past the object's end, and a collection without its list.
  Value leaf = map({{"serializer", str("pickle")}, {"writeable", arr({})}});
  Value past = collection("list", {collection("list", {leaf}, {4})}, {3});
  Message m = object_message(past, {kTextPickle5, kTextPickle5, kTextPickle5});
  TranscodeOptions o;
  o.pickle_protocol = 4;
  TranscodeReport rep;
  auto out = transcode_message(m, o, rep);
  REQUIRE(!out);
  CHECK(out.error().code == Errc::length_out_of_range);
  Value no_list = map({{"is-collection", Value::boolean(true)}, {"frame-lengths", arr({})}});
  Message m2 = object_message(collection("tuple", {no_list}, {0}), {});
  auto out2 = transcode_message(m2, o, rep);
  REQUIRE(!out2);
  CHECK(out2.error().message().find("has no \"sub-headers\" list") != std::string::npos);
}

TEST_CASE("field pickles: a result's type in key-in-memory and task-finished goes to protocol 4") {
  // The scheduler's report to a client, alone and batched.
  for (Value root : {map({{"op", str("key-in-memory")}, {"key", str("x-1")}, {"type", Value::bin(kIntClassPickle5)}}),
                     arr({map({{"op", str("key-in-memory")}, {"key", str("x-1")}, {"type", Value::bin(kIntClassPickle5)}}),
                          map({{"op", str("task-finished")}, {"key", str("y")}, {"type", Value::bin(kIntClassPickle5)},
                               {"nbytes", num(28)}})})}) {
    std::vector<Bytes> frames = frames_of({msgpack::encode(root)});
    TranscodeOptions o;
    o.pickle_protocol = 4;
    CHECK(needs_recode(RawMessage::of(frames), o));
    TranscodeReport rep;
    Message back = reparse(recode(reparse(frames), o, rep));
    std::size_t seen = 0;
    for_each_field_pickle(back.root, [&](std::string_view, std::string_view key, Value& v) {
      CHECK(key == "type");
      CHECK(protocol_of(v.as_bin()) == 4);
      ++seen;
    });
    CHECK(seen == (root.is_array() ? 2u : 1u));
    CHECK(rep.pickles_recoded == seen);
  }
}

TEST_CASE("field pickles: selected by op and key, never by the bytes") {
  // The same bytes under another op, or another key, are data.
  Value root = arr({map({{"op", str("echo")}, {"type", Value::bin(kIntClassPickle5)}}),
                    map({{"op", str("key-in-memory")}, {"other", Value::bin(kIntClassPickle5)}}),
                    map({{"op", str("log-event")}, {"topic", str("print")},
                         {"msg", map({{"message", Value::bin(kIntClassPickle5)}})}})});
  std::vector<Bytes> frames = frames_of({msgpack::encode(root)});
  TranscodeOptions o;
  o.pickle_protocol = 4;
  TranscodeReport rep;
  auto out = recode(reparse(frames), o, rep);
  REQUIRE(out.size() == 1);
  CHECK(out[0].span().size() == frames[0].span().size());
  CHECK(std::equal(out[0].span().begin(), out[0].span().end(), frames[0].span().begin()));
  CHECK(rep.pickles_recoded == 0);
  CHECK(!needs_recode(RawMessage::of(frames_of({msgpack::encode(map({{"op", str("echo")}, {"type", Value::bin(kIntClassPickle5)}}))})), o));

  // Every listed field: run inside broadcast's msg, plugins, feed, the warn relays.
  Value bin = Value::bin(kIntClassPickle5);
  Value all = arr({map({{"op", str("broadcast")},
                        {"msg", map({{"op", str("run")}, {"function", bin}, {"args", bin}, {"kwargs", bin}})}}),
                   map({{"op", str("run_function")}, {"function", bin}, {"args", bin}, {"kwargs", bin}}),
                   map({{"op", str("feed")}, {"function", bin}, {"setup", bin}, {"teardown", bin}}),
                   map({{"op", str("register_worker_plugin")}, {"plugin", bin}}),
                   map({{"op", str("plugin-add")}, {"plugin", bin}}),
                   map({{"op", str("workers_to_close")}, {"key", bin}}),
                   map({{"op", str("log-event")}, {"topic", str("warn")},
                        {"msg", map({{"message", bin}, {"category", bin}})}}),
                   map({{"op", str("event")}, {"topic", str("warn")},
                        {"event", arr({Value::float64(1.5), map({{"message", bin}, {"category", bin}})})}})});
  std::size_t n = 0;
  for_each_field_pickle(all, [&](std::string_view, std::string_view, Value&) { ++n; });
  CHECK(n == 16);
  std::vector<Bytes> all_frames = frames_of({msgpack::encode(all)});
  CHECK(needs_recode(RawMessage::of(all_frames), o));
  TranscodeReport all_rep;
  Message back = reparse(recode(reparse(all_frames), o, all_rep));
  for_each_field_pickle(back.root, [&](std::string_view, std::string_view, Value& v) { CHECK(protocol_of(v.as_bin()) == 4); });
  // Without a pickle protocol, nothing to do.
  TranscodeOptions codec_only;
  codec_only.codec = Codec::zstd;
  CHECK(!needs_recode(RawMessage::of(frames_of({msgpack::encode(map({{"op", str("key-in-memory")}, {"type", bin}}))})), codec_only));
}

TEST_CASE("nested: a header nested past the msgpack limit is refused at parse, with its offset") {
  Value h = map({{"serializer", str("pickle")}, {"writeable", arr({})}});
  for (int i = 0; i < 600; ++i) h = collection("list", {h}, {1});
  h.set("num-sub-frames", num(1));
  auto m = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})),
                                    msgpack::encode(h), kTextPickle5}));
  REQUIRE(!m);
  CHECK(m.error().code == Errc::too_deep);
  CHECK(m.error().has_offset());
}
