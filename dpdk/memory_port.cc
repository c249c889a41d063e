#include "dpdk/memory_port.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

namespace urxe::dpdk {
namespace {

constexpr uint32_t kFrameSize = 10240;  // > 4096 path MTU + all headers, < a jumbo frame
constexpr uint32_t kFrames = 512;

class MemoryPort;

// All loop ports of one device in a process share a bus: a frame sent by any of them is received by
// every one (its own included), so several contexts of one process talk to each other as two processes
// on one NIC would; each engine drops the QPNs it does not own.
struct LoopBus {
  std::mutex mu;
  std::vector<MemoryPort*> ports;
};

std::shared_ptr<LoopBus> loop_bus(const std::string& device) {
  static std::mutex mu;
  static std::vector<std::pair<std::string, std::weak_ptr<LoopBus>>> buses;
  std::lock_guard g(mu);
  for (auto& [name, weak] : buses)
    if (name == device)
      if (auto bus = weak.lock()) return bus;
  auto bus = std::make_shared<LoopBus>();
  buses.emplace_back(device, bus);
  return bus;
}

// Frames live in a fixed pool: tx_alloc takes one, tx_burst copies it into the receive queue of every
// port on the bus (loop) or drops it (null) and returns it to the pool, rx_free returns received ones.
class MemoryPort final : public engine::Port {
 public:
  MemoryPort(const engine::PortAttr& attr, std::shared_ptr<LoopBus> bus)
      : attr_(attr), bus_(std::move(bus)), storage_(size_t{kFrameSize} * kFrames) {
    for (uint32_t i = 0; i < kFrames; ++i) free_.push_back(storage_.data() + size_t{i} * kFrameSize);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (bus_) {
      std::lock_guard g(bus_->mu);
      bus_->ports.push_back(this);
    }
  }
  ~MemoryPort() override {
    if (bus_) {
      std::lock_guard g(bus_->mu);
      bus_->ports.erase(std::find(bus_->ports.begin(), bus_->ports.end(), this));
    }
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
    if (bus_) {
      std::lock_guard g(bus_->mu);
      for (MemoryPort* p : bus_->ports)
        for (uint32_t i = 0; i < n; ++i) p->deliver(bufs[i]);
    }
    std::lock_guard g(mu_);
    for (uint32_t i = 0; i < n; ++i) free_.push_back(bufs[i].data);
    return n;
  }
  void tx_free(engine::PacketBuf& buf) override {
    std::lock_guard g(mu_);
    free_.push_back(buf.data);
  }
  uint32_t rx_burst(engine::PacketBuf* bufs, uint32_t n) override {
    std::lock_guard g(mu_);
    uint32_t k = 0;
    while (k < n && rx_count_ > 0) {
      bufs[k++] = rx_[rx_head_];
      rx_head_ = (rx_head_ + 1) % kFrames;
      --rx_count_;
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
  // A copy of `frame` into this port's receive queue (dropped when the pool is empty, as a NIC would).
  void deliver(const engine::PacketBuf& frame) {
    std::lock_guard g(mu_);
    if (free_.empty() || frame.len > kFrameSize) return;
    engine::PacketBuf b{.data = free_.back(), .len = frame.len, .opaque = nullptr};
    free_.pop_back();
    b.opaque = b.data;
    std::memcpy(b.data, frame.data, frame.len);
    rx_[(rx_head_ + rx_count_++) % kFrames] = b;  // at most kFrames buffers exist, so it never overflows
    if (armed_ && wake_fd_ >= 0) {
      uint64_t one = 1;
      [[maybe_unused]] auto r = ::write(wake_fd_, &one, sizeof one);
    }
  }

  engine::PortAttr attr_;
  std::shared_ptr<LoopBus> bus_;
  std::vector<uint8_t> storage_;
  std::mutex mu_;
  std::vector<uint8_t*> free_;
  // Received frames, a fixed ring: the data path allocates nothing (tests/provider/datapath_test.c).
  std::array<engine::PacketBuf, kFrames> rx_{};
  uint32_t rx_head_ = 0, rx_count_ = 0;
  bool armed_ = false;
  int wake_fd_ = -1;
};

}  // namespace

std::unique_ptr<engine::Port> open_memory_port(const engine::PortAttr& attr, const std::string& bus) {
  return std::make_unique<MemoryPort>(attr, bus.empty() ? nullptr : loop_bus(bus));
}

}  // namespace urxe::dpdk
