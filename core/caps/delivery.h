// What a receiver gets from a sender: the one decision of dask-caps
// (docs/design.md §3). `check`'s recommendation, `transcode --for`, the
// bridge's two legs, examples/library and the Python module's plan() (and
// through it the Dask plugin) all ask deliver(); nothing else chooses a
// codec, a pickle protocol or a layout for a receiver.
//
// The rule, for one direction (sender -> receiver):
//   codec   the user's codec when one is named; else none on a link Dask
//           leaves uncompressed by design (uncompressed_by_design); else
//           the first codec of the sender's preference (Peer::codecs, in
//           the order it prefers to write) that the receiver decodes, or,
//           for a sender with no order of its own (dask-caps itself:
//           Order::receiver), the first of the receiver's that the sender
//           writes; none when they share no codec.
//   accept  what the receiver reads as it arrives: the codecs of this
//           build it decodes, or only the user's codec when one is named.
//           A frame in another codec is recoded to `codec` (or raw).
//   pickle  the user's protocol when named, else the highest both read.
//   layout  the user's choice when named; else CPU when the receiver is
//           known to have no GPU, GPU when it has one, not known otherwise
//           (and, with keep_layout_for_schedulers, not known for a
//           scheduler, which relays data to workers that may have GPUs).
//
// Errors: options out of range (a pickle protocol outside 0 to 5),
// Errc::usage naming the value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/peer.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/codec.h"

namespace daskcaps {

struct DeliveryOptions {
  /// Both ends on one host (the newest releases advertise None then).
  bool same_host = false;
  /// Whose order picks the codec: the sender's (a Dask peer, or a process
  /// with the plugin: its preference), or the receiver's (a sender that
  /// writes any codec of this build and prefers none: this_build()).
  enum class Order : std::uint8_t { sender, receiver };
  Order order = Order::sender;
  /// The user's codec (--codec): written, and every frame in another codec
  /// recoded to it.
  std::optional<Codec> codec;
  /// The user's pickle protocol (0 to 5).
  std::optional<int> pickle_protocol;
  /// The user's layout: true converts GPU data to CPU data, false keeps it.
  std::optional<bool> cpu_layout;
  /// A receiver that publishes the role "scheduler" keeps its data's
  /// layout (the plugin: a scheduler relays what it gets to workers).
  bool keep_layout_for_schedulers = false;
};

struct Delivery {
  /// What the sender writes with; nullopt: uncompressed.
  std::optional<std::string> codec;
  /// The codecs of this build the receiver reads as they arrive.
  std::vector<Codec> accept;
  /// The pickle protocol it gets: the highest both read, or the user's.
  std::int64_t pickle_protocol = 5;
  /// true: GPU data becomes CPU data; false: the receiver has a GPU (or
  /// the user keeps the layout); nullopt: not known.
  std::optional<bool> cpu_layout;

  /// `codec` as this build's codec: none when it is nullopt or a codec
  /// this build does not write.
  Codec written() const;
  /// True when a frame may reach the sender in a codec of this build that
  /// the receiver does not accept, so that frames must be recoded.
  bool recodes_frames() const;
  /// `base` (limits, levels, Dask's rules) with what this delivery needs:
  /// frames the receiver does not accept recoded to written() (only when
  /// recodes_frames()), pickles above a protocol below 5 recoded down, GPU
  /// data converted when cpu_layout is true.
  TranscodeOptions recode_options(TranscodeOptions base) const;

  /// Which of a recode's codec, pickle protocol and layout the user set
  /// (`--codec`, `--pickle-protocol`, `--layout`).
  struct Given {
    bool codec = false;
    bool pickle_protocol = false;
    bool layout = false;
  };
  /// `--for` (transcode, bridge): what the user did not set of a recode
  /// toward this receiver, from this delivery: every frame in written(),
  /// pickles at pickle_protocol, GPU data converted where cpu_layout is
  /// true (kept where it is false; left as it is where it is unknown).
  void fill_unset(std::optional<Codec>& codec, std::optional<int>& pickle_protocol, bool& layout_cpu,
                  Given given) const;
};

/// The decision described above.
Result<Delivery> deliver(const Peer& sender, const Peer& receiver, const DeliveryOptions& options = {});

/// dask-caps itself as a sender: it writes every codec of this build (in
/// this build's order: lz4, snappy, zstd, zlib) and every pickle protocol up
/// to 5; it prefers none (use Order::receiver).
Peer this_build();

/// True when Dask leaves a link between them uncompressed whatever either
/// side configures: they share a host and one follows the newest rules, so
/// it advertises None (distributed PR #7768), and None equals no codec.
bool uncompressed_by_design(const Peer& a, const Peer& b, bool same_host);

/// Both directions between two peers, as `check` recommends them.
struct DirectionPlan {
  std::optional<std::string> codec;  // nullopt: send uncompressed
  std::string layout = "cpu";        // "cpu" or "gpu"
};
struct Recommendation {
  DirectionPlan a_to_b;
  DirectionPlan b_to_a;
  std::int64_t pickle_protocol = 5;
};
/// deliver() each way with the sender's order; a layout not known is
/// "cpu".
Recommendation recommend(const Peer& a, const Peer& b, bool same_host = false);

}  // namespace daskcaps
