// The output of a streaming decoder (core/wire/internal/stream_codec.h): windows of
// a fixed size that the decoder writes into and hands out as Bytes slices
// sharing the window, so that a piece stays valid when the decoder has
// moved on, and the decoder keeps one window however large the frame.
//
// A window is `history` bytes copied from the end of the previous one (the
// past that the decoder may still read: lz4's 64 KiB), then room for up to
// piece_bytes new bytes, never more than the frame has left to make. Bytes
// before cursor() are final: they are never written again. A window whose
// pieces are all gone (no Bytes shares it) is used again two windows later,
// so that a frame costs two windows of memory, not a fresh one each time
// (whose pages would fault in anew; bench/RESULTS.md, "Transcode in
// windows", counts them).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "daskcaps/base/bytes.h"

namespace daskcaps::detail {

class OutputWindow {
 public:
  /// `total`: the bytes the frame makes in all; `history`: bytes of the past
  /// each new window starts with (at most what was written).
  OutputWindow(std::uint64_t total, std::size_t piece_bytes, std::size_t history)
      : total_(total), piece_bytes_(piece_bytes), history_(history) {}

  /// Room left in the current window (0 before the first one).
  std::size_t room() const { return cap_ - pos_; }
  std::uint8_t* cursor() { return data_ + pos_; }
  std::uint8_t* end() { return data_ + cap_; }
  /// Marks bytes up to `p` (between cursor() and end()) as written.
  void set_cursor(std::uint8_t* p) { pos_ = static_cast<std::size_t>(p - data_); }
  void advance(std::size_t n) { pos_ += n; }

  /// Bytes written in all: the absolute output position of cursor().
  std::uint64_t written() const { return base_ + pos_; }
  /// The absolute output position of a pointer into the current window.
  std::uint64_t position_of(const std::uint8_t* p) const {
    return base_ + static_cast<std::uint64_t>(p - data_);
  }

  /// Bytes handed out in all.
  std::uint64_t handed_out() const { return handed_total_; }

  /// Appends the bytes written since the last hand-out as one piece.
  void hand_out(std::vector<Bytes>& out) {
    const std::size_t n = pos_ - handed_;
    if (n == 0) return;
    out.emplace_back(buffer_, ByteSpan(data_ + handed_, n));
    handed_ = pos_;
    handed_total_ += n;
  }

  /// Hands out the current window's rest and starts the next one with the
  /// history copied to its start. False, and nothing changes, when the
  /// frame has nothing left to make (written() == total).
  bool next(std::vector<Bytes>& out) {
    const std::uint64_t done = written();
    if (done >= total_) return false;
    hand_out(out);
    const std::size_t keep = static_cast<std::size_t>(std::min<std::uint64_t>(history_, done));
    const std::size_t fresh =
        static_cast<std::size_t>(std::min<std::uint64_t>(piece_bytes_, total_ - done));
    std::shared_ptr<Buffer> next;
    if (spare_ != nullptr && spare_.use_count() == 1 && spare_->size() >= keep + fresh) {
      // The window before the last one, whose pieces are all gone: used
      // again, so that its pages are not faulted in anew for every window.
      next = std::move(spare_);
    } else {
      // A window that more windows follow is made large enough for any of
      // them, to be used again.
      const bool more = total_ - done > fresh;
      next = std::make_shared<Buffer>(Buffer::uninitialised(more ? history_ + piece_bytes_ : keep + fresh));
    }
    if (keep > 0) std::memcpy(next->data(), data_ + pos_ - keep, keep);
    spare_ = std::move(buffer_);  // lives on in the pieces that share it, then is used again
    buffer_ = std::move(next);
    data_ = buffer_->data();
    cap_ = keep + fresh;
    pos_ = handed_ = keep;
    base_ = done - keep;
    return true;
  }

 private:
  std::uint64_t total_;
  std::size_t piece_bytes_;
  std::size_t history_;
  std::shared_ptr<Buffer> buffer_;
  std::shared_ptr<Buffer> spare_;  // the previous window, once no piece shares it
  std::uint8_t* data_ = nullptr;
  std::size_t cap_ = 0;
  std::size_t pos_ = 0;
  std::size_t handed_ = 0;
  std::uint64_t base_ = 0;  // absolute output position of data_[0]
  std::uint64_t handed_total_ = 0;
};

}  // namespace daskcaps::detail
