// msgpack decode + encode of Dask headers: our layer against msgpack-cxx.
// the design allows "a small own msgpack layer if it is measurably better";
// this measures it on what Dask sends: a numpy sub-header, an
// update-graph-like frame 0 with tuple keys, and two small task messages
// (frame 0 as Dask 2022.12.1 writes them).
//   build/bench/msgpack_bench [iterations] [ours|theirs|both] [input]
// `input` picks the inputs whose name contains it. With one side only, run
// it under `valgrind --tool=callgrind --toggle-collect='*run_ours*'` (or
// run_theirs) to count the instructions of the loop alone; see
// bench/msgpack_callgrind.sh.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "daskcaps/wire/msgpack.h"

#ifdef DASKCAPS_HAVE_MSGPACK_CXX
#define MSGPACK_NO_BOOST
#include <msgpack.hpp>
#endif

using daskcaps::Buffer;
using Value = daskcaps::msgpack::Value;

namespace {
Buffer hex(const char* h) {
  Buffer out;
  for (std::size_t i = 0; h[i] != 0 && h[i + 1] != 0; i += 2)
    out.push_back(static_cast<std::uint8_t>(std::stoi(std::string(h + i, 2), nullptr, 16)));
  return out;
}

Buffer numpy_header() {
  Value sub = Value::map();
  sub.set("dtype", Value::array({Value::integer(0), Value::str("<f8")}));
  sub.set("shape", Value::array({Value::integer(1000), Value::integer(1000)}));
  sub.set("strides", Value::array({Value::integer(8000), Value::integer(8)}));
  sub.set("writeable", Value::array({Value::boolean(true)}));
  Value h = Value::map();
  h.set("sub-header", sub);
  h.set("type", Value::str("numpy.ndarray"));
  h.set("type-serialized", Value::bin(Buffer(32, 0x80)));
  h.set("serializer", Value::str("dask"));
  h.set("split-num-sub-frames", Value::array({Value::integer(1)}));
  h.set("split-offsets", Value::array({Value::integer(0)}));
  h.set("compression", Value::array({Value::str("lz4")}));
  h.set("num-sub-frames", Value::integer(1));
  return daskcaps::msgpack::encode(h);
}
Buffer graph_frame() {
  daskcaps::msgpack::Map who;
  for (int i = 0; i < 2000; ++i)
    who.emplace_back(Value::array({Value::str("x-" + std::to_string(i % 50)), Value::integer(i)}),
                     Value::array({Value::str("tcp://10.0.0." + std::to_string(i % 250) + ":40000")}));
  Value m = Value::map();
  m.set("op", Value::str("update-graph"));
  m.set("who_has", Value::map(std::move(who)));
  m.set("priority", Value::float64(1.5));
  return daskcaps::msgpack::encode(m);
}
// Frame 0 of a worker's batched [task-finished] (distributed 2022.12.1:
// TaskFinishedMsg(...).to_dict() of an 8 MB numpy result, through
// distributed.protocol.dumps).
Buffer task_finished() {
  return hex(
      "918aa36b6579d92b2827696e632d3866326239633164346535613662376338643965306631613262336334643565272c"
      "203329a66e6279746573ce007a1200a474797065c42080059515000000000000008c056e756d7079948c076e64617272"
      "61799493942ea8747970656e616d65ad6e756d70792e6e646172726179a86d6574616461746180a6746872656164cf00"
      "007f8ae79ab4cbaa737461727473746f70739183a6616374696f6ea7636f6d70757465a57374617274cb41d9b0c45807"
      "e6b4a473746f70cb41d9b0c45827e6b4a26f70ad7461736b2d66696e6973686564ab7374696d756c75735f6964d92074"
      "61736b2d66696e69736865642d313732343036303030302e36323431393832a6737461747573a24f4b");
}
// Frame 0 of the scheduler's batched [compute-task] for a task with two
// dependencies (the dict Scheduler._task_to_msg builds, with function and
// args as ToPickle, through distributed.protocol.dumps of 2022.12.1).
Buffer compute_task() {
  return hex(
      "918ea26f70ac636f6d707574652d7461736ba36b6579d92b28276164642d356431633065386232663961346337643665"
      "3362316130663965386437633662272c203729a87072696f726974799300012aa86475726174696f6ecb3fe000000000"
      "0000ab7374696d756c75735f6964bf636f6d707574652d7461736b2d313732343036303030302e35313337383233a777"
      "686f5f68617382d92b2827696e632d386632623963316434653561366237633864396530663161326233633464356527"
      "2c20372991b57463703a2f2f31302e302e302e31323a3430313233d92b2827696e632d38663262396331643465356136"
      "62376338643965306631613262336334643565272c20382991b57463703a2f2f31302e302e302e31333a3430323131a6"
      "6e627974657382d92b2827696e632d386632623963316434653561366237633864396530663161326233633464356527"
      "2c203729ce007a1200d92b2827696e632d38663262396331643465356136623763386439653066316132623363346435"
      "65272c203829ce007a1200a872756e5f73706563c0a866756e6374696f6e81ab5f5f5069636b6c65645f5f01a4617267"
      "7381ab5f5f5069636b6c65645f5f02a66b7761726773c0b57265736f757263655f7265737472696374696f6e7380a561"
      "63746f72c2ab616e6e6f746174696f6e7380");
}

template <typename F>
double seconds(int iterations, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The measured loops, kept out of line so that callgrind can count them alone.
__attribute__((noinline)) std::size_t run_ours(const Buffer& bytes, int n) {
  std::size_t sink = 0;
  for (int i = 0; i < n; ++i) {
    auto v = daskcaps::msgpack::decode_all(bytes);
    if (!v) std::abort();
    sink += daskcaps::msgpack::encode(*v).size();
  }
  return sink;
}
#ifdef DASKCAPS_HAVE_MSGPACK_CXX
__attribute__((noinline)) std::size_t run_theirs(const Buffer& bytes, int n) {
  std::size_t sink = 0;
  for (int i = 0; i < n; ++i) {
    ::msgpack::object_handle oh =
        ::msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    ::msgpack::sbuffer out;
    ::msgpack::pack(out, oh.get());
    sink += out.size();
  }
  return sink;
}
#endif
}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const std::string side = argc > 2 ? argv[2] : "both";
  const char* only = argc > 3 ? argv[3] : "";
  const bool ours = side != "theirs", theirs = side != "ours";
  const std::pair<const char*, Buffer> inputs[] = {
      {"numpy sub-header", numpy_header()},
      {"task-finished", task_finished()},
      {"compute-task", compute_task()},
      {"frame 0, 2000 tuple keys", graph_frame()},
  };
  for (const auto& input : inputs) {
    const char* name = input.first;
    if (std::strstr(name, only) == nullptr) continue;
    const Buffer& bytes = input.second;  // not a structured binding: lambdas capture it (clang 14)
    // The own layer must give back Dask's bytes.
    if (daskcaps::msgpack::encode(*daskcaps::msgpack::decode_all(bytes)) != bytes) {
      std::fprintf(stderr, "%s: re-encoding changed the bytes\n", name);
      return 1;
    }
    const int n = bytes.size() < 1000 ? iterations * 100 : iterations;
    std::size_t sink = 0;
    std::printf("%-26s %7zu B", name, bytes.size());
    double t_ours = 0;
    if (ours) {
      t_ours = seconds(1, [&] { sink += run_ours(bytes, n); });
      std::printf("  dask-caps: %8.1f MB/s", static_cast<double>(bytes.size()) * n / t_ours / 1e6);
    }
#ifdef DASKCAPS_HAVE_MSGPACK_CXX
    if (theirs) {
      const double t_theirs = seconds(1, [&] { sink += run_theirs(bytes, n); });
      std::printf("  msgpack-cxx: %8.1f MB/s", static_cast<double>(bytes.size()) * n / t_theirs / 1e6);
      if (ours) std::printf("  ratio %.2f", t_theirs / t_ours);
    }
#else
    (void)theirs;
#endif
    std::printf("   (%zu)\n", sink % 10);
  }
  return 0;
}
