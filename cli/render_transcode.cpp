#include "cli/render_transcode.h"

namespace daskcaps::cli {

Json transcode_summary_json(const TranscodeSummary& s) {
  Json doc = json_document(kTranscodeSchema);
  doc["input"] = s.input;
  doc["output"] = s.output;
  Json files = Json::array();
  for (const auto& f : s.files) {
    Json j;
    j["path"] = f.path;
    j["messages"] = f.messages;
    j["bytes"] = f.bytes;
    if (s.capture && f.connection) {
      j["connection"] = *f.connection;
      j["direction"] = std::string(formats::to_string(f.direction.value_or(formats::Direction::client_to_server)));
    }
    files.push_back(std::move(j));
  }
  doc["outputs"] = std::move(files);
  doc["messages"] = s.messages;
  doc["bytes-in"] = s.report.bytes_in;
  doc["bytes-out"] = s.report.bytes_out;
  doc["frames-recompressed"] = s.report.frames_recompressed;
  doc["pickles-recoded"] = s.report.pickles_recoded;
  doc["buffers-inlined"] = s.report.buffers_inlined;
  doc["arrays-converted"] = s.report.arrays_converted;
  doc["unconvertible"] = s.report.unconvertible;
  if (s.capture) doc["warnings"] = diagnostic_texts(s.warnings);
  std::vector<Diagnostic> diagnostics = s.warnings;
  for (const std::string& u : s.report.unconvertible)
    diagnostics.push_back(Diagnostic{DiagnosticKind::unconvertible, kNoOffset, u});
  doc["diagnostics"] = json_value(diagnostics_json(diagnostics));
  if (s.recipient)
    doc["for"] = {{"endpoint", s.recipient->endpoint}, {"codec", s.recipient->codec},
                  {"pickle-protocol", s.recipient->pickle_protocol}, {"layout", s.recipient->layout}};
  return doc;
}

void render_transcode_text(const TranscodeSummary& s, std::ostream& out) {
  if (s.recipient)
    out << "for " << s.recipient->name << ": codec " << s.recipient->codec << ", pickle protocol "
        << s.recipient->pickle_protocol << ", layout " << s.recipient->layout
        << (s.recipient->gpu_known ? "" : " (whether it has a GPU is not known)") << '\n';
  for (const auto& f : s.files) out << f.path << ": " << f.messages << " messages, " << f.bytes << " bytes\n";
  const TranscodeReport& r = s.report;
  out << s.messages << " messages, " << r.bytes_in << " -> " << r.bytes_out << " bytes of frames; "
      << r.frames_recompressed << " frames compressed, " << r.pickles_recoded << " pickles recoded, "
      << r.buffers_inlined << " buffers inlined, " << r.arrays_converted << " GPU arrays converted\n";
  for (const std::string& u : r.unconvertible) out << "  left as it is: " << u << '\n';
  for (const Diagnostic& w : s.warnings) out << "warning: " << w.text << '\n';
}

}  // namespace daskcaps::cli
