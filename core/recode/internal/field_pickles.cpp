#include "core/recode/internal/field_pickles.h"

#include <cstring>

namespace daskcaps {

namespace {

using msgpack::Value;

struct OpFields {
  std::string_view op;
  std::string_view keys[3];
};

// docs/pickled-fields.md gives each row's writer and reader in both Dasks.
constexpr OpFields kFields[] = {
    {"task-finished", {"type"}},
    {"key-in-memory", {"type"}},
    {"run", {"function", "args", "kwargs"}},
    {"run_function", {"function", "args", "kwargs"}},
    {"feed", {"function", "setup", "teardown"}},
    {"register_scheduler_plugin", {"plugin"}},
    {"register_worker_plugin", {"plugin"}},
    {"register_nanny_plugin", {"plugin"}},
    {"plugin-add", {"plugin"}},
    {"plugin_add", {"plugin"}},
    {"workers_to_close", {"key"}},
};

static_assert([] {
  for (const OpFields& f : kFields)
    if (f.op.size() >= 31) return false;
  return true;
}(), "may_hold_field_pickles() looks for the ops as msgpack fixstr values");

// A worker's warnings.warn(): log-event {"topic": "warn", "msg": {...}}
// and its relay to subscribers, event {"topic": "warn", "event": [t, {...}]}.
constexpr std::string_view kWarnKeys[] = {"message", "category"};

bool str_is(const Value* v, std::string_view s) { return v != nullptr && v->is_str() && v->as_str() == s; }

using Visit = std::function<void(std::string_view, std::string_view, Value&)>;

void visit_warn(std::string_view op, Value& dict, const Visit& visit) {
  if (!dict.is_map()) return;
  for (auto& [key, val] : dict.as_map()) {
    if (!key.is_str() || !val.is_bin()) continue;
    for (std::string_view k : kWarnKeys)
      if (key.as_str() == k) visit(op, k, val);
  }
}

void visit_op(Value& map, const Visit& visit) {
  const Value* op = map.find("op");
  if (op == nullptr || !op->is_str()) return;
  const std::string_view name = op->as_str();
  for (const OpFields& f : kFields) {
    if (name != f.op) continue;
    for (auto& [key, val] : map.as_map()) {
      if (!key.is_str() || !val.is_bin()) continue;
      for (std::string_view k : f.keys)
        if (!k.empty() && key.as_str() == k) visit(f.op, k, val);
    }
    return;
  }
  if (!str_is(map.find("topic"), "warn")) return;
  if (name == "log-event") {
    if (Value* msg = map.find("msg")) visit_warn("log-event", *msg, visit);
  } else if (name == "event") {
    if (Value* ev = map.find("event"); ev != nullptr && ev->is_array() && ev->as_array().size() == 2)
      visit_warn("event", ev->as_array()[1], visit);
  }
}

void walk(Value& v, const Visit& visit) {
  if (v.is_map()) {
    if (v.find("__Serialized__") != nullptr || v.find("__Pickled__") != nullptr) return;  // a placeholder
    visit_op(v, visit);
    for (auto& [key, val] : v.as_map())
      if (val.is_map() || val.is_array()) walk(val, visit);
  } else if (v.is_array()) {
    for (auto& item : v.as_array())
      if (item.is_map() || item.is_array()) walk(item, visit);
  }
}

}  // namespace

void for_each_field_pickle(Value& root, const Visit& visit) { walk(root, visit); }

bool may_hold_field_pickles(ByteSpan f0) {
  // Each op, and the topic "warn", as msgpack writes the str value: a
  // fixstr (every name is shorter than 32 bytes) and its bytes.
  auto holds = [&](std::string_view name) {
    char needle[32];
    needle[0] = static_cast<char>(0xa0 | name.size());
    std::memcpy(needle + 1, name.data(), name.size());
    return f0.size() > name.size() && ::memmem(f0.data(), f0.size(), needle, name.size() + 1) != nullptr;
  };
  for (const OpFields& f : kFields)
    if (holds(f.op)) return true;
  return holds("warn");
}

}  // namespace daskcaps
