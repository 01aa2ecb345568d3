#include "daskcaps/wire/handshake.h"

namespace daskcaps {

std::string CompressionValue::to_string() const {
  switch (kind) {
    case Kind::nil: return "null";
    case Kind::false_: return "false";
    case Kind::name: return name;
  }
  return "null";
}

msgpack::Value CompressionValue::to_msgpack() const {
  switch (kind) {
    case Kind::nil: return msgpack::Value::nil();
    case Kind::false_: return msgpack::Value::boolean(false);
    case Kind::name: return msgpack::Value::str(name);
  }
  return msgpack::Value::nil();
}

std::optional<CompressionValue> CompressionValue::from_msgpack(const msgpack::Value& v) {
  if (v.is_nil()) return CompressionValue::nil();
  if (v.is_bool() && !v.as_bool()) return CompressionValue::none_false();
  if (v.is_str()) return CompressionValue::named(v.as_str());
  return std::nullopt;
}

}  // namespace daskcaps
