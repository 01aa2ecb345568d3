#include "daskcaps/base/option_name.h"

#include <atomic>

namespace daskcaps {

namespace {

std::string library_spelling(std::string_view field, OptionKind kind) {
  return (kind == OptionKind::limit ? "limit " : "") + std::string(field);
}

std::atomic<OptionSpeller> g_speller{nullptr};

}  // namespace

void set_option_speller(OptionSpeller speller) { g_speller.store(speller, std::memory_order_release); }

std::string option_name(std::string_view field, OptionKind kind) {
  const OptionSpeller speller = g_speller.load(std::memory_order_acquire);
  return (speller != nullptr ? speller : library_spelling)(field, kind);
}

}  // namespace daskcaps
