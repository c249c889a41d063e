// The one rtnetlink client of urxe (libmnl): a request answered by one message, a dump, and a socket
// subscribed to multicast groups. Internal to hostnet/; the public headers say what is asked, not how.
#pragma once
#include <libmnl/libmnl.h>

#include <cstdint>
#include <string>

namespace urxe::hostnet::netlink {

inline constexpr size_t kRequestSize = 8192;  // room for any request urxe builds
inline constexpr size_t kReceiveSize =
    32768;  // a dump datagram (the kernel's NLMSG_GOODSIZE is at most this)

// Calls f(const nlattr*) for each attribute of `nlh` after its family header of `header` bytes
// (mnl_attr_for_each, which C++ cannot compile).
template <class F>
void for_each_attr(const nlmsghdr* nlh, size_t header, F&& f) {
  const auto* attr = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, header));
  const auto* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  while (mnl_attr_ok(attr, static_cast<int>(tail - reinterpret_cast<const char*>(attr)))) {
    f(attr);
    attr = mnl_attr_next(attr);
  }
}

// An mnl socket on NETLINK_ROUTE, bound (groups = 0: requests only) and closed with the object.
class Socket {
 public:
  Socket() = default;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();
  // false with a reason when the socket cannot be made.
  bool open(unsigned groups, bool nonblock, std::string* err);
  bool is_open() const { return nl_ != nullptr; }
  int fd() const;
  uint32_t portid() const;
  mnl_socket* get() const { return nl_; }

 private:
  mnl_socket* nl_ = nullptr;
};

// Sends `nlh` (NLM_F_ACK/NLM_F_DUMP as the caller set them; seq and pid are filled in here) and runs `cb`
// on every reply until the request is done. Returns MNL_CB_STOP/OK (>= 0) or -1 with errno set (the
// kernel's error, e.g. ENODEV for an unknown interface).
int request(nlmsghdr* nlh, mnl_cb_t cb, void* data);

}  // namespace urxe::hostnet::netlink
