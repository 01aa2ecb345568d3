#include "core/recode/internal/error_pickles.h"

#include <doctest/doctest.h>

#include "daskcaps/pickle/pickle.h"
#include "daskcaps/recode/transcode.h"
#include "support/dask_builder.h"
#include "support/error_pickles.h"
#include "support/pickle_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

TranscodeOptions protocol(int p) {
  TranscodeOptions o;
  o.pickle_protocol = p;
  return o;
}

std::vector<Bytes> transcode(const Message& m, const TranscodeOptions& o, TranscodeReport* report = nullptr) {
  TranscodeReport r;
  auto out = transcode_message(m, o, r);
  if (!out) FAIL(out.error().message());
  if (report) *report = r;
  return std::move(*out);
}

std::string head(const Bytes& b) { return to_hex(ByteSpan(b.data(), std::min<std::size_t>(2, b.size()))); }

}  // namespace

TEST_CASE("error_pickles: error dicts by Dask's conventions, at any depth") {
  SUBCASE("a handler's reply: status uncaught-error or error, with exception_text") {
    for (const char* status : {"uncaught-error", "error"}) {
      auto slots = find_error_slots(error_dict(status));
      REQUIRE(slots.size() == 2);
      CHECK(slots[0].part == ErrorPart::exception);
      CHECK(slots[0].path == "exception");
      CHECK(slots[0].header_frame == 1u);
      CHECK(slots[0].exception_text == "ValueError('boom')");
      CHECK(slots[1].part == ErrorPart::traceback);
      CHECK(slots[1].header_frame == 3u);
    }
  }
  SUBCASE("client.run's reply: the worker's dict under its address") {
    auto slots = find_error_slots(map({{"tcp://127.0.0.3:40001", error_dict("error")}}));
    REQUIRE(slots.size() == 2);
    CHECK(slots[0].path == "tcp://127.0.0.3:40001['exception']");
  }
  SUBCASE("batched task-erred, without a status (scheduler to client)") {
    auto slots = find_error_slots(arr({map({{"op", str("key-in-memory")}, {"key", str("a")}}),
                                       map({{"op", str("task-erred")},
                                            {"key", str("x")},
                                            {"exception", placeholder("__Serialized__", 1)},
                                            {"traceback", Value::nil()}})}));
    REQUIRE(slots.size() == 1);  // a nil traceback is no pickle
    CHECK(slots[0].path == "[1]['exception']");
    CHECK(!slots[0].exception_text);
  }
  SUBCASE("KilledWorker: the scheduler's own pickle, a bin in frame 0") {
    auto slots = find_error_slots(arr({map({{"op", str("task-erred")},
                                            {"exception", Value::bin(exception_pickle())},
                                            {"traceback", Value::nil()}})}));
    REQUIRE(slots.size() == 1);
    CHECK(!slots[0].header_frame);
    CHECK(slots[0].bin.size() == exception_pickle().size());
  }
  SUBCASE("not Dask's error dict: nothing") {
    CHECK(find_error_slots(map({{"status", str("OK")},
                                {"exception", placeholder("__Serialized__", 1)},
                                {"exception_text", str("x")}})).empty());
    // error_message always writes exception_text.
    CHECK(find_error_slots(map({{"status", str("error")}, {"exception", placeholder("__Serialized__", 1)}})).empty());
    CHECK(find_error_slots(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})).empty());
    CHECK(find_error_slots(map({{"op", str("task-erred")}, {"key", str("x")}})).empty());
  }
}

TEST_CASE("error_pickles: holds_bytes wants the dask family's bytes") {
  Message m = message_of(error_dict("error"), error_frames());
  REQUIRE(m.objects.size() == 2);
  CHECK(holds_bytes(m.objects[0]));
  SubObject other = m.objects[0];
  other.header.set("serializer", str("pickle"));
  CHECK(!holds_bytes(other));
  other = m.objects[0];
  auto ts = pickle::class_reference_pickle("numpy", "ndarray");
  REQUIRE(ts);
  other.header.set("type-serialized", Value::bin(*ts));
  CHECK(!holds_bytes(other));
  CHECK(error_objects(m).size() == 2);
}

TEST_CASE("transcode: the exception and traceback of every error shape go to the target protocol") {
  const std::vector<std::pair<const char*, Value>> shapes = {
      {"uncaught-error reply", error_dict("uncaught-error")},
      {"run_on_scheduler reply", error_dict("error")},
      {"client.run reply", map({{"tcp://127.0.0.3:40001", error_dict("error")}})},
      {"task-erred to the client",
       arr({map({{"op", str("task-erred")},
                 {"key", str("x")},
                 {"exception", placeholder("__Serialized__", 1)},
                 {"traceback", placeholder("__Serialized__", 3)}})})},
      {"task-erred to the scheduler", [] {
         Value d = error_dict("error");
         d.set("op", str("task-erred"));
         d.set("key", str("x"));
         return arr({d});
       }()},
      {"log-event", arr({map({{"op", str("log-event")}, {"topic", str("worker-fail-hard")}, {"msg", error_dict("error")}})})},
  };
  for (const auto& shape : shapes) {
    const char* name = shape.first;  // (clang 14: no structured binding in CAPTURE's lambda)
    const Value& root = shape.second;
    CAPTURE(name);
    Message m = message_of(root, error_frames());
    TranscodeReport rep;
    auto out = transcode(m, protocol(4), &rep);
    REQUIRE(out.size() == 5);
    CHECK(head(out[2]) == "80 04");
    CHECK(head(out[4]) == "80 04");
    CHECK(rep.pickles_recoded == 4);  // two type-serialized, the exception, the traceback
    auto info = pickle::read_exception_info(out[2]);
    REQUIRE(info);
    CHECK(info->exception_class == "builtins.ValueError");
    CHECK(info->arguments == std::vector<std::string>{"'boom'"});
    CHECK(info->frames.size() == 1);
  }
}

TEST_CASE("transcode: KilledWorker's pickle inside frame 0 goes to the target protocol") {
  Message m = message_of(arr({map({{"op", str("task-erred")},
                                   {"key", str("k")},
                                   {"exception", Value::bin(exception_pickle())},
                                   {"traceback", Value::nil()}})}),
                         {});
  auto out = transcode(m, protocol(4));
  REQUIRE(out.size() == 1);
  auto root = msgpack::decode_all(out[0].span());
  REQUIRE(root);
  const Value* e = root->as_array()[0].find("exception");
  REQUIRE(e != nullptr);
  REQUIRE(e->is_bin());
  CHECK(to_hex(e->as_bin().subspan(0, 2)) == "80 04");
  CHECK(root->as_array()[0].find("traceback")->is_nil());
  // At its own protocol nothing changes.
  auto same = transcode(m, protocol(5));
  CHECK(same[0] == m.raw.frames[0].bytes());
}

TEST_CASE("transcode: a user's bytes that start with \\x80\\x05 are data and pass untouched") {
  const Buffer user = exception_pickle();  // a pickle, even: still the user's bytes
  const std::vector<std::pair<const char*, Value>> shapes = {
      {"echo", map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})},
      {"a result", map({{"status", str("OK")}, {"result", placeholder("__Serialized__", 1)}})},
      {"OK with an exception key", map({{"status", str("OK")},
                                        {"exception", placeholder("__Serialized__", 1)},
                                        {"exception_text", str("not an error")}})},
      {"error without exception_text", map({{"status", str("error")}, {"exception", placeholder("__Serialized__", 1)}})},
      {"an error's other keys", [] {
         Value d = error_dict("error");
         d.set("data", placeholder("__Serialized__", 5));
         return d;
       }()},
  };
  for (const auto& shape : shapes) {
    const char* name = shape.first;  // (clang 14: no structured binding in CAPTURE's lambda)
    const Value& root = shape.second;
    CAPTURE(name);
    std::vector<Buffer> objects;
    if (root.find("traceback") != nullptr) objects = error_frames();
    objects.push_back(msgpack::encode(bytes_header()));
    objects.push_back(user);
    Message m = message_of(root, objects);
    auto out = transcode(m, protocol(4));
    REQUIRE(out.size() == m.raw.frames.size());
    // The user's frame is the last: its bytes as they were.
    CHECK(out.back() == m.raw.frames.back().bytes());
    CHECK(head(out.back()) == "80 05");
  }
}

TEST_CASE("transcode: a message whose frames and pickles all stay comes out byte for byte") {
  SUBCASE("raw frames under Dask's threshold, to every codec, with and without a compression list") {
    Value no_list = bytes_header();
    no_list.erase("compression");
    for (const Value& header : {bytes_header(), no_list}) {
      Message m = message_of(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}}),
                             {msgpack::encode(header), Buffer(500, 7)});
      for (Codec c : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
        CAPTURE(std::string(codec_name(c)));
        TranscodeOptions o;
        o.codec = c;
        TranscodeReport rep;
        auto out = transcode(m, o, &rep);
        CHECK(out == m.raw.memory_frames());
        CHECK(rep.frames_recompressed == 0);
      }
    }
  }
  SUBCASE("pickles at the protocol they have: an error, the pickle family") {
    Message error = message_of(error_dict("error"), error_frames());
    TranscodeReport rep;
    CHECK(transcode(error, protocol(5), &rep) == error.raw.memory_frames());
    CHECK(rep.pickles_recoded == 0);
    Message family = message_of(
        map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}}),
        {msgpack::encode(map({{"serializer", str("pickle")}, {"writeable", arr({})}, {"num-sub-frames", num(1)}})),
         exception_pickle()});
    CHECK(transcode(family, protocol(5)) == family.raw.memory_frames());
  }
  SUBCASE("a pickle that changes adds no key its header did not have") {
    Value bare = bytes_header();
    bare.erase("compression");
    bare.erase("split-num-sub-frames");
    bare.erase("split-offsets");
    Message m = message_of(map({{"status", str("error")},
                                {"exception", placeholder("__Serialized__", 1)},
                                {"traceback", Value::nil()},
                                {"exception_text", str("ValueError('boom')")},
                                {"traceback_text", str("")}}),
                           {msgpack::encode(bare), exception_pickle()});
    auto out = transcode(m, protocol(4));
    REQUIRE(out.size() == 3);
    CHECK(head(out[2]) == "80 04");
    auto h = msgpack::decode_all(out[1].span());
    REQUIRE(h);
    CHECK(h->find("compression") == nullptr);
    CHECK(h->find("split-num-sub-frames") == nullptr);
    CHECK(h->find("split-offsets") == nullptr);
    // The one with them keeps them, with the same values.
    Message full = message_of(error_dict("error"), error_frames());
    auto out2 = transcode(full, protocol(4));
    auto h2 = msgpack::decode_all(out2[1].span());
    REQUIRE(h2);
    CHECK(*h2->find("compression") == arr({Value::nil()}));
    CHECK(*h2->find("split-offsets") == arr({num(0)}));
  }
}
