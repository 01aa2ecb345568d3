// libdaskcaps: Dask's wire protocol, read and recoded without executing a
// pickle. Start here.
//
//   formats/message_source.h  MessageSource::open(): the messages of a raw
//                             stream, a pcap or a pcapng capture
//   wire/raw_message.h        RawMessage: one message as read, the type every
//                             reader makes and every consumer takes
//   wire/message.h            parse_message(): a RawMessage as Dask's
//                             objects and their sub-frames
//   caps/peer.h               Peer: what one side decodes, reads and has
//                             (from a probe, a live endpoint or a handshake)
//   caps/delivery.h           deliver(): what a receiver gets from a sender,
//                             the one decision every caller asks
//   recode/transcode.h        transcode_message(): one message recoded
//   caps/endpoint.h           peer_for_endpoint(): a probe file or a live
//                             Dask endpoint as a Peer
// Errors are values (base/result.h): a Result<T> holds a T or an Error with
// its kind and byte offset. docs/design.md in the source tree has the map.
//
// ---- example: recode a raw stream for a receiver that reads only lz4 ----
// #include <cstdio>
// #include <string>
//
// #include "daskcaps/daskcaps.h"
//
// int main(int argc, char** argv) {
//   if (argc != 2) return 2;
//   daskcaps::Peer receiver;  // what it published: codecs, pickle protocol
//   receiver.codecs = {"lz4"};
//   receiver.max_pickle_protocol = 4;
//   daskcaps::DeliveryOptions options;
//   options.order = daskcaps::DeliveryOptions::Order::receiver;
//   auto plan = daskcaps::deliver(daskcaps::this_build(), receiver, options);
//   if (!plan) return 3;
//   const daskcaps::TranscodeOptions recode = plan->recode_options({});
//   const daskcaps::Limits limits;
//   auto source = daskcaps::formats::MessageSource::open(argv[1], limits);
//   if (!source) return 3;
//   for (;;) {
//     auto next = (*source)->next();
//     if (!next) return 3;
//     if (!*next) return 0;
//     auto message = daskcaps::parse_message((*next)->raw, limits);
//     if (!message) return 3;
//     daskcaps::TranscodeReport report;
//     auto frames = daskcaps::transcode_message(std::move(*message), recode, report);
//     if (!frames) {
//       std::printf("%s\n", frames.error().message().c_str());
//       return 3;
//     }
//     std::printf("message %zu: %zu frames recompressed, %zu pickles recoded\n",
//                 (*next)->index, report.frames_recompressed, report.pickles_recoded);
//   }
// }
// ---- end of the example (tests/library/test_umbrella.py builds and runs it) ----
