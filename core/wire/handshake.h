// The connection handshake of Dask comms (docs/protocol.md §2) and the extended
// capability set dask-caps publishes beside it.
//
// On every new connection each side sends one message whose frame 0 is the
// msgpack map {"compression": str|nil|false, "python": [major, minor, micro],
// "pickle-protocol": int}. Key order as observed: compression, python,
// pickle-protocol. Extra keys are ignored by Dask; a missing
// "pickle-protocol" or "compression" makes Dask fail the connection
// (docs/protocol.md §2.5), a missing "python" is accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/wire/value_view.h"

namespace daskcaps {

/// CompressionValue: what Dask writes where a codec is named: a handshake's
/// "compression" (docs/protocol.md §2.2) and each entry of a sub-header's
/// "compression" list (docs/protocol.md §3.4): a codec name, nil or false.
/// nil and false both mean "no compression" but are distinct on the wire
/// (2022.12 sends false when configured false; docs/protocol.md §2.3) and in Python's
/// equality, which decides negotiation (docs/protocol.md §2.4).
struct CompressionValue {
  enum class Kind : std::uint8_t { nil, false_, name };
  Kind kind = Kind::nil;
  std::string name;  // when kind == name

  static CompressionValue nil() { return {}; }
  static CompressionValue none_false() { return {Kind::false_, {}}; }
  static CompressionValue named(std::string n) { return {Kind::name, std::move(n)}; }
  /// True when frames written under this value are compressed.
  bool compresses() const { return kind == Kind::name; }
  /// Python equality: "lz4" == "lz4", None == None, False == False.
  bool operator==(const CompressionValue&) const = default;
  /// "lz4", "null" or "false", as the JSON reports write it.
  std::string to_string() const;
  msgpack::Value to_msgpack() const;
  /// nullopt when the value is not str, nil or false.
  static std::optional<CompressionValue> from_msgpack(const msgpack::Value& v);
};

/// The key under which dask-caps publishes its Capabilities (below) in a
/// handshake, or in an identity's "dask-caps" entry. Only this file's
/// functions read it (read_capabilities) and write it (write_capabilities).
inline constexpr std::string_view kCapabilitiesKey = "capabilities";

struct Handshake {
  std::optional<CompressionValue> compression;  // absent key: nullopt
  std::optional<std::vector<std::int64_t>> python;
  std::optional<std::int64_t> pickle_protocol;
  msgpack::Value raw;  // the whole map as received (extra keys kept)
  /// Why the peer's "capabilities" key was refused and taken out of raw
  /// (handshake_from_peer); "" when it was not.
  std::string capabilities_refused;

  /// Keys Dask requires that are absent ("compression", "pickle-protocol").
  std::vector<std::string> missing_keys() const;
  /// "3.11.2" from the python list, or "" when absent.
  std::string python_version() const;
  /// The map in Dask's key order (for sending).
  msgpack::Value to_msgpack() const;
};

/// Reads a handshake from frame 0 of the first message on a connection.
/// Fails (Errc::protocol) only when the value is not a map or a present key
/// has the wrong type; missing keys are reported by missing_keys().
Result<Handshake> handshake_from_msgpack(const msgpack::Value& v);

/// The extended set a peer could use to pick the best common options
/// (docs/protocol.md §2.9): codecs it decodes, in its preference order;
/// the highest pickle protocol it reads; whether it holds a GPU; and who
/// published it.
struct Capabilities {
  std::vector<std::string> codecs;  // e.g. {"lz4", "snappy", "zstd", "zlib"}
  std::int64_t max_pickle_protocol = 5;
  bool gpu = false;
  std::string dask_caps{};  // the publisher's dask-caps version ("0.1.0"); "" when not said
  std::string role{};       // "scheduler", "worker", "nanny", "client"; "" when not said
};

/// Why read_capabilities refused a key, as figures rather than words, for
/// a caller that words it its own way (the Dask plugin's log lines). The
/// offending value is named by where it is (member, index), never copied.
struct CapabilitiesRefusal {
  enum class Problem : std::uint8_t {
    not_a_map,            // the key's value (member "")
    not_a_list,           // "codecs"
    too_many_codecs,      // "codecs": count names, more than limit
    not_a_string,         // a codec name (member "codecs", index), "dask-caps" or "role"
    not_printable_ascii,  // the same: a byte outside 0x20-0x7E
    too_long,             // the same: count bytes, more than limit
    bad_pickle_protocol,  // "max-pickle-protocol": not an integer of at least 0
    not_a_boolean,        // "gpu"
  };
  Problem problem = Problem::not_a_map;
  std::string member;                  // "", "codecs", "max-pickle-protocol", "gpu", "dask-caps", "role"
  std::optional<std::uint64_t> index;  // a codec name's place in "codecs"
  std::uint64_t count = 0;             // too_many_codecs: names; too_long: bytes
  std::uint64_t limit = 0;             // the limit crossed (names: max_capability_name)
};

/// The "capabilities" key of a handshake (or of an identity's "dask-caps"
/// entry), as read_capabilities found it.
struct CapabilitiesKey {
  enum class State : std::uint8_t { absent, published, refused };
  State state = State::absent;
  Capabilities capabilities;  // published: what it says
  /// refused: why, in one line, its peer strings escaped and bounded
  /// (peer_text), ending "; read as a plain Dask peer".
  std::string refused;
  CapabilitiesRefusal refusal;  // refused: the same, as figures
};

/// The one reader of the "capabilities" key as dask-caps peers publish it
/// (the Dask plugin dask_caps.plugin, `check`, `serve`;
/// docs/protocol.md §2.9), the key itself found in the map `holder`: a map {"codecs":
/// [str...], "max-pickle-protocol": int >= 0, "gpu": bool, "dask-caps":
/// str, "role": str}, "codecs" required, the rest optional (5, false, "",
/// ""), other members ignored. Refused (and the peer read as a plain Dask
/// peer) when it is not such a map (a member of the wrong type, a negative
/// protocol), or when it crosses the limits: more than
/// limits.max_capability_codecs codec names, or a codec name, role or
/// version longer than limits.max_capability_name bytes or holding a byte
/// that is not printable ASCII. Nothing is copied before it is checked, and
/// nothing past a count or length it refuses is looked at.
CapabilitiesKey read_capabilities(const ValueView& holder, const Limits& limits);

/// The same, of a msgpack map the core decoded (through a ValueView of it).
CapabilitiesKey read_capabilities(const msgpack::Value& holder, const Limits& limits);

/// The same, of the key's value itself (absent is not a state it returns).
CapabilitiesKey read_capabilities_value(const ValueView& value, const Limits& limits);

/// Whether read_capabilities would take `s` as a codec name, role or
/// version: "" when it would, else why not ("holds a byte ...", "is 65
/// bytes, more than 64 (limit max_capability_name)"), with `problem` set.
std::string capability_name_problem(const ValueView& s, const Limits& limits,
                                    CapabilitiesRefusal* problem = nullptr);

/// read_capabilities of {"capabilities": v} under the default limits:
/// nullopt unless published.
std::optional<Capabilities> capabilities_from_msgpack(const msgpack::Value& v);

/// A handshake as a peer sent it (handshake_from_msgpack), its
/// "capabilities" key read once (read_capabilities): a refused key is
/// taken out of raw, so that nothing keeps, forwards or prints it, and
/// capabilities_refused says why.
Result<Handshake> handshake_from_peer(const msgpack::Value& v, const Limits& limits);

/// The inverse, for the handshake and identity dask-caps sends.
msgpack::Value capabilities_to_msgpack(const Capabilities& c);

/// Writes `c` as the "capabilities" key of the map `holder` (a handshake,
/// or an identity's "dask-caps" entry), replacing one already there: the
/// one writer of the key, as read_capabilities is its one reader.
void write_capabilities(msgpack::Value& holder, const Capabilities& c);

/// Publishes `c` in a handshake dask-caps sends: raw becomes to_msgpack()
/// (Dask's keys from h's fields, in Dask's order, then raw's other keys)
/// with the "capabilities" key written.
void publish_capabilities(Handshake& h, const Capabilities& c);

}  // namespace daskcaps
