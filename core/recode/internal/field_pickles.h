// The pickles Dask puts in plain bin fields of frame 0, found by Dask's own
// conventions, by op and key (as core/recode/internal/error_pickles.h finds the
// error pickles), never by looking at the bytes. docs/pickled-fields.md
// lists every such field of Dask 2022.12.1 and 2026.7.1, who writes it and
// who loads it.
//
// A field is a value under `key` of a map of frame 0 whose "op" is `op`, at
// any depth (batched messages are arrays of such maps; broadcast carries
// its message to the workers in "msg"). Only bin values are pickles; a
// placeholder there is an object that transcode recodes as any other, and
// nil (no type, no kwargs) is nothing. The fields:
//   task-finished     type                      worker -> scheduler
//   key-in-memory     type                      scheduler -> client (Client._handle_key_in_memory loads it)
//   run               function, args, kwargs    client -> scheduler (in broadcast's msg) -> worker, nanny
//   run_function      function, args, kwargs    client -> scheduler
//   feed              function, setup, teardown client -> scheduler
//   register_scheduler_plugin, register_worker_plugin, register_nanny_plugin,
//   plugin-add, plugin_add   plugin             client -> scheduler -> worker, nanny
//   workers_to_close  key                       Adaptive -> scheduler
//   log-event, event  message, category         a worker's warnings.warn -> scheduler -> client
//                     (topic "warn" only: the dict under "msg", or the
//                     second item of "event")
#pragma once

#include <functional>
#include <string_view>

#include "daskcaps/base/bytes.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

/// Calls `visit(op, key, value)` on every bin value of frame 0 (decoded)
/// that Dask's conventions make a pickle; `visit` may replace the value.
/// Depth is bounded by the msgpack decoder's limit.
void for_each_field_pickle(msgpack::Value& root,
                           const std::function<void(std::string_view op, std::string_view key, msgpack::Value&)>& visit);

/// Whether frame 0's bytes may hold such a field: one of the ops' names is
/// in them (an op is a str value as it is). False spares decoding.
bool may_hold_field_pickles(ByteSpan frame0);

}  // namespace daskcaps
