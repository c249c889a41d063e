// The provider's internals, shared by its files (provider/README.md has the map): the wrapper objects
// libibverbs sees (UrxeContext, UrxeCq, ...), ContextState (one per opened context) and the helpers every
// verb uses. Every entry point catches exceptions: none may unwind into libibverbs (C code).
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "provider/abi34.h"
#include "provider/device_tree.h"
#include "provider/gid_watch.h"
#include "provider/log.h"
#include "provider/stats.h"

namespace urxe::provider {

namespace en = urxe::engine;

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
// engine::Wc is ibv_wc field for field, so poll_cq polls straight into the caller's ibv_wc array.
static_assert(sizeof(en::Wc) == sizeof(ibv_wc) && alignof(en::Wc) == alignof(ibv_wc));
#define URXE_SAME_WC(f) \
  static_assert(offsetof(en::Wc, f) == offsetof(ibv_wc, f) && sizeof(en::Wc::f) == sizeof(ibv_wc::f), #f)
URXE_SAME_WC(wr_id);
URXE_SAME_WC(status);
URXE_SAME_WC(opcode);
URXE_SAME_WC(vendor_err);
URXE_SAME_WC(byte_len);
URXE_SAME_WC(imm_data);
URXE_SAME_WC(qp_num);
URXE_SAME_WC(src_qp);
URXE_SAME_WC(wc_flags);
URXE_SAME_WC(pkey_index);
URXE_SAME_WC(slid);
URXE_SAME_WC(sl);
URXE_SAME_WC(dlid_path_bits);
#undef URXE_SAME_WC
// engine::Sge is ibv_sge: SGE lists are passed through untouched.
static_assert(sizeof(en::Sge) == sizeof(ibv_sge) && offsetof(en::Sge, lkey) == offsetof(ibv_sge, lkey));

inline bool debug_on() {  // URXE_LOG=debug or URXE_DEBUG=1 (provider/log.h)
  return urxe::provider::log_enabled(en::LogLevel::debug);
}

void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
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

inline UrxeContext* to_ctx(ibv_context* c) {
  return reinterpret_cast<UrxeContext*>(reinterpret_cast<char*>(c) - offsetof(UrxeContext, vctx) -
                                        offsetof(verbs_context, context));
}
inline UrxeDevice* to_dev(ibv_device* d) {
  return reinterpret_cast<UrxeDevice*>(d);
}
bool is_urxe_context(ibv_context* c);
// Sends the ACKs that app rounds of this process's contexts hold for an answer (a round each that has
// some): the app went on to connection management (the UCMA shim, on each command) instead of answering.
void send_held_acks();
inline UrxeCq* to_cq(ibv_cq* c) {
  return reinterpret_cast<UrxeCq*>(c);
}
inline UrxeQp* to_qp(ibv_qp* q) {
  return reinterpret_cast<UrxeQp*>(q);
}
inline UrxeSrq* to_srq(ibv_srq* s) {
  return reinterpret_cast<UrxeSrq*>(s);
}
inline UrxePd* to_pd(ibv_pd* p) {
  return reinterpret_cast<UrxePd*>(p);
}

// One per opened device context: the engine, its port, the progress thread and the pipes libibverbs reads.
// An en::EventSink that also logs (provider/log.h).
struct ContextState final : urxe::provider::LoggingSink {
  DeviceConfig config;
  urxe::provider::NetdevInfo netdev{};
  SteadyClock clock;
  std::unique_ptr<en::Port> port;
  std::unique_ptr<en::Port> capture;  // pcap tap over *port or null (--pcap, $URXE_PCAP: dpdk/capture_port.h)
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
  void gid_update();  // progress.cc

  // Progress-thread statistics, printed at close with URXE_DEBUG=1.
  uint64_t n_sleeps = 0, n_wake_doorbell = 0, n_wake_port = 0, n_rounds = 0;
  int progress_nice = 0;  // the nice the progress thread runs at (set_progress_nice)

  ~ContextState() override;

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(doorbell_fd, &one, sizeof one);
  }

  bool post_async(uint64_t element, uint32_t type);  // false: the queue was full, the event dropped

  // ---- engine::EventSink (engine lock held) ----
  void async_event(const en::AsyncEvent& ev) override;
  void comp_event(uint32_t cq_handle) override;

  // Who drives the engine. An application thread that busy-polls its CQ runs the engine itself
  // (try_progress in poll_cq): on 2 cores, a progress thread per process competing with two polling apps
  // turns each packet's wait into a scheduler time slice. While the app drives, the progress thread naps
  // (no spinning; woken by a frame or after kNapNs) and posts wake nothing (a long run of them runs a round:
  // doorbell); when the app stops polling or arms a completion channel, the thread takes over: spin, then
  // sleep on the port's rx fd and the doorbell.
  enum SleepMode : int { kAwake = 0, kSleeping = 1, kNapping = 2 };
  static constexpr uint64_t kNapNs = 1000000;
  // On at most two CPUs, while the app polls and nothing needs the thread to watch the port (progress.cc,
  // "quiet"): its waits and steps aside last up to this long.
  static constexpr uint64_t kQuietNapNs = 8000000;
  // An app thread is in the engine: step aside this long at first (doubling up to kNapNs while that goes
  // on). Shorter costs the apps a preemption by this thread's timer more often; longer keeps a
  // memory-polling app that just left the engine waiting for its frames (docs/performance.md).
  static constexpr uint64_t kBusyNapNs = 50000;
  std::atomic<int> sleep_mode{kAwake};
  std::atomic<uint64_t> app_polls{0};  // poll_cq calls (changes = an app thread is polling)
  std::atomic<uint64_t> polls_at_sleep{0};  // app_polls when the thread last slept on the port
  // The app answered ACKs its round held with a post (doorbell), and the thread has not found any held
  // unanswered since: its waits may then outlast kNapNs (progress.cc, quiet).
  std::atomic<bool> holds_answered{false};
  static constexpr uint64_t kWakeAfterPolls = 256;  // polls in one such sleep that wake it (app_poll)
  std::atomic<uint32_t> posts_since_poll{0};  // post_send calls since the last app poll (approximate)
  static constexpr uint32_t kPostsPerRound = 32;
  std::atomic<uint32_t> armed_cqs{0};  // CQs with a channel armed by req_notify_cq (an app may block)
  uint64_t n_naps = 0;

  // An app thread's poll: do the NIC's work here if nobody else is doing it right now.
  void app_poll() {
    const uint64_t polls = app_polls.load(std::memory_order_relaxed) + 1;
    app_polls.store(polls, std::memory_order_relaxed);
    posts_since_poll.store(0, std::memory_order_relaxed);
    const int mode = sleep_mode.load(std::memory_order_relaxed);
    // The thread sleeps on the port, each frame waking it in the kernel although this app reads the frame
    // itself (on 2 busy cores, each wake-up preempts an app), and it stays so until its sleep ends (up to
    // kMaxSleepNs): an app that took up busy-polling during that sleep wakes it, once per sleep, so that
    // it sees the app drive and naps without the port (ib_send_lat's first 10 ms).
    if (mode == kSleeping && polls - polls_at_sleep.load(std::memory_order_relaxed) == kWakeAfterPolls)
      wake();
    // Its round may hold ACKs back for the app's answer (not one that raised a completion event:
    // Engine::try_progress), unless the thread sleeps (it would not send them if the app stopped polling:
    // a napping thread's step is at most kNapNs, or kQuietNapNs while the app answers its holds, and on
    // more than one CPU shorter while ACKs wait when it begins).
    engine->try_progress(nullptr, mode != kSleeping ? en::Engine::Round::app : en::Engine::Round::other);
  }
  void cq_armed(UrxeCq* cq) {
    if (!cq->armed.exchange(true)) armed_cqs.fetch_add(1, std::memory_order_seq_cst);
    if (sleep_mode.load(std::memory_order_seq_cst) == kNapping) wake();
  }
  void cq_disarmed(UrxeCq* cq) {
    if (cq->armed.exchange(false)) armed_cqs.fetch_sub(1, std::memory_order_relaxed);
  }

  // The doorbell. The engine rings it on the posting thread, once per post_send/post_recv/post_srq_recv
  // call that queued work; the post verbs here ring nothing themselves, so a post crosses it once.
  // The queued work (a release store inside the engine) must be visible before we read `sleep_mode`, or
  // both sides can miss each other (x86 lets a load pass an earlier store): hence the full fence. It
  // costs a few nanoseconds. While the thread sleeps on the port, the posting thread runs the round
  // itself (the WQE's frames leave now, from here: on 2 cores a woken thread first has to win a core from a
  // busy application, tens of microseconds) and wakes the thread only when that round could not run or left
  // work or a timer due before the thread's own wake-up (`sleep_until`, at most kMaxSleepNs away).
  void doorbell(bool send) override {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleep_mode.load(std::memory_order_relaxed) != kSleeping) {
      if (!send) return;  // (a receive makes no frame)
      // The app's last poll held ACKs back for its answer (Engine::try_progress): this may be it, so it
      // leaves now, the ACKs after it.
      if (engine->acks_held()) {
        holds_answered.store(true, std::memory_order_relaxed);
        posts_since_poll.store(0, std::memory_order_relaxed);
        engine->try_progress();
        return;
      }
      // The app drives: its next poll sends what it posted. An app that posts a long run before it polls
      // (perftest's bandwidth loop: up to the queue's depth) would hold every frame until then and leave
      // the peer idle (asleep) meanwhile, so every kPostsPerRound post_send calls the post runs a round
      // (between two processes on one device it more than doubles 64 B ib_write_bw's packet rate, with the
      // spin rule in progress.cc; through the veth it changes nothing measurable). 32 leaves apps that post
      // a few WRs per poll as they were.
      uint32_t n = posts_since_poll.load(std::memory_order_relaxed) + 1;
      if (n >= kPostsPerRound) {
        n = 0;
        engine->try_progress();
      }
      posts_since_poll.store(n, std::memory_order_relaxed);
      return;
    }
    bool ran = false;
    engine->try_progress(&ran);
    if (!ran || engine->next_deadline_ns(false) < sleep_until.load(std::memory_order_seq_cst)) wake();
  }
  // When the sleeping thread wakes by itself (0 while not yet known: a post then wakes it). The sleep is
  // capped so that a post, whose retransmit timer is milliseconds away, rarely has to wake it.
  static constexpr uint64_t kMaxSleepNs = 10000000;
  std::atomic<uint64_t> sleep_until{0};

  // Whether the app is busy-polling: at least kDrivingPolls poll_cq calls since `since` (the start of
  // this idle spell, at most the spin time ago). An app that polls only now and then does not count: the
  // thread then serves the port itself. An armed CQ does not stop it counting: a poll of any CQ runs the
  // whole engine, and UCX keeps CQs armed while it busy-polls (Open MPI over UCX); a nap still ends on a
  // frame, so an app blocked on a channel is served.
  static constexpr uint64_t kDrivingPolls = 4;
  bool app_driving(uint64_t since) const {
    return app_polls.load(std::memory_order_relaxed) - since >= kDrivingPolls;
  }

  void wait_fds(bool with_port, int port_fd, uint64_t wait_ns);

  // Spin while there is work; nap while the app drives; otherwise spin a little, then sleep on the port's
  // rx fd and the doorbell until the engine's next deadline; posts ring the doorbell only then.
  void run();
};

inline ContextState& state_of(ibv_context* c) {
  return *to_ctx(c)->state;
}

// ---- event records (context.cc, where the why is): the async fd's and the channels' socket pairs, taking
// back a destroyed object's unread records, and waiting until the app acknowledged the read ones ----
bool record_pair(int& rd, int& wr);
uint32_t purge_records(int rd, int wr, size_t rec_size, uint64_t element);
void wait_acked(pthread_mutex_t* mu, pthread_cond_t* cond, const uint32_t* done_a, uint32_t want_a,
                const uint32_t* done_b, uint32_t want_b);

// ---- progress.cc ----
int set_progress_nice();
void request_short_slice(int nice);
int claim_qpn_block(const std::string& ibdev_path, uint32_t block_size, int& fd_out);

// ---- verbs.cc ----
int resolve_dmac(ibv_context* ibctx, ContextState& st, ibv_ah_attr& ah, en::AddressVector& av);

// ---- cq.cc ----
bool is_our_channel(ibv_comp_channel* ch);

// ---- data path: WRs converted in fixed-size chunks on the stack (no allocation, no syscall) ----
// post_send is in qp.cc; the receive side is shared by post_recv (qp.cc) and post_srq_recv (verbs.cc).
constexpr int kWrChunk = 16;
// Such a chunk, left unconstructed: each slot is constructed as it is filled (placement new). An array of
// engine WRs would zero all kWrChunk of them for every post (16 SendWrs: 1.7 KB; that was 40 % of
// urxe_post_send for one 64 B WRITE).
template <class T>
union WrChunk {
  WrChunk() {}
  T w[kWrChunk];
};

template <class PostFn>
int post_recv_list(ibv_recv_wr* wr, ibv_recv_wr** bad_wr, PostFn&& post) {
  try {
    while (wr) {
      WrChunk<en::RecvWr> chunk;
      en::RecvWr* ew = chunk.w;
      ibv_recv_wr* src[kWrChunk];
      int n = 0;
      for (ibv_recv_wr* w = wr; w && n < kWrChunk; w = w->next, ++n) {
        new (&ew[n]) en::RecvWr{w->wr_id, nullptr, reinterpret_cast<const en::Sge*>(w->sg_list), w->num_sge};
        src[n] = w;
        if (n) ew[n - 1].next = &ew[n];
      }
      const en::RecvWr* bad = nullptr;
      int rc = post(ew, &bad);  // rings the doorbell if it queued work
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

// ---- the verbs, grouped by the file that holds them, for the ops tables (provider.cc) ----
// context.cc
bool urxe_match_device(verbs_sysfs_dev* sysfs_dev);
verbs_device* urxe_alloc_device(verbs_sysfs_dev* sysfs_dev);
void urxe_uninit_device(verbs_device* vdev);
verbs_context* urxe_alloc_context(ibv_device* ibdev, int cmd_fd, const verbs_context_ops& ops);
void urxe_free_context(ibv_context* ibctx);
void urxe_async_event(ibv_context*, ibv_async_event*);
int urxe_query_device_ex(ibv_context* ibctx, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                         size_t attr_size);
int urxe_query_port(ibv_context* ibctx, uint8_t port_num, ibv_port_attr* pa);
// verbs.cc
ibv_pd* urxe_alloc_pd(ibv_context* ibctx);
int urxe_dealloc_pd(ibv_pd* ibpd);
ibv_mr* urxe_reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access);
int urxe_rereg_mr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access);
int urxe_dereg_mr(verbs_mr* vmr);
ibv_ah* urxe_create_ah(ibv_pd* ibpd, ibv_ah_attr* attr);
int urxe_destroy_ah(ibv_ah* ibah);
ibv_srq* urxe_create_srq(ibv_pd* ibpd, ibv_srq_init_attr* attr);
int urxe_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask);
int urxe_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr);
int urxe_destroy_srq(ibv_srq* ibsrq);
int urxe_post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// cq.cc
ibv_cq* urxe_create_cq(ibv_context* ibctx, int cqe, ibv_comp_channel* channel, int comp_vector);
ibv_cq_ex* urxe_create_cq_ex(ibv_context* ibctx, ibv_cq_init_attr_ex* attr);
int urxe_poll_cq(ibv_cq* ibcq, int n, ibv_wc* wc);
int urxe_req_notify_cq(ibv_cq* ibcq, int solicited_only);
void urxe_cq_event(ibv_cq*);
int urxe_resize_cq(ibv_cq* ibcq, int cqe);
int urxe_destroy_cq(ibv_cq* ibcq);
// qp.cc
ibv_qp* urxe_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
ibv_qp* urxe_create_qp_ex(ibv_context* ibctx, ibv_qp_init_attr_ex* ax);
int urxe_modify_qp(ibv_qp* ibqp, ibv_qp_attr* a, int mask);
int urxe_query_qp(ibv_qp* ibqp, ibv_qp_attr* a, int mask, ibv_qp_init_attr* init);
int urxe_destroy_qp(ibv_qp* ibqp);
int urxe_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int urxe_post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

}  // namespace urxe::provider
