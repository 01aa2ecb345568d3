// One session of the bridge (core/bridge/bridge.h): an accepted client
// connection, its upstream connection, the handshakes of both, and the two
// engine streams that recode what each side sends for the other.
//
// States:
//   handshakes         the upstream is connected at once; its handshake is
//                      answered on both legs (core/bridge/bridge.h); the
//                      client's handshake is read (a Dask client writes it
//                      only after reading ours); later messages wait unread
//   open               both handshakes are in: both directions flow
//   closing            one side ended (or shutdown): no more reading; what
//                      is in flight is delivered, then both sides close
//   done               both connections closed; the bridge destroys it
//
// Capture (BridgeObserver::on_bytes): whole messages as they are read and
// sent; a message cut through as its pieces arrive and leave.
//
// Cut-through (core/recode/internal/cut_through.h): a message of at least
// BridgeOptions::cut_through_bytes, read while nothing else of its side is
// in flight, is planned as it arrives; once the plan allows it, the new
// prelude and head go out and the rest is forwarded (or decoded) as each
// read brings it, instead of the whole message being held first. It counts
// as in flight until its last byte is out. When its sender or its receiver
// goes away in the middle, or its data turns out corrupt, the receiver
// holds part of a message: its connection is closed (with a log line),
// which a Dask peer sees as a closed comm, as for any connection lost in
// the middle of a message.
// Everything runs on the loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "daskcaps/bridge/bridge.h"
#include "daskcaps/caps/delivery.h"
#include "core/caps/internal/link_policy.h"
#include "core/net/internal/connection.h"
#include "core/recode/internal/cut_through.h"
#include "daskcaps/recode/engine.h"
#include "core/wire/internal/assembler.h"
#include "daskcaps/wire/handshake.h"

namespace daskcaps::bridge {

class Session {
 public:
  Session(Bridge& bridge, std::uint64_t id, net::Socket client_socket);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::uint64_t id() const { return id_; }
  /// A message recoded by one of this session's engine streams.
  void on_output(RecodeEngine::Output&& out);
  /// The engine may have room again: submit what waited. True while a
  /// message still waits.
  bool retry_pending();
  /// Stop reading, deliver what is in flight, then close both sides.
  void begin_shutdown();
  bool done() const { return done_; }

 private:
  // Cut-through of one side (core/recode/internal/cut_through.h): the
  // message being forwarded before its end is in, and what its plan waits on.
  struct CutState {
    std::unique_ptr<CutThrough> message;  // null: no message is being cut through
    bool first_in = false;                // its first input piece is still to come (capture)
    std::optional<Bytes> rest;            // what of its last piece waits for the receiver's room
    std::uint64_t wait_at = ~std::uint64_t{0};      // message (offset) the plan waits on ...
    std::uint64_t wait = 0;                         // ... for this many of its bytes
    std::uint64_t declined_at = ~std::uint64_t{0};  // message (offset) that takes the whole path
  };

  struct Side final : net::Connection::Handler {
    Side(Session& s, Leg l, const Limits& limits) : session(s), leg(l), in(limits) {}
    void on_open(net::Connection&) override;
    std::span<std::uint8_t> read_buffer(net::Connection&) override;
    void on_read(net::Connection&, ByteSpan data) override;
    void on_read_eof(net::Connection&) override;
    void on_drained(net::Connection&) override;
    void on_closed(net::Connection&, const Status& why) override;

    Session& session;
    Leg leg;
    std::unique_ptr<net::Connection> conn;
    MessageAssembler in;
    std::optional<Handshake> handshake;
    RecodeEngine::StreamId stream = 0;  // recodes what this side sends, for the other
    TranscodeOptions for_other;          // that stream's options (cut-through plans)
    CutState cut;                        // this side's message being cut through, if any
    bool processing = false;  // process() is running for this side
    bool again = false;       // ... and was asked to run again
    std::optional<RecodeEngine::Input> pending;  // the engine had no room for it
    std::uint64_t in_flight = 0;  // messages of this side submitted and not yet sent on
    std::uint64_t read_index = 0;  // messages read from this side, handshake included
    bool eof = false;
    bool closed = false;
    bool finish_one = false;
    bool noted_partial = false;  // at shutdown: the message half read is read to its end and sent on
    std::string peer;
    /// The codec per link of what the bridge writes to this side; null:
    /// none (off, or the side reads no codec). Shared with the stream's
    /// recode options, which ask it per frame on the engine's threads.
    std::shared_ptr<link::LinkPolicy> link;
    std::uint64_t unobserved = 0;  // bytes written to this side since its link was last observed
  };

  enum class State : std::uint8_t { handshakes, open, closing, done };

  Side& other(Side& s) { return s.leg == Leg::client ? upstream_ : client_; }
  const char* name(const Side& s) const { return s.leg == Leg::client ? "client" : "upstream"; }
  void process(Side& s);
  void process_messages(Side& s);
  bool start_cut(Side& s);
  bool pump_cut(Side& s);
  void abort_cut(Side& s, const std::string& why);
  void send_pieces(Side& to, std::vector<Bytes>& pieces, bool message_start);
  bool take_handshake(Side& s, RawMessage&& m);
  void open_streams();
  void open_link(Side& to, const Delivery& plan, TranscodeOptions& options);
  void observe_link(Side& to, std::uint64_t bytes_sent);
  void log_link_changes(Side& to);
  bool submit(Side& s, RecodeEngine::Input& in);
  void send_message(Side& to, std::span<const Bytes> frames);
  void observe(Leg leg, Flow flow, const Bytes& prelude, std::span<const Bytes> frames);
  void update_reading(Side& s);
  void fail(const std::string& why);
  void start_closing();
  void maybe_close();
  void on_side_closed(Side& s, const Status& why);
  void note_partial(Side& s, const std::string& why);
  void log(const std::string& line);
  std::string describe(const Handshake& h) const;

  Bridge& bridge_;
  std::uint64_t id_;
  Side client_;
  Side upstream_;
  State state_ = State::handshakes;
  net::Timer handshake_timer_;
  bool noted_direct_ = false;  // the client sent who_has or ncores_running (logged once)
  bool failed_ = false;
  bool done_ = false;
  std::string to_client_plan_, to_upstream_plan_;
};

}  // namespace daskcaps::bridge
