// The JSON Schemas (draft 2020-12) of the documents dask-caps reads and
// writes, kept in schemas/<name>.schema.json and built into the binary
// (cmake/embed_schemas.cmake) so that `dask-caps schema NAME` works
// uninstalled. Each schema's "$id" is "urn:dask-caps:" followed by the
// "schema" value of the documents it describes ("dask-caps.check/1").
#pragma once

#include <span>
#include <string_view>

namespace daskcaps::cli {

struct EmbeddedSchema {
  std::string_view name;  // "check", "probe", ...
  std::string_view text;  // the file, byte for byte
};

/// Every schema, sorted by name.
std::span<const EmbeddedSchema> embedded_schemas();

}  // namespace daskcaps::cli
