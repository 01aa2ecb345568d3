// The summary of one `transcode` run and its rendering as JSON (schema
// dask-caps.transcode/1, keys are contract: docs/cli.md §5) and as
// text. cli/transcode.cpp fills it; nothing here reads or writes files.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/common.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/formats/message_source.h"
#include "daskcaps/formats/stream_outputs.h"

namespace daskcaps::cli {

inline constexpr const char* kTranscodeSchema = "dask-caps.transcode/1";

struct TranscodeSummary {
  std::string input;
  std::string output;
  bool capture = false;                  // the input was a pcap/pcapng capture
  std::size_t messages = 0;
  TranscodeReport report;
  std::vector<formats::OutputFile> files;
  std::vector<Diagnostic> warnings;      // the capture's (formats/internal/capture.h)
  /// --for: the recipient and what was chosen for it.
  struct Recipient {
    std::string endpoint;
    std::string name;
    std::string codec, pickle_protocol, layout;
    bool gpu_known = true;
  };
  std::optional<Recipient> recipient;
};

/// The document; besides the capture's "warnings" (texts, captures only),
/// "diagnostics" (always) holds the capture's warnings with their kinds and
/// then one `unconvertible` per GPU object left as it is.
Json transcode_summary_json(const TranscodeSummary& summary);
void render_transcode_text(const TranscodeSummary& summary, std::ostream& out);

}  // namespace daskcaps::cli
