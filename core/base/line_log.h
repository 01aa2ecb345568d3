// LineLog: log lines written to a file descriptor by a thread of their own,
// so that a reader who stops reading (a full pipe, a terminal on hold)
// never blocks the caller (the bridge's event loop).
//
// Lines wait in a queue of at most max_bytes; a line that does not fit is
// dropped and counted, and the next line written says how many were lost
// ("(N log lines dropped: the output was not read)"). flush_for() waits
// until the queue is written, the descriptor fails or the time is up. The
// destructor waits up to 5 seconds; a writer still blocked then is left to
// the process's exit (it holds its own state, nothing of the LineLog).
// Write errors other than EINTR end the writing: lines are then dropped.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace daskcaps {

class LineLog {
 public:
  explicit LineLog(int fd, std::size_t max_bytes = std::size_t{4} << 20);
  ~LineLog();
  LineLog(const LineLog&) = delete;
  LineLog& operator=(const LineLog&) = delete;

  /// Queues `line` and a newline; never blocks on the descriptor.
  void write(std::string line);
  /// Waits until every queued line is written (or writing failed); false
  /// when the time ran out first.
  bool flush_for(std::chrono::milliseconds limit);
  /// Lines dropped so far.
  std::uint64_t dropped() const;

 private:
  struct State;
  static void run(std::shared_ptr<State> s);
  std::shared_ptr<State> state_;  // with the writing thread
};

}  // namespace daskcaps
