// The ceilings every parser in dask-caps enforces on untrusted input.
//
// Each field is a limit with a sane default; commands expose them as flags
// (--max-message-bytes, ...). A declared length or count is checked against
// these limits and against the bytes actually present *before* anything is
// allocated, so a claimed size of 2^63 is an error (Errc::limit_exceeded or
// Errc::truncated), never an allocation.
#pragma once

#include <cstdint>

namespace daskcaps {

struct Limits {
  /// One Dask message on the wire: prelude plus all frames (docs/protocol.md §1.5: Dask
  /// itself has no explicit cap; half of RAM in practice).
  std::uint64_t max_message_bytes = std::uint64_t{8} << 30;  // 8 GiB
  /// Frames in one message (each costs a u64 in the prelude).
  std::uint64_t max_frames = std::uint64_t{1} << 20;
  /// Output of decompressing one frame. Dask compresses only frames of at
  /// most 2^31 bytes (docs/protocol.md §4.2), so nothing larger is legitimate.
  std::uint64_t max_decompressed_bytes = std::uint64_t{1} << 31;
  /// msgpack nesting (docs/protocol.md §1.5: a decoder should allow at least 512).
  std::uint32_t max_msgpack_depth = 1024;
  /// Elements of one msgpack array or entries of one map.
  std::uint64_t max_msgpack_container = std::uint64_t{1} << 31;
  /// Pickle machine: nesting of containers being built, memo entries, stack
  /// depth, and bytes of any pickle we write.
  std::uint32_t max_pickle_depth = 10000;
  std::uint64_t max_pickle_memo = std::uint64_t{1} << 24;
  std::uint64_t max_pickle_stack = std::uint64_t{1} << 24;
  std::uint64_t max_pickle_output_bytes = std::uint64_t{8} << 30;
  /// The "capabilities" handshake key a dask-caps peer publishes
  /// (core/wire/handshake.h): codec names it may list, and the bytes of one
  /// codec name, role or dask-caps version (printable ASCII only). A key
  /// past them is refused and the peer read as a plain Dask peer, so no
  /// more of it is kept or printed.
  std::uint64_t max_capability_codecs = 32;
  std::uint64_t max_capability_name = 64;
};

}  // namespace daskcaps
