#include "daskcaps/version.h"

namespace daskcaps {

unsigned version_number() noexcept { return DASKCAPS_VERSION_NUMBER; }
const char* version_string() noexcept { return DASKCAPS_VERSION_STRING; }

}  // namespace daskcaps
