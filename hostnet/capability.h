// Whether the calling process has a capability (CAP_NET_ADMIN, CAP_NET_RAW, ...) in its effective set.
#pragma once

namespace urxe::hostnet {

bool have_capability(int cap);

}  // namespace urxe::hostnet
