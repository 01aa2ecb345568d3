// Pickle recoding speed (see bench/pickle_bench.py, which makes the inputs,
// times CPython on them and prints the ratios).
//
//   pickle_bench [--target P] [--inline] [--repeat N] [--out FILE] PICKLE [BUFFER[:ro] ...]
//
// Recodes PICKLE (with its out-of-band buffers, writeable unless ":ro") to
// protocol P N times and prints one line of JSON: the best and median wall
// seconds of one recode, its best CPU seconds, the input bytes (pickle +
// buffers), the output bytes, and, for scale, the best time of one memcpy of
// the output size. --out writes the recoded pickle to FILE (to compare it
// with CPython's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <time.h>
#include <vector>

#include "daskcaps/pickle/pickle.h"
#include "core/pickle/detail/pickle_alloc.h"

using namespace daskcaps;

namespace {

Buffer read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "pickle_bench: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return Buffer(as_bytes(text));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of this thread: on a loaded machine it says what the work costs
// when wall time also counts the waits for a core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  pickle::RecodeOptions options;
  options.target_protocol = 2;
  int repeat = 10;
  std::vector<std::string> files;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--target" && i + 1 < argc) {
      options.target_protocol = std::atoi(argv[++i]);
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--inline") {
      options.inline_buffers = true;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: pickle_bench [--target P] [--inline] [--repeat N] [--out FILE] PICKLE [BUFFER[:ro] ...]\n");
    return 2;
  }
  const Buffer data = read_file(files[0]);
  std::vector<Buffer> storage;
  std::vector<bool> writeable;
  for (std::size_t i = 1; i < files.size(); ++i) {
    std::string path = files[i];
    bool w = true;
    if (path.size() > 3 && path.compare(path.size() - 3, 3, ":ro") == 0) {
      path.resize(path.size() - 3);
      w = false;
    }
    storage.push_back(read_file(path));
    writeable.push_back(w);
  }
  std::vector<pickle::OutOfBandBuffer> buffers;
  std::uint64_t input = data.size();
  for (std::size_t i = 0; i < storage.size(); ++i) {
    buffers.push_back({storage[i], writeable[i]});
    input += storage[i].size();
  }

  std::vector<double> times;
  double cpu = 1e9;
  std::size_t out_size = 0;
  for (int i = 0; i < repeat; ++i) {
    const double c0 = thread_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    auto r = pickle::recode(data, buffers, options);
    const double s = seconds_since(t0);
    cpu = std::min(cpu, thread_cpu_seconds() - c0);
    if (!r) {
      std::fprintf(stderr, "pickle_bench: %s\n", r.error().message().c_str());
      return 3;
    }
    out_size = r->pickle.size();
    times.push_back(s);
    if (i == 0 && !out_path.empty()) {
      std::ofstream f(out_path, std::ios::binary);
      f.write(reinterpret_cast<const char*>(r->pickle.data()), static_cast<std::streamsize>(r->pickle.size()));
      if (!f) {
        std::fprintf(stderr, "pickle_bench: cannot write %s\n", out_path.c_str());
        return 2;
      }
    }
  }
  std::sort(times.begin(), times.end());

  // One memcpy of the output size into fresh memory (with the same huge
  // page hint as the recoder's output), for scale.
  double copy = 1e9;
  {
    Buffer src(out_size, 1);
    for (int i = 0; i < std::min(repeat, 5); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Buffer dst;
      pickle::detail::reserve_large(dst, out_size);
      dst.append(src);
      copy = std::min(copy, seconds_since(t0));
      if (dst.size() != out_size) return 4;
    }
  }
  std::printf("{\"best_s\": %.6f, \"median_s\": %.6f, \"cpu_s\": %.6f, \"input_bytes\": %llu, "
              "\"output_bytes\": %zu, \"memcpy_s\": %.6f}\n",
              times.front(), times[times.size() / 2], cpu, static_cast<unsigned long long>(input), out_size, copy);
  return 0;
}
