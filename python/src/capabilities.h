// dask_caps.read_capabilities(), read_peer() and capabilities(): the
// "capabilities" handshake key read and written by the core alone
// (read_capabilities and capabilities_to_msgpack, core/wire/handshake.h;
// peer_from_handshake, core/caps/peer.h), for the Dask plugin, which has
// the handshake as Python values Dask decoded. They are read in place
// through a ValueView (python/src/py_value_view.h), never packed again, so
// a key refused on its count or length costs one len(). The readers never
// raise for what a peer sent: what is refused comes back as a refusal.
#pragma once

#include <pybind11/pybind11.h>

namespace daskcaps::python {

/// Adds read_capabilities(), read_peer(), capabilities() and LIMITS to the module.
void register_capabilities(pybind11::module_& m);

}  // namespace daskcaps::python
