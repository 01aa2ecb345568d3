// describe_errors() (core/recode/describe.h): the exceptions and tracebacks
// of Dask's error messages, for `inspect`.
#include <algorithm>

#include "core/recode/detail/describe_parts.h"
#include "daskcaps/pickle/pickle.h"
#include "daskcaps/recode/describe.h"
#include "core/wire/internal/serialized.h"
#include "core/recode/internal/error_pickles.h"

namespace daskcaps {

namespace {

// The pickle an error object holds: its frames decompressed and merged
// (a dask `bytes` is one original frame), under the limits.
Result<Bytes> pickle_of(const SubObject& obj, const Limits& limits) {
  auto raw = decompressed_frames(obj, limits);
  if (!raw) return std::move(raw).error();
  auto merged = merge_frames(obj, std::move(*raw));
  if (!merged) return std::move(merged).error();
  if (merged->size() != 1)
    return make_error(Errc::bad_value, "a bytes object of " + std::to_string(merged->size()) + " frames");
  return std::move((*merged)[0]);
}

void read_pickle(ErrorReport& e, ByteSpan pickled, const Limits& limits) {
  auto summary = pickle::summarize(pickled, limits);
  if (!summary) {
    e.problem = "pickle does not parse: " + summary.error().message();
    return;
  }
  e.pickle_protocol = summary->protocol;
  auto info = pickle::read_exception_info(pickled, limits);
  if (!info) {
    e.problem = "pickle does not parse: " + info.error().message();
    return;
  }
  e.exception_class = std::move(info->exception_class);
  e.class_by_value = info->class_by_value;
  e.arguments = std::move(info->arguments);
  e.frames = std::move(info->frames);
  e.frames_cut = info->frames_cut;
}

}  // namespace

std::vector<ErrorReport> describe_errors(const Message& message, const DescribeOptions& options) {
  std::vector<ErrorReport> out;
  const std::vector<SubObject>& objects = message.objects;
  for (const ErrorSlot& slot : find_error_slots(message.root)) {
    ErrorReport e;
    e.path = slot.path;
    e.part = std::string(to_string(slot.part));
    e.exception_text = slot.exception_text;
    if (!slot.header_frame) {
      read_pickle(e, slot.bin, options.limits);
      out.push_back(std::move(e));
      continue;
    }
    auto it = std::lower_bound(objects.begin(), objects.end(), *slot.header_frame,
                               [](const SubObject& o, std::uint64_t k) { return o.header_frame < k; });
    if (it == objects.end() || it->header_frame != *slot.header_frame || !holds_bytes(*it)) continue;
    e.header_frame = it->header_frame;
    bool stored = false;
    for (std::size_t i = 0; i < it->frames.size(); ++i) stored |= message.raw.frames[it->header_frame + 1 + i].is_stored();
    if (stored) {
      // Left in its file (a message of --store-bytes or more): an exception
      // or traceback that large is not read whole, to keep memory to a window.
      e.problem = "not read: its frames are larger than a message kept in memory";
      out.push_back(std::move(e));
      continue;
    }
    // Decoded whole to be read, so no larger than what describe decodes whole.
    Limits limits = options.limits;
    limits.max_decompressed_bytes = std::min(limits.max_decompressed_bytes, options.decode_whole_bytes);
    auto pickled = pickle_of(*it, limits);
    if (!pickled) {
      e.problem = pickled.error().message();
    } else {
      read_pickle(e, *pickled, options.limits);
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace daskcaps
