#include "cm/service/clients.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cm/protocol.h"

namespace urxe::cm {

ClientSockets::~ClientSockets() {
  for (auto& [fd, c] : clients_) {
    if (c.efd >= 0) close(c.efd);
    close(fd);
  }
}

size_t ClientSockets::channels() const {
  size_t n = 0;
  for (const auto& [fd, c] : clients_) n += c.ch != 0;
  return n;
}

void ClientSockets::accept_all(int listen_fd) {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        service_log("accept: %s", std::strerror(errno));
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    Client c;
    c.fd = fd;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      c.owner.pid = cred.pid;
      c.owner.uid = cred.uid;
    }
    clients_[fd] = std::move(c);
    ep_.add(fd, loop_tag(LoopTag::client, static_cast<uint32_t>(fd)));
  }
}

void ClientSockets::on_event(int fd, uint32_t epoll_events) {
  if (epoll_events & EPOLLOUT)
    writable(fd);
  else
    readable(fd);
}

void ClientSockets::event_queued(ChannelId ch) {
  auto it = channels_.find(ch);
  if (it == channels_.end()) return;
  const uint64_t one = 1;
  if (write(clients_[it->second].efd, &one, sizeof one) != sizeof one)
    service_log("eventfd write: %s", std::strerror(errno));
}

void ClientSockets::events_dequeued(ChannelId ch, uint32_t n) {
  auto it = channels_.find(ch);
  if (it == channels_.end()) return;
  const int efd = clients_[it->second].efd;
  // The count equals the queue length, so these reads find it non-zero; the poll makes sure a read can
  // never block the loop should an application have read the eventfd itself.
  for (uint32_t i = 0; i < n; ++i) {
    pollfd pfd{efd, POLLIN, 0};
    uint64_t v;
    if (poll(&pfd, 1, 0) != 1 || read(efd, &v, sizeof v) != sizeof v) break;
  }
}

bool ClientSockets::hello(Client& c, const uint8_t* msg, size_t n) {
  Hello h;
  if (n != sizeof h) return false;
  std::memcpy(&h, msg, sizeof h);
  if (h.magic == kStatusMagic && h.version == kProtoVersion) {
    c.status = true;
    c.out = status_text_();
    ep_.modify(c.fd, loop_tag(LoopTag::client, static_cast<uint32_t>(c.fd)), EPOLLOUT);
    return true;
  }
  if (h.magic != kProtoMagic || h.version != kProtoVersion) return false;
  // Not EFD_NONBLOCK: this is the application's fd, and the shim reads its O_NONBLOCK flag as the
  // application's choice.
  const int efd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (efd < 0) {
    HelloReply r;
    r.err = errno;
    send(c.fd, &r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT);
    return false;
  }
  c.ch = service_.open_channel(c.owner);
  c.efd = efd;
  channels_[c.ch] = c.fd;
  return send_channel(c, efd);
}

// The HelloReply with the channel's token, the eventfd attached (SCM_RIGHTS).
bool ClientSockets::send_channel(Client& c, int efd) {
  HelloReply r;
  r.channel_token = c.ch;
  iovec iov{&r, sizeof r};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl;
  mh.msg_controllen = sizeof ctl;
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &efd, sizeof efd);
  return sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof r);
}

bool ClientSockets::request(Client& c, const uint8_t* msg, size_t n) {
  Request q;
  if (n < sizeof q) return false;
  std::memcpy(&q, msg, sizeof q);
  if (static_cast<uint64_t>(q.cmd_len) + q.extra_len != n - sizeof q) return false;
  const uint8_t* body = msg + sizeof q;
  CommandResult res = service_.command(c.ch, std::span<const uint8_t>(body, q.cmd_len),
                                       std::span<const uint8_t>(body + q.cmd_len, q.extra_len));
  Reply r;
  r.seq = q.seq;
  r.err = res.err;
  r.out_len = static_cast<uint32_t>(res.out.size());
  if (sizeof r + res.out.size() > kMaxMessage) return false;
  uint8_t buf[kMaxMessage];
  std::memcpy(buf, &r, sizeof r);
  if (!res.out.empty()) std::memcpy(buf + sizeof r, res.out.data(), res.out.size());
  // One request at a time: the socket's buffer always has room for the reply, so a failure means the
  // client is gone or misbehaving.
  return send(c.fd, buf, sizeof r + res.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(sizeof r + res.out.size());
}

void ClientSockets::readable(int fd) {
  for (;;) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = it->second;
    uint8_t buf[kMaxMessage];
    iovec iov{buf, sizeof buf};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    const ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    // Hang-up, error, an oversized message or one with descriptors attached: the connection ends.
    bool ok = n > 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
    if (ok && c.status) return;  // a status client has nothing more to say
    if (ok) ok = c.efd < 0 ? hello(c, buf, static_cast<size_t>(n)) : request(c, buf, static_cast<size_t>(n));
    if (!ok) {
      drop(fd);
      return;
    }
    if (c.status) return;
  }
}

void ClientSockets::writable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = it->second;
  while (!c.out.empty()) {
    // Messages of at most kMaxMessage bytes, each ending at a line end.
    size_t len = c.out.size();
    if (len > kMaxMessage) {
      len = c.out.rfind('\n', kMaxMessage - 1);
      len = len == std::string::npos ? kMaxMessage : len + 1;
    }
    const ssize_t n = send(fd, c.out.data(), len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) break;
    c.out.erase(0, static_cast<size_t>(n));
  }
  drop(fd);
}

void ClientSockets::drop(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  ep_.remove(fd);
  if (it->second.ch) {
    service_.close_channel(it->second.ch);
    channels_.erase(it->second.ch);
  }
  if (it->second.efd >= 0) close(it->second.efd);
  close(fd);
  clients_.erase(it);
  last_drop_ns_ = monotonic_ns();
}

}  // namespace urxe::cm
