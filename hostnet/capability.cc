#include "hostnet/capability.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace urxe::hostnet {

bool have_capability(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective >> (cap % 32)) & 1;
}

}  // namespace urxe::hostnet
