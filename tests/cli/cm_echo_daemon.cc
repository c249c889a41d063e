// `urxe cm`'s loop (cm/service/service_loop.h, with tools/cm_platform.h) around a scripted core instead of
// cm::CmService, for cm_service_test.sh: it checks the loop's own paths whatever the real core does so far.
//   - CREATE_ID answers an id and, 200 ms later (the timerfd), queues one event on the channel: the
//     channel's eventfd turns readable; GET_EVENT takes it (336 bytes) and the eventfd's count drops back.
//   - Every MAD received is sent back to where it came from (send_mad: source and destination swapped,
//     the sender's MAC, the sender's QP), its last byte set to 0xee; a MAD already marked so is not
//     answered, so a device talking to itself stops after one round.
//   - counters(): MADs by attribute as received and sent.
// The socket is the service's (cm/protocol.h) for $URXE_RUN_DIR and this namespace; no lock or pid file.
//   usage: cm_echo_daemon   (runs until SIGTERM/SIGINT)
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "cm/protocol.h"
#include "cm/service/service_loop.h"
#include "cm/ucma_abi.h"
#include "hostnet/netns.h"
#include "provider/device_tree.h"
#include "tools/cm_platform.h"
#include "wire/bytes.h"

using namespace urxe;

namespace {

constexpr uint8_t kEchoMark = 0xee;

class EchoService final : public cm::CmService {
 public:
  explicit EchoService(cm::CmHost& host) : host_(host) {}
  void set_devices(std::vector<cm::CmDevice> d) override { devices_ = std::move(d); }
  cm::ChannelId open_channel(const cm::ChannelOwner&) override {
    channels_[next_] = {};
    return next_++;
  }
  void close_channel(cm::ChannelId ch) override { channels_.erase(ch); }
  cm::CommandResult command(cm::ChannelId ch, std::span<const uint8_t> cmd,
                            std::span<const uint8_t>) override {
    rdma_ucm_cmd_hdr hdr{};
    if (cmd.size() < sizeof hdr || !channels_.count(ch)) return {EINVAL, {}};
    std::memcpy(&hdr, cmd.data(), sizeof hdr);
    Channel& c = channels_[ch];
    switch (hdr.cmd) {
      case RDMA_USER_CM_CMD_CREATE_ID:
        c.due_ns = host_.now_ns() + 200'000'000;
        return {0, {1, 0, 0, 0}};
      case RDMA_USER_CM_CMD_GET_EVENT:
        if (c.queued == 0) return {EAGAIN, {}};
        --c.queued;
        host_.events_dequeued(ch, 1);
        return {0, std::vector<uint8_t>(sizeof(rdma_ucm_event_resp), 0)};
      default:
        return {ENOSYS, {}};
    }
  }
  void on_mad(const cm::MadIn& m) override {
    const uint16_t attr = wire::load_be16(m.mad.data() + 16);
    if (attr >= 0x10 && attr < 0x20) ++counters_.rx[attr - 0x10];
    if (m.mad.size() != 256 || m.mad[255] == kEchoMark) return;
    cm::MadOut o;
    o.device = m.device;
    o.sgid = m.dgid;
    o.dgid = m.sgid;
    o.dmac = m.smac;
    o.traffic_class = m.traffic_class;
    o.dest_qp = m.src_qp;
    std::memcpy(o.mad.data(), m.mad.data(), 256);
    o.mad[255] = kEchoMark;
    if (attr >= 0x10 && attr < 0x20) ++counters_.tx[attr - 0x10];
    host_.send_mad(o);
  }
  uint64_t next_deadline_ns() const override {
    uint64_t d = UINT64_MAX;
    for (const auto& [ch, c] : channels_) d = std::min(d, c.due_ns);
    return d;
  }
  void on_timer() override {
    const uint64_t now = host_.now_ns();
    for (auto& [ch, c] : channels_) {
      if (c.due_ns > now) continue;
      c.due_ns = UINT64_MAX;
      ++c.queued;
      host_.event_queued(ch);
    }
  }
  const Counters& counters() const override { return counters_; }
  Counters device_counters(uint32_t) const override { return counters_; }
  std::vector<std::string> describe_ids() const override { return {}; }

 private:
  struct Channel {
    uint64_t due_ns = UINT64_MAX;
    uint32_t queued = 0;
  };
  cm::CmHost& host_;
  std::vector<cm::CmDevice> devices_;
  std::map<cm::ChannelId, Channel> channels_;
  cm::ChannelId next_ = 1;
  Counters counters_;
};

std::unique_ptr<cm::CmService> make_echo(cm::CmHost& host) {
  return std::make_unique<EchoService>(host);
}

}  // namespace

int main() {
  const provider::Paths paths = provider::Paths::from_env();
  const std::string netns = hostnet::current_netns().to_string();
  const std::string path = cm::cm_socket_path(paths.run_dir, netns);
  std::error_code ec;
  std::filesystem::create_directories(cm::cm_dir(paths.run_dir), ec);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) < 0 || listen(fd, 16) < 0) {
    std::perror(path.c_str());
    return 1;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  cm::CmServiceConfig cfg;
  cfg.run_dir = paths.run_dir;
  cfg.netns = netns;
  cfg.listen_fd = fd;
  cfg.idle_exit_s = 0;
  cfg.make_service = make_echo;
  tools::CmPlatformImpl platform(paths.run_dir);
  const int rc = cm::run_cm_service(cfg, platform);
  unlink(path.c_str());
  return rc;
}
