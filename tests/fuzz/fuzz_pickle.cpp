// fuzz_pickle: the pickle engine (core/pickle/pickle.h): reader (symbolic
// evaluation), disassembler, class references, the exception reader, and
// the writer for every protocol
// (read -> write -> read).
//
// Input: byte 0 picks the recode: target protocol (byte0 % 6), how many
// out-of-band buffers come with the pickle ((byte0 / 6) % 4), inline_buffers
// ((byte0 / 24) % 2) and whether the buffers are writeable ((byte0 / 48) % 2);
// then one length byte per buffer; the buffers are cut, in order, from the
// end of the input; what is left in the middle is the pickle.
//
// Properties, when recode succeeds:
//  1. summarize reads the output; at target 2-5 its protocol (PROTO) is the
//     target; at 0-1, where CPython writes no PROTO, the lowest protocol its
//     opcodes need is at most the target;
//  2. the output consumes exactly the buffers recode says stay out of band;
//  3. recoding the output again for the same target, with those buffers,
//     succeeds, keeps the buffers in order, and does the same when loaded:
//     as many calls of each kind, BUILDs, and items added to objects that
//     are not lists, dicts or sets (acts_of below);
//  4. a third pass makes the same calls again.
// Why not "read -> write is a fixed point": the writer keeps, per object,
// the order of its mutations and the calls that need them, but not the
// relative order of mutations on different objects, nor where a dropped
// value goes relative to a GET of a result that is already built
// (core/pickle/detail/pickle_writer.h). Re-reading its output can therefore move, say, an
// APPEND on one object past a BUILD on another: the same objects and the
// same calls, in an order that only hand-made pickles can tell apart (the
// fuzzer found several; CPython's own pickles are fixed points, checked by
// tests/e2e/test_pickle_oracle.py). The counts catch a call written twice
// or lost, which is what the fixed point caught that matters.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "daskcaps/pickle/pickle.h"
#include "core/pickle/detail/pickle_vm.h"
#include "fuzz_common.h"

using namespace daskcaps;
namespace pk = daskcaps::pickle;

namespace {

// What loading a pickle the writer made does, as the reader sees it: how
// many calls (REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST, persistent loads), and
// how many BUILDs and items added by APPEND/SETITEM/ADDITEMS to objects
// that are not lists, dicts or sets (a dropped call is a call node too; where
// it is written, as an effect or inside the result, may change). Read from
// the graph, not the opcodes: the writer's own lowerings (bytes(),
// _codecs.encode, set(list), getattr(Outer, 'Inner'), ...) are REDUCEs that
// stand for one value, not calls, and equal values among them are written
// once.
struct Acts {
  std::array<std::uint64_t, 6> calls{};
  std::uint64_t builds = 0, items = 0;
  bool operator==(const Acts&) const = default;
};

Acts acts_of(ByteSpan pickle, std::span<const pk::OutOfBandBuffer> buffers, const Limits& limits) {
  pk::LoadOptions options;
  options.buffers = buffers;
  auto g = pk::load(pickle, options, limits);
  FUZZ_CHECK(g.ok());
  Acts a;
  for (pk::NodeId id = 0; id < g->size(); ++id) {
    switch (g->kind(id)) {
      case pk::Kind::reduce: ++a.calls[0]; break;
      case pk::Kind::newobj: ++a.calls[1]; break;
      case pk::Kind::newobj_ex: ++a.calls[2]; break;
      case pk::Kind::obj: ++a.calls[3]; break;
      case pk::Kind::inst: ++a.calls[4]; break;
      case pk::Kind::persid: ++a.calls[5]; break;
      default: break;
    }
    for (std::uint32_t o = g->node(id).ops; o != pk::Graph::kEnd; o = g->op(o).next) {
      const pk::Graph::Op& op = g->op(o);
      if (op.kind == pk::OpKind::build) {
        ++a.builds;
      } else if (op.kind != pk::OpKind::effect) {
        a.items += g->chain_total(op.ref);
      }
    }
  }
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t b0 = data[0];
  pk::RecodeOptions options;
  options.target_protocol = b0 % 6;
  const std::size_t nbuf = (b0 / 6) % 4;
  options.inline_buffers = ((b0 / 24) % 2) != 0;
  const bool writeable = ((b0 / 48) % 2) != 0;

  ByteSpan rest(data + 1, size - 1);
  std::vector<std::size_t> lengths;
  for (std::size_t i = 0; i < nbuf && !rest.empty(); ++i) {
    lengths.push_back(rest[0]);
    rest = rest.subspan(1);
  }
  std::vector<pk::OutOfBandBuffer> buffers(lengths.size());
  for (std::size_t i = lengths.size(); i-- > 0;) {
    const std::size_t n = std::min(lengths[i], rest.size());
    buffers[i].data = rest.subspan(rest.size() - n);
    buffers[i].writeable = writeable;
    rest = rest.subspan(0, rest.size() - n);
  }
  const ByteSpan pickle = rest;
  const Limits limits = fuzzsupport::fuzz_limits();

  auto summary = pk::summarize(pickle, limits);
  if (summary) FUZZ_CHECK(summary->protocol >= 0 && summary->protocol <= 5);
  (void)pk::disassemble(pickle, limits);
  (void)pk::class_reference(pickle, limits);
  if (auto info = pk::read_exception_info(pickle, limits)) FUZZ_CHECK(info->frames.size() <= pk::ExceptionInfo::kMaxFrames);

  auto recoded = pk::recode(pickle, buffers, options, limits);
  if (!recoded) {
    (void)recoded.error().message();
    return 0;
  }
  const int target = options.target_protocol;
  for (std::size_t i : recoded->out_of_band) FUZZ_CHECK(i < buffers.size());
  if (target < 5 || options.inline_buffers) FUZZ_CHECK(recoded->out_of_band.empty());

  // 1. It reads, at the target protocol.
  auto out_summary = pk::summarize(recoded->pickle, limits);
  FUZZ_CHECK(out_summary.ok());
  if (target >= 2)
    FUZZ_CHECK(out_summary->protocol == target);
  else
    FUZZ_CHECK(out_summary->protocol <= target);
  // 2. It consumes the buffers that stay out of band.
  FUZZ_CHECK(out_summary->out_of_band_buffers == recoded->out_of_band.size());
  // Not a property: like pickletools.dis, the disassembler refuses some
  // pickles that load (a protocol 0 STRING with non-ASCII escapes).
  (void)pk::disassemble(recoded->pickle, limits);

  // 3. Read back and written again, it makes the same calls.
  std::vector<pk::OutOfBandBuffer> kept;
  for (std::size_t i : recoded->out_of_band) kept.push_back(buffers[i]);
  auto again = pk::recode(recoded->pickle, kept, options, limits);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->out_of_band.size() == kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) FUZZ_CHECK(again->out_of_band[i] == i);
  FUZZ_CHECK(acts_of(recoded->pickle, kept, limits) == acts_of(again->pickle, kept, limits));
  // 4. And again.
  auto third = pk::recode(again->pickle, kept, options, limits);
  FUZZ_CHECK(third.ok());
  FUZZ_CHECK(acts_of(third->pickle, kept, limits) == acts_of(again->pickle, kept, limits));
  return 0;
}
