#include "daskcaps/formats/capture_options.h"

namespace daskcaps::formats {

std::string_view to_string(Direction direction) {
  return direction == Direction::client_to_server ? "client_to_server" : "server_to_client";
}

std::optional<Direction> parse_direction(std::string_view text) {
  if (text == "client_to_server" || text == "client-to-server" || text == "c2s")
    return Direction::client_to_server;
  if (text == "server_to_client" || text == "server-to-client" || text == "s2c")
    return Direction::server_to_client;
  return std::nullopt;
}

}  // namespace daskcaps::formats
