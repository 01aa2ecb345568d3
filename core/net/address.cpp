#include "daskcaps/net/address.h"

#include <charconv>
#include <string>

namespace daskcaps::net {

std::string Address::host_port() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Address::to_string() const {
  return std::string(scheme == Scheme::tls ? "tls://" : "tcp://") + host_port();
}

Result<Address> parse_address(std::string_view text) {
  Address a;
  std::string_view rest = text;
  if (const auto sep = rest.find("://"); sep != std::string_view::npos) {
    const std::string_view scheme = rest.substr(0, sep);
    if (scheme == "tcp")
      a.scheme = Scheme::tcp;
    else if (scheme == "tls")
      a.scheme = Scheme::tls;
    else
      return make_error(Errc::usage, "unsupported address scheme \"" + std::string(scheme) +
                                         "://\" in \"" + std::string(text) +
                                         "\" (dask-caps speaks tcp:// and tls://)");
    rest = rest.substr(sep + 3);
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos)
      return make_error(Errc::usage, "unterminated \"[\" in address \"" + std::string(text) + "\"");
    a.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (rest.empty() || rest.front() != ':')
      return make_error(Errc::usage, "missing port number in address \"" + std::string(text) + "\"");
    port_text = rest.substr(1);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos)
      return make_error(Errc::usage, "missing port number in address \"" + std::string(text) + "\"");
    a.host = std::string(rest.substr(0, colon));
    if (a.host.find(':') != std::string::npos)
      return make_error(Errc::usage, "IPv6 address without brackets in \"" + std::string(text) +
                                         "\" (write tcp://[::1]:8786)");
    port_text = rest.substr(colon + 1);
  }
  if (a.host.empty())
    return make_error(Errc::usage, "missing host in address \"" + std::string(text) + "\"");
  if (const auto slash = port_text.find('/'); slash != std::string_view::npos && slash + 1 == port_text.size())
    port_text = port_text.substr(0, slash);
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() || port > 65535)
    return make_error(Errc::usage, "bad port \"" + std::string(port_text) + "\" in address \"" +
                                       std::string(text) + "\"");
  a.port = static_cast<std::uint16_t>(port);
  return a;
}

}  // namespace daskcaps::net
