#include "provider/ports.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <vector>

#ifdef URXE_HAVE_DPDK_PORTS
#include "dpdk/port_factory.h"
#endif

namespace urxe::provider {
namespace {

constexpr uint32_t kFrameSize = 10240;  // > 4096 path MTU + all headers, < a jumbo frame
constexpr uint32_t kFrames = 512;

// Frames go round in a fixed pool: tx_alloc takes one, tx_burst moves it to the receive queue (loop) or
// back to the pool (null), rx_free returns it to the pool.
class MemoryPort final : public engine::Port {
 public:
  MemoryPort(const engine::PortAttr& attr, bool loop)
      : attr_(attr), loop_(loop), storage_(size_t{kFrameSize} * kFrames) {
    for (uint32_t i = 0; i < kFrames; ++i) free_.push_back(storage_.data() + size_t{i} * kFrameSize);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  ~MemoryPort() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }
  const engine::PortAttr& attr() const override { return attr_; }
  bool tx_alloc(uint32_t size, engine::PacketBuf& buf) override {
    std::lock_guard g(mu_);
    if (size > kFrameSize || free_.empty()) return false;
    buf.data = free_.back();
    free_.pop_back();
    buf.len = size;
    buf.opaque = buf.data;
    return true;
  }
  uint32_t tx_burst(engine::PacketBuf* bufs, uint32_t n) override {
    std::lock_guard g(mu_);
    for (uint32_t i = 0; i < n; ++i) {
      if (loop_)
        rx_.push_back(bufs[i]);
      else
        free_.push_back(bufs[i].data);
    }
    if (loop_ && n && armed_ && wake_fd_ >= 0) {
      uint64_t one = 1;
      [[maybe_unused]] auto r = ::write(wake_fd_, &one, sizeof one);
    }
    return n;
  }
  void tx_free(engine::PacketBuf& buf) override {
    std::lock_guard g(mu_);
    free_.push_back(buf.data);
  }
  uint32_t rx_burst(engine::PacketBuf* bufs, uint32_t n) override {
    std::lock_guard g(mu_);
    uint32_t k = 0;
    while (k < n && !rx_.empty()) {
      bufs[k++] = rx_.front();
      rx_.pop_front();
    }
    return k;
  }
  void rx_free(engine::PacketBuf* bufs, uint32_t n) override {
    std::lock_guard g(mu_);
    for (uint32_t i = 0; i < n; ++i) free_.push_back(bufs[i].data);
  }
  int rx_wait_fd() const override { return wake_fd_; }
  void rx_wait_arm(bool armed) override {
    std::lock_guard g(mu_);
    armed_ = armed;
    if (!armed && wake_fd_ >= 0) {
      uint64_t v;
      [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
    }
  }

 private:
  engine::PortAttr attr_;
  bool loop_;
  std::vector<uint8_t> storage_;
  std::mutex mu_;
  std::vector<uint8_t*> free_;
  std::deque<engine::PacketBuf> rx_;
  bool armed_ = false;
  int wake_fd_ = -1;
};

}  // namespace

std::unique_ptr<engine::Port> make_port(const std::string& kind, const PortRequest& req, std::string& err) {
  if (kind == "loop") return std::make_unique<MemoryPort>(req.attr, true);
  if (kind == "null") return std::make_unique<MemoryPort>(req.attr, false);
  if (kind == "auto" || kind == "dpdk" || kind == "socket") {
#ifdef URXE_HAVE_DPDK_PORTS
    dpdk::PortOptions opt;
    opt.ifname = req.config.netdev;
    opt.dpdk_args = req.config.dpdk;
    opt.kind = kind == "dpdk"     ? dpdk::PortKind::dpdk
               : kind == "socket" ? dpdk::PortKind::socket
                                  : dpdk::PortKind::automatic;
    opt.gids = req.attr.gids;
    std::string notice;
    auto port = dpdk::open_port(opt, &notice, &err);
    // One line per process and device, the first time a port is opened (stderr, as rdma-core warns).
    static std::mutex notice_mu;
    static std::vector<std::string> noticed;
    if (port && !notice.empty()) {
      std::lock_guard g(notice_mu);
      if (std::find(noticed.begin(), noticed.end(), req.config.name) == noticed.end()) {
        noticed.push_back(req.config.name);
        std::fprintf(stderr, "%s\n", notice.c_str());
      }
    }
    return port;
#else
    err =
        "port '" + kind + "' is not available in this build (dpdk/ ports not linked); use port=loop or null";
    return nullptr;
#endif
  }
  err = "unknown port kind '" + kind + "' (auto, dpdk, socket, loop, null)";
  return nullptr;
}

}  // namespace urxe::provider
