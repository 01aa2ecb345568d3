#include "core/recode/detail/object_transcoder.h"

#include <memory>
#include <utility>
#include <vector>

#include "core/recode/detail/object_recoder.h"
#include "core/recode/internal/error_pickles.h"

namespace daskcaps {

struct ObjectTranscoder::State {
  State(const Message& message, const TranscodeOptions& options, TranscodeReport& report)
      : opt(options),
        headers_opt(without_codec(options)),
        errors(options.pickle_protocol.has_value() && !message.is_handshake() && detail::may_hold_errors(message)),
        fields(detail::recodes_field_pickles(message, options)),
        whole(opt, report, nullptr, errors ? error_objects(message) : std::vector<std::pair<std::size_t, ErrorPart>>{}),
        headers(headers_opt, report, nullptr, {}) {}
  static TranscodeOptions without_codec(TranscodeOptions o) {
    o.codec.reset();
    return o;
  }
  const TranscodeOptions opt;
  // recode_header(): the whole object's recode without a codec changes its
  // header and no frame (header_only()); the codec is the caller's.
  const TranscodeOptions headers_opt;
  const bool errors;
  const bool fields;
  detail::ObjectRecoder whole;
  detail::ObjectRecoder headers;
};

ObjectTranscoder::ObjectTranscoder(const Message& message, const TranscodeOptions& options, TranscodeReport& report)
    : state_(std::make_unique<State>(message, options, report)) {}

ObjectTranscoder::~ObjectTranscoder() = default;

bool ObjectTranscoder::header_only(const SubObject& obj) const { return !state_->whole.touches_data(obj); }

Status ObjectTranscoder::recode_header(SubObject& obj) {
  if (!header_only(obj)) return make_error(Errc::internal, "recode_header() of an object whose data frames change");
  return state_->headers.recode(obj);
}

Status ObjectTranscoder::recode(SubObject& obj) { return state_->whole.recode(obj); }

bool ObjectTranscoder::inlines(const SubObject& obj) const { return state_->whole.inlines(obj); }

Status ObjectTranscoder::recode_inlining(SubObject& obj, std::vector<Bytes>& merged, std::size_t gap_bytes,
                                         std::vector<pickle::BufferGap>& gaps) {
  if (!inlines(obj)) return make_error(Errc::internal, "recode_inlining() of an object that does not inline");
  return state_->whole.recode_inlining(obj, merged, gap_bytes, gaps);
}

Result<bool> ObjectTranscoder::recode_root(msgpack::Value& root) {
  if (!state_->errors && !state_->fields) return false;
  return detail::recode_root_pickles(state_->whole, root, state_->errors, state_->fields);
}

bool ObjectTranscoder::changed() const { return state_->whole.changed() || state_->headers.changed(); }

}  // namespace daskcaps
