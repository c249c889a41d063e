#include "cm/service/service_loop.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "cm/service/clients.h"
#include "cm/service/common.h"
#include "cm/service/qp1_devices.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/monitor.h"
#include "hostnet/multicast.h"
#include "wire/mad.h"

namespace urxe::cm {
namespace {

class ServiceLoop final : public CmHost, public hostnet::MonitorSink {
 public:
  ServiceLoop(const CmServiceConfig& cfg, CmPlatform& platform) : cfg_(cfg), platform_(platform) {}
  ~ServiceLoop() override;
  int run();

  // CmHost
  uint64_t now_ns() override { return monotonic_ns(); }
  void note(const std::string& line) override { service_log("%s", line.c_str()); }
  void event_queued(ChannelId ch) override { clients_->event_queued(ch); }
  void events_dequeued(ChannelId ch, uint32_t n) override { clients_->events_dequeued(ch, n); }
  void send_mad(const MadOut& m) override { devices_->send_mad(m); }
  RouteResult lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex, bool trigger) override {
    return devices_->lookup_route(dst, src, ifindex, trigger);
  }
  int local_address_ifindex(const wire::Gid& addr) override { return hostnet::address_ifindex(addr); }
  int ip_multicast(int ifindex, const wire::Gid& group, bool join) override {
    return join ? ip_groups_.join(ifindex, group) : ip_groups_.leave(ifindex, group);
  }

  // MonitorSink: any link or address change may change a device's MAC, MTU, state or GIDs.
  void on_link(const hostnet::LinkChange&) override { rescan_ = true; }
  void on_address(const hostnet::AddressChange&) override { rescan_ = true; }
  void on_lost() override { rescan_ = true; }

 private:
  bool setup();
  void rescan();
  void dispatch(const epoll_event& ev);
  void on_timer();
  void on_tick();
  void arm_timer();
  bool idle_expired();
  std::string status_text() const;
  void status_counters(std::string& o) const;

  CmServiceConfig cfg_;
  CmPlatform& platform_;
  hostnet::IpMulticast ip_groups_;  // the RDMA CM joins' IP-level memberships
  std::unique_ptr<CmService> service_;
  LoopEpoll ep_;
  int sig_ = -1, timer_ = -1, tick_ = -1;
  hostnet::Monitor monitor_;
  bool monitor_ok_ = false;
  bool rescan_ = false;
  bool stop_ = false;
  uint64_t armed_ = UINT64_MAX;  // deadline the timerfd holds (UINT64_MAX = disarmed)
  uint64_t last_busy_ns_ = 0;
  std::optional<Qp1Devices> devices_;
  std::optional<ClientSockets> clients_;
};

ServiceLoop::~ServiceLoop() {
  clients_.reset();
  for (int fd : {sig_, timer_, tick_})
    if (fd >= 0) close(fd);
}

bool ServiceLoop::setup() {
  ep_.open();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sig_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  timer_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  tick_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (ep_.fd() < 0 || sig_ < 0 || timer_ < 0 || tick_ < 0) {
    service_log("epoll/signalfd/timerfd: %s", std::strerror(errno));
    return false;
  }
  ep_.add(cfg_.listen_fd, loop_tag(LoopTag::listen));
  ep_.add(sig_, loop_tag(LoopTag::signal));
  ep_.add(timer_, loop_tag(LoopTag::timer));
  ep_.add(tick_, loop_tag(LoopTag::tick));
  const itimerspec second{{1, 0}, {1, 0}};
  timerfd_settime(tick_, 0, &second, nullptr);
  std::string err;
  monitor_ok_ = monitor_.open(true, &err);
  if (monitor_ok_)
    ep_.add(monitor_.fd(), loop_tag(LoopTag::monitor));
  else
    service_log("no rtnetlink monitor (%s): devices are rescanned every second only", err.c_str());
  return true;
}

void ServiceLoop::rescan() {
  rescan_ = false;
  devices_->rescan();
}

// The timerfd holds the earliest of the core's deadline and a port's held frame (fault rules): otherwise
// the loop sleeps until a frame, a client or the tick.
void ServiceLoop::arm_timer() {
  const uint64_t d = std::min(service_->next_deadline_ns(), devices_->next_due_ns());
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

bool ServiceLoop::idle_expired() {
  const uint64_t now = monotonic_ns();
  if (!clients_->empty() || !service_->describe_ids().empty()) {
    last_busy_ns_ = now;
    return false;
  }
  if (clients_->last_drop_ns() > last_busy_ns_) last_busy_ns_ = clients_->last_drop_ns();
  return cfg_.idle_exit_s && now - last_busy_ns_ >= cfg_.idle_exit_s * 1000000000ull;
}

std::string ServiceLoop::status_text() const {
  std::string o;
  char line[512];
  auto add = [&](const char* fmt, auto... a) {
    std::snprintf(line, sizeof line, fmt, a...);
    o += line;
  };
  const size_t channels = clients_->channels();
  add("CM service pid %d, netns %s, run dir %s, %zu channel%s\n", static_cast<int>(getpid()),
      cfg_.netns.c_str(), cfg_.run_dir.c_str(), channels, channels == 1 ? "" : "s");
  o += "devices:\n";
  size_t shown = 0;
  for (const DeviceSlot& s : devices_->slots()) {
    if (!s.present) continue;
    const CmDevice& d = s.found.dev;
    size_t gids = 0;
    for (const wire::Gid& g : d.gids) gids += g != wire::Gid{};
    add("  %s  netdev %s ifindex %d mtu %u %s, %zu GIDs, node_guid %s%s%s\n", d.name.c_str(),
        s.found.netdev.c_str(), d.ifindex, d.mtu, d.up ? "up" : "down", gids,
        hostnet::format_guid(d.node_guid).c_str(),
        s.port ? "" : ", no port: ", s.port ? "" : s.port_error.c_str());
    ++shown;
  }
  if (!shown) o += "  (none)\n";
  const std::vector<std::string> ids = service_->describe_ids();
  add("ids: %zu\n", ids.size());
  for (const std::string& s : ids) o += "  " + s + "\n";
  status_counters(o);
  return o;
}

// The status text's MAD table and counters: the service's and QP1's.
void ServiceLoop::status_counters(std::string& o) const {
  char line[512];
  auto add = [&](const char* fmt, auto... a) {
    std::snprintf(line, sizeof line, fmt, a...);
    o += line;
  };
  const CmService::Counters& k = service_->counters();
  o += "MADs:         sent   received\n";
  for (uint16_t a = 0x10; a <= 0x18; ++a)
    add("  %-8s %8llu %10llu\n", std::string(wire::cm_attr_name(a)).c_str(),
        static_cast<unsigned long long>(k.tx[a - 0x10]), static_cast<unsigned long long>(k.rx[a - 0x10]));
  auto counter = [&](const char* name, uint64_t v) {
    add("  %-16s %llu\n", name, static_cast<unsigned long long>(v));
  };
  const Qp1Counts& q = devices_->counts();
  o += "counters:\n";
  counter("retries", k.retries());
  counter("duplicates", k.duplicates());
  counter("rx_mads", q.rx_mads);
  counter("rx_dropped", k.rx_dropped);
  counter("rx_drop_parse", q.drop_parse);
  counter("rx_drop_icrc", q.drop_icrc);
  counter("rx_drop_opcode", q.drop_opcode);
  counter("rx_drop_qkey", q.drop_qkey);
  counter("rx_drop_length", q.drop_length);
  counter("tx_frames", q.tx_frames);
  counter("tx_dropped", q.tx_dropped);
}

void ServiceLoop::on_timer() {
  uint64_t ticks;
  if (read(timer_, &ticks, sizeof ticks) < 0) { /* spurious wakeup: the deadline is checked anyway */
  }
  armed_ = UINT64_MAX;
  const uint64_t now = monotonic_ns();
  if (service_->next_deadline_ns() <= now) service_->on_timer();
  devices_->serve_due(now);
}

void ServiceLoop::on_tick() {
  uint64_t ticks;
  if (read(tick_, &ticks, sizeof ticks) < 0) { /* as above */
  }
  rescan();
  devices_->mirror_counters();
  if (idle_expired()) {
    service_log("idle for %u s: exiting", cfg_.idle_exit_s);
    stop_ = true;
  }
}

void ServiceLoop::dispatch(const epoll_event& ev) {
  const auto v = static_cast<uint32_t>(ev.data.u64);
  switch (static_cast<LoopTag>(ev.data.u64 >> 32)) {
    case LoopTag::listen:
      clients_->accept_all(cfg_.listen_fd);
      break;
    case LoopTag::signal: {
      signalfd_siginfo si;
      if (read(sig_, &si, sizeof si) == sizeof si) {
        service_log("signal %u: exiting", si.ssi_signo);
        stop_ = true;
      }
      break;
    }
    case LoopTag::timer:
      on_timer();
      break;
    case LoopTag::tick:
      on_tick();
      break;
    case LoopTag::monitor:
      if (monitor_.drain(*this) < 0) service_log("rtnetlink monitor: %s", std::strerror(errno));
      if (rescan_) rescan();
      break;
    case LoopTag::port:
      devices_->port_event(v, ev.events & EPOLLERR);
      break;
    case LoopTag::client:
      clients_->on_event(static_cast<int>(v), ev.events);
      break;
  }
}

int ServiceLoop::run() {
  service_ = cfg_.make_service ? cfg_.make_service(*this) : CmService::create(*this);
  devices_.emplace(platform_, *service_, ep_);
  clients_.emplace(*service_, ep_, [this] { return status_text(); });
  if (!setup()) return 1;
  last_busy_ns_ = monotonic_ns();
  rescan();
  if (devices_->slots().empty()) service_log("no urxe device in this namespace yet (looking every second)");
  service_log("listening (netns %s, run dir %s)", cfg_.netns.c_str(), cfg_.run_dir.c_str());
  epoll_event evs[32];
  while (!stop_) {
    arm_timer();
    const int n = epoll_wait(ep_.fd(), evs, 32, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      service_log("epoll_wait: %s", std::strerror(errno));
      return 1;
    }
    for (int i = 0; i < n && !stop_; ++i) dispatch(evs[i]);
  }
  return 0;
}

}  // namespace

int run_cm_service(const CmServiceConfig& cfg, CmPlatform& platform) {
  ServiceLoop loop(cfg, platform);
  return loop.run();
}

}  // namespace urxe::cm
