// The pieces describe_message() (daskcaps/recode/describe.h) is made of,
// for its sources and for the tests that pin each.
#pragma once

#include <optional>
#include <vector>

#include "daskcaps/recode/describe.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

/// The exceptions and tracebacks of Dask's error dicts in a message
/// (describe_message() fills MessageReport::errors with it).
std::vector<ErrorReport> describe_errors(const Message& message, const DescribeOptions& options = {});

/// Layout of a numpy dask-family sub-header ("sub-header" of a header whose
/// type is numpy.ndarray) or a CuPy CAI; nullopt when it is neither.
std::optional<ArrayLayout> numpy_layout(const msgpack::Value& sub_header);
std::optional<ArrayLayout> cupy_layout(const msgpack::Value& cai);

}  // namespace daskcaps
