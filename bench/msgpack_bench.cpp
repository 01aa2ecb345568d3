// msgpack decode + encode of Dask headers: our layer against msgpack-cxx.
// DESIGN.md allows "a small own msgpack layer if it is measurably better";
// this measures it on what Dask sends: a numpy sub-header and an
// update-graph-like frame 0 with tuple keys.
//   build/bench/msgpack_bench [iterations]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/wire/msgpack.h"

#ifdef DASKCAPS_HAVE_MSGPACK_CXX
#define MSGPACK_NO_BOOST
#include <msgpack.hpp>
#endif

using daskcaps::Buffer;
using Value = daskcaps::msgpack::Value;

namespace {
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

template <typename F>
double seconds(int iterations, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  for (const auto& input : {std::pair<const char*, Buffer>{"numpy sub-header", numpy_header()},
                            std::pair<const char*, Buffer>{"frame 0, 2000 tuple keys", graph_frame()}}) {
    const char* name = input.first;
    const Buffer& bytes = input.second;  // not a structured binding: lambdas capture it (clang 14)
    const int n = bytes.size() < 1000 ? iterations * 100 : iterations;
    std::size_t sink = 0;
    const double ours = seconds(n, [&] {
      auto v = daskcaps::msgpack::decode_all(bytes);
      sink += daskcaps::msgpack::encode(*v).size();
    });
    std::printf("%-26s %7zu B  dask-caps: %8.1f MB/s", name, bytes.size(),
                static_cast<double>(bytes.size()) * n / ours / 1e6);
#ifdef DASKCAPS_HAVE_MSGPACK_CXX
    const double theirs = seconds(n, [&] {
      ::msgpack::object_handle oh =
          ::msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      ::msgpack::sbuffer out;
      ::msgpack::pack(out, oh.get());
      sink += out.size();
    });
    std::printf("  msgpack-cxx: %8.1f MB/s  ratio %.2f", static_cast<double>(bytes.size()) * n / theirs / 1e6,
                theirs / ours);
#endif
    std::printf("   (%zu)\n", sink % 10);
  }
  return 0;
}
