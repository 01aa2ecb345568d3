// Reports for the policy and baseline tests, built from probe files the
// way `check FILE FILE...` builds them.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "daskcaps/caps/caps_report.h"
#include "daskcaps/caps/probe.h"

namespace gatetest {

struct Host {
  std::string file;             // the endpoint's name (a probe file path)
  std::string hostname;
  std::string python = "3.11.2";
  std::string compression = "lz4";
  std::vector<std::string> codecs{"lz4", "zstd", "zlib"};
  std::string dask = "2022.12.1";
  bool gpu = false;
  std::string numpy = "1.24.2";
  std::string pandas = "1.5.3";
};

inline std::string probe_text(const Host& h) {
  std::string codecs;
  for (const auto& c : h.codecs) codecs += (codecs.empty() ? "\"" : ", \"") + c + "\"";
  return R"({"schema": "dask-caps.probe/1", "hostname": ")" + h.hostname + R"(",
    "python": {"version": ")" + h.python + R"(", "pickle-protocol": 5, "dask": ")" + h.dask +
         R"(", "distributed": ")" + h.dask + R"(", "compression": ")" + h.compression +
         R"(", "compressions": [)" + codecs + R"(],
               "packages": {"numpy": ")" + h.numpy + R"(", "pandas": ")" + h.pandas + R"("}},
    "capabilities": {"codecs": [)" + codecs + R"(], "max-pickle-protocol": 5, "gpu": )" +
         (h.gpu ? "true" : "false") + "}}";
}

inline daskcaps::report::EndpointInfo endpoint(const Host& h) {
  auto probe = daskcaps::parse_probe_file(probe_text(h));
  REQUIRE(probe);
  return daskcaps::report::endpoint_from_probe(h.file, std::move(*probe));
}

/// `check A B ...` over probe files.
inline daskcaps::report::Report check(const std::vector<Host>& hosts,
                                      daskcaps::PythonRule rule = daskcaps::PythonRule::same_minor) {
  std::vector<daskcaps::report::EndpointInfo> eps;
  for (const auto& h : hosts) eps.push_back(endpoint(h));
  daskcaps::report::ReportOptions opt;
  opt.python_rule = rule;
  return daskcaps::report::build_report(std::nullopt, std::move(eps), opt);
}

/// The findings of a code over all pairs and the summary.
inline std::vector<daskcaps::Finding> findings_of(const daskcaps::report::Report& r, std::string_view code) {
  std::vector<daskcaps::Finding> out;
  for (const auto& p : r.pairs)
    for (const auto& f : p.report.findings)
      if (f.code == code) out.push_back(f);
  for (const auto& f : r.summary.findings)
    if (f.code == code) out.push_back(f);
  return out;
}

}  // namespace gatetest
