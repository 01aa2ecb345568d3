// Lookups over the generated tables of core/pickle/detail/pickle_tables.cpp.
#include <algorithm>

#include "core/pickle/detail/pickle_tables.h"

namespace daskcaps::pickle::tables {
namespace {

const NamePair* find_name(std::span<const NamePair> rows, std::string_view module,
                          std::string_view name) {
  auto it = std::lower_bound(rows.begin(), rows.end(), std::pair{module, name},
                             [](const NamePair& row, const std::pair<std::string_view, std::string_view>& key) {
                               return std::pair{row.module, row.name} < key;
                             });
  if (it == rows.end() || it->module != module || it->name != name) return nullptr;
  return &*it;
}

const ModulePair* find_module(std::span<const ModulePair> rows, std::string_view module) {
  auto it = std::lower_bound(rows.begin(), rows.end(), module,
                             [](const ModulePair& row, std::string_view key) { return row.module < key; });
  if (it == rows.end() || it->module != module) return nullptr;
  return &*it;
}

Global apply(std::span<const NamePair> names, std::span<const ModulePair> modules,
             std::string_view module, std::string_view name) {
  if (const NamePair* row = find_name(names, module, name)) return {row->to_module, row->to_name};
  if (const ModulePair* row = find_module(modules, module)) return {row->to_module, name};
  return {module, name};
}

}  // namespace

Global map_2to3(std::string_view module, std::string_view name) {
  return apply(name_mapping(), import_mapping(), module, name);
}

Global map_3to2(std::string_view module, std::string_view name) {
  return apply(reverse_name_mapping(), reverse_import_mapping(), module, name);
}

bool is_printable(char32_t cp) {
  auto rows = non_printable();
  auto it = std::upper_bound(rows.begin(), rows.end(), cp,
                             [](char32_t key, const CodeRange& row) { return key < row.first; });
  if (it == rows.begin()) return true;
  --it;
  return cp > it->last;
}

}  // namespace daskcaps::pickle::tables
