#include "daskcaps/base/diagnostic.h"

namespace daskcaps {

std::string_view to_string(DiagnosticKind kind) {
  switch (kind) {
    case DiagnosticKind::capture_truncated: return "capture-truncated";
    case DiagnosticKind::record_over_snaplen: return "record-over-snaplen";
    case DiagnosticKind::record_over_original: return "record-over-original";
    case DiagnosticKind::unsupported_block: return "unsupported-block";
    case DiagnosticKind::unsupported_link: return "unsupported-link";
    case DiagnosticKind::packets_skipped: return "packets-skipped";
    case DiagnosticKind::packets_malformed: return "packets-malformed";
    case DiagnosticKind::segments_cut: return "segments-cut";
    case DiagnosticKind::not_dask: return "not-dask";
    case DiagnosticKind::retransmission_conflict: return "retransmission-conflict";
    case DiagnosticKind::bytes_lost: return "bytes-lost";
    case DiagnosticKind::bytes_skipped: return "bytes-skipped";
    case DiagnosticKind::pickle_unreadable: return "pickle-unreadable";
    case DiagnosticKind::type_unreadable: return "type-unreadable";
    case DiagnosticKind::codec_failed: return "codec-failed";
    case DiagnosticKind::unknown_codec: return "unknown-codec";
    case DiagnosticKind::bad_sub_header: return "bad-sub-header";
    case DiagnosticKind::bad_split: return "bad-split";
    case DiagnosticKind::limit_exceeded: return "limit-exceeded";
    case DiagnosticKind::unconvertible: return "unconvertible";
  }
  return "unknown";
}

std::optional<DiagnosticKind> diagnostic_kind_from_string(std::string_view name) {
  for (DiagnosticKind k : kAllDiagnosticKinds)
    if (to_string(k) == name) return k;
  return std::nullopt;
}

Diagnostic diagnostic_from_error(DiagnosticKind kind, const Error& error, std::string_view prefix) {
  switch (error.code) {
    case Errc::limit_exceeded:
    case Errc::too_deep: kind = DiagnosticKind::limit_exceeded; break;
    case Errc::unknown_codec: kind = DiagnosticKind::unknown_codec; break;
    default: break;
  }
  return Diagnostic{kind, error.offset, std::string(prefix) + error.message()};
}

std::vector<std::string> diagnostic_texts(const std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> out;
  out.reserve(diagnostics.size());
  for (const Diagnostic& d : diagnostics) out.push_back(d.text);
  return out;
}

}  // namespace daskcaps
