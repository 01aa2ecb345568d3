#include "daskcaps/recode/transcode.h"

#include <string>
#include <utility>
#include <vector>

#include "core/wire/internal/message_layout.h"
#include "core/recode/detail/object_recoder.h"
#include "core/recode/internal/error_pickles.h"
#include "daskcaps/wire/handshake.h"

namespace daskcaps {

TranscodeReport& TranscodeReport::operator+=(const TranscodeReport& o) {
  frames_recompressed += o.frames_recompressed;
  pickles_recoded += o.pickles_recoded;
  buffers_inlined += o.buffers_inlined;
  arrays_converted += o.arrays_converted;
  frames_link_coded += o.frames_link_coded;
  unconvertible.insert(unconvertible.end(), o.unconvertible.begin(), o.unconvertible.end());
  bytes_in += o.bytes_in;
  bytes_out += o.bytes_out;
  return *this;
}

namespace {

msgpack::Value rewrite_handshake(const msgpack::Value& root, const TranscodeOptions& opt) {
  msgpack::Value out = root;
  if (opt.codec) {
    out.set("compression", *opt.codec == Codec::none
                               ? msgpack::Value::nil()
                               : msgpack::Value::str(std::string(codec_name(*opt.codec))));
  }
  if (opt.pickle_protocol) out.set("pickle-protocol", msgpack::Value::integer(*opt.pickle_protocol));
  return out;
}

}  // namespace

Status validate(const TranscodeOptions& options) {
  if (auto st = validate(options.compress); !st) return st;
  if (options.pickle_protocol && (*options.pickle_protocol < 0 || *options.pickle_protocol > 5))
    return make_error(Errc::usage, "pickle protocol " + std::to_string(*options.pickle_protocol) +
                                       ": the engine writes protocols 0 to 5");
  if (options.shard_bytes == 0) return make_error(Errc::usage, "the shard size must be positive");
  return {};
}

Result<std::vector<Bytes>> transcode_message(Message&& message, const TranscodeOptions& options,
                                             TranscodeReport& report) {
  for (const WireFrame& f : message.raw.frames) report.bytes_in += f.size();
  if (options.is_identity()) {
    for (const WireFrame& f : message.raw.frames) report.bytes_out += f.size();
    return message.raw.memory_frames();
  }
  const bool handshake = message.is_handshake();
  if (handshake) message.root = rewrite_handshake(message.root, options);
  // The exceptions and tracebacks of Dask's error messages are pickles
  // inside bytes (core/recode/internal/error_pickles.h).
  const bool error_pickles = options.pickle_protocol.has_value() && !handshake && detail::may_hold_errors(message);
  detail::ObjectRecoder recoder(options, report, message.raw.storage.get(),
                                error_pickles ? error_objects(message)
                                              : std::vector<std::pair<std::size_t, ErrorPart>>{});
  for (SubObject& obj : message.objects) {
    if (auto st = recoder.recode(obj); !st) return std::move(st).error().add_context(obj.path);
  }
  // Those that frame 0 holds as bin.
  bool root_changed = handshake;
  auto root = detail::recode_root_pickles(recoder, message.root, error_pickles,
                                          detail::recodes_field_pickles(message, options));
  if (!root) return std::move(root).error();
  root_changed |= *root;
  // Nothing was recoded: the message goes out as it came, byte for byte.
  if (!root_changed && !recoder.changed()) {
    for (const WireFrame& f : message.raw.frames) report.bytes_out += f.size();
    return message.raw.memory_frames();
  }
  auto frames = assemble_message(message, /*root_unchanged=*/!root_changed);
  if (!frames) return frames;
  for (const Bytes& f : *frames) report.bytes_out += f.size();
  return frames;
}

Result<std::vector<Bytes>> transcode_message(const Message& message, const TranscodeOptions& options,
                                             TranscodeReport& report) {
  Message copy = message;
  return transcode_message(std::move(copy), options, report);
}

}  // namespace daskcaps
