// check_bench: the round trip of `check` against one live endpoint, in
// process (no process start, no probe): connect, send our handshake, read
// theirs, identity, versions, close. Or, with --survey, the concurrent
// survey of every worker a scheduler lists.
//
//   check_bench ADDRESS [ITERATIONS]          round trips, one after another
//   check_bench --survey ADDRESS [ITERATIONS] identity of ADDRESS, then survey
//                                             its workers ITERATIONS times
//
// Prints one line per measure: name, iterations, median, p90, min (ms).
// bench/check_bench.py runs it beside the Python equivalent.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "daskcaps/caps/caps_report.h"
#include "daskcaps/net/address.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/net/rpc.h"

using namespace daskcaps;

namespace {

void print_stats(const char* name, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double p90 = ms[std::min(ms.size() - 1, ms.size() * 9 / 10)];
  std::printf("%-28s n=%-5zu median %8.3f ms  p90 %8.3f ms  min %8.3f ms\n", name, ms.size(), median, p90,
              ms.front());
}

rpc::SessionOptions session() {
  rpc::SessionOptions s;
  msgpack::Value hs = msgpack::Value::map();
  hs.set("compression", msgpack::Value::nil());
  hs.set("python", msgpack::Value::array({msgpack::Value::integer(3), msgpack::Value::integer(11),
                                          msgpack::Value::integer(2)}));
  hs.set("pickle-protocol", msgpack::Value::integer(5));
  s.ours = *handshake_from_msgpack(hs);
  s.limits.max_message_bytes = std::uint64_t{256} << 20;
  return s;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  bool survey_mode = argc > 1 && std::strcmp(argv[1], "--survey") == 0;
  const int first = survey_mode ? 2 : 1;
  if (argc <= first) {
    std::fprintf(stderr, "usage: check_bench [--survey] ADDRESS [ITERATIONS]\n");
    return 2;
  }
  auto address = net::parse_address(argv[first]);
  if (!address) {
    std::fprintf(stderr, "check_bench: %s\n", address.error().message().c_str());
    return 2;
  }
  const int iterations = argc > first + 1 ? std::atoi(argv[first + 1]) : (survey_mode ? 5 : 200);
  rpc::QueryOptions q;
  q.session = session();
  q.timeout = std::chrono::seconds(10);

  if (!survey_mode) {
    std::vector<double> ms;
    for (int i = 0; i < iterations; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = rpc::query_endpoint(*address, q);
      const double t = since(t0);
      if (!r) {
        std::fprintf(stderr, "check_bench: %s\n", r.error().message().c_str());
        return 4;
      }
      ms.push_back(t);
    }
    print_stats("c++ query_endpoint", ms);
    return 0;
  }

  auto sched = rpc::query_endpoint(*address, q);
  if (!sched || !sched->exchange.identity || !sched->exchange.identity->ok()) {
    std::fprintf(stderr, "check_bench: no identity from the scheduler\n");
    return 4;
  }
  std::vector<net::Address> workers;
  for (const auto& w : report::workers_of(sched->exchange.identity->value))
    if (auto a = net::parse_address(w)) workers.push_back(*a);
  survey::SurveyOptions o;
  o.session = q.session;
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto results = survey::survey(workers, o);
    const double t = since(t0);
    std::size_t failed = 0;
    for (const auto& r : results) failed += !r;
    if (failed) {
      std::fprintf(stderr, "check_bench: %zu of %zu workers failed\n", failed, workers.size());
      return 4;
    }
    ms.push_back(t);
  }
  char name[64];
  std::snprintf(name, sizeof name, "c++ survey of %zu", workers.size());
  print_stats(name, ms);
  return 0;
}
