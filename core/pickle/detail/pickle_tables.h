// Tables the pickle engine takes from CPython 3.11, generated into
// core/pickle/detail/pickle_tables.cpp by tests/tools/pickle_gen_tables.py:
//
//  * _compat_pickle's Python 2 <-> Python 3 name mappings. With the default
//    fix_imports=True, CPython's unpickler maps (module, name) of GLOBAL,
//    INST and STACK_GLOBAL through NAME_MAPPING (else the module through
//    IMPORT_MAPPING) when the pickle's protocol is below 3, and its pickler
//    applies the REVERSE_ tables when writing protocols 0-2.
//  * The code points that str.isprintable() rejects (so repr() escapes them),
//    as sorted, inclusive ranges.
//
// All rows are sorted by their key (byte order of the UTF-8 text, which is
// code point order), so lookups are binary searches.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

namespace daskcaps::pickle::tables {

struct NamePair {
  std::string_view module, name;          // key
  std::string_view to_module, to_name;    // value
};
struct ModulePair {
  std::string_view module, to_module;
};
struct CodeRange {
  char32_t first, last;
};

std::span<const NamePair> name_mapping();            // Python 2 -> 3
std::span<const ModulePair> import_mapping();        // Python 2 -> 3
std::span<const NamePair> reverse_name_mapping();    // Python 3 -> 2
std::span<const ModulePair> reverse_import_mapping();  // Python 3 -> 2
std::span<const CodeRange> non_printable();

using Global = std::pair<std::string_view, std::string_view>;

/// What CPython's unpickler imports for (module, name) in a pickle of
/// protocol < 3 (find_class with fix_imports).
Global map_2to3(std::string_view module, std::string_view name);
/// What CPython's pickler writes for (module, name) at protocol < 3.
Global map_3to2(std::string_view module, std::string_view name);
/// str.isprintable() for one code point.
bool is_printable(char32_t cp);

}  // namespace daskcaps::pickle::tables
