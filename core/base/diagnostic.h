// Diagnostics: recoverable problems that do not stop a run (a capture's
// skipped packets, a stream that is not Dask, an object whose pickle does
// not parse), as values with a kind, where it was found, and a text.
//
// DiagnosticKind is a closed list with stable lower-case hyphenated names
// (to_string), in the manner of Errc (core/base/result.h): scripts branch on
// the kind, users read the text. The names are contract: they appear as
// "kind" in the "diagnostics" and "problem-details" arrays of the JSON
// documents (docs/cli.md §11.1; man/dask-caps.1
// DIAGNOSTICS), so a kind is never renamed or given another meaning; new
// kinds are added at the end of their group.
//
// `offset` is an absolute byte offset in the input file (for a capture, the
// record or packet where the thing was seen), or kNoOffset when there is
// none; offsets inside a TCP stream or an embedded item are written in the
// text, never here. `text` is what the plain-string forms ("warnings",
// "problems") have always held: lower-case, no final period.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/result.h"

namespace daskcaps {

enum class DiagnosticKind : std::uint8_t {
  // The capture file (formats/internal/pcap.h, formats/internal/capture.h).
  capture_truncated,     // the file ends inside a record; the rest is ignored
  record_over_snaplen,   // a record holds more bytes than the snapshot length (kept)
  record_over_original,  // a record captured more bytes than the packet had (kept)
  unsupported_block,     // a pcapng block type that is not read (skipped)
  unsupported_link,      // an interface whose link type is not decoded (its packets skipped)
  // Packets (formats/internal/capture.h): counted, said once with the first packet.
  packets_skipped,       // packets not read: non-first IP fragments, cut inside a header,
                         // on an unsupported link
  packets_malformed,     // packets whose headers contradict themselves (skipped)
  segments_cut,          // TCP payload missing from a packet (snapshot length, fragments):
                         // gaps in the stream
  // TCP streams (formats/internal/tcp_reassembly.h), per connection and direction.
  not_dask,              // the bytes are not Dask messages; the rest of the direction is skipped
  retransmission_conflict,  // a retransmitted segment differs from the first copy (first kept)
  bytes_lost,            // stream bytes missing from the capture, so in no message
  bytes_skipped,         // stream bytes captured but in no message (resynchronising,
                         // an unfinished message at the end)
  // Serialized objects (core/recode/describe.h).
  pickle_unreadable,     // a pickle does not parse
  type_unreadable,       // `type-serialized` names no class we can read
  codec_failed,          // a frame does not decompress
  unknown_codec,         // a frame's compression is a codec this build cannot decode
  bad_sub_header,        // a sub-header lacks what its kind needs or holds a wrong type
  bad_split,             // the split layout does not fit the frames
  limit_exceeded,        // a configured limit (core/base/limits.h) was crossed
  // Recoding (transcode).
  unconvertible,         // a GPU object left as it is (--keep-unconvertible)
};

/// Every kind, in declaration order (for tests, schemas and listings).
inline constexpr std::array<DiagnosticKind, 20> kAllDiagnosticKinds = {
    DiagnosticKind::capture_truncated,   DiagnosticKind::record_over_snaplen,
    DiagnosticKind::record_over_original, DiagnosticKind::unsupported_block,
    DiagnosticKind::unsupported_link,    DiagnosticKind::packets_skipped,
    DiagnosticKind::packets_malformed,   DiagnosticKind::segments_cut,
    DiagnosticKind::not_dask,            DiagnosticKind::retransmission_conflict,
    DiagnosticKind::bytes_lost,          DiagnosticKind::bytes_skipped,
    DiagnosticKind::pickle_unreadable,   DiagnosticKind::type_unreadable,
    DiagnosticKind::codec_failed,        DiagnosticKind::unknown_codec,
    DiagnosticKind::bad_sub_header,      DiagnosticKind::bad_split,
    DiagnosticKind::limit_exceeded,      DiagnosticKind::unconvertible,
};

/// Stable lower-case hyphenated name of a kind, e.g. "capture-truncated".
std::string_view to_string(DiagnosticKind kind);

/// The kind a name stands for; nullopt for a name that is none.
std::optional<DiagnosticKind> diagnostic_kind_from_string(std::string_view name);

struct Diagnostic {
  DiagnosticKind kind{};              // always set by whoever makes one
  std::uint64_t offset = kNoOffset;   // absolute byte offset in the input, if any
  std::string text;                   // lower-case, no final period

  bool has_offset() const { return offset != kNoOffset; }
  bool operator==(const Diagnostic&) const = default;
};

/// A diagnostic made from an error met while going on: its text is the
/// error's message() and its offset the error's; the kind is `kind`, except
/// that a crossed limit (Errc::limit_exceeded, Errc::too_deep) is always
/// limit_exceeded and a codec this build lacks (Errc::unknown_codec) is
/// unknown_codec, whatever part of the input it was found in.
Diagnostic diagnostic_from_error(DiagnosticKind kind, const Error& error, std::string_view prefix = {});

/// The texts alone, in order: the plain-string form ("warnings", "problems").
std::vector<std::string> diagnostic_texts(const std::vector<Diagnostic>& diagnostics);

}  // namespace daskcaps
