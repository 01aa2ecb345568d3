// Batch driver of the pickle engine for the CPython oracle test
// (tests/e2e/test_pickle_oracle.py): reads many jobs from one file, runs
// each, writes all answers to another file, so a corpus of thousands of
// pickles costs one process.
//
//   pickle_recode IN OUT
//
// IN:  "PRB1", u32 count, then per job:
//        u8 mode (0 recode, 1 disassemble, 2 summarize, 3 class_reference)
//        u8 target protocol, u8 flags (1: inline buffers)
//        u64 pickle length, pickle bytes
//        u32 buffer count, per buffer: u8 writeable, u64 length, bytes
// OUT: "PRO1", u32 count, then per job:
//        u8 status (0 ok, 1 error)
//        ok:    u64 length, bytes (recoded pickle, or UTF-8 text for the
//               other modes); u32 count, u32 indices (out-of-band buffers)
//        error: u16 length + Errc name, u64 offset (~0 when none),
//               u32 length + message
// All integers little-endian.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/base/internal/byte_reader.h"
#include "core/base/internal/byte_writer.h"
#include "daskcaps/pickle/pickle.h"

using namespace daskcaps;

namespace {

struct Job {
  std::uint8_t mode = 0, target = 5, flags = 0;
  ByteSpan pickle;
  std::vector<pickle::OutOfBandBuffer> buffers;
};

Result<std::vector<Job>> parse(ByteSpan in) {
  ByteReader r(in);
  auto magic = r.chars(4);
  if (!magic || *magic != "PRB1") return make_error(Errc::bad_magic, "not a PRB1 batch");
  auto count = r.u32_le();
  if (!count) return std::move(count).error();
  std::vector<Job> jobs;
  for (std::uint32_t i = 0; i < *count; ++i) {
    Job j;
    auto mode = r.u8();
    auto target = r.u8();
    auto flags = r.u8();
    auto len = r.u64_le();
    if (!mode || !target || !flags || !len) return make_error(Errc::truncated, "job header", r.offset());
    j.mode = *mode;
    j.target = *target;
    j.flags = *flags;
    auto body = r.bytes(*len);
    if (!body) return std::move(body).error();
    j.pickle = *body;
    auto nbuf = r.u32_le();
    if (!nbuf) return std::move(nbuf).error();
    for (std::uint32_t b = 0; b < *nbuf; ++b) {
      auto w = r.u8();
      auto blen = r.u64_le();
      if (!w || !blen) return make_error(Errc::truncated, "buffer header", r.offset());
      auto data = r.bytes(*blen);
      if (!data) return std::move(data).error();
      j.buffers.push_back({*data, *w != 0});
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

void put_ok(ByteWriter& w, ByteSpan data, const std::vector<std::size_t>& oob) {
  w.u8(0);
  w.u64_le(data.size());
  w.bytes(data);
  w.u32_le(static_cast<std::uint32_t>(oob.size()));
  for (std::size_t i : oob) w.u32_le(static_cast<std::uint32_t>(i));
}

void put_error(ByteWriter& w, const Error& e) {
  w.u8(1);
  const std::string_view name = to_string(e.code);
  w.u16_le(static_cast<std::uint16_t>(name.size()));
  w.chars(name);
  w.u64_le(e.offset);
  w.u32_le(static_cast<std::uint32_t>(e.what.size()));
  w.chars(e.what);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: pickle_recode IN OUT\n");
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const Buffer in(as_bytes(text));
  auto jobs = parse(in);
  if (!jobs) {
    std::fprintf(stderr, "pickle_recode: %s\n", jobs.error().message().c_str());
    return 3;
  }
  Buffer out;
  ByteWriter w(out);
  w.chars("PRO1");
  w.u32_le(static_cast<std::uint32_t>(jobs->size()));
  for (const Job& j : *jobs) {
    switch (j.mode) {
      case 0: {
        pickle::RecodeOptions o;
        o.target_protocol = j.target;
        o.inline_buffers = (j.flags & 1) != 0;
        auto r = pickle::recode(j.pickle, j.buffers, o);
        if (r) {
          put_ok(w, r->pickle, r->out_of_band);
        } else {
          put_error(w, r.error());
        }
        break;
      }
      case 1: {
        auto r = pickle::disassemble(j.pickle);
        if (r) {
          put_ok(w, as_bytes(*r), {});
        } else {
          put_error(w, r.error());
        }
        break;
      }
      case 2: {
        auto r = pickle::summarize(j.pickle);
        if (!r) {
          put_error(w, r.error());
          break;
        }
        std::string text = "protocol " + std::to_string(r->protocol) + "\nbuffers " +
                           std::to_string(r->out_of_band_buffers) + "\npersistent " +
                           (r->has_persistent_ids ? "1" : "0") + "\n";
        for (const auto& g : r->globals) text += "global " + g + "\n";
        put_ok(w, as_bytes(text), {});
        break;
      }
      case 3: {
        auto r = pickle::class_reference(j.pickle);
        if (r) {
          put_ok(w, as_bytes(r->first + "\n" + r->second), {});
        } else {
          put_error(w, r.error());
        }
        break;
      }
      default: put_error(w, make_error(Errc::usage, "unknown mode"));
    }
  }
  std::ofstream o(argv[2], std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  return o ? 0 : 1;
}
