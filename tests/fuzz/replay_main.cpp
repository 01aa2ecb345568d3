// A plain main for the fuzz targets (docs/design.md §9.4, as bloaty's fuzz_driver.cc
// and zstd's regression_driver.c): runs LLVMFuzzerTestOneInput once on every
// file named, and on every file under every directory named, in sorted
// order, so the committed regressions and the seed corpora replay under
// CTest in builds without libFuzzer (and under the sanitizer build).
//
//   replay_<name> [--if-exists] PATH...
//
// A PATH after --if-exists may be missing (the generated seed corpus is
// optional); any other missing PATH is an error. A crash or a violated
// property aborts, naming the input on stderr first.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  bool optional = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--if-exists") {
      optional = true;
      continue;
    }
    const fs::path p(arg);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) in_dir.push_back(e.path());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else if (!optional) {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", arg.c_str());
      return 2;
    }
    optional = false;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: %s: cannot read\n", f.c_str());
      return 2;
    }
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    // Copy into an exact-size heap buffer so ASan sees reads past the end;
    // libFuzzer never passes a null pointer, not even for empty input.
    std::vector<std::uint8_t> data(bytes.begin(), bytes.end());
    static std::uint8_t empty = 0;
    LLVMFuzzerTestOneInput(data.empty() ? &empty : data.data(), data.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
