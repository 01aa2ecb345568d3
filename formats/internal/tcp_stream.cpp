// TcpStream (formats/internal/tcp_reassembly.h): one direction of a TCP
// connection, its segments put in sequence through a bounded reorder window
// and its retransmissions checked against a history, its bytes and gaps
// handed to its sink. The connections and their two streams each are
// tcp_reassembly.cpp.
#include <algorithm>
#include <iterator>

#include "formats/internal/tcp_reassembly.h"

namespace daskcaps::formats {

TcpStream::TcpStream(const ReassemblyOptions& options, Sink& sink) : options_(options), sink_(sink) {}

void TcpStream::start(std::uint32_t seq_of_offset_zero) {
  if (started_) return;
  started_ = true;
  seq0_ = seq_of_offset_zero;
}

void TcpStream::emit_data(ByteSpan bytes) {
  if (bytes.empty()) return;
  const std::uint64_t keep = options_.history_bytes;
  if (keep > 0) {
    if (bytes.size() >= keep) {
      history_.clear();
      history_.append(bytes.last(static_cast<std::size_t>(keep)));
      history_start_ = next_ + bytes.size() - keep;
    } else {
      if (history_.empty()) history_start_ = next_;
      history_.append(bytes);
      if (history_.size() > 2 * keep) {
        const std::size_t drop = history_.size() - static_cast<std::size_t>(keep);
        history_.erase_front(drop);
        history_start_ += drop;
      }
    }
  }
  next_ += bytes.size();
  delivered_ += bytes.size();
  sink_.data(bytes);
}

void TcpStream::emit_gap(std::uint64_t count) {
  if (count == 0) return;
  next_ += count;
  lost_ += count;
  history_.clear();
  history_start_ = next_;
  sink_.gap(count);
}

void TcpStream::compare_with_history(std::uint64_t from, std::uint64_t to, const std::uint8_t* data,
                                     AddResult& result) {
  result.duplicate_bytes += to - from;
  const std::uint64_t hs = history_start_;
  const std::uint64_t he = history_start_ + history_.size();
  const std::uint64_t lo = std::max(from, hs);
  const std::uint64_t hi = std::min(to, he);
  const std::uint64_t checked = hi > lo ? hi - lo : 0;
  result.unchecked_bytes += (to - from) - checked;
  for (std::uint64_t at = lo; at < hi; ++at) {
    if (history_[static_cast<std::size_t>(at - hs)] != data[at - from]) {
      if (result.conflict_bytes == 0) result.conflict_offset = at;
      ++result.conflict_bytes;
    }
  }
}

void TcpStream::insert(std::uint64_t from, std::uint64_t to, const std::uint8_t* data,
                       AddResult& result) {
  if (to <= from) return;
  // Bytes already delivered: a retransmission, compared with the history.
  if (from < next_) {
    const std::uint64_t hi = std::min(to, next_);
    if (data != nullptr) {
      compare_with_history(from, hi, data, result);
      data += hi - from;
    }
    from = hi;
    if (from >= to) return;
  }
  std::uint64_t cur = from;
  while (cur < to) {
    auto it = pending_.upper_bound(cur);
    if (it != pending_.begin()) {
      auto prev = std::prev(it);
      const std::uint64_t prev_end = prev->first + prev->second.length;
      if (prev_end > cur) {
        // Overlap with a buffered piece: the first copy wins.
        const std::uint64_t ov_end = std::min(to, prev_end);
        if (data != nullptr) {
          result.duplicate_bytes += ov_end - cur;
          if (!prev->second.lost) {
            const std::uint8_t* old = prev->second.bytes.data() + (cur - prev->first);
            const std::uint8_t* now = data + (cur - from);
            for (std::uint64_t i = 0; i < ov_end - cur; ++i) {
              if (old[i] != now[i]) {
                if (result.conflict_bytes == 0) result.conflict_offset = cur + i;
                ++result.conflict_bytes;
              }
            }
          }
        }
        cur = ov_end;
        continue;
      }
    }
    const std::uint64_t stop = it != pending_.end() ? std::min(to, it->first) : to;
    const std::uint64_t len = stop - cur;
    if (cur == next_) {
      // In order: straight to the sink, no copy.
      if (data != nullptr) {
        emit_data(ByteSpan(data + (cur - from), static_cast<std::size_t>(len)));
      } else {
        emit_gap(len);
      }
    } else {
      Piece piece;
      piece.length = len;
      piece.lost = data == nullptr;
      if (data != nullptr) piece.bytes = Buffer(data + (cur - from), static_cast<std::size_t>(stop - cur));
      held_ += (piece.lost ? 0 : len) + kPieceOverhead;
      pending_.emplace(cur, std::move(piece));
    }
    cur = stop;
  }
}

void TcpStream::deliver_ready() {
  while (!pending_.empty() && pending_.begin()->first <= next_) {
    auto node = pending_.extract(pending_.begin());
    const std::uint64_t key = node.key();
    Piece& piece = node.mapped();
    held_ -= (piece.lost ? 0 : piece.length) + kPieceOverhead;
    if (key + piece.length <= next_) continue;
    const std::uint64_t skip = next_ - key;
    if (piece.lost) {
      emit_gap(piece.length - skip);
    } else {
      emit_data(ByteSpan(piece.bytes).subspan(static_cast<std::size_t>(skip)));
    }
  }
}

void TcpStream::enforce_window() {
  while (held_ > options_.window_bytes && !pending_.empty()) {
    // The oldest hole will not be filled in time: declare it lost.
    const std::uint64_t first = pending_.begin()->first;
    if (first > next_) emit_gap(first - next_);
    deliver_ready();
  }
}

TcpStream::AddResult TcpStream::add(std::uint32_t seq, ByteSpan payload, std::uint32_t wire_length,
                                    bool fin) {
  AddResult result;
  if (!started_ || finished_) return result;
  const std::uint64_t wire = std::max<std::uint64_t>(wire_length, payload.size());
  // Unwrap the 32-bit sequence number around the next expected byte.
  const std::uint32_t next_seq = seq0_ + static_cast<std::uint32_t>(next_);
  const std::int64_t rel = static_cast<std::int32_t>(seq - next_seq);
  const std::int64_t start = static_cast<std::int64_t>(next_) + rel;
  const std::int64_t data_end = start + static_cast<std::int64_t>(payload.size());
  const std::int64_t end = start + static_cast<std::int64_t>(wire);
  if (start < 0) result.before_start = true;
  if (fin && !fin_at_ && end >= 0) {
    fin_at_ = static_cast<std::uint64_t>(end);
    // Anything buffered past the FIN is not part of the stream.
    for (auto it = pending_.lower_bound(*fin_at_); it != pending_.end();) {
      held_ -= (it->second.lost ? 0 : it->second.length) + kPieceOverhead;
      it = pending_.erase(it);
    }
  }
  const std::uint64_t limit = fin_at_ ? *fin_at_ : ~std::uint64_t{0};
  const std::int64_t from = std::max<std::int64_t>(start, 0);
  if (from < data_end) {
    const std::uint64_t to = std::min(static_cast<std::uint64_t>(data_end), limit);
    insert(static_cast<std::uint64_t>(from), to, payload.data() + (from - start), result);
  }
  const std::int64_t lost_from = std::max(from, data_end);
  if (lost_from < end) {
    const std::uint64_t to = std::min(static_cast<std::uint64_t>(end), limit);
    insert(static_cast<std::uint64_t>(lost_from), to, nullptr, result);
  }
  deliver_ready();
  enforce_window();
  return result;
}

void TcpStream::acknowledged(std::uint32_t ack) {
  if (!started_ || finished_) return;
  const std::uint32_t next_seq = seq0_ + static_cast<std::uint32_t>(next_);
  const std::int64_t rel = static_cast<std::int32_t>(ack - next_seq);
  if (rel <= 0) return;
  std::uint64_t upto = next_ + static_cast<std::uint64_t>(rel);
  if (fin_at_) upto = std::min(upto, *fin_at_);  // the FIN takes a sequence number, not a byte
  while (next_ < upto) {
    if (!pending_.empty() && pending_.begin()->first <= next_) {
      deliver_ready();
      continue;
    }
    const std::uint64_t stop = pending_.empty() ? upto : std::min(upto, pending_.begin()->first);
    emit_gap(stop - next_);
  }
  deliver_ready();
}

void TcpStream::finish() {
  if (finished_) return;
  finished_ = true;
  if (!started_) return;
  while (!pending_.empty()) {
    const std::uint64_t first = pending_.begin()->first;
    if (first > next_) emit_gap(first - next_);
    deliver_ready();
  }
  // Bytes before a FIN that never arrived.
  if (fin_at_ && *fin_at_ > next_) emit_gap(*fin_at_ - next_);
}

}  // namespace daskcaps::formats
