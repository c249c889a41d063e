// liburxe-rdmav34.so: the libibverbs provider. Each verb is translated onto one engine::Engine per device
// context, driven by one progress thread. Facts about the core this relies on: research/provider-without-
// kernel.md. Every entry point catches exceptions: none may unwind into libibverbs (C code).
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "provider/abi34.h"
#include "provider/capture_port.h"
#include "provider/device_tree.h"
#include "provider/gid_watch.h"
#include "provider/log.h"
#include "provider/ports.h"
#include "provider/stats.h"
#include "provider/user_memory.h"

namespace en = urxe::engine;
using urxe::provider::DeviceConfig;

// ibv_resolve_eth_l2_from_gid (IBVERBS_1.1) is exported but declared only in driver.h.
extern "C" int ibv_resolve_eth_l2_from_gid(struct ibv_context* context, struct ibv_ah_attr* attr,
                                           uint8_t eth_mac[6], uint16_t* vid);

// The engine's vocabulary is libibverbs' numbers; conversions are casts. Pin the ones the casts rely on.
#define URXE_SAME(a, b) static_assert(static_cast<uint32_t>(a) == static_cast<uint32_t>(b), #a)
URXE_SAME(en::WC_GENERAL_ERR, IBV_WC_GENERAL_ERR);
URXE_SAME(en::WC_RECV_RDMA_WITH_IMM, IBV_WC_RECV_RDMA_WITH_IMM);
URXE_SAME(en::WR_SEND_WITH_INV, IBV_WR_SEND_WITH_INV);
URXE_SAME(en::WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD);
URXE_SAME(en::QPS_ERR, IBV_QPS_ERR);
URXE_SAME(en::QPT_UD, IBV_QPT_UD);
URXE_SAME(en::MTU_4096, IBV_MTU_4096);
URXE_SAME(en::QP_DEST_QPN, IBV_QP_DEST_QPN);
URXE_SAME(en::QP_RATE_LIMIT, IBV_QP_RATE_LIMIT);
URXE_SAME(en::EVENT_GID_CHANGE, IBV_EVENT_GID_CHANGE);
URXE_SAME(en::SEND_IP_CSUM, IBV_SEND_IP_CSUM);
URXE_SAME(en::ACCESS_RELAXED_ORDERING, IBV_ACCESS_RELAXED_ORDERING);
#undef URXE_SAME
// engine::Wc is ibv_wc field for field, so completions are copied as bytes.
static_assert(sizeof(en::Wc) == sizeof(ibv_wc) && offsetof(en::Wc, status) == offsetof(ibv_wc, status) &&
              offsetof(en::Wc, imm_data) == offsetof(ibv_wc, imm_data) &&
              offsetof(en::Wc, wc_flags) == offsetof(ibv_wc, wc_flags) &&
              offsetof(en::Wc, pkey_index) == offsetof(ibv_wc, pkey_index) &&
              offsetof(en::Wc, dlid_path_bits) == offsetof(ibv_wc, dlid_path_bits));
// engine::Sge is ibv_sge: SGE lists are passed through untouched.
static_assert(sizeof(en::Sge) == sizeof(ibv_sge) && offsetof(en::Sge, lkey) == offsetof(ibv_sge, lkey));

extern "C" const verbs_device_ops urxe_dev_ops;

namespace {

bool debug_on() {  // URXE_LOG=debug or URXE_DEBUG=1 (provider/log.h)
  return urxe::provider::log_enabled(en::LogLevel::debug);
}

void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_line(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("urxe: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}
#define URXE_DEBUG(...)                    \
  do {                                     \
    if (debug_on()) log_line(__VA_ARGS__); \
  } while (0)

// Runs f; an escaping exception becomes errno = ENOMEM (or EIO) and `fail`.
template <class R, class F>
R guarded(R fail, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (...) {
    errno = EIO;
  }
  return fail;
}

class SteadyClock final : public en::Clock {
 public:
  uint64_t now_ns() const override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
};

struct ContextState;

// Wrapper objects are C-shaped aggregates, allocated zeroed (the unions' other members included).
template <class T>
T* zalloc() {
  void* p = std::calloc(1, sizeof(T));
  if (!p) throw std::bad_alloc();
  return static_cast<T*>(p);
}
template <class T>
void zfree(T* p) {
  std::free(p);
}

struct UrxeDevice {
  verbs_device vdev;  // first: libibverbs casts
  DeviceConfig* config;
  char ibdev_path[256];
};

struct UrxeContext {
  verbs_context vctx;  // the core's part (ends with the public ibv_context)
  ContextState* state;
};

struct UrxePd {
  ibv_pd pd;
  uint32_t handle;
};

struct UrxeMr {
  verbs_mr vmr;
};

struct UrxeChannel {
  ibv_comp_channel channel;  // first: handed to the app
  int write_fd;
  uint32_t magic;
};
constexpr uint32_t kChannelMagic = 0x75727863;  // "urxc"

struct UrxeCq {
  verbs_cq vcq;
  uint32_t handle;
  ContextState* ctx;
  uint32_t comp_reported;   // events written to the channel (under map_mu)
  uint32_t async_reported;  // CQ_ERR records written to the async fd
  // ibv_cq_ex polling: the completion start_poll/next_poll fetched.
  en::Wc cur;
  std::atomic<bool> armed;  // req_notify_cq armed it and has a channel: an app may sleep on it
};

struct WrBatch;

struct UrxeQp {
  verbs_qp vqp;
  ContextState* ctx;
  en::QpType type;
  uint32_t async_reported;
  WrBatch* batch;  // the ibv_wr_* builder state; only for QPs created with send_ops_flags
};

struct UrxeSrq {
  verbs_srq vsrq;
  uint32_t handle;
  ContextState* ctx;
  uint32_t async_reported;
};

struct UrxeAh {
  ibv_ah ah;
  uint32_t handle;
};

UrxeContext* to_ctx(ibv_context* c) {
  return reinterpret_cast<UrxeContext*>(reinterpret_cast<char*>(c) - offsetof(UrxeContext, vctx) -
                                        offsetof(verbs_context, context));
}
UrxeDevice* to_dev(ibv_device* d) {
  return reinterpret_cast<UrxeDevice*>(d);
}
bool is_urxe_context(ibv_context* c) {
  return c && c->device && reinterpret_cast<verbs_device*>(c->device)->ops == &urxe_dev_ops;
}
UrxeCq* to_cq(ibv_cq* c) {
  return reinterpret_cast<UrxeCq*>(c);
}
UrxeQp* to_qp(ibv_qp* q) {
  return reinterpret_cast<UrxeQp*>(q);
}
UrxeSrq* to_srq(ibv_srq* s) {
  return reinterpret_cast<UrxeSrq*>(s);
}
UrxePd* to_pd(ibv_pd* p) {
  return reinterpret_cast<UrxePd*>(p);
}

// One per opened device context: the engine, its port, the progress thread and the pipes libibverbs reads.
// An en::EventSink that also logs (provider/log.h).
struct ContextState final : urxe::provider::LoggingSink {
  DeviceConfig config;
  urxe::provider::NetdevInfo netdev{};
  SteadyClock clock;
  std::unique_ptr<en::Port> port;
  std::unique_ptr<en::Port> capture;  // pcap tap over *port (--pcap, $URXE_PCAP; capture_port.h) or null
  std::unique_ptr<en::Engine> engine;
  int async_rd = -1, async_wr = -1;  // async_fd = async_rd (16-byte records)
  int doorbell_fd = -1;              // eventfd that wakes a sleeping progress thread
  int qpn_lock_fd = -1;              // holds the OFD lock naming this context's QPN block
  // The engine's counters, shared with `urxe stats` and sysfs (provider/stats.h); folded into the device
  // total when it is destroyed, after the destructor's body has stopped the engine.
  urxe::provider::CounterFile counter_file;
  std::atomic<bool> stop{false};
  std::thread progress_thread;
  // Handle → object, for the events the engine reports by QPN / handle. Touched under the engine lock
  // (sink callbacks) and by control verbs, hence its own mutex.
  std::mutex map_mu;
  std::unordered_map<uint32_t, UrxeQp*> qps;
  std::unordered_map<uint32_t, UrxeCq*> cqs;
  std::unordered_map<uint32_t, UrxeSrq*> srqs;
  // GIDs follow the interface's addresses (provider/gid_watch.h): its rtnetlink fd is in wait_fds' set.
  urxe::provider::GidWatch gid_watch;
  // One IBV_EVENT_GID_CHANGE (element: port 1) per changed entry, as the kernel raises them.
  // The port follows the interface (up and carrier), as rxe's: IBV_EVENT_PORT_ERR / _ACTIVE, and sysfs's
  // link_downed (counted from the kernel's carrier_down_count, provider/stats.h) mirrored at once.
  void gid_update() {
    for (int n = gid_watch.handle(*engine); n > 0; --n) post_async(1, IBV_EVENT_GID_CHANGE);
    bool up = false;
    while (gid_watch.take_port_change(up)) {
      urxe::provider::log_printf(up ? en::LogLevel::info : en::LogLevel::warn, config.name,
                                 "port 1 %s (interface %s %s)", up ? "ACTIVE" : "DOWN", config.netdev.c_str(),
                                 up ? "up with carrier" : "down or without carrier");
      post_async(1, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
      counter_file.poke();
    }
  }

  // Progress-thread statistics, printed at close with URXE_DEBUG=1.
  uint64_t n_sleeps = 0, n_wake_doorbell = 0, n_wake_port = 0, n_rounds = 0;

  ~ContextState() override {
    counter_file.stop_mirror();  // its per-QP source uses the engine
    stop.store(true);
    wake();
    if (progress_thread.joinable()) progress_thread.join();
    URXE_DEBUG("progress: %llu busy rounds, %llu sleeps, %llu naps, woken by doorbell %llu, by port %llu",
               (unsigned long long)n_rounds, (unsigned long long)n_sleeps, (unsigned long long)n_naps,
               (unsigned long long)n_wake_doorbell, (unsigned long long)n_wake_port);
    if (debug_on() && engine) {
      std::string line;
      for (uint32_t c = 0; c < static_cast<uint32_t>(en::Counter::num_counters); ++c) {
        const uint64_t v = engine->counter(static_cast<en::Counter>(c));
        if (v)
          line += std::string(" ") + en::counter_name(static_cast<en::Counter>(c)) + "=" + std::to_string(v);
      }
      URXE_DEBUG("counters:%s", line.c_str());
    }
    engine.reset();
    port.reset();
    if (async_wr >= 0) ::close(async_wr);
    if (doorbell_fd >= 0) ::close(doorbell_fd);
    if (qpn_lock_fd >= 0) ::close(qpn_lock_fd);
    // async_rd is the context's async_fd: verbs_uninit_context closes it.
  }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(doorbell_fd, &one, sizeof one);
  }

  void post_async(uint64_t element, uint32_t type) {
    struct {
      uint64_t element;
      uint32_t event_type;
      uint32_t reserved;
    } rec{element, type, 0};
    static_assert(sizeof rec == 16);
    if (::write(async_wr, &rec, sizeof rec) != sizeof rec)
      URXE_DEBUG("async pipe full, event %u dropped", type);
  }

  // ---- engine::EventSink (engine lock held) ----
  void async_event(const en::AsyncEvent& ev) override {
    std::lock_guard g(map_mu);
    switch (ev.type) {
      case en::EVENT_CQ_ERR: {
        auto it = cqs.find(ev.element);
        if (it == cqs.end()) return;
        it->second->async_reported++;
        post_async(reinterpret_cast<uintptr_t>(&it->second->vcq.cq), ev.type);
        return;
      }
      case en::EVENT_SRQ_ERR:
      case en::EVENT_SRQ_LIMIT_REACHED: {
        auto it = srqs.find(ev.element);
        if (it == srqs.end()) return;
        it->second->async_reported++;
        post_async(reinterpret_cast<uintptr_t>(&it->second->vsrq.srq), ev.type);
        return;
      }
      case en::EVENT_DEVICE_FATAL:
      case en::EVENT_PORT_ACTIVE:
      case en::EVENT_PORT_ERR:
      case en::EVENT_LID_CHANGE:
      case en::EVENT_PKEY_CHANGE:
      case en::EVENT_SM_CHANGE:
      case en::EVENT_CLIENT_REREGISTER:
      case en::EVENT_GID_CHANGE:
        post_async(ev.element, ev.type);
        return;
      default: {  // QP events
        auto it = qps.find(ev.element);
        if (it == qps.end()) return;
        it->second->async_reported++;
        post_async(reinterpret_cast<uintptr_t>(&it->second->vqp.qp), ev.type);
        return;
      }
    }
  }

  void comp_event(uint32_t cq_handle) override {
    std::lock_guard g(map_mu);
    auto it = cqs.find(cq_handle);
    if (it == cqs.end()) return;
    UrxeCq* cq = it->second;
    auto* ch = reinterpret_cast<UrxeChannel*>(cq->vcq.cq.channel);
    if (!ch) return;
    uint64_t ptr = reinterpret_cast<uintptr_t>(&cq->vcq.cq);
    cq_disarmed(cq);
    if (::write(ch->write_fd, &ptr, sizeof ptr) == sizeof ptr)
      cq->comp_reported++;
    else
      URXE_DEBUG("completion channel full, event dropped");
  }

  // Who drives the engine. An application thread that busy-polls its CQ runs the engine itself
  // (try_progress in poll_cq): on 2 cores, a progress thread per process competing with two polling apps
  // turns each packet's wait into a scheduler time slice. While the app drives, the progress thread naps
  // (no spinning; woken by a frame or after kNapNs) and posts ring no doorbell; when the app stops polling
  // or arms a completion channel, the thread takes over: spin, then sleep on the port's rx fd and the
  // doorbell.
  enum SleepMode : int { kAwake = 0, kSleeping = 1, kNapping = 2 };
  static constexpr uint64_t kNapNs = 1000000;
  std::atomic<int> sleep_mode{kAwake};
  std::atomic<uint64_t> app_polls{0};  // poll_cq calls (changes = an app thread is polling)
  std::atomic<uint32_t> armed_cqs{0};  // CQs with a channel armed by req_notify_cq (an app may block)
  uint64_t n_naps = 0;

  // An app thread's poll: do the NIC's work here if nobody else is doing it right now.
  void app_poll() {
    app_polls.store(app_polls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    engine->try_progress();
  }
  void cq_armed(UrxeCq* cq) {
    if (!cq->armed.exchange(true)) armed_cqs.fetch_add(1, std::memory_order_seq_cst);
    if (sleep_mode.load(std::memory_order_seq_cst) == kNapping) wake();
  }
  void cq_disarmed(UrxeCq* cq) {
    if (cq->armed.exchange(false)) armed_cqs.fetch_sub(1, std::memory_order_relaxed);
  }

  // The queued work (a release store inside the engine) must be visible before we read `sleep_mode`, or
  // both sides can miss each other (x86 lets a load pass an earlier store): hence the full fence. It
  // costs a few nanoseconds; the eventfd write happens only when the thread really sleeps on the port.
  void doorbell_ring() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleep_mode.load(std::memory_order_relaxed) == kSleeping) wake();
  }
  void doorbell() override { doorbell_ring(); }

  // Whether the app is busy-polling: at least kDrivingPolls poll_cq calls since `since` (the start of
  // this idle spell, at most the spin time ago), and no CQ armed for events (an app may be blocked).
  // An app that polls only now and then does not count: the thread then serves the port itself.
  static constexpr uint64_t kDrivingPolls = 4;
  bool app_driving(uint64_t since) const {
    return app_polls.load(std::memory_order_relaxed) - since >= kDrivingPolls &&
           armed_cqs.load(std::memory_order_relaxed) == 0;
  }

  void wait_fds(bool with_port, int port_fd, uint64_t wait_ns) {
    timespec ts{static_cast<time_t>(wait_ns / 1000000000u), static_cast<long>(wait_ns % 1000000000u)};
    pollfd fds[3] = {
        {doorbell_fd, POLLIN, 0}, {with_port ? port_fd : -1, POLLIN, 0}, {gid_watch.fd(), POLLIN, 0}};
    ::ppoll(fds, 3, wait_ns == UINT64_MAX ? nullptr : &ts, nullptr);
    if (fds[1].revents & POLLIN) ++n_wake_port;
    if (fds[2].revents & POLLIN) gid_update();
    if (fds[0].revents & POLLIN) {
      ++n_wake_doorbell;
      uint64_t v;
      [[maybe_unused]] auto r = ::read(doorbell_fd, &v, sizeof v);
    }
  }

  // Spin while there is work; nap while the app drives; otherwise spin a little, then sleep on the port's
  // rx fd and the doorbell until the engine's next deadline; posts ring the doorbell only then.
  void run() {
    const int port_fd = port->rx_wait_fd();
    // How long to keep polling without work before sleeping ($URXE_IDLE_SPIN_US, default 20 us). Polling
    // uses the pause instruction, not sched_yield: on a busy machine a yield hands the core to a spinning
    // application thread for a whole time slice.
    uint64_t spin_ns = 20000;
    if (const char* e = std::getenv("URXE_IDLE_SPIN_US"); e && *e)
      spin_ns = std::strtoull(e, nullptr, 10) * 1000;
    uint64_t idle_since = 0, idle_polls = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      if (engine->progress()) {
        ++n_rounds;
        if ((n_rounds & 1023) == 0 && gid_watch.due(clock.now_ns())) gid_update();  // busy: never sleeps
        idle_since = 0;
        continue;
      }
      const uint64_t t = clock.now_ns();
      if (idle_since == 0) {
        idle_since = t;
        idle_polls = app_polls.load(std::memory_order_relaxed);
      }
      if (app_driving(idle_polls)) {
        sleep_mode.store(kNapping, std::memory_order_seq_cst);
        const uint64_t deadline = engine->next_deadline_ns(), now = clock.now_ns();
        uint64_t wait_ns = deadline > now ? std::min(deadline - now, kNapNs) : 0;
        // Re-check after announcing the nap: a req_notify_cq that armed a CQ before seeing kNapping must
        // not leave its app waiting for a nap to end (pairs with cq_armed).
        if (armed_cqs.load(std::memory_order_seq_cst) != 0) wait_ns = 0;
        if (wait_ns) {
          ++n_naps;
          // A frame still wakes the nap: an app may spin on memory a peer WRITEs (ib_write_lat) and
          // make no poll that would run the engine for it.
          port->rx_wait_arm(true);
          wait_fds(true, port_fd, wait_ns);
          port->rx_wait_arm(false);
        }
        sleep_mode.store(kAwake, std::memory_order_relaxed);
        idle_since = 0;
        continue;
      }
      if (t - idle_since < spin_ns) {
        for (int i = 0; i < 32; ++i) __builtin_ia32_pause();
        continue;
      }
      port->rx_wait_arm(true);
      sleep_mode.store(kSleeping, std::memory_order_seq_cst);
      if (engine->progress() || stop.load() || app_driving(idle_polls)) {
        sleep_mode.store(kAwake);
        port->rx_wait_arm(false);
        idle_since = 0;
        continue;
      }
      const uint64_t deadline = engine->next_deadline_ns();
      const uint64_t now = clock.now_ns();
      // Sleep until the engine's next deadline (forever if none); without a port fd, at most 20 us.
      uint64_t wait_ns = deadline == UINT64_MAX ? UINT64_MAX : (deadline > now ? deadline - now : 0);
      if (port_fd < 0) wait_ns = std::min<uint64_t>(wait_ns, 20000);
      wait_fds(true, port_fd, wait_ns);
      ++n_sleeps;
      sleep_mode.store(kAwake);
      port->rx_wait_arm(false);
      idle_since = 0;
    }
  }
};

// Event fds are SOCK_SEQPACKET socket pairs rather than pipes: libibverbs reads one record per read()
// either way, but a socket lets a destroy take back, with MSG_DONTWAIT and whatever the app set on its end,
// the records about the destroyed object that the app has not read. That is the kernel's rule (uverbs
// counts an event as reported when it is read, and drops unread ones at destroy), and it keeps
// ibv_destroy_qp from waiting forever in apps that never read async events (perftest and COMM_EST).
bool record_pair(int& rd, int& wr) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return false;
  ::shutdown(sv[0], SHUT_WR);
  ::shutdown(sv[1], SHUT_RD);
  rd = sv[0];
  wr = sv[1];
  return true;
}

// Removes the queued records whose first 8 bytes are `element`; returns how many.
uint32_t purge_records(int rd, int wr, size_t rec_size, uint64_t element) {
  std::vector<std::array<unsigned char, 16>> keep;
  uint32_t removed = 0;
  for (;;) {
    std::array<unsigned char, 16> rec{};
    if (::recv(rd, rec.data(), rec_size, MSG_DONTWAIT) != static_cast<ssize_t>(rec_size)) break;
    uint64_t el;
    std::memcpy(&el, rec.data(), 8);
    if (el == element)
      ++removed;
    else
      keep.push_back(rec);
  }
  for (auto& rec : keep) [[maybe_unused]] auto n = ::send(wr, rec.data(), rec_size, MSG_DONTWAIT);
  return removed;
}

// Asks the scheduler (EEVDF, Linux >= 6.12) for a short time slice for the calling thread, so that when it
// wakes for a packet or a doorbell it preempts a busy-polling application thread at once instead of waiting
// out that thread's slice (measured: ~6 ms per wakeup with two pingpong processes on two cores).
// Unprivileged; ignored by older kernels.
void request_short_slice() {
  struct {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
  } attr{};
  attr.size = sizeof attr;
  attr.sched_policy = 0;        // SCHED_OTHER
  attr.sched_runtime = 100000;  // 100 us: the minimum slice
  if (const char* e = std::getenv("URXE_SLICE_US"); e && *e)
    attr.sched_runtime = std::strtoull(e, nullptr, 10) * 1000;
  if (attr.sched_runtime) ::syscall(SYS_sched_setattr, 0, &attr, 0u);
}

// Claims a block of QPNs for this context (byte i of urxe.qpn locked → QPNs 0x11 + i*max_qp ...), so
// several processes on one device never hand out the same QPN. The lock goes away with the fd.
int claim_qpn_block(const std::string& ibdev_path, uint32_t block_size, int& fd_out) {
  int fd = ::open((ibdev_path + "/urxe.qpn").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  const uint32_t blocks = ((1u << 24) - 0x11) / block_size;
  for (uint32_t i = 0; i < blocks; ++i) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(i);
    fl.l_len = 1;
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) {
      fd_out = fd;
      return static_cast<int>(i);
    }
  }
  ::close(fd);
  return -1;
}

// ---------------------------------------------------------------------------------------------------
// device

bool urxe_match_device(verbs_sysfs_dev* sysfs_dev) {
  return guarded(false, [&] {
    DeviceConfig cfg;
    return urxe::provider::read_device_config(sysfs_dev->ibdev_path, cfg);
  });
}

verbs_device* urxe_alloc_device(verbs_sysfs_dev* sysfs_dev) {
  return guarded<verbs_device*>(nullptr, [&]() -> verbs_device* {
    auto cfg = std::make_unique<DeviceConfig>();
    if (!urxe::provider::read_device_config(sysfs_dev->ibdev_path, *cfg)) return nullptr;
    auto* dev = static_cast<UrxeDevice*>(std::calloc(1, sizeof(UrxeDevice)));
    if (!dev) return nullptr;
    dev->config = cfg.release();
    std::snprintf(dev->ibdev_path, sizeof dev->ibdev_path, "%s", sysfs_dev->ibdev_path);
    URXE_DEBUG("alloc_device(%s via %s, netdev %s)", sysfs_dev->ibdev_name, sysfs_dev->sysfs_name,
               dev->config->netdev.c_str());
    return &dev->vdev;
  });
}

void urxe_uninit_device(verbs_device* vdev) {
  auto* dev = reinterpret_cast<UrxeDevice*>(vdev);
  delete dev->config;
  std::free(dev);
}

const verbs_context_ops& ctx_ops();

verbs_context* urxe_alloc_context(ibv_device* ibdev, int cmd_fd, void* /*private_data*/) {
  return guarded<verbs_context*>(nullptr, [&]() -> verbs_context* {
    UrxeDevice* dev = to_dev(ibdev);
    // libibverbs writes legacy commands to cmd_fd (notably CREATE_COMP_CHANNEL when our interposer is not
    // preloaded). /dev/null opened read-only makes those fail cleanly with EBADF instead of "succeeding".
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    ::close(cmd_fd);
    auto* ctx = static_cast<UrxeContext*>(_verbs_init_and_alloc_context(
        ibdev, fd, sizeof(UrxeContext), reinterpret_cast<verbs_context*>(offsetof(UrxeContext, vctx)), 0));
    if (!ctx) {
      ::close(fd);
      return nullptr;
    }
    auto fail = [&](int err, const std::string& why) -> verbs_context* {
      std::fprintf(stderr, "urxe: %s: %s\n", dev->config->name.c_str(), why.c_str());
      delete ctx->state;
      ctx->state = nullptr;
      verbs_uninit_context(&ctx->vctx);
      std::free(ctx);
      errno = err;
      return nullptr;
    };
    auto st = new ContextState;
    ctx->state = st;
    st->config = *dev->config;
    if (const char* p = std::getenv("URXE_PORT"); p && *p) st->config.port = p;
    if (!record_pair(st->async_rd, st->async_wr)) return fail(errno, "socketpair");
    ::fcntl(st->async_wr, F_SETFL, O_NONBLOCK);  // the progress thread must never block on a slow reader
    ctx->vctx.context.async_fd = st->async_rd;   // from here on verbs_uninit_context closes it
    st->doorbell_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (st->doorbell_fd < 0) return fail(errno, "eventfd");

    std::string err;
    if (!urxe::provider::query_netdev(st->config.netdev, st->netdev, &err)) return fail(ENODEV, err);
    urxe::provider::PortRequest req;
    req.config = st->config;
    req.netdev = st->netdev;
    req.attr.mac = st->netdev.mac;
    req.attr.mtu = st->config.mtu ? st->config.mtu : st->netdev.mtu;
    // The port's GID table is the one the app sees in sysfs, slot for slot.
    req.attr.gids = st->gid_watch.open(dev->ibdev_path, st->config, st->netdev.ifindex);
    st->port = urxe::provider::make_port(st->config.port, req, err);
    if (!st->port) return fail(ENODEV, err);
    st->capture = urxe::provider::open_capture(*st->port, st->config);
    st->set_log_name(st->config.name);

    en::EngineConfig ecfg;
    int block = claim_qpn_block(dev->ibdev_path, ecfg.device.max_qp, st->qpn_lock_fd);
    if (block < 0) {
      // No lock file we may write: pick a block from the pid; processes could then collide, so say so.
      const uint32_t blocks = ((1u << 24) - 0x11) / ecfg.device.max_qp;
      block = static_cast<int>(static_cast<uint32_t>(::getpid()) % blocks);
      std::fprintf(
          stderr,
          "urxe: %s: cannot lock %s/urxe.qpn (%s); QPNs from block %d may clash with another process\n",
          dev->config->name.c_str(), dev->ibdev_path, std::strerror(errno), block);
    }
    ecfg.qpn_base = 0x11 + static_cast<uint32_t>(block) * ecfg.device.max_qp;
    urxe::provider::restrict_rx_qpns(*st->port, ecfg.qpn_base, ecfg.qpn_base + ecfg.device.max_qp);
    {
      const char* names[static_cast<size_t>(en::Counter::num_counters)];
      for (size_t c = 0; c < std::size(names); ++c) names[c] = en::counter_name(static_cast<en::Counter>(c));
      if (st->counter_file.open(dev->ibdev_path, names, ecfg.qpn_base, err))
        ecfg.counter_storage = st->counter_file.values();
      else
        URXE_DEBUG("counters stay private to this process: %s", err.c_str());
    }
    try {
      st->engine = std::make_unique<en::Engine>(st->capture ? *st->capture : *st->port, st->clock, ecfg);
    } catch (const std::exception& ex) {
      return fail(ENOMEM, std::string("engine: ") + ex.what());
    }
    st->engine->set_event_sink(st);
    st->counter_file.set_qp_source([st] {  // on the stats thread, once a second at most
      std::vector<std::pair<uint32_t, en::QpType>> qps;
      {
        std::lock_guard<std::mutex> g(st->map_mu);
        for (const auto& [qpn, qp] : st->qps) qps.emplace_back(qpn, qp->type);
      }
      std::string text;
      uint64_t v[static_cast<size_t>(en::Counter::num_counters)];
      en::QpState state;
      for (const auto& [qpn, type] : qps)
        if (st->engine->qp_counters(qpn, state, v) == 0)
          text += st->counter_file.qp_line(qpn,
                                           type == en::QPT_RC   ? "RC"
                                           : type == en::QPT_UC ? "UC"
                                                                : "UD",
                                           en::qp_state_str(state), v);
      return text;
    });
    st->counter_file.start_mirror();

    verbs_set_ops(&ctx->vctx, &ctx_ops());
    ctx->vctx.context.num_comp_vectors = 1;
    try {
      st->progress_thread = std::thread([st] {
        pthread_setname_np(pthread_self(), "urxe-progress");
        request_short_slice();
        try {
          st->run();
        } catch (...) {
          std::fprintf(stderr, "urxe: progress thread stopped by an exception\n");
        }
      });
    } catch (const std::system_error& ex) {
      return fail(EAGAIN, std::string("progress thread: ") + ex.what());
    }
    URXE_DEBUG("alloc_context(%s): port %s, async_fd %d, qpn_base 0x%x", dev->config->name.c_str(),
               st->config.port.c_str(), st->async_rd, ecfg.qpn_base);
    return &ctx->vctx;
  });
}

void urxe_free_context(ibv_context* ibctx) {
  UrxeContext* ctx = to_ctx(ibctx);
  guarded(0, [&] {
    delete ctx->state;
    return 0;
  });
  ctx->state = nullptr;
  verbs_uninit_context(&ctx->vctx);
  std::free(ctx);
}

ContextState& state_of(ibv_context* c) {
  return *to_ctx(c)->state;
}

void urxe_async_event(ibv_context*, ibv_async_event*) {}  // nothing to do once the core has read it

int urxe_query_device_ex(ibv_context* ibctx, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                         size_t attr_size) {
  return guarded(EIO, [&] {
    if (input && input->comp_mask) return EINVAL;
    if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
    ContextState& st = state_of(ibctx);
    const en::DeviceAttr& d = st.engine->device_attr();
    ibv_device_attr_ex a{};
    std::snprintf(a.orig_attr.fw_ver, sizeof a.orig_attr.fw_ver, "0.1.0");
    const uint64_t guid = urxe::provider::node_guid_from_mac(st.netdev.mac);
    a.orig_attr.node_guid = htobe64(guid);
    a.orig_attr.sys_image_guid = htobe64(guid);
    a.orig_attr.max_mr_size = d.max_mr_size;
    a.orig_attr.page_size_cap = 0xfffff000;
    a.orig_attr.vendor_id = 0xffffff;
    a.orig_attr.vendor_part_id = 0;
    a.orig_attr.hw_ver = 0;
    a.orig_attr.max_qp = static_cast<int>(d.max_qp);
    a.orig_attr.max_qp_wr = static_cast<int>(d.max_qp_wr);
    a.orig_attr.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
                                   IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_N_NOTIFY_CQ;
    a.orig_attr.max_sge = static_cast<int>(d.max_sge);
    a.orig_attr.max_sge_rd = static_cast<int>(d.max_sge_rd);
    a.orig_attr.max_cq = static_cast<int>(d.max_cq);
    a.orig_attr.max_cqe = static_cast<int>(d.max_cqe);
    a.orig_attr.max_mr = static_cast<int>(d.max_mr);
    a.orig_attr.max_pd = static_cast<int>(d.max_pd);
    a.orig_attr.max_qp_rd_atom = static_cast<int>(d.max_qp_rd_atom);
    a.orig_attr.max_res_rd_atom = static_cast<int>(d.max_qp_rd_atom * d.max_qp);
    a.orig_attr.max_qp_init_rd_atom = static_cast<int>(d.max_qp_init_rd_atom);
    a.orig_attr.atomic_cap = IBV_ATOMIC_HCA;
    a.orig_attr.max_srq = static_cast<int>(d.max_srq);
    a.orig_attr.max_srq_wr = static_cast<int>(d.max_srq_wr);
    a.orig_attr.max_srq_sge = static_cast<int>(d.max_srq_sge);
    a.orig_attr.max_ah = static_cast<int>(d.max_ah);
    a.orig_attr.max_pkeys = 1;
    a.orig_attr.local_ca_ack_delay = 15;
    a.orig_attr.phys_port_cnt = 1;
    a.max_dm_size = 0;
    a.phys_port_cnt_ex = 1;
    std::memcpy(attr, &a, std::min(attr_size, sizeof a));
    return 0;
  });
}

// rxe's mapping of the netdev speed to IB width/speed (ib_get_eth_speed), for what ibv_devinfo prints.
// IB width / speed codes of ibv_port_attr (rdma-core 44 has no names for them in verbs.h).
enum : uint8_t { IBV_WIDTH_1X = 1, IBV_WIDTH_4X = 2 };
enum : uint8_t {
  IBV_SPEED_SDR = 1,
  IBV_SPEED_DDR = 2,
  IBV_SPEED_FDR10 = 8,
  IBV_SPEED_EDR = 32,
  IBV_SPEED_HDR = 64
};
void eth_speed(const std::string& netdev, uint8_t& width, uint8_t& speed) {
  // ETHTOOL_GSET through the socket API answers for the caller's network namespace (sysfs may not).
  long mbps = 0;
  if (int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); s >= 0) {
    ethtool_cmd cmd{};
    cmd.cmd = ETHTOOL_GSET;
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", netdev.c_str());
    ifr.ifr_data = reinterpret_cast<char*>(&cmd);
    if (::ioctl(s, SIOCETHTOOL, &ifr) == 0) {
      const uint32_t v = ethtool_cmd_speed(&cmd);
      if (v != static_cast<uint32_t>(SPEED_UNKNOWN)) mbps = v;
    }
    ::close(s);
  }
  width = IBV_WIDTH_1X;
  speed = IBV_SPEED_SDR;
  if (mbps <= 0) return;  // unknown (veth, lo): as the kernel, 1X SDR
  if (mbps <= 2500) {
    speed = IBV_SPEED_SDR;
  } else if (mbps <= 5000) {
    speed = IBV_SPEED_DDR;
  } else if (mbps <= 10000) {
    speed = IBV_SPEED_FDR10;
  } else if (mbps <= 20000) {
    width = IBV_WIDTH_4X;
    speed = IBV_SPEED_DDR;
  } else if (mbps <= 25000) {
    speed = IBV_SPEED_EDR;
  } else if (mbps <= 40000) {
    width = IBV_WIDTH_4X;
    speed = IBV_SPEED_FDR10;
  } else if (mbps <= 50000) {
    speed = IBV_SPEED_HDR;
  } else if (mbps <= 100000) {
    width = IBV_WIDTH_4X;
    speed = IBV_SPEED_EDR;
  } else {
    width = IBV_WIDTH_4X;
    speed = IBV_SPEED_HDR;
  }
}

int urxe_query_port(ibv_context* ibctx, uint8_t port_num, ibv_port_attr* pa) {
  return guarded(EIO, [&] {
    if (port_num != 1) return EINVAL;
    ContextState& st = state_of(ibctx);
    urxe::provider::NetdevInfo nd;
    const bool up = urxe::provider::query_netdev(st.config.netdev, nd) && nd.up;
    std::memset(pa, 0, sizeof *pa);
    pa->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    pa->max_mtu = IBV_MTU_4096;
    pa->active_mtu = static_cast<ibv_mtu>(st.engine->active_mtu());
    pa->gid_tbl_len = static_cast<int>(st.config.gid_tbl_len);
    pa->port_cap_flags = IBV_PORT_CM_SUP;
    pa->max_msg_sz = st.engine->device_attr().max_msg_sz;
    pa->bad_pkey_cntr = 0;
    pa->qkey_viol_cntr = 0;
    pa->pkey_tbl_len = 1;
    pa->lid = 0;
    pa->sm_lid = 0;
    pa->lmc = 0;
    pa->max_vl_num = 1;
    pa->sm_sl = 0;
    pa->subnet_timeout = 0;
    pa->init_type_reply = 0;
    eth_speed(st.config.netdev, pa->active_width, pa->active_speed);
    pa->phys_state = up ? 5 /* LinkUp */ : 3 /* Disabled */;
    pa->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------------
// PD, MR

ibv_pd* urxe_alloc_pd(ibv_context* ibctx) {
  return guarded<ibv_pd*>(nullptr, [&]() -> ibv_pd* {
    uint32_t h;
    if (int rc = state_of(ibctx).engine->alloc_pd(h)) {
      errno = rc;
      return nullptr;
    }
    auto* pd = zalloc<UrxePd>();
    pd->pd.context = ibctx;
    pd->pd.handle = h;
    pd->handle = h;
    return &pd->pd;
  });
}

int urxe_dealloc_pd(ibv_pd* ibpd) {
  return guarded(EIO, [&] {
    auto* pd = to_pd(ibpd);
    if (int rc = state_of(ibpd->context).engine->dealloc_pd(pd->handle)) return rc;
    zfree(pd);
    return 0;
  });
}

// reg_mr/rereg_mr's range check (provider/user_memory.h): what the kernel's pinning would find, for writing
// when the access writes (ib_access_writable). Done before any key exists that a peer could aim at; skipped
// when the kernel's access rule (remote write or atomic needs local write) fails first: the engine's EINVAL.
int pin_check(const void* addr, size_t length, int access) {
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return 0;
  constexpr int kWritable =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
  return urxe::provider::check_user_range(addr, length, (access & kWritable) != 0);
}

ibv_mr* urxe_reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access) {
  return guarded<ibv_mr*>(nullptr, [&]() -> ibv_mr* {
    en::MrInfo info;
    const uint64_t iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : hca_va;
    if (int rc = pin_check(addr, length, access)) {
      errno = rc;
      return nullptr;
    }
    if (int rc = state_of(ibpd->context)
                     .engine->reg_mr(to_pd(ibpd)->handle, addr, length, iova, static_cast<uint32_t>(access),
                                     info)) {
      errno = rc;
      return nullptr;
    }
    auto* mr = zalloc<UrxeMr>();
    mr->vmr.ibv_mr.context = ibpd->context;
    mr->vmr.ibv_mr.pd = ibpd;
    mr->vmr.ibv_mr.addr = addr;
    mr->vmr.ibv_mr.length = length;
    mr->vmr.ibv_mr.handle = info.lkey;
    mr->vmr.ibv_mr.lkey = info.lkey;
    mr->vmr.ibv_mr.rkey = info.rkey;
    mr->vmr.mr_type = URXE_IBV_MR_TYPE_MR;
    mr->vmr.access = access;
    return &mr->vmr.ibv_mr;
  });
}

// ibv_rereg_mr: in place, lkey/rkey kept (as kernel rxe); libibverbs itself then updates mr->pd, addr and
// length. A failure returns the errno value (the core turns it into IBV_REREG_MR_ERR_CMD) with errno set.
int urxe_rereg_mr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access) {
  const int rc = guarded(EIO, [&] {
    ibv_mr& mr = vmr->ibv_mr;
    uint32_t pd = 0;
    if (flags & IBV_REREG_MR_CHANGE_PD) {
      if (!ibpd || ibpd->context != mr.context) return EINVAL;
      pd = to_pd(ibpd)->handle;
    }
    // A new range, or new rights on the old one, must pass what pinning would check (as in reg_mr).
    if (flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS)) {
      const bool moved = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
      const int acc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : vmr->access;
      if (int r = pin_check(moved ? addr : mr.addr, moved ? length : mr.length, acc)) return r;
    }
    if (int r = state_of(mr.context)
                    .engine->rereg_mr(mr.lkey, static_cast<uint32_t>(flags), pd, addr, length,
                                      static_cast<uint32_t>(access)))
      return r;
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) vmr->access = access;
    return 0;
  });
  if (rc) errno = rc;
  return rc;
}

int urxe_dereg_mr(verbs_mr* vmr) {
  return guarded(EIO, [&] {
    if (int rc = state_of(vmr->ibv_mr.context).engine->dereg_mr(vmr->ibv_mr.lkey)) return rc;
    zfree(reinterpret_cast<UrxeMr*>(vmr));
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------------
// CQ

bool is_our_channel(ibv_comp_channel* ch) {
  return ch && is_urxe_context(ch->context) && reinterpret_cast<UrxeChannel*>(ch)->magic == kChannelMagic;
}

int cq_poll_into(UrxeCq* cq, int n, ibv_wc* wc) {
  cq->ctx->app_poll();
  en::Engine& e = *cq->ctx->engine;
  constexpr int kChunk = 16;
  en::Wc buf[kChunk];
  int total = 0;
  while (total < n) {
    const int want = std::min(kChunk, n - total);
    const int got = e.poll_cq(cq->handle, want, buf);
    if (got < 0) return total ? total : got;
    std::memcpy(wc + total, buf, sizeof(en::Wc) * static_cast<size_t>(got));
    total += got;
    if (got < want) break;
  }
  return total;
}

int urxe_poll_cq(ibv_cq* ibcq, int n, ibv_wc* wc) {
  return guarded(-EIO, [&] { return cq_poll_into(to_cq(ibcq), n, wc); });
}

int urxe_req_notify_cq(ibv_cq* ibcq, int solicited_only) {
  return guarded(EIO, [&] {
    UrxeCq* cq = to_cq(ibcq);
    const int rc = cq->ctx->engine->req_notify_cq(cq->handle, solicited_only != 0);
    if (rc == 0 && ibcq->channel) cq->ctx->cq_armed(cq);
    return rc;
  });
}

void urxe_cq_event(ibv_cq*) {}

// ibv_resize_cq: completions not yet polled are kept; EINVAL below their number (as rxe). Returns the errno.
int urxe_resize_cq(ibv_cq* ibcq, int cqe) {
  const int rc = guarded(EIO, [&] {
    UrxeCq* cq = to_cq(ibcq);
    if (cqe < 1) return EINVAL;
    uint32_t actual = 0;
    if (int r = cq->ctx->engine->resize_cq(cq->handle, static_cast<uint32_t>(cqe), &actual)) return r;
    ibcq->cqe = static_cast<int>(actual);
    return 0;
  });
  if (rc) errno = rc;
  return rc;
}

UrxeCq* create_cq_common(ibv_context* ibctx, int cqe, ibv_comp_channel* channel, int comp_vector) {
  ContextState& st = state_of(ibctx);
  if (cqe < 1 || static_cast<uint32_t>(cqe) > st.engine->device_attr().max_cqe || comp_vector < 0 ||
      comp_vector >= ibctx->num_comp_vectors || (channel && !is_our_channel(channel))) {
    errno = EINVAL;
    return nullptr;
  }
  uint32_t h, actual = 0;
  if (int rc = st.engine->create_cq(static_cast<uint32_t>(cqe), h, &actual)) {
    errno = rc;
    return nullptr;
  }
  auto* cq = zalloc<UrxeCq>();
  cq->handle = h;
  cq->ctx = &st;
  cq->vcq.cq.context = ibctx;
  cq->vcq.cq.channel = channel;
  cq->vcq.cq.cqe = static_cast<int>(actual ? actual : static_cast<uint32_t>(cqe));
  cq->vcq.cq.handle = h;
  std::lock_guard g(st.map_mu);
  st.cqs[h] = cq;
  return cq;
}

ibv_cq* urxe_create_cq(ibv_context* ibctx, int cqe, ibv_comp_channel* channel, int comp_vector) {
  return guarded<ibv_cq*>(nullptr, [&]() -> ibv_cq* {
    UrxeCq* cq = create_cq_common(ibctx, cqe, channel, comp_vector);
    return cq ? &cq->vcq.cq : nullptr;
  });
}

// ---- ibv_cq_ex: one completion at a time through start_poll / next_poll ----
UrxeCq* cqx(ibv_cq_ex* c) {
  return reinterpret_cast<UrxeCq*>(c);
}

int cqx_fetch(ibv_cq_ex* c) {
  UrxeCq* cq = cqx(c);
  const int got = cq->ctx->engine->poll_cq(cq->handle, 1, &cq->cur);
  if (got < 0) return -got;
  if (got == 0) return ENOENT;
  c->wr_id = cq->cur.wr_id;
  c->status = static_cast<ibv_wc_status>(cq->cur.status);
  return 0;
}
int cqx_start_poll(ibv_cq_ex* c, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  return guarded(EIO, [&] {
    cqx(c)->ctx->app_poll();
    return cqx_fetch(c);
  });
}
int cqx_next_poll(ibv_cq_ex* c) {
  return guarded(EIO, [&] { return cqx_fetch(c); });
}
void cqx_end_poll(ibv_cq_ex*) {}
ibv_wc_opcode cqx_read_opcode(ibv_cq_ex* c) {
  return static_cast<ibv_wc_opcode>(cqx(c)->cur.opcode);
}
uint32_t cqx_read_vendor_err(ibv_cq_ex* c) {
  return cqx(c)->cur.vendor_err;
}
uint32_t cqx_read_byte_len(ibv_cq_ex* c) {
  return cqx(c)->cur.byte_len;
}
__be32 cqx_read_imm_data(ibv_cq_ex* c) {
  return cqx(c)->cur.imm_data;
}
uint32_t cqx_read_qp_num(ibv_cq_ex* c) {
  return cqx(c)->cur.qp_num;
}
uint32_t cqx_read_src_qp(ibv_cq_ex* c) {
  return cqx(c)->cur.src_qp;
}
unsigned int cqx_read_wc_flags(ibv_cq_ex* c) {
  return cqx(c)->cur.wc_flags;
}
uint32_t cqx_read_slid(ibv_cq_ex* c) {
  return cqx(c)->cur.slid;
}
uint8_t cqx_read_sl(ibv_cq_ex* c) {
  return cqx(c)->cur.sl;
}
uint8_t cqx_read_dlid_path_bits(ibv_cq_ex* c) {
  return cqx(c)->cur.dlid_path_bits;
}

ibv_cq_ex* urxe_create_cq_ex(ibv_context* ibctx, ibv_cq_init_attr_ex* attr) {
  return guarded<ibv_cq_ex*>(nullptr, [&]() -> ibv_cq_ex* {
    constexpr uint64_t kWcFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                  IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                  IBV_WC_EX_WITH_DLID_PATH_BITS;
    if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    if ((attr->wc_flags & ~kWcFlags) || ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                                         (attr->flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)))) {
      errno = EOPNOTSUPP;  // timestamps, ignore-overrun: not supported
      return nullptr;
    }
    UrxeCq* cq = create_cq_common(ibctx, static_cast<int>(attr->cqe), attr->channel,
                                  static_cast<int>(attr->comp_vector));
    if (!cq) return nullptr;
    ibv_cq_ex& x = cq->vcq.cq_ex;
    x.start_poll = cqx_start_poll;
    x.next_poll = cqx_next_poll;
    x.end_poll = cqx_end_poll;
    x.read_opcode = cqx_read_opcode;
    x.read_vendor_err = cqx_read_vendor_err;
    x.read_wc_flags = cqx_read_wc_flags;
    if (attr->wc_flags & IBV_WC_EX_WITH_BYTE_LEN) x.read_byte_len = cqx_read_byte_len;
    if (attr->wc_flags & IBV_WC_EX_WITH_IMM) x.read_imm_data = cqx_read_imm_data;
    if (attr->wc_flags & IBV_WC_EX_WITH_QP_NUM) x.read_qp_num = cqx_read_qp_num;
    if (attr->wc_flags & IBV_WC_EX_WITH_SRC_QP) x.read_src_qp = cqx_read_src_qp;
    if (attr->wc_flags & IBV_WC_EX_WITH_SLID) x.read_slid = cqx_read_slid;
    if (attr->wc_flags & IBV_WC_EX_WITH_SL) x.read_sl = cqx_read_sl;
    if (attr->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS) x.read_dlid_path_bits = cqx_read_dlid_path_bits;
    return &x;
  });
}

// Waits (on the object's own mutex/cond, which the ack verbs signal) until the app acknowledged every event
// reported for it, as the kernel did before destroy returned.
void wait_acked(pthread_mutex_t* mu, pthread_cond_t* cond, const uint32_t* done_a, uint32_t want_a,
                const uint32_t* done_b, uint32_t want_b) {
  pthread_mutex_lock(mu);
  while (*done_a != want_a || (done_b && *done_b != want_b)) pthread_cond_wait(cond, mu);
  pthread_mutex_unlock(mu);
}

int urxe_destroy_cq(ibv_cq* ibcq) {
  return guarded(EIO, [&] {
    UrxeCq* cq = to_cq(ibcq);
    ContextState& st = *cq->ctx;
    if (int rc = st.engine->destroy_cq(cq->handle)) return rc;
    uint32_t comp, async;
    {
      std::lock_guard g(st.map_mu);
      st.cqs.erase(cq->handle);
      st.cq_disarmed(cq);
      const uint64_t self = reinterpret_cast<uintptr_t>(ibcq);
      comp = cq->comp_reported;
      if (auto* ch = reinterpret_cast<UrxeChannel*>(ibcq->channel))
        comp -= purge_records(ch->channel.fd, ch->write_fd, 8, self);
      async = cq->async_reported - purge_records(st.async_rd, st.async_wr, 16, self);
    }
    wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->comp_events_completed, comp, &ibcq->async_events_completed,
               async);
    zfree(cq);
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------------
// QP

en::QpCap to_cap(const ibv_qp_cap& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}
void from_cap(const en::QpCap& c, ibv_qp_cap& o) {
  o.max_send_wr = c.max_send_wr;
  o.max_recv_wr = c.max_recv_wr;
  o.max_send_sge = c.max_send_sge;
  o.max_recv_sge = c.max_recv_sge;
  o.max_inline_data = c.max_inline_data;
}

bool our_cq(ibv_cq* c, ibv_context* ctx) {
  return c && c->context == ctx;
}

ibv_qp* create_qp_common(ibv_context* ibctx, ibv_pd* ibpd, ibv_qp_init_attr* attr) {
  ContextState& st = state_of(ibctx);
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!ibpd || ibpd->context != ibctx || !our_cq(attr->send_cq, ibctx) || !our_cq(attr->recv_cq, ibctx) ||
      (attr->srq && attr->srq->context != ibctx)) {
    errno = EINVAL;
    return nullptr;
  }
  en::QpInitAttr init;
  init.send_cq = to_cq(attr->send_cq)->handle;
  init.recv_cq = to_cq(attr->recv_cq)->handle;
  init.srq = attr->srq ? to_srq(attr->srq)->handle : 0;
  init.cap = to_cap(attr->cap);
  init.qp_type = static_cast<en::QpType>(attr->qp_type);
  init.sq_sig_all = attr->sq_sig_all != 0;
  uint32_t qpn;
  en::QpCap actual;
  if (int rc = st.engine->create_qp(to_pd(ibpd)->handle, init, qpn, &actual)) {
    errno = rc;
    return nullptr;
  }
  from_cap(actual, attr->cap);  // ibv_create_qp reports the capacities granted
  auto* qp = zalloc<UrxeQp>();
  qp->ctx = &st;
  qp->type = init.qp_type;
  ibv_qp& q = qp->vqp.qp;
  // ibv_create_qp fills nothing itself: everything the kernel path set is ours to set.
  q.context = ibctx;
  q.qp_context = attr->qp_context;
  q.pd = ibpd;
  q.send_cq = attr->send_cq;
  q.recv_cq = attr->recv_cq;
  q.srq = attr->srq;
  q.handle = qpn;
  q.qp_num = qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  q.events_completed = 0;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  qp->vqp.comp_mask = 0;  // no ibv_qp_ex ops: ibv_qp_to_qp_ex() must return NULL
  std::lock_guard g(st.map_mu);
  st.qps[qpn] = qp;
  return &q;
}

ibv_qp* urxe_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return guarded<ibv_qp*>(nullptr, [&] { return create_qp_common(pd->context, pd, attr); });
}

// ---- ibv_qp_ex: work requests built with ibv_wr_*() between wr_start and wr_complete ----
// Preallocated at create time for max_send_wr WRs, their SGEs and their inline bytes, so building and
// posting allocate nothing. A builder error (too many WRs or SGEs) is reported by wr_complete.
struct WrBatch {
  uint32_t max_wr = 0, max_sge = 0, max_inline = 0;
  std::vector<en::SendWr> wrs;
  std::vector<en::Sge> sges;        // max_sge per WR
  std::vector<uint8_t> inline_buf;  // max_inline per WR
  uint32_t n = 0;
  int err = 0;
};

UrxeQp* qpx_qp(ibv_qp_ex* x) {
  return reinterpret_cast<UrxeQp*>(x);
}

en::SendWr* wr_new(ibv_qp_ex* x, en::WrOpcode op) {
  WrBatch& b = *qpx_qp(x)->batch;
  if (b.n >= b.max_wr) {
    b.err = ENOMEM;
    return nullptr;
  }
  en::SendWr& w = b.wrs[b.n++];
  w = en::SendWr{};
  w.wr_id = x->wr_id;
  w.send_flags = x->wr_flags;
  w.opcode = op;
  return &w;
}
en::SendWr* wr_cur(ibv_qp_ex* x) {
  WrBatch& b = *qpx_qp(x)->batch;
  return b.n ? &b.wrs[b.n - 1] : nullptr;
}

void wrx_rdma(ibv_qp_ex* x, en::WrOpcode op, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (en::SendWr* w = wr_new(x, op)) {
    w->rdma.rkey = rkey;
    w->rdma.remote_addr = addr;
    w->imm_data = imm;
  }
}
void wrx_rdma_write(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  wrx_rdma(x, en::WR_RDMA_WRITE, rkey, addr, 0);
}
void wrx_rdma_write_imm(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, __be32 imm) {
  wrx_rdma(x, en::WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}
void wrx_rdma_read(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  wrx_rdma(x, en::WR_RDMA_READ, rkey, addr, 0);
}
void wrx_send(ibv_qp_ex* x) {
  wr_new(x, en::WR_SEND);
}
void wrx_send_imm(ibv_qp_ex* x, __be32 imm) {
  if (en::SendWr* w = wr_new(x, en::WR_SEND_WITH_IMM)) w->imm_data = imm;
}
void wrx_send_inv(ibv_qp_ex* x, uint32_t rkey) {
  if (en::SendWr* w = wr_new(x, en::WR_SEND_WITH_INV)) w->invalidate_rkey = rkey;
}
void wrx_local_inv(ibv_qp_ex* x, uint32_t rkey) {
  if (en::SendWr* w = wr_new(x, en::WR_LOCAL_INV)) w->invalidate_rkey = rkey;
}
void wrx_cmp_swp(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  if (en::SendWr* w = wr_new(x, en::WR_ATOMIC_CMP_AND_SWP)) {
    w->atomic.rkey = rkey;
    w->atomic.remote_addr = addr;
    w->atomic.compare_add = compare;
    w->atomic.swap = swap;
  }
}
void wrx_fetch_add(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (en::SendWr* w = wr_new(x, en::WR_ATOMIC_FETCH_AND_ADD)) {
    w->atomic.rkey = rkey;
    w->atomic.remote_addr = addr;
    w->atomic.compare_add = add;
  }
}
void wrx_set_ud_addr(ibv_qp_ex* x, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  if (en::SendWr* w = wr_cur(x)) {
    w->ud.ah = ah ? reinterpret_cast<UrxeAh*>(ah)->handle : 0;
    w->ud.remote_qpn = remote_qpn;
    w->ud.remote_qkey = remote_qkey;
  }
}
void wrx_set_sge_list(ibv_qp_ex* x, size_t num, const ibv_sge* list) {
  WrBatch& b = *qpx_qp(x)->batch;
  en::SendWr* w = wr_cur(x);
  if (!w) return;
  if (num > b.max_sge) {
    b.err = EINVAL;
    return;
  }
  en::Sge* dst = &b.sges[size_t{b.n - 1} * b.max_sge];
  for (size_t i = 0; i < num; ++i) dst[i] = {list[i].addr, list[i].length, list[i].lkey};
  w->sg_list = dst;
  w->num_sge = static_cast<int>(num);
}
void wrx_set_sge(ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge one{addr, length, lkey};
  wrx_set_sge_list(x, 1, &one);
}
void wrx_set_inline_data_list(ibv_qp_ex* x, size_t num, const ibv_data_buf* bufs) {
  WrBatch& b = *qpx_qp(x)->batch;
  en::SendWr* w = wr_cur(x);
  if (!w) return;
  size_t total = 0;
  for (size_t i = 0; i < num; ++i) total += bufs[i].length;
  if (total > b.max_inline) {
    b.err = EINVAL;
    return;
  }
  uint8_t* dst = &b.inline_buf[size_t{b.n - 1} * b.max_inline];
  size_t off = 0;
  for (size_t i = 0; i < num; ++i) {
    if (bufs[i].length) std::memcpy(dst + off, bufs[i].addr, bufs[i].length);
    off += bufs[i].length;
  }
  en::Sge* sge = &b.sges[size_t{b.n - 1} * b.max_sge];
  *sge = {reinterpret_cast<uintptr_t>(dst), static_cast<uint32_t>(total), 0};
  w->sg_list = sge;
  w->num_sge = 1;
  w->send_flags |= en::SEND_INLINE;
}
void wrx_set_inline_data(ibv_qp_ex* x, void* addr, size_t length) {
  const ibv_data_buf one{addr, length};
  wrx_set_inline_data_list(x, 1, &one);
}
void wrx_start(ibv_qp_ex* x) {
  WrBatch& b = *qpx_qp(x)->batch;
  b.n = 0;
  b.err = 0;
}
void wrx_abort(ibv_qp_ex* x) {
  wrx_start(x);
}
int wrx_complete(ibv_qp_ex* x) {
  UrxeQp* qp = qpx_qp(x);
  WrBatch& b = *qp->batch;
  int rc = b.err;
  if (!rc && b.n) {
    for (uint32_t i = 0; i + 1 < b.n; ++i) b.wrs[i].next = &b.wrs[i + 1];
    b.wrs[b.n - 1].next = nullptr;
    const en::SendWr* bad = nullptr;
    try {
      rc = qp->ctx->engine->post_send(qp->vqp.qp.qp_num, b.wrs.data(), &bad);
    } catch (...) {
      rc = ENOMEM;
    }
    qp->ctx->doorbell_ring();
  }
  b.n = 0;
  b.err = 0;
  return rc;
}

ibv_qp* urxe_create_qp_ex(ibv_context* ibctx, ibv_qp_init_attr_ex* ax) {
  return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
    if (!(ax->comp_mask & IBV_QP_INIT_ATTR_PD)) {
      errno = EINVAL;
      return nullptr;
    }
    if (ax->comp_mask &
        ~uint32_t(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
      errno = EOPNOTSUPP;  // XRC, TSO, RSS: not supported
      return nullptr;
    }
    constexpr uint64_t kSendOps =
        IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
        IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
    const bool want_ex = ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if (want_ex && (ax->send_ops_flags & ~kSendOps)) {
      errno = EOPNOTSUPP;  // memory windows, TSO, atomic write
      return nullptr;
    }
    if ((ax->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && ax->create_flags) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    ibv_qp_init_attr a{};
    a.qp_context = ax->qp_context;
    a.send_cq = ax->send_cq;
    a.recv_cq = ax->recv_cq;
    a.srq = ax->srq;
    a.cap = ax->cap;
    a.qp_type = ax->qp_type;
    a.sq_sig_all = ax->sq_sig_all;
    ibv_qp* qp = create_qp_common(ibctx, ax->pd, &a);
    if (!qp) return nullptr;
    ax->cap = a.cap;
    if (want_ex) {
      UrxeQp* uq = to_qp(qp);
      auto* b = new WrBatch;
      b->max_wr = std::max(a.cap.max_send_wr, 1u);
      b->max_sge = std::max(a.cap.max_send_sge, 1u);
      b->max_inline = a.cap.max_inline_data;
      b->wrs.resize(b->max_wr);
      b->sges.resize(size_t{b->max_wr} * b->max_sge);
      b->inline_buf.resize(size_t{b->max_wr} * b->max_inline);
      uq->batch = b;
      ibv_qp_ex& x = uq->vqp.qp_ex;
      x.comp_mask = 0;
      x.wr_atomic_cmp_swp = wrx_cmp_swp;
      x.wr_atomic_fetch_add = wrx_fetch_add;
      x.wr_local_inv = wrx_local_inv;
      x.wr_rdma_read = wrx_rdma_read;
      x.wr_rdma_write = wrx_rdma_write;
      x.wr_rdma_write_imm = wrx_rdma_write_imm;
      x.wr_send = wrx_send;
      x.wr_send_imm = wrx_send_imm;
      x.wr_send_inv = wrx_send_inv;
      x.wr_set_ud_addr = wrx_set_ud_addr;
      x.wr_set_inline_data = wrx_set_inline_data;
      x.wr_set_inline_data_list = wrx_set_inline_data_list;
      x.wr_set_sge = wrx_set_sge;
      x.wr_set_sge_list = wrx_set_sge_list;
      x.wr_start = wrx_start;
      x.wr_complete = wrx_complete;
      x.wr_abort = wrx_abort;
      uq->vqp.comp_mask |= URXE_VERBS_QP_EX;  // now ibv_qp_to_qp_ex() hands out &qp_ex
    }
    return qp;
  });
}

// The destination MAC of a RoCE address vector: our own MAC for our own GIDs (two QPs on one device),
// the multicast mapping for multicast GIDs, else the kernel's neighbour table (libibverbs' resolver).
int resolve_dmac(ibv_context* ibctx, ContextState& st, ibv_ah_attr& ah, en::AddressVector& av) {
  if (!ah.is_global) return EINVAL;  // RoCE needs a GRH
  std::memcpy(av.dgid.data(), ah.grh.dgid.raw, 16);
  av.sgid_index = ah.grh.sgid_index;
  av.hop_limit = ah.grh.hop_limit;
  av.traffic_class = ah.grh.traffic_class;
  av.flow_label = ah.grh.flow_label;
  av.sl = ah.sl;
  av.port_num = ah.port_num ? ah.port_num : 1;
  if (ah.grh.sgid_index >= st.config.gid_tbl_len) return EINVAL;
  const auto gids = st.engine->gid_table();
  for (const auto& g : gids) {
    if (g != urxe::wire::Gid{} && g == av.dgid) {
      av.dmac = st.netdev.mac;
      return 0;
    }
  }
  if (av.dgid[0] == 0xff) {  // IPv6 multicast → 33:33:xx:xx:xx:xx
    av.dmac = {0x33, 0x33, av.dgid[12], av.dgid[13], av.dgid[14], av.dgid[15]};
    return 0;
  }
  if (urxe::wire::gid_is_ipv4_mapped(av.dgid) && (av.dgid[12] & 0xf0) == 0xe0) {  // IPv4 multicast
    av.dmac = {0x01, 0x00, 0x5e, static_cast<uint8_t>(av.dgid[13] & 0x7f), av.dgid[14], av.dgid[15]};
    return 0;
  }
  uint16_t vid = 0xffff;
  if (ibv_resolve_eth_l2_from_gid(ibctx, &ah, av.dmac.data(), &vid) != 0) return errno ? errno : EHOSTUNREACH;
  return 0;
}

int urxe_modify_qp(ibv_qp* ibqp, ibv_qp_attr* a, int mask) {
  return guarded(EIO, [&] {
    UrxeQp* qp = to_qp(ibqp);
    ContextState& st = *qp->ctx;
    en::QpAttr e;
    e.qp_state = static_cast<en::QpState>(a->qp_state);
    e.cur_qp_state = static_cast<en::QpState>(a->cur_qp_state);
    e.path_mtu = static_cast<en::Mtu>(a->path_mtu);
    e.path_mig_state = static_cast<en::MigState>(a->path_mig_state);
    e.qkey = a->qkey;
    e.rq_psn = a->rq_psn;
    e.sq_psn = a->sq_psn;
    e.dest_qp_num = a->dest_qp_num;
    e.qp_access_flags = static_cast<uint32_t>(a->qp_access_flags);
    e.cap = to_cap(a->cap);
    e.pkey_index = a->pkey_index;
    e.en_sqd_async_notify = a->en_sqd_async_notify;
    e.sq_draining = a->sq_draining;
    e.max_rd_atomic = a->max_rd_atomic;
    e.max_dest_rd_atomic = a->max_dest_rd_atomic;
    e.min_rnr_timer = a->min_rnr_timer;
    e.port_num = a->port_num;
    e.timeout = a->timeout;
    e.retry_cnt = a->retry_cnt;
    e.rnr_retry = a->rnr_retry;
    e.rate_limit = a->rate_limit;
    if (mask & IBV_QP_AV) {
      if (int rc = resolve_dmac(ibqp->context, st, a->ah_attr, e.ah_attr)) return rc;
    }
    return st.engine->modify_qp(ibqp->qp_num, e, static_cast<uint32_t>(mask));
  });
}

int urxe_query_qp(ibv_qp* ibqp, ibv_qp_attr* a, int /*mask*/, ibv_qp_init_attr* init) {
  return guarded(EIO, [&] {
    UrxeQp* qp = to_qp(ibqp);
    en::QpAttr e;
    en::QpInitAttr ei;
    if (int rc = qp->ctx->engine->query_qp(ibqp->qp_num, e, &ei)) return rc;
    std::memset(a, 0, sizeof *a);
    a->qp_state = static_cast<ibv_qp_state>(e.qp_state);
    a->cur_qp_state = static_cast<ibv_qp_state>(e.cur_qp_state);
    a->path_mtu = static_cast<ibv_mtu>(e.path_mtu);
    a->path_mig_state = static_cast<ibv_mig_state>(e.path_mig_state);
    a->qkey = e.qkey;
    a->rq_psn = e.rq_psn;
    a->sq_psn = e.sq_psn;
    a->dest_qp_num = e.dest_qp_num;
    a->qp_access_flags = static_cast<unsigned>(e.qp_access_flags);
    from_cap(e.cap, a->cap);
    a->ah_attr.is_global = 1;
    std::memcpy(a->ah_attr.grh.dgid.raw, e.ah_attr.dgid.data(), 16);
    a->ah_attr.grh.sgid_index = e.ah_attr.sgid_index;
    a->ah_attr.grh.hop_limit = e.ah_attr.hop_limit;
    a->ah_attr.grh.traffic_class = e.ah_attr.traffic_class;
    a->ah_attr.grh.flow_label = e.ah_attr.flow_label;
    a->ah_attr.sl = e.ah_attr.sl;
    a->ah_attr.port_num = e.ah_attr.port_num;
    a->pkey_index = e.pkey_index;
    a->en_sqd_async_notify = e.en_sqd_async_notify;
    a->sq_draining = e.sq_draining;
    a->max_rd_atomic = e.max_rd_atomic;
    a->max_dest_rd_atomic = e.max_dest_rd_atomic;
    a->min_rnr_timer = e.min_rnr_timer;
    a->port_num = e.port_num;
    a->timeout = e.timeout;
    a->retry_cnt = e.retry_cnt;
    a->rnr_retry = e.rnr_retry;
    a->rate_limit = e.rate_limit;
    if (init) {
      std::memset(init, 0, sizeof *init);
      init->qp_context = ibqp->qp_context;
      init->send_cq = ibqp->send_cq;
      init->recv_cq = ibqp->recv_cq;
      init->srq = ibqp->srq;
      from_cap(ei.cap, init->cap);
      init->qp_type = ibqp->qp_type;
      init->sq_sig_all = ei.sq_sig_all;
    }
    return 0;
  });
}

int urxe_destroy_qp(ibv_qp* ibqp) {
  return guarded(EIO, [&] {
    UrxeQp* qp = to_qp(ibqp);
    ContextState& st = *qp->ctx;
    if (int rc = st.engine->destroy_qp(ibqp->qp_num)) return rc;
    uint32_t async;
    {
      std::lock_guard g(st.map_mu);
      st.qps.erase(ibqp->qp_num);
      async =
          qp->async_reported - purge_records(st.async_rd, st.async_wr, 16, reinterpret_cast<uintptr_t>(ibqp));
    }
    wait_acked(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed, async, nullptr, 0);
    pthread_cond_destroy(&ibqp->cond);
    pthread_mutex_destroy(&ibqp->mutex);
    delete qp->batch;
    zfree(qp);
    return 0;
  });
}

// ---- data path: WRs converted in fixed-size chunks on the stack (no allocation, no syscall) ----
constexpr int kWrChunk = 16;

int urxe_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  UrxeQp* qp = to_qp(ibqp);
  en::Engine& eng = *qp->ctx->engine;
  try {
    while (wr) {
      en::SendWr ew[kWrChunk];
      ibv_send_wr* src[kWrChunk];
      int n = 0;
      for (ibv_send_wr* w = wr; w && n < kWrChunk; w = w->next, ++n) {
        en::SendWr& e = ew[n];
        e = en::SendWr{};
        src[n] = w;
        e.wr_id = w->wr_id;
        e.sg_list = reinterpret_cast<const en::Sge*>(w->sg_list);
        e.num_sge = w->num_sge;
        e.opcode = static_cast<en::WrOpcode>(w->opcode);
        e.send_flags = w->send_flags;
        e.imm_data = w->imm_data;  // shares storage with invalidate_rkey, as in the engine
        e.invalidate_rkey = w->invalidate_rkey;
        if (qp->type == en::QPT_UD) {
          e.ud.ah = w->wr.ud.ah ? reinterpret_cast<UrxeAh*>(w->wr.ud.ah)->handle : 0;
          e.ud.remote_qpn = w->wr.ud.remote_qpn;
          e.ud.remote_qkey = w->wr.ud.remote_qkey;
        } else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
          e.atomic.remote_addr = w->wr.atomic.remote_addr;
          e.atomic.compare_add = w->wr.atomic.compare_add;
          e.atomic.swap = w->wr.atomic.swap;
          e.atomic.rkey = w->wr.atomic.rkey;
        } else {
          e.rdma.remote_addr = w->wr.rdma.remote_addr;
          e.rdma.rkey = w->wr.rdma.rkey;
        }
        if (n) ew[n - 1].next = &e;
      }
      const en::SendWr* bad = nullptr;
      int rc = eng.post_send(ibqp->qp_num, ew, &bad);
      qp->ctx->doorbell_ring();
      if (rc) {
        URXE_DEBUG("post_send on QP 0x%x failed: %s", ibqp->qp_num, std::strerror(rc));
        *bad_wr = bad ? src[bad - ew] : wr;
        return rc;
      }
      wr = src[n - 1]->next;
    }
    return 0;
  } catch (...) {
    *bad_wr = wr;
    return ENOMEM;
  }
}

template <class PostFn>
int post_recv_list(ContextState& st, ibv_recv_wr* wr, ibv_recv_wr** bad_wr, PostFn&& post) {
  try {
    while (wr) {
      en::RecvWr ew[kWrChunk];
      ibv_recv_wr* src[kWrChunk];
      int n = 0;
      for (ibv_recv_wr* w = wr; w && n < kWrChunk; w = w->next, ++n) {
        ew[n] = en::RecvWr{w->wr_id, nullptr, reinterpret_cast<const en::Sge*>(w->sg_list), w->num_sge};
        src[n] = w;
        if (n) ew[n - 1].next = &ew[n];
      }
      const en::RecvWr* bad = nullptr;
      int rc = post(ew, &bad);
      st.doorbell_ring();
      if (rc) {
        *bad_wr = bad ? src[bad - ew] : wr;
        return rc;
      }
      wr = src[n - 1]->next;
    }
    return 0;
  } catch (...) {
    *bad_wr = wr;
    return ENOMEM;
  }
}

int urxe_post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  ContextState& st = *to_qp(ibqp)->ctx;
  return post_recv_list(st, wr, bad_wr, [&](const en::RecvWr* w, const en::RecvWr** bad) {
    return st.engine->post_recv(ibqp->qp_num, w, bad);
  });
}

// ---------------------------------------------------------------------------------------------------
// SRQ

ibv_srq* urxe_create_srq(ibv_pd* ibpd, ibv_srq_init_attr* attr) {
  return guarded<ibv_srq*>(nullptr, [&]() -> ibv_srq* {
    ContextState& st = state_of(ibpd->context);
    en::SrqAttr in{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit}, actual;
    uint32_t h;
    if (int rc = st.engine->create_srq(to_pd(ibpd)->handle, in, h, &actual)) {
      errno = rc;
      return nullptr;
    }
    attr->attr.max_wr = actual.max_wr;
    attr->attr.max_sge = actual.max_sge;
    auto* srq = zalloc<UrxeSrq>();
    srq->handle = h;
    srq->ctx = &st;
    srq->vsrq.srq.context = ibpd->context;
    srq->vsrq.srq.srq_context = attr->srq_context;
    srq->vsrq.srq.pd = ibpd;
    srq->vsrq.srq.handle = h;
    srq->vsrq.srq_type = IBV_SRQT_BASIC;
    std::lock_guard g(st.map_mu);
    st.srqs[h] = srq;
    return &srq->vsrq.srq;
  });
}

int urxe_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  return guarded(EIO, [&] {
    UrxeSrq* srq = to_srq(ibsrq);
    en::SrqAttr a{attr->max_wr, attr->max_sge, attr->srq_limit};
    return srq->ctx->engine->modify_srq(srq->handle, a, static_cast<uint32_t>(mask));
  });
}

int urxe_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  return guarded(EIO, [&] {
    UrxeSrq* srq = to_srq(ibsrq);
    en::SrqAttr a;
    if (int rc = srq->ctx->engine->query_srq(srq->handle, a)) return rc;
    attr->max_wr = a.max_wr;
    attr->max_sge = a.max_sge;
    attr->srq_limit = a.srq_limit;
    return 0;
  });
}

int urxe_destroy_srq(ibv_srq* ibsrq) {
  return guarded(EIO, [&] {
    UrxeSrq* srq = to_srq(ibsrq);
    ContextState& st = *srq->ctx;
    if (int rc = st.engine->destroy_srq(srq->handle)) return rc;
    uint32_t async;
    {
      std::lock_guard g(st.map_mu);
      st.srqs.erase(srq->handle);
      async = srq->async_reported -
              purge_records(st.async_rd, st.async_wr, 16, reinterpret_cast<uintptr_t>(ibsrq));
    }
    wait_acked(&ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed, async, nullptr, 0);
    zfree(srq);
    return 0;
  });
}

int urxe_post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  UrxeSrq* srq = to_srq(ibsrq);
  return post_recv_list(*srq->ctx, wr, bad_wr, [&](const en::RecvWr* w, const en::RecvWr** bad) {
    return srq->ctx->engine->post_srq_recv(srq->handle, w, bad);
  });
}

// ---------------------------------------------------------------------------------------------------
// AH

ibv_ah* urxe_create_ah(ibv_pd* ibpd, ibv_ah_attr* attr) {
  return guarded<ibv_ah*>(nullptr, [&]() -> ibv_ah* {
    ContextState& st = state_of(ibpd->context);
    en::AddressVector av;
    if (int rc = resolve_dmac(ibpd->context, st, *attr, av)) {
      errno = rc;
      return nullptr;
    }
    uint32_t h;
    if (int rc = st.engine->create_ah(to_pd(ibpd)->handle, av, h)) {
      errno = rc;
      return nullptr;
    }
    auto* ah = zalloc<UrxeAh>();
    ah->ah.context = ibpd->context;
    ah->ah.pd = ibpd;
    ah->ah.handle = h;
    ah->handle = h;
    return &ah->ah;
  });
}

int urxe_destroy_ah(ibv_ah* ibah) {
  return guarded(EIO, [&] {
    auto* ah = reinterpret_cast<UrxeAh*>(ibah);
    if (int rc = state_of(ibah->context).engine->destroy_ah(ah->handle)) return rc;
    zfree(ah);
    return 0;
  });
}

const verbs_match_ent urxe_match_table[] = {{nullptr, {nullptr}, 0, 0, URXE_VERBS_MATCH_SENTINEL}};

}  // namespace

extern "C" {

// Claims exactly the devices whose sysfs directory holds a urxe.conf (match_device), whatever their name.
const verbs_device_ops urxe_dev_ops = {
    "urxe",
    0,
    1,
    urxe_match_table,
    nullptr,
    urxe_match_device,
    urxe_alloc_context,
    nullptr,  // import_context: needs a kernel (EOPNOTSUPP from the core)
    urxe_alloc_device,
    urxe_uninit_device,
};
// The name static builds of rdma-core look for; an alias of the ops above.
extern const verbs_device_ops verbs_provider_urxe
    __attribute__((alias("urxe_dev_ops"), visibility("default")));

}  // extern "C"

namespace {
verbs_context_ops make_ctx_ops() {
  verbs_context_ops o{};
  o.alloc_pd = urxe_alloc_pd;
  o.async_event = urxe_async_event;
  o.cq_event = urxe_cq_event;
  o.create_ah = urxe_create_ah;
  o.create_cq = urxe_create_cq;
  o.create_cq_ex = urxe_create_cq_ex;
  o.create_qp = urxe_create_qp;
  o.create_qp_ex = urxe_create_qp_ex;
  o.create_srq = urxe_create_srq;
  o.dealloc_pd = urxe_dealloc_pd;
  o.dereg_mr = urxe_dereg_mr;
  o.destroy_ah = urxe_destroy_ah;
  o.destroy_cq = urxe_destroy_cq;
  o.destroy_qp = urxe_destroy_qp;
  o.destroy_srq = urxe_destroy_srq;
  o.free_context = urxe_free_context;
  o.modify_qp = urxe_modify_qp;
  o.modify_srq = urxe_modify_srq;
  o.poll_cq = urxe_poll_cq;
  o.post_recv = urxe_post_recv;
  o.post_send = urxe_post_send;
  o.post_srq_recv = urxe_post_srq_recv;
  o.query_device_ex = urxe_query_device_ex;
  o.query_port = urxe_query_port;
  o.query_qp = urxe_query_qp;
  o.query_srq = urxe_query_srq;
  o.reg_mr = urxe_reg_mr;
  o.req_notify_cq = urxe_req_notify_cq;
  o.rereg_mr = urxe_rereg_mr;
  o.resize_cq = urxe_resize_cq;
  return o;
}
const verbs_context_ops& ctx_ops() {
  static const verbs_context_ops ops = make_ctx_ops();
  return ops;
}
}  // namespace

// Registration before main(): with LD_PRELOAD this runs before device discovery, so libibverbs never needs
// to load drivers.
__attribute__((constructor)) static void urxe_register() {
  verbs_register_driver_34(&urxe_dev_ops);
}

// ---------------------------------------------------------------------------------------------------
// Completion channels. libibverbs makes them with a kernel command on cmd_fd and no provider hook, so
// when preloaded we interpose both verbs: a urxe context gets a pipe (read end = channel fd, the progress
// thread writes CQ pointers into the other end); any other context goes to libibverbs' own function.

namespace {
template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlvsym(RTLD_NEXT, name, "IBVERBS_1.0"));
}
}  // namespace

extern "C" __attribute__((visibility("default"))) ibv_comp_channel* ibv_create_comp_channel(
    ibv_context* context) {
  if (!is_urxe_context(context)) {
    using Fn = ibv_comp_channel* (*)(ibv_context*);
    static Fn real = next_symbol<Fn>("ibv_create_comp_channel");
    if (!real) {
      errno = ENOSYS;
      return nullptr;
    }
    return real(context);
  }
  auto* ch = static_cast<UrxeChannel*>(std::calloc(1, sizeof(UrxeChannel)));
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  int fds[2];
  if (!record_pair(fds[0], fds[1])) {
    std::free(ch);
    return nullptr;
  }
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  ch->channel.context = context;
  ch->channel.fd = fds[0];
  ch->channel.refcnt = 0;
  ch->write_fd = fds[1];
  ch->magic = kChannelMagic;
  URXE_DEBUG("ibv_create_comp_channel -> fd %d", fds[0]);
  return &ch->channel;
}

extern "C" __attribute__((visibility("default"))) int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (!is_our_channel(channel)) {
    using Fn = int (*)(ibv_comp_channel*);
    static Fn real = next_symbol<Fn>("ibv_destroy_comp_channel");
    return real ? real(channel) : ENOSYS;
  }
  auto* ch = reinterpret_cast<UrxeChannel*>(channel);
  pthread_mutex_lock(&channel->context->mutex);
  const bool busy = channel->refcnt != 0;  // CQs still use it (the core counts them in verbs_init_cq)
  pthread_mutex_unlock(&channel->context->mutex);
  if (busy) return EBUSY;
  ::close(ch->channel.fd);
  ::close(ch->write_fd);
  ch->magic = 0;
  std::free(ch);
  return 0;
}
