#include "hostnet/netlink.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

namespace urxe::hostnet::netlink {

Socket::~Socket() {
  if (nl_) mnl_socket_close(nl_);
}

bool Socket::open(unsigned groups, bool nonblock, std::string* err) {
  nl_ = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0));
  if (nl_ && mnl_socket_bind(nl_, groups, MNL_SOCKET_AUTOPID) == 0) return true;
  if (err) *err = std::string("netlink: ") + std::strerror(errno);
  if (nl_) mnl_socket_close(nl_);
  nl_ = nullptr;
  return false;
}

int Socket::fd() const {
  return nl_ ? mnl_socket_get_fd(nl_) : -1;
}

uint32_t Socket::portid() const {
  return nl_ ? mnl_socket_get_portid(nl_) : 0;
}

int request(nlmsghdr* nlh, mnl_cb_t cb, void* data) {
  Socket s;
  if (!s.open(0, false, nullptr)) return -1;
  timeval tv{1, 0};  // a kernel that never answers must not hang the caller
  setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const uint32_t seq = static_cast<uint32_t>(time(nullptr));
  nlh->nlmsg_seq = seq;
  if (mnl_socket_sendto(s.get(), nlh, nlh->nlmsg_len) < 0) return -1;
  std::vector<char> buf(kReceiveSize);
  int ret = MNL_CB_OK;
  while (ret > MNL_CB_STOP) {
    const ssize_t n = mnl_socket_recvfrom(s.get(), buf.data(), buf.size());
    if (n < 0) return -1;
    ret = mnl_cb_run(buf.data(), static_cast<size_t>(n), seq, s.portid(), cb, data);
    // A request without NLM_F_DUMP/ACK is answered by one message: done after it.
    if (ret >= MNL_CB_STOP && !(nlh->nlmsg_flags & (NLM_F_DUMP | NLM_F_ACK))) break;
  }
  return ret;
}

}  // namespace urxe::hostnet::netlink
