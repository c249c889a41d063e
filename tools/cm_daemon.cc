#include "tools/cm_daemon.h"

#include <endian.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cm/protocol.h"
#include "cm/service.h"
#include "dpdk/socket_port.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/monitor.h"
#include "hostnet/neighbour.h"
#include "provider/ports.h"
#include "provider/device_tree.h"
#include "provider/stats.h"
#include "wire/mad.h"
#include "wire/packet.h"

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

// Kernel rxe's UDP source port for QP1: RXE_ROCE_V2_SPORT + (hash_32(qpn, 14) & 0x3fff) with qpn 1, as the
// rxe CM frames in pcap-fixtures/ show; peers see the same 5-tuple as from a kernel rxe.
constexpr uint16_t kQp1SourcePort = 0xd872;
constexpr uint8_t kUdSendOnly = 0x64;
constexpr uint32_t kRxBurst = 32;
constexpr int kClientBacklog = 128;

enum class Tag : uint32_t { listen, signal, timer, tick, monitor, port, client };
uint64_t tag(Tag t, uint32_t v = 0) {
  return (static_cast<uint64_t>(t) << 32) | v;
}

void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log(const char* fmt, ...) {
  char when[32];
  const time_t t = time(nullptr);
  tm tmv;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tmv));
  std::fprintf(stderr, "%s urxe cm[%d]: ", when, static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Why a frame that reached QP1's filter was not a CM MAD the service could take.
struct RxDrops {
  uint64_t parse = 0;   // does not parse as RoCEv2 (length, checksum, version, opcode)
  uint64_t icrc = 0;    // bad ICRC
  uint64_t opcode = 0;  // not a UD SEND_ONLY with a DETH to QP 1
  uint64_t qkey = 0;    // Q_Key is not the GSI's
  uint64_t length = 0;  // payload is not one 256-byte MAD
};

struct TxCounts {
  uint64_t frames = 0;
  uint64_t dropped = 0;  // no port, no buffer, or the port refused it
};

// One urxe device of this namespace. Its position in the daemon's list is its CmDevice::index and stays
// while the daemon runs: a device that goes keeps its slot (down, no GIDs, no port) for when it comes back.
struct DeviceSlot {
  cm::CmDevice dev;
  std::string netdev;
  bool present = false;
  prov::DeviceConfig config;
  std::unique_ptr<dpdk::SocketPort> port;
  // The device's live capture (urxe link add --pcap, $URXE_PCAP) around the port, as every process of the
  // device has one: the CM MADs land in the same directory as the apps' frames. nullptr when off.
  std::unique_ptr<engine::Port> capture;
  engine::Port& io() { return capture ? *capture : *port; }
  std::string port_error;
  uint32_t psn = 0;  // of the next MAD sent from QP1
  std::string ibdev_path;
  prov::CmCounterTable mirrored{};  // what ports/1/cm_* last showed
  bool mirror_failed = false, mirror_done = false;
};

struct Client {
  int fd = -1;
  int efd = -1;  // the channel's eventfd (the application's fd); -1 before Hello
  cm::ChannelId ch = 0;
  cm::ChannelOwner owner;
  bool status = false;  // a `urxe cm show` client: out is written, then the connection closed
  std::string out;
};

bool same_device(const cm::CmDevice& a, const cm::CmDevice& b) {
  return a.index == b.index && a.name == b.name && a.node_guid == b.node_guid && a.mac == b.mac &&
         a.ifindex == b.ifindex && a.mtu == b.mtu && a.gids == b.gids && a.up == b.up;
}

class Daemon final : public cm::CmHost, public hostnet::MonitorSink {
 public:
  explicit Daemon(const CmDaemonConfig& cfg) : cfg_(cfg), paths_{cfg.run_dir} {}
  ~Daemon() override;
  int run();

  // CmHost
  uint64_t now_ns() override { return monotonic_ns(); }
  void event_queued(cm::ChannelId ch) override;
  void events_dequeued(cm::ChannelId ch, uint32_t n) override;
  void send_mad(const cm::MadOut& m) override;
  cm::RouteResult lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex,
                               bool trigger) override;
  int local_address_ifindex(const wire::Gid& addr) override { return hostnet::address_ifindex(addr); }

  // MonitorSink: any link or address change may change a device's MAC, MTU, state or GIDs.
  void on_link(const hostnet::LinkChange&) override { rescan_ = true; }
  void on_address(const hostnet::AddressChange&) override { rescan_ = true; }
  void on_lost() override { rescan_ = true; }

 private:
  bool setup();
  void add_fd(int fd, uint64_t t, uint32_t events = EPOLLIN);
  void rescan();
  void open_port(DeviceSlot& s);
  void poll_port(uint32_t slot);
  void mirror_counters();
  void port_error(uint32_t slot);
  void handle_frame(uint32_t slot, const uint8_t* data, uint32_t len);
  void accept_clients();
  void client_readable(int fd);
  void client_writable(int fd);
  bool client_hello(Client& c, const uint8_t* msg, size_t n);
  bool client_request(Client& c, const uint8_t* msg, size_t n);
  void drop_client(int fd);
  void arm_timer();
  bool idle_expired();
  std::string status_text() const;

  CmDaemonConfig cfg_;
  prov::Paths paths_;
  std::unique_ptr<cm::CmService> service_;
  int ep_ = -1, sig_ = -1, timer_ = -1, tick_ = -1;
  hostnet::Monitor monitor_;
  bool monitor_ok_ = false;
  bool rescan_ = false;
  bool stop_ = false;
  uint64_t armed_ = UINT64_MAX;  // deadline the timerfd holds (UINT64_MAX = disarmed)
  uint64_t last_busy_ns_ = 0;
  std::vector<DeviceSlot> slots_;
  std::map<int, Client> clients_;
  std::map<cm::ChannelId, int> channels_;  // channel -> client fd
  RxDrops drops_;
  TxCounts tx_;
  uint64_t rx_mads_ = 0;
  uint16_t ip_id_ = 0;
};

Daemon::~Daemon() {
  for (auto& [fd, c] : clients_) {
    if (c.efd >= 0) close(c.efd);
    close(fd);
  }
  for (int fd : {ep_, sig_, timer_, tick_})
    if (fd >= 0) close(fd);
}

void Daemon::add_fd(int fd, uint64_t t, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = t;
  if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) < 0) log("epoll_ctl(ADD %d): %s", fd, std::strerror(errno));
}

bool Daemon::setup() {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sig_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  timer_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  tick_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (ep_ < 0 || sig_ < 0 || timer_ < 0 || tick_ < 0) {
    log("epoll/signalfd/timerfd: %s", std::strerror(errno));
    return false;
  }
  add_fd(cfg_.listen_fd, tag(Tag::listen));
  add_fd(sig_, tag(Tag::signal));
  add_fd(timer_, tag(Tag::timer));
  add_fd(tick_, tag(Tag::tick));
  const itimerspec second{{1, 0}, {1, 0}};
  timerfd_settime(tick_, 0, &second, nullptr);
  std::string err;
  monitor_ok_ = monitor_.open(true, &err);
  if (monitor_ok_)
    add_fd(monitor_.fd(), tag(Tag::monitor));
  else
    log("no rtnetlink monitor (%s): devices are rescanned every second only", err.c_str());
  return true;
}

void Daemon::open_port(DeviceSlot& s) {
  s.capture.reset();
  s.port.reset();
  dpdk::SocketPortConfig pc;
  pc.ifname = s.netdev;
  pc.ring_frames = 64;
  pc.rx_ring_bytes = 1u << 20;
  pc.gids = s.dev.gids;  // only its attr(); given so that it does not build the table again
  std::string err;
  s.port = dpdk::SocketPort::open(pc, &err);
  if (s.port && !s.port->set_rx_qpn_range(wire::kQp1, wire::kQp1 + 1)) {
    err = "cannot filter on QP1";
    s.port.reset();
  }
  if (!s.port) {
    if (err != s.port_error) log("%s: no port on %s: %s", s.dev.name.c_str(), s.netdev.c_str(), err.c_str());
    s.port_error = err;
    return;
  }
  s.port_error.clear();
  s.capture = prov::open_capture(*s.port, s.config);
  add_fd(s.port->rx_wait_fd(), tag(Tag::port, s.dev.index));
}

// The urxe devices of this run directory whose interface is in this namespace, as the provider sees them:
// the node GUID it reports, the GID table it uses (sync_gid_table, so sgid_index agrees).
void Daemon::rescan() {
  rescan_ = false;
  std::vector<bool> seen(slots_.size(), false);
  bool changed = false;
  for (prov::DeviceInfo& d : prov::list_devices(paths_)) {
    if (d.other_netns || !d.netdev_present) continue;
    prov::NetdevInfo nd;
    if (!prov::query_netdev(d.config.netdev, nd)) continue;
    std::vector<prov::GidEntry> table;
    std::string err;
    prov::sync_gid_table(d.ibdev_path, d.config, table, err);  // EACCES still yields the table
    cm::CmDevice dev;
    dev.name = d.config.name;
    dev.node_guid = hostnet::eui64(nd.mac);  // as the provider derives it (the node_guid file)
    dev.mac = nd.mac;
    dev.ifindex = nd.ifindex;
    dev.mtu = d.config.mtu && d.config.mtu < nd.mtu ? d.config.mtu : nd.mtu;
    dev.gids.assign(d.config.gid_tbl_len, wire::Gid{});
    for (size_t i = 0; i < table.size() && i < dev.gids.size(); ++i)
      if (!table[i].ndev.empty()) dev.gids[i] = table[i].gid;
    dev.up = nd.up;
    size_t i = 0;
    while (i < slots_.size() && slots_[i].dev.name != dev.name) ++i;
    if (i == slots_.size()) {
      slots_.emplace_back();
      seen.push_back(false);
    }
    DeviceSlot& s = slots_[i];
    seen[i] = true;
    dev.index = static_cast<uint32_t>(i);
    // A port that could not be opened is tried again every rescan (its error is logged once).
    const bool reopen = !s.present || !s.port || s.netdev != d.config.netdev ||
                        s.dev.ifindex != dev.ifindex || s.dev.mac != dev.mac;
    if (!s.present || !same_device(s.dev, dev)) changed = true;
    if (!s.present)
      log("device %s on %s (ifindex %d)", dev.name.c_str(), d.config.netdev.c_str(), dev.ifindex);
    s.dev = std::move(dev);
    s.netdev = d.config.netdev;
    s.config = d.config;
    s.ibdev_path = d.ibdev_path;
    s.present = true;
    if (reopen) open_port(s);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    DeviceSlot& s = slots_[i];
    if (seen[i] || !s.present) continue;
    log("device %s gone", s.dev.name.c_str());
    s.present = false;
    s.capture.reset();
    s.port.reset();
    s.port_error.clear();
    s.dev.up = false;
    s.dev.ifindex = 0;
    s.dev.gids.clear();
    changed = true;
  }
  if (!changed) return;
  std::vector<cm::CmDevice> devs;
  for (const DeviceSlot& s : slots_) devs.push_back(s.dev);
  service_->set_devices(std::move(devs));
}

// Each device's CM counters into its tree, where the kernel has them (ports/1/cm_tx_msgs/ ...), once a second
// when they changed: `urxe stats` and sysfs readers see them.
void Daemon::mirror_counters() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    DeviceSlot& s = slots_[i];
    if (!s.present || s.ibdev_path.empty()) continue;
    const cm::CmService::Counters k = service_->device_counters(static_cast<uint32_t>(i));
    prov::CmCounterTable t{};
    for (size_t m = 0; m < t[0].size(); ++m) {
      t[0][m] = k.tx[m];
      t[1][m] = k.rx[m];
      t[2][m] = k.tx_retries[m];
      t[3][m] = k.rx_duplicates[m];
    }
    if (s.mirror_done && t == s.mirrored) continue;
    std::string err;
    if (prov::write_cm_counters(s.ibdev_path, t, err)) {
      s.mirrored = t;
      s.mirror_done = true;
    } else if (!s.mirror_failed) {
      log("%s: cannot write its CM counters: %s", s.dev.name.c_str(), err.c_str());
      s.mirror_failed = true;
    }
  }
}

void Daemon::poll_port(uint32_t slot) {
  DeviceSlot& s = slots_[slot];
  if (!s.port) return;
  engine::PacketBuf bufs[kRxBurst];
  for (;;) {
    const uint32_t n = s.io().rx_burst(bufs, kRxBurst);
    for (uint32_t i = 0; i < n; ++i) handle_frame(slot, bufs[i].data, bufs[i].len);
    if (s.port) s.io().rx_free(bufs, n);
    if (n < kRxBurst || !s.port) return;
  }
}

// The kernel flags a packet socket ENETDOWN when its interface goes down (it is hooked in again when the
// interface comes back up). The flag stays set, and the fd in POLLERR, until read: read it so the loop does
// not spin while the link is down.
void Daemon::port_error(uint32_t slot) {
  DeviceSlot& s = slots_[slot];
  if (!s.port) return;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(s.port->rx_wait_fd(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
    log("%s: port on %s: %s", s.dev.name.c_str(), s.netdev.c_str(), std::strerror(err));
}

void Daemon::handle_frame(uint32_t slot, const uint8_t* data, uint32_t len) {
  cm::MadIn m;
  switch (parse_qp1_frame(wire::ByteSpan(data, len), m)) {
    case Qp1Rx::mad:
      m.device = slot;
      ++rx_mads_;
      service_->on_mad(m);
      return;
    case Qp1Rx::parse:
      ++drops_.parse;
      return;
    case Qp1Rx::icrc:
      ++drops_.icrc;
      return;
    case Qp1Rx::opcode:
      ++drops_.opcode;
      return;
    case Qp1Rx::qkey:
      ++drops_.qkey;
      return;
    case Qp1Rx::length:
      ++drops_.length;
      return;
  }
}

void Daemon::send_mad(const cm::MadOut& m) {
  if (m.device >= slots_.size() || !slots_[m.device].port) {
    ++tx_.dropped;
    return;
  }
  DeviceSlot& s = slots_[m.device];
  engine::PacketBuf b;
  if (!s.io().tx_alloc(kQp1FrameMax, b)) {
    ++tx_.dropped;
    return;
  }
  // A frame to our own MAC (the peer is on this device) goes through the port's LoopbackSender.
  b.len = build_qp1_frame(m, s.dev.mac, s.psn, ip_id_++, wire::MutByteSpan(b.data, kQp1FrameMax));
  if (b.len == 0 || s.io().tx_burst(&b, 1) != 1) {
    s.io().tx_free(b);
    ++tx_.dropped;
    return;
  }
  s.psn = (s.psn + 1) & 0xffffff;
  ++tx_.frames;
}

cm::RouteResult Daemon::lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex, bool trigger) {
  std::vector<cm::CmDevice> devs;
  devs.reserve(slots_.size());
  for (const DeviceSlot& s : slots_) devs.push_back(s.dev);
  return lookup_cm_route(devs, dst, src, ifindex, trigger);
}

void Daemon::event_queued(cm::ChannelId ch) {
  auto it = channels_.find(ch);
  if (it == channels_.end()) return;
  const uint64_t one = 1;
  if (write(clients_[it->second].efd, &one, sizeof one) != sizeof one)
    log("eventfd write: %s", std::strerror(errno));
}

void Daemon::events_dequeued(cm::ChannelId ch, uint32_t n) {
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

void Daemon::accept_clients() {
  for (;;) {
    const int fd = accept4(cfg_.listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        log("accept: %s", std::strerror(errno));
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
    add_fd(fd, tag(Tag::client, static_cast<uint32_t>(fd)));
  }
}

bool Daemon::client_hello(Client& c, const uint8_t* msg, size_t n) {
  cm::Hello h;
  if (n != sizeof h) return false;
  std::memcpy(&h, msg, sizeof h);
  if (h.magic == cm::kStatusMagic && h.version == cm::kProtoVersion) {
    c.status = true;
    c.out = status_text();
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = tag(Tag::client, static_cast<uint32_t>(c.fd));
    epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    return true;
  }
  if (h.magic != cm::kProtoMagic || h.version != cm::kProtoVersion) return false;
  cm::HelloReply r;
  // Not EFD_NONBLOCK: this is the application's fd, and the shim reads its O_NONBLOCK flag as the
  // application's choice.
  const int efd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (efd < 0) {
    r.err = errno;
    send(c.fd, &r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT);
    return false;
  }
  c.ch = service_->open_channel(c.owner);
  c.efd = efd;
  channels_[c.ch] = c.fd;
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

bool Daemon::client_request(Client& c, const uint8_t* msg, size_t n) {
  cm::Request q;
  if (n < sizeof q) return false;
  std::memcpy(&q, msg, sizeof q);
  if (static_cast<uint64_t>(q.cmd_len) + q.extra_len != n - sizeof q) return false;
  const uint8_t* body = msg + sizeof q;
  cm::CommandResult res = service_->command(c.ch, std::span<const uint8_t>(body, q.cmd_len),
                                            std::span<const uint8_t>(body + q.cmd_len, q.extra_len));
  cm::Reply r;
  r.seq = q.seq;
  r.err = res.err;
  r.out_len = static_cast<uint32_t>(res.out.size());
  if (sizeof r + res.out.size() > cm::kMaxMessage) return false;
  uint8_t buf[cm::kMaxMessage];
  std::memcpy(buf, &r, sizeof r);
  if (!res.out.empty()) std::memcpy(buf + sizeof r, res.out.data(), res.out.size());
  // One request at a time: the socket's buffer always has room for the reply, so a failure means the
  // client is gone or misbehaving.
  return send(c.fd, buf, sizeof r + res.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(sizeof r + res.out.size());
}

void Daemon::client_readable(int fd) {
  for (;;) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = it->second;
    uint8_t buf[cm::kMaxMessage];
    iovec iov{buf, sizeof buf};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    const ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    // Hang-up, error, an oversized message or one with descriptors attached: the connection ends.
    bool ok = n > 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
    if (ok && c.status) return;  // a status client has nothing more to say
    if (ok)
      ok = c.efd < 0 ? client_hello(c, buf, static_cast<size_t>(n))
                     : client_request(c, buf, static_cast<size_t>(n));
    if (!ok) {
      drop_client(fd);
      return;
    }
    if (c.status) return;
  }
}

void Daemon::client_writable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = it->second;
  while (!c.out.empty()) {
    // Messages of at most kMaxMessage bytes, each ending at a line end.
    size_t len = c.out.size();
    if (len > cm::kMaxMessage) {
      len = c.out.rfind('\n', cm::kMaxMessage - 1);
      len = len == std::string::npos ? cm::kMaxMessage : len + 1;
    }
    const ssize_t n = send(fd, c.out.data(), len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) break;
    c.out.erase(0, static_cast<size_t>(n));
  }
  drop_client(fd);
}

void Daemon::drop_client(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
  if (it->second.ch) {
    service_->close_channel(it->second.ch);
    channels_.erase(it->second.ch);
  }
  if (it->second.efd >= 0) close(it->second.efd);
  close(fd);
  clients_.erase(it);
  last_busy_ns_ = monotonic_ns();
}

void Daemon::arm_timer() {
  const uint64_t d = service_->next_deadline_ns();
  if (d == armed_) return;
  armed_ = d;
  itimerspec its{};  // all zero: disarmed
  if (d != UINT64_MAX) {
    // A deadline already past fires at once; 0 itself would disarm, so it becomes 1 ns.
    const uint64_t at = d ? d : 1;
    its.it_value.tv_sec = static_cast<time_t>(at / 1000000000u);
    its.it_value.tv_nsec = static_cast<long>(at % 1000000000u);
  }
  timerfd_settime(timer_, TFD_TIMER_ABSTIME, &its, nullptr);
}

bool Daemon::idle_expired() {
  const uint64_t now = monotonic_ns();
  if (!clients_.empty() || !service_->describe_ids().empty()) {
    last_busy_ns_ = now;
    return false;
  }
  return cfg_.idle_exit_s && now - last_busy_ns_ >= cfg_.idle_exit_s * 1000000000ull;
}

std::string Daemon::status_text() const {
  std::string o;
  char line[512];
  auto add = [&](const char* fmt, auto... a) {
    std::snprintf(line, sizeof line, fmt, a...);
    o += line;
  };
  size_t channels = 0;
  for (const auto& [fd, c] : clients_) channels += c.ch != 0;
  add("CM service pid %d, netns %s, run dir %s, %zu channel%s\n", static_cast<int>(getpid()),
      cfg_.netns.c_str(), cfg_.run_dir.c_str(), channels, channels == 1 ? "" : "s");
  o += "devices:\n";
  size_t shown = 0;
  for (const DeviceSlot& s : slots_) {
    if (!s.present) continue;
    size_t gids = 0;
    for (const wire::Gid& g : s.dev.gids) gids += g != wire::Gid{};
    add("  %s  netdev %s ifindex %d mtu %u %s, %zu GIDs, node_guid %s%s%s\n", s.dev.name.c_str(),
        s.netdev.c_str(), s.dev.ifindex, s.dev.mtu, s.dev.up ? "up" : "down", gids,
        hostnet::format_guid(s.dev.node_guid).c_str(),
        s.port ? "" : ", no port: ", s.port ? "" : s.port_error.c_str());
    ++shown;
  }
  if (!shown) o += "  (none)\n";
  const std::vector<std::string> ids = service_->describe_ids();
  add("ids: %zu\n", ids.size());
  for (const std::string& s : ids) o += "  " + s + "\n";
  const cm::CmService::Counters& k = service_->counters();
  o += "MADs:         sent   received\n";
  for (uint16_t a = 0x10; a <= 0x18; ++a)
    add("  %-8s %8llu %10llu\n", std::string(wire::cm_attr_name(a)).c_str(),
        static_cast<unsigned long long>(k.tx[a - 0x10]), static_cast<unsigned long long>(k.rx[a - 0x10]));
  auto counter = [&](const char* name, uint64_t v) {
    add("  %-16s %llu\n", name, static_cast<unsigned long long>(v));
  };
  o += "counters:\n";
  counter("retries", k.retries());
  counter("duplicates", k.duplicates());
  counter("rx_mads", rx_mads_);
  counter("rx_dropped", k.rx_dropped);
  counter("rx_drop_parse", drops_.parse);
  counter("rx_drop_icrc", drops_.icrc);
  counter("rx_drop_opcode", drops_.opcode);
  counter("rx_drop_qkey", drops_.qkey);
  counter("rx_drop_length", drops_.length);
  counter("tx_frames", tx_.frames);
  counter("tx_dropped", tx_.dropped);
  return o;
}

int Daemon::run() {
  service_ = cfg_.make_service ? cfg_.make_service(*this) : cm::CmService::create(*this);
  if (!setup()) return 1;
  last_busy_ns_ = monotonic_ns();
  rescan();
  if (slots_.empty()) log("no urxe device in this namespace yet (looking every second)");
  log("listening (netns %s, run dir %s)", cfg_.netns.c_str(), cfg_.run_dir.c_str());
  epoll_event evs[32];
  while (!stop_) {
    arm_timer();
    const int n = epoll_wait(ep_, evs, 32, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log("epoll_wait: %s", std::strerror(errno));
      return 1;
    }
    for (int i = 0; i < n && !stop_; ++i) {
      const auto t = static_cast<Tag>(evs[i].data.u64 >> 32);
      const auto v = static_cast<uint32_t>(evs[i].data.u64);
      uint64_t ticks;
      switch (t) {
        case Tag::listen:
          accept_clients();
          break;
        case Tag::signal: {
          signalfd_siginfo si;
          if (read(sig_, &si, sizeof si) == sizeof si) {
            log("signal %u: exiting", si.ssi_signo);
            stop_ = true;
          }
          break;
        }
        case Tag::timer:
          if (read(timer_, &ticks, sizeof ticks) < 0) { /* spurious wakeup: the deadline is checked anyway */
          }
          armed_ = UINT64_MAX;
          if (service_->next_deadline_ns() <= monotonic_ns()) service_->on_timer();
          break;
        case Tag::tick:
          if (read(tick_, &ticks, sizeof ticks) < 0) { /* as above */
          }
          rescan();
          mirror_counters();
          if (idle_expired()) {
            log("idle for %u s: exiting", cfg_.idle_exit_s);
            stop_ = true;
          }
          break;
        case Tag::monitor:
          if (monitor_.drain(*this) < 0) log("rtnetlink monitor: %s", std::strerror(errno));
          if (rescan_) rescan();
          break;
        case Tag::port:
          if (v < slots_.size() && (evs[i].events & EPOLLERR)) port_error(v);
          if (v < slots_.size()) poll_port(v);
          break;
        case Tag::client:
          if (evs[i].events & EPOLLOUT)
            client_writable(static_cast<int>(v));
          else
            client_readable(static_cast<int>(v));
          break;
      }
    }
  }
  return 0;
}

}  // namespace

Qp1Rx parse_qp1_frame(wire::ByteSpan frame, cm::MadIn& m) {
  wire::Packet p;
  const wire::ParseError e = wire::parse_frame(frame, p);
  if (e == wire::ParseError::bad_icrc) return Qp1Rx::icrc;
  if (e != wire::ParseError::ok) return Qp1Rx::parse;
  if (p.bth.opcode != kUdSendOnly || p.bth.dqpn != wire::kQp1 || !(p.present & wire::kDeth))
    return Qp1Rx::opcode;
  if (p.deth.qkey != wire::kQp1Qkey) return Qp1Rx::qkey;
  if (p.payload_len != wire::kMadSize) return Qp1Rx::length;
  m.sgid = p.src_gid();
  m.dgid = p.dst_gid();
  m.smac = p.eth.src;
  m.traffic_class = p.ip_version == 4 ? p.ip4.tos : p.ip6.traffic_class;
  m.hop_limit = p.ip_version == 4 ? p.ip4.ttl : p.ip6.hop_limit;
  m.src_qp = p.deth.src_qp;
  m.pkey = p.bth.pkey;
  m.mad = p.payload;
  return Qp1Rx::mad;
}

uint32_t build_qp1_frame(const cm::MadOut& m, const wire::MacAddr& src_mac, uint32_t psn, uint16_t ip_id,
                         wire::MutByteSpan out) {
  wire::FrameSpec f;
  f.dst_mac = m.dmac;
  f.src_mac = src_mac;
  f.ip_version = wire::gid_is_ipv4_mapped(m.dgid) ? 4 : 6;
  f.src_ip = m.sgid;
  f.dst_ip = m.dgid;
  f.traffic_class = m.traffic_class;
  f.ttl = m.hop_limit;
  f.ip_id = ip_id;
  f.flow_label = m.flow_label;
  f.udp_sport = kQp1SourcePort;
  f.bth.opcode = kUdSendOnly;
  f.bth.pkey = 0xffff;
  f.bth.dqpn = m.dest_qp;
  f.bth.psn = psn & 0xffffff;
  f.bth.ack_req = true;  // rxe sets AckReq on the last packet of every message, UD's too
  f.deth.qkey = wire::kQp1Qkey;
  f.deth.src_qp = wire::kQp1;
  return wire::build_frame(out, f, wire::ByteSpan(m.mad.data(), m.mad.size()));
}

cm::RouteResult lookup_cm_route(const std::vector<cm::CmDevice>& devs, const wire::Gid& dst,
                                const wire::Gid& src, int ifindex, bool trigger) {
  cm::RouteResult r;
  const hostnet::Route rt = hostnet::lookup_route(dst, src, ifindex);
  if (!rt.ok) return r;
  // A local destination's route leaves through lo: the device is the one holding the address.
  const int oif = rt.local ? (ifindex > 0 ? ifindex : hostnet::address_ifindex(dst)) : rt.ifindex;
  const cm::CmDevice* dev = nullptr;
  for (const cm::CmDevice& d : devs)
    if (oif > 0 && d.ifindex == oif) dev = &d;
  if (!dev) {
    r.state = cm::RouteResult::State::not_urxe;
    return r;
  }
  r.device = dev->index;
  r.src = rt.src;
  if (rt.local) {  // the frames loop back through the device's own MAC
    r.dmac = dev->mac;
    r.state = cm::RouteResult::State::resolved;
    return r;
  }
  const hostnet::NeighResult n = hostnet::lookup_neighbor(rt.next_hop, oif, trigger);
  switch (n.state) {
    case hostnet::NeighState::resolved:
      r.dmac = n.mac;
      r.state = cm::RouteResult::State::resolved;
      break;
    case hostnet::NeighState::pending:
      r.state = cm::RouteResult::State::pending;
      break;
    case hostnet::NeighState::unreachable:
      r.state = cm::RouteResult::State::unreachable;
      break;
  }
  return r;
}

int run_cm_daemon(const CmDaemonConfig& cfg) {
  Daemon d(cfg);
  return d.run();
}

}  // namespace urxe::tools
