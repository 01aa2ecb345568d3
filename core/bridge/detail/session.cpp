#include "core/bridge/detail/session.h"

#include <cstring>

#include "daskcaps/base/peer_text.h"
#include "daskcaps/caps/delivery.h"
#include "daskcaps/caps/peer.h"
#include "daskcaps/net/rpc.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps::bridge {

namespace {

bool contains(ByteSpan hay, std::string_view needle) {
  return hay.size() >= needle.size() && ::memmem(hay.data(), hay.size(), needle.data(), needle.size()) != nullptr;
}

// The op of a client's message when it is one that Dask clients send before
// a direct transfer to or from workers (who_has before a direct gather,
// ncores_running before a direct scatter); frame 0 is decoded only when it
// holds one of the names.
std::optional<std::string> direct_transfer_op(const Bytes& frame0, const Limits& limits) {
  static constexpr std::string_view kOps[] = {"who_has", "ncores_running"};
  if (!contains(frame0.span(), kOps[0]) && !contains(frame0.span(), kOps[1])) return std::nullopt;
  auto root = msgpack::decode_all(frame0.span(), limits);
  if (!root) return std::nullopt;
  auto named = [&](const msgpack::Value& m) -> std::optional<std::string> {
    const msgpack::Value* op = m.find("op");
    if (op == nullptr || !op->is_str()) return std::nullopt;
    for (std::string_view k : kOps)
      if (op->as_str() == k) return std::string(k);
    return std::nullopt;
  };
  if (root->is_map()) return named(*root);
  if (root->is_array())
    for (const msgpack::Value& m : root->as_array())
      if (auto op = m.is_map() ? named(m) : std::nullopt) return op;
  return std::nullopt;
}

std::string plan_text(const TranscodeOptions& t) {
  // No codec in the options: frames go in the codec they came in.
  std::string out = "codec " + (t.codec ? std::string(codec_name(*t.codec)) : std::string("as sent"));
  out += ", pickle " + (t.pickle_protocol ? std::to_string(*t.pickle_protocol) : std::string("as sent"));
  if (t.layout_cpu) out += ", layout cpu";
  if (t.frame_codec) out += ", codec per link";
  return out;
}

Bytes prelude_of(std::span<const Bytes> frames) {
  std::vector<std::uint64_t> lengths;
  lengths.reserve(frames.size());
  for (const Bytes& f : frames) lengths.push_back(f.size());
  return Bytes(encode_prelude(lengths));
}

}  // namespace

Session::Session(Bridge& bridge, std::uint64_t id, net::Socket client_socket)
    : bridge_(bridge),
      id_(id),
      client_(*this, Leg::client, bridge.options_.recode.limits),
      upstream_(*this, Leg::upstream, bridge.options_.recode.limits) {
  const BridgeOptions& o = bridge_.options_;
  net::ConnectionOptions co;
  co.max_output_bytes = o.max_output_bytes;
  co.handshake_timeout = o.handshake_timeout;
  client_.conn = net::Connection::accepted(bridge_.loop_, std::move(client_socket), client_, co, o.listen_tls.get());
  client_.peer = client_.conn->peer();
  upstream_.conn = net::Connection::connect(bridge_.loop_, o.upstream, upstream_, co, o.upstream_tls.get());
  upstream_.peer = o.upstream.to_string();
  handshake_timer_ = bridge_.loop_.add_timer(o.handshake_timeout, [this] {
    handshake_timer_ = {};
    if (state_ == State::handshakes)
      fail(std::string("no Dask handshake from the ") + (upstream_.handshake ? "client" : "upstream") + " within " +
           std::to_string(bridge_.options_.handshake_timeout.count()) + " ms");
  });
}

Session::~Session() {
  bridge_.loop_.cancel_timer(handshake_timer_);
  // Nothing of this session may be delivered once it is gone.
  for (Side* x : {&client_, &upstream_}) {
    if (x->stream == 0) continue;
    bridge_.by_stream_.erase(x->stream);
    bridge_.engine_->cancel(x->stream);
    x->stream = 0;
  }
  // Connections go first: their callbacks point at the sides.
  client_.conn.reset();
  upstream_.conn.reset();
}

void Session::log(const std::string& line) { bridge_.observer_.on_log("session " + std::to_string(id_) + ": " + line); }

std::string Session::describe(const Handshake& h) const {
  std::string out =
      "compression " + (h.compression ? peer_text(h.compression->to_string(), 64) : std::string("(none given)"));
  out += ", pickle " + (h.pickle_protocol ? std::to_string(*h.pickle_protocol) : std::string("?"));
  const std::string py = h.python_version();
  if (!py.empty()) out += ", Python " + py;
  return out;
}

// ---- the sides' callbacks ---------------------------------------------------

void Session::Side::on_open(net::Connection&) { session.update_reading(*this); }

std::span<std::uint8_t> Session::Side::read_buffer(net::Connection&) { return in.buffer(); }

void Session::Side::on_read(net::Connection&, ByteSpan data) {
  in.commit(data.size());
  session.process(*this);
}

void Session::Side::on_read_eof(net::Connection&) {
  eof = true;
  finish_one = false;
  session.note_partial(*this, "");
  session.start_closing();
}

void Session::Side::on_drained(net::Connection&) {
  // The queue ran empty while the link carried its tail: a reading at the
  // end of a busy stretch.
  session.observe_link(*this, ~std::uint64_t{0});
  Side& sender = session.other(*this);
  if (sender.cut.rest)
    session.process(sender);  // a message cut through waited for room here
  else
    session.update_reading(sender);
}

void Session::Side::on_closed(net::Connection&, const Status& why) { session.on_side_closed(*this, why); }

// ---- reading -----------------------------------------------------------------

void Session::update_reading(Side& s) {
  if (!s.conn || s.closed) return;
  bool want = !s.eof && !s.pending && state_ != State::done && (state_ != State::closing || s.finish_one);
  if (want) {
    if (state_ != State::open) want = !s.handshake;  // only the handshake until both are in
    const Side& o = other(s);
    if (o.conn && o.conn->output_full()) want = false;
  }
  if (want)
    s.conn->resume_reading();
  else
    s.conn->pause_reading();
}

void Session::process(Side& s) {
  // A delivery can lead here again while this side is being processed: the
  // running call goes round once more instead.
  if (s.processing) {
    s.again = true;
    return;
  }
  s.processing = true;
  do {
    s.again = false;
    process_messages(s);
  } while (s.again && state_ != State::done);
  s.processing = false;
  if (s.in.at_boundary()) s.in.release_idle();
  update_reading(s);
  bridge_.drain_engine();
}

void Session::process_messages(Side& s) {
  while (state_ != State::done && (state_ != State::closing || s.finish_one)) {
    if (s.cut.message) {
      if (!pump_cut(s)) break;
      continue;
    }
    if (s.pending) {
      if (!submit(s, *s.pending)) break;
      s.pending.reset();
      continue;
    }
    if (s.handshake && state_ != State::open && !s.finish_one) break;  // later messages wait for the other handshake
    auto m = s.in.next();
    if (!m) {
      fail(std::string(name(s)) + " sent bytes that are not a Dask message: " + m.error().message());
      return;
    }
    if (!*m) {
      if (start_cut(s)) continue;
      break;
    }
    RawMessage& msg = **m;
    ++s.read_index;
    BridgeStats& st = bridge_.stats_;
    ++st.messages[static_cast<int>(s.leg)][static_cast<int>(Flow::to_bridge)];
    st.bytes[static_cast<int>(s.leg)][static_cast<int>(Flow::to_bridge)] += msg.wire_size;
    const bool capturing = bridge_.observer_.wants_bytes();
    if (capturing) {
      const std::vector<Bytes> frames = msg.memory_frames();
      observe(s.leg, Flow::to_bridge, prelude_of(frames), frames);
    }
    if (!s.handshake) {
      if (!take_handshake(s, std::move(msg))) return;
      continue;
    }
    if (s.leg == Leg::client && !noted_direct_ && !msg.frames.empty()) {
      if (auto op = direct_transfer_op(msg.frames[0].bytes(), bridge_.options_.recode.limits)) {
        noted_direct_ = true;
        log("info: the client sent " + *op + "; Dask clients send it before they move data to or from workers "
            "directly (direct_to_workers=True, scatter(direct=True)), and such transfers go to the workers' own "
            "addresses, not through this bridge");
      }
    }
    RecodeEngine::Input in;
    in.tag = s.read_index;
    in.raw = std::move(msg);
    // A capture holds the frames until its thread has written them: the
    // recoder must not discard their pages.
    if (capturing) in.raw.storage.reset();
    ++s.in_flight;
    const bool last = s.finish_one;
    s.finish_one = false;
    if (!submit(s, in)) {
      s.pending = std::move(in);
      break;
    }
    if (last) break;
  }
}

// ---- cut-through -----------------------------------------------------------------

bool Session::start_cut(Side& s) {
  const BridgeOptions& o = bridge_.options_;
  if (o.cut_through_bytes == 0) return false;
  if (!s.handshake || s.stream == 0 || s.pending || s.in_flight > 0) return false;
  if (state_ != State::open && !(state_ == State::closing && s.finish_one)) return false;
  Side& to = other(s);
  if (!to.conn || to.closed) return false;
  auto p = s.in.partial();
  if (!p || p->wire_size < o.cut_through_bytes || p->offset == s.cut.declined_at) return false;
  if (p->offset == s.cut.wait_at && p->have.size() < s.cut.wait) return false;
  // Decoded output in windows of 448 KiB (with lz4's 64 KiB of history, 512
  // KiB): below glibc's mmap threshold, so windows come from the heap and are
  // reused, not mapped and faulted in afresh for every one.
  FrameStreamDecoder::Options windows;
  windows.piece_bytes = std::size_t{448} << 10;
  auto verdict = plan_cut_through(p->offset, p->lengths, p->have, s.for_other, windows);
  if (!verdict) {
    fail("message " + std::to_string(s.read_index) + " from the " + name(s) + " cannot be recoded for the " +
         name(to) + ": " + verdict.error().message());
    return false;
  }
  if (const auto* wait = std::get_if<CutWait>(&*verdict)) {
    s.cut.wait_at = p->offset;
    s.cut.wait = wait->bytes;
    return false;
  }
  if (std::holds_alternative<CutNo>(*verdict)) {
    s.cut.declined_at = p->offset;
    return false;
  }
  ++s.read_index;
  ++s.in_flight;
  BridgeStats& st = bridge_.stats_;
  ++st.messages[static_cast<int>(s.leg)][static_cast<int>(Flow::to_bridge)];
  st.bytes[static_cast<int>(s.leg)][static_cast<int>(Flow::to_bridge)] += p->wire_size;
  s.cut.message = std::make_unique<CutThrough>(std::move(std::get<CutPlan>(*verdict)));
  s.cut.first_in = true;
  std::vector<Bytes> first = s.cut.message->begin();
  send_pieces(to, first, /*message_start=*/true);
  s.in.stream_rest();
  return true;
}

// Forwards what arrived of the message being cut through; true once it is
// all out. Input goes to the plan in slices, and stops while the receiver's
// queue is full (a decoded slice can be 255 times its size): what is left
// of a piece waits in cut.rest until the receiver drains.
bool Session::pump_cut(Side& s) {
  constexpr std::size_t kSlice = std::size_t{64} << 10;
  Side& to = other(s);
  std::vector<Bytes> out;
  for (;;) {
    Bytes piece;
    if (s.cut.rest) {
      piece = std::move(*s.cut.rest);
      s.cut.rest.reset();
    } else if (auto p = s.in.next_piece()) {
      piece = std::move(*p);
      // What arrived, as it arrived (the first piece starts at the L field).
      if (bridge_.observer_.wants_bytes()) {
        bridge_.observer_.on_bytes(id_, s.leg, Flow::to_bridge, std::span<const Bytes>(&piece, 1), s.cut.first_in);
        s.cut.first_in = false;
      }
    } else {
      break;
    }
    for (std::size_t at = 0; at < piece.size();) {
      if (to.conn && !to.closed && to.conn->output_full()) {
        s.cut.rest = piece.slice(at, piece.size() - at);
        return false;
      }
      const std::size_t k = std::min(kSlice, piece.size() - at);
      if (auto st = s.cut.message->feed(piece.slice(at, k), out); !st) {
        send_pieces(to, out, false);
        abort_cut(s, "its data cannot be decoded: " + st.error().message());
        fail("message " + std::to_string(s.read_index) + " from the " + name(s) + " broke off: " +
             st.error().message());
        return false;
      }
      send_pieces(to, out, false);
      at += k;
    }
  }
  if (!s.cut.message->done()) return false;
  BridgeStats& st = bridge_.stats_;
  ++st.messages[static_cast<int>(to.leg)][static_cast<int>(Flow::from_bridge)];
  ++st.cut_through;
  if (s.cut.message->changed())
    ++st.recoded;
  else
    ++st.passed;
  s.cut.message.reset();
  if (s.in_flight > 0) --s.in_flight;
  if (state_ == State::closing) {
    s.finish_one = false;
    maybe_close();
    return false;
  }
  return true;
}

// The message being cut through ends in the middle: its receiver holds part
// of it and is closed.
void Session::abort_cut(Side& s, const std::string& why) {
  if (!s.cut.message) return;
  Side& to = other(s);
  log(std::string(name(s)) + "'s message of " + std::to_string(s.cut.message->in_bytes()) + " bytes, forwarded as it came, "
      "broke off (" + why + "): the " + name(to) + " got part of it and is closed");
  s.cut.message.reset();
  s.cut.rest.reset();
  if (s.in_flight > 0) --s.in_flight;
  s.finish_one = false;
  if (to.conn && !to.closed) to.conn->close();
}

void Session::send_pieces(Side& to, std::vector<Bytes>& pieces, bool message_start) {
  if (!to.conn || to.closed) {
    pieces.clear();
    return;
  }
  if (!pieces.empty() && bridge_.observer_.wants_bytes())
    bridge_.observer_.on_bytes(id_, to.leg, Flow::from_bridge, pieces, message_start);
  std::uint64_t size = 0;
  for (Bytes& b : pieces) {
    size += b.size();
    to.conn->send(std::move(b));
  }
  pieces.clear();
  bridge_.stats_.bytes[static_cast<int>(to.leg)][static_cast<int>(Flow::from_bridge)] += size;
  observe_link(to, size);
}

bool Session::submit(Side& s, RecodeEngine::Input& in) {
  switch (bridge_.engine_->try_submit(s.stream, in)) {
    case RecodeEngine::Submitted::accepted:
      return true;
    case RecodeEngine::Submitted::full:
      bridge_.engine_waiters_.push_back(id_);
      return false;
    case RecodeEngine::Submitted::closed:
      break;
  }
  return false;
}

bool Session::retry_pending() {
  bool waiting = false;
  for (Side* s : {&client_, &upstream_}) {
    if (!s->pending || state_ == State::closing || state_ == State::done) continue;
    process(*s);
    waiting |= s->pending.has_value();
  }
  return waiting;
}

// ---- handshakes ----------------------------------------------------------------

bool Session::take_handshake(Side& s, RawMessage&& m) {
  const Limits& limits = bridge_.options_.recode.limits;
  std::optional<Handshake> h;
  if (m.frames.size() == 1) {
    auto v = msgpack::decode_all(m.frames[0].bytes().span(), limits, m.offset + prelude_size(1));
    if (v && v->is_map() && v->find("op") == nullptr) {
      auto parsed = handshake_from_peer(*v, limits);
      if (parsed && parsed->missing_keys().empty()) h = std::move(*parsed);
    }
  }
  if (!h) {
    fail(std::string(name(s)) + "'s first message is not a Dask handshake (a map with \"compression\" and "
         "\"pickle-protocol\")");
    return false;
  }
  s.handshake = std::move(h);
  // The reader took a refused key out (nothing of it is kept or forwarded);
  // one line says so.
  if (!s.handshake->capabilities_refused.empty())
    log("warning: the " + std::string(name(s)) + " " + s.peer + ": " + s.handshake->capabilities_refused);
  if (s.leg == Leg::upstream) {
    // Dask's connector reads the listener's handshake before it writes its
    // own, on both legs. The upstream is answered with its own codec and
    // protocol 5, so the cluster sends its best. The client, which is still
    // waiting for ours, gets the same: it then writes in the cluster's codec
    // when it has it, else uncompressed, and in its own pickle protocol;
    // what it reads is recoded for what it advertises.
    msgpack::Value ours = upstream_.handshake->raw;
    ours.set("pickle-protocol", msgpack::Value::integer(5));
    send_message(upstream_, std::vector<Bytes>{Bytes(msgpack::encode(ours))});
    send_message(client_, std::vector<Bytes>{Bytes(msgpack::encode(ours))});
  }
  if (client_.handshake && upstream_.handshake) open_streams();
  update_reading(client_);
  update_reading(upstream_);
  return true;
}

void Session::open_streams() {
  const BridgeOptions& o = bridge_.options_;
  bridge_.loop_.cancel_timer(handshake_timer_);

  // What each side gets is the one policy's (core/caps/delivery.h): the
  // bridge writes any codec and prefers none, so each side gets what it
  // decodes, in its own order; the flags name the client's codec, pickle
  // protocol and layout. The layout changes only when the flags say so.
  const Peer client = peer_from_handshake(client_.peer, *client_.handshake, o.recode.limits);
  const Peer upstream = peer_from_handshake(upstream_.peer, *upstream_.handshake, o.recode.limits);
  DeliveryOptions for_client;
  for_client.order = DeliveryOptions::Order::receiver;
  for_client.codec = o.codec;
  for_client.pickle_protocol = o.pickle_protocol;
  for_client.cpu_layout = o.layout_cpu;
  DeliveryOptions for_upstream;
  for_upstream.order = DeliveryOptions::Order::receiver;
  for_upstream.cpu_layout = false;
  auto to_client_plan = deliver(this_build(), client, for_client);
  auto to_upstream_plan = deliver(this_build(), upstream, for_upstream);
  if (!to_client_plan || !to_upstream_plan) {
    fail("cannot plan the session: " + (to_client_plan ? to_upstream_plan.error() : to_client_plan.error()).message());
    return;
  }

  RecodeEngine::StreamOptions to_client;
  to_client.transcode = to_client_plan->recode_options(o.recode);
  to_client.transcode.keep_unconvertible = o.keep_unconvertible;
  to_client.transcode.frame_codec.reset();
  to_client.inline_bytes = o.inline_bytes;
  const TranscodeOptions& tc = to_client.transcode;

  RecodeEngine::StreamOptions to_upstream;
  to_upstream.transcode = to_upstream_plan->recode_options(o.recode);
  to_upstream.transcode.frame_codec.reset();
  to_upstream.inline_bytes = o.inline_bytes;
  const TranscodeOptions& tu = to_upstream.transcode;

  if (o.link_choice) {
    open_link(client_, *to_client_plan, to_client.transcode);
    open_link(upstream_, *to_upstream_plan, to_upstream.transcode);
  }

  upstream_.for_other = tc;
  client_.for_other = tu;
  upstream_.stream = bridge_.engine_->open_stream(to_client);
  client_.stream = bridge_.engine_->open_stream(to_upstream);
  bridge_.by_stream_[upstream_.stream] = this;
  bridge_.by_stream_[client_.stream] = this;
  state_ = State::open;

  to_client_plan_ = plan_text(tc);
  to_upstream_plan_ = plan_text(tu);
  log("client " + client_.peer + " (" + describe(*client_.handshake) + ") <-> upstream " + upstream_.peer + " (" +
      describe(*upstream_.handshake) + "); to the client: " + to_client_plan_ + "; to the upstream: " +
      to_upstream_plan_);
  bridge_.observer_.on_session(id_, client_.peer, bridge_.address().host_port(),
                               upstream_.conn->local_ip(), o.upstream.host_port());
  // Messages that arrived behind the handshakes.
  process(client_);
  process(upstream_);
}

// ---- codec per leg ---------------------------------------------------------------

// The leg toward `to` gets its LinkChooser (core/caps/internal/link_policy.h) when
// its receiver reads a codec; a pin it does not read leaves it without one,
// with one line.
void Session::open_link(Side& to, const Delivery& plan, TranscodeOptions& options) {
  const std::string peer_ip = to.conn ? to.conn->peer_ip() : std::string();
  const std::string local_ip = to.conn ? to.conn->local_ip() : std::string();
  const bool same_host = !peer_ip.empty() && peer_ip == local_ip;
  auto policy = link::LinkPolicy::for_delivery(plan, same_host, bridge_.options_.pin_codec, options.rules, peer_ip);
  if (!policy) {
    log(std::string("warning: no codec per link to the ") + name(to) + ": " + policy.error().message());
    return;
  }
  if (!*policy) return;
  to.link = std::move(*policy);
  options.frame_codec = to.link;
}

// What the kernel says of the link to `to`, after `bytes_sent` more were
// handed to it: read once every 64 KiB (the chooser's span of readings
// closes once it holds 0.1 s of sending, so more readings add nothing; this
// bounds them to one per 64 KiB sent) and when its full queue drains (~0).
void Session::observe_link(Side& to, std::uint64_t bytes_sent) {
  constexpr std::uint64_t kObserveEvery = std::uint64_t{64} << 10;
  if (!to.link || !to.conn || to.closed) return;
  to.unobserved = bytes_sent > kObserveEvery ? kObserveEvery : to.unobserved + bytes_sent;
  if (to.unobserved < kObserveEvery) return;
  to.unobserved = 0;
  if (auto figures = to.conn->link_figures()) to.link->observe(*figures);
}

// One line per change of the choice toward `to`.
void Session::log_link_changes(Side& to) {
  if (!to.link) return;
  for (const std::string& line : to.link->take_changes())
    log(std::string("to the ") + name(to) + " " + to.peer + ": " + peer_text(line, 240));
}

// ---- writing -------------------------------------------------------------------

void Session::send_message(Side& to, std::span<const Bytes> frames) {
  if (!to.conn || to.closed) return;
  const Bytes prelude = prelude_of(frames);
  std::uint64_t size = prelude.size();
  if (!to.conn->send(prelude)) return;
  for (const Bytes& f : frames) {
    to.conn->send(f);
    size += f.size();
  }
  BridgeStats& st = bridge_.stats_;
  ++st.messages[static_cast<int>(to.leg)][static_cast<int>(Flow::from_bridge)];
  st.bytes[static_cast<int>(to.leg)][static_cast<int>(Flow::from_bridge)] += size;
  if (bridge_.observer_.wants_bytes()) observe(to.leg, Flow::from_bridge, prelude, frames);
  observe_link(to, size);
}

void Session::observe(Leg leg, Flow flow, const Bytes& prelude, std::span<const Bytes> frames) {
  std::vector<Bytes> pieces;
  pieces.reserve(frames.size() + 1);
  pieces.push_back(prelude);
  pieces.insert(pieces.end(), frames.begin(), frames.end());
  bridge_.observer_.on_bytes(id_, leg, flow, pieces, /*message_start=*/true);
}

void Session::on_output(RecodeEngine::Output&& out) {
  Side& from = out.stream == client_.stream ? client_ : upstream_;
  Side& to = other(from);
  if (from.in_flight > 0) --from.in_flight;
  if (!out.frames) {
    fail("message " + std::to_string(out.tag - 1) + " from the " + name(from) + " cannot be recoded for the " +
         name(to) + ": " + out.frames.error().message());
    return;
  }
  BridgeStats& st = bridge_.stats_;
  if (out.passed_through)
    ++st.passed;
  else
    ++st.recoded;
  st.frames_recompressed += out.report.frames_recompressed;
  st.pickles_recoded += out.report.pickles_recoded;
  st.buffers_inlined += out.report.buffers_inlined;
  st.arrays_converted += out.report.arrays_converted;
  st.frames_link_coded += out.report.frames_link_coded;
  log_link_changes(to);
  send_message(to, *out.frames);
  if (state_ == State::closing)
    maybe_close();
  else
    update_reading(from);
}

// ---- ending --------------------------------------------------------------------

void Session::fail(const std::string& why) {
  if (failed_ || done_) return;
  failed_ = true;
  ++bridge_.stats_.errors;
  log("closed: " + why);
  start_closing();
}

void Session::begin_shutdown() {
  // A message half read goes on to its end and is sent on; nothing after it.
  if (state_ == State::open)
    for (Side* x : {&client_, &upstream_}) x->finish_one = !x->closed && !x->eof && !x->in.at_boundary();
  start_closing();
}

void Session::start_closing() {
  if (state_ == State::closing || state_ == State::done) {
    maybe_close();
    return;
  }
  state_ = State::closing;
  bridge_.loop_.cancel_timer(handshake_timer_);
  for (Side* s : {&client_, &upstream_}) {
    // A message the engine had no room for is dropped: it was never sent on.
    if (s->pending) {
      s->pending.reset();
      if (s->in_flight > 0) --s->in_flight;
    }
    // A message being cut through that will not be read to its end.
    if (s->cut.message && !s->finish_one) abort_cut(*s, "the session is closing");
    if (s->conn && !s->closed && !s->finish_one) s->conn->pause_reading();
  }
  maybe_close();
}

void Session::maybe_close() {
  // Whatever was recoded goes out first; nothing is cut in the middle.
  if (client_.in_flight > 0 || upstream_.in_flight > 0 || client_.finish_one || upstream_.finish_one) return;
  for (Side* s : {&client_, &upstream_})
    if (s->conn && !s->closed) s->conn->close_when_flushed();
}

void Session::note_partial(Side& s, const std::string& why) {
  if (s.in.at_boundary() || s.noted_partial) return;
  s.noted_partial = true;
  if (s.cut.message) {
    log(std::string(name(s)) + " closed in the middle of a message (" + std::to_string(s.in.buffered()) + " of its " +
        std::to_string(s.cut.message->in_bytes()) + " bytes came" + (why.empty() ? "" : ": " + why) + ")");
    abort_cut(s, std::string(name(s)) + " closed");
    return;
  }
  log(std::string(name(s)) + " closed in the middle of a message (" + std::to_string(s.in.buffered()) +
      " bytes of it dropped, nothing of it sent on)" + (why.empty() ? "" : ": " + why));
}

void Session::on_side_closed(Side& s, const Status& why) {
  s.closed = true;
  s.finish_one = false;
  if (other(s).cut.message) abort_cut(other(s), std::string(name(s)) + " closed");
  if (!why) note_partial(s, why.error().message());
  if (s.cut.message) abort_cut(s, std::string(name(s)) + " closed");
  if (!why && !failed_ && state_ != State::closing)
    log(std::string(name(s)) + " " + s.peer + ": " + why.error().message());
  if (state_ != State::closing && state_ != State::done) start_closing();
  if (!client_.closed || !upstream_.closed) {
    maybe_close();
    return;
  }
  state_ = State::done;
  done_ = true;
  for (Side* x : {&client_, &upstream_}) {
    if (x->stream) {
      bridge_.by_stream_.erase(x->stream);
      bridge_.engine_->cancel(x->stream);
      x->stream = 0;
    }
  }
  bridge_.session_done(id_);
}

}  // namespace daskcaps::bridge
