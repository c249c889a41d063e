// The provider's internals, shared by its files (provider/README.md has the map): the wrapper objects
// libibverbs sees (UrxeContext, UrxeCq, ...), ContextState (one per opened context) and the helpers every
// verb uses. Every entry point catches exceptions: none may unwind into libibverbs (C code).
#pragma once

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/fault_port.h"
#include "provider/abi34.h"
#include "provider/device_tree.h"
#include "provider/fault_rules.h"
#include "provider/fault_stack.h"
#include "provider/gid_watch.h"
#include "provider/log.h"
#include "provider/progress_policy.h"
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

inline uint64_t clock_ns(clockid_t id) {
  timespec t;
  clock_gettime(id, &t);  // (vDSO: no syscall)
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec);
}

// The engine's time: CLOCK_MONOTONIC in ns. It is also the device's "HCA clock" (completion timestamps,
// ibv_query_rt_values_ex; hca_core_clock 1 GHz): timers and timestamps on one clock, and one that the
// kernel slews with CLOCK_REALTIME, so a timestamp moves to wall-clock time by their current offset.
class SteadyClock final : public en::Clock {
 public:
  uint64_t now_ns() const override { return clock_ns(CLOCK_MONOTONIC); }
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

struct UrxeTd {
  ibv_td td;
  std::atomic<uint32_t> users;  // parent domains on it: dealloc_td is EBUSY while any
};

// A PD, or a parent domain (ibv_alloc_parent_domain), which every verb takes in place of its PD.
struct UrxePd {
  ibv_pd pd;
  uint32_t handle;  // the engine's PD; a parent domain's is its PD's, so the verbs resolve both alike
  // A PD: the parent domains on it. A parent domain: the objects created through it (MRs, QPs, CQs, SRQs,
  // AHs). dealloc_pd is EBUSY while any.
  std::atomic<uint32_t> users;
  UrxePd* protection;  // a parent domain's PD; null for a PD
  UrxeTd* td;          // a parent domain's thread domain, or null
  // A parent domain's allocator (both set, or neither) and its pd_context.
  void* (*alloc)(ibv_pd* pd, void* pd_context, size_t size, size_t alignment, uint64_t resource_type);
  void (*free)(ibv_pd* pd, void* pd_context, void* ptr, uint64_t resource_type);
  void* pd_context;
};

struct UrxeDm;

struct UrxeMr {
  verbs_mr vmr;
  UrxeDm* dm;  // ibv_reg_dm_mr: the device memory it is over (its MR count), else null
};

// Device memory (device_memory.cc): the provider's own pages, reached by the copy calls and by MRs.
struct UrxeDm {
  verbs_dm vdm;  // first: libibverbs casts
  uint8_t* base;
  size_t length;              // as allocated
  size_t mapped;              // pages mapped at base
  std::atomic<uint32_t> mrs;  // MRs over it (ibv_free_dm: EBUSY)
};
// Device memory a context may hold in all (device_attr_ex.max_dm_size): a NIC's memory is finite.
constexpr size_t kDeviceMemoryBytes = 256 * 1024;

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
  // ibv_cq_ex polling: the completion start_poll/next_poll fetched, and its time (CQs created with a
  // timestamp wc_flag only: engine CqOptions::timestamps).
  en::Wc cur;
  uint64_t cur_ts;
  std::atomic<bool> armed;  // req_notify_cq armed it and has a channel: an app may sleep on it
  ibv_pd* parent_domain;    // IBV_CQ_INIT_ATTR_MASK_PD: the parent domain it was created in (held)
  ibv_pd* alloc_pd;         // the parent domain whose allocator gave this memory (domain_zalloc), or null
};

struct WrBatch;

struct UrxeQp {
  verbs_qp vqp;
  ContextState* ctx;
  en::QpType type;
  uint32_t async_reported;
  WrBatch* batch;    // the ibv_wr_* builder state; only for QPs created with send_ops_flags
  ibv_pd* alloc_pd;  // as UrxeCq's
};

struct UrxeSrq {
  verbs_srq vsrq;
  uint32_t handle;
  ContextState* ctx;
  uint32_t async_reported;
  ibv_pd* alloc_pd;  // as UrxeCq's
};

struct UrxeXrcd {
  verbs_xrcd vxrcd;
  ContextState* ctx;
  uint32_t handle;  // the engine's XRC domain
  bool on_file;     // opened on a file: `file` keys ContextState::xrcd_files
  std::pair<uint64_t, uint64_t> file;
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

// ---- domains.cc: thread and parent domains ----
// Objects created through a parent domain hold it (its `users`); a PD holds nothing here (the engine
// counts what uses a PD).
void pd_hold(ibv_pd* pd);
void pd_release(ibv_pd* pd);
// The parent domain `pd` is, or null for a PD.
inline UrxePd* parent_domain_of(ibv_pd* pd) {
  return pd && to_pd(pd)->protection ? to_pd(pd) : nullptr;
}
// Whether objects created through `pd` are under a thread domain (no locks on their posts and polls).
inline bool in_thread_domain(ibv_pd* pd) {
  const UrxePd* p = parent_domain_of(pd);
  return p && p->td;
}
// Resource types handed to a parent domain's allocator: rdma-core's form (driver id << 32 | kind) with no
// driver id (urxe has none from the kernel) and mlx5dv's kind numbers.
constexpr uint64_t kResTypeQp = 1, kResTypeSrq = 4, kResTypeCq = 5;
// What the provider allocates for a QP, CQ or SRQ (its wrapper: UrxeQp, UrxeCq, UrxeSrq) comes from the
// allocator of the parent domain `pd` when it has one and does not answer IBV_ALLOCATOR_USE_DEFAULT, else
// from calloc; zeroed either way. The engine's rings stay the engine's. Throws std::bad_alloc.
void* domain_alloc(ibv_pd* pd, size_t size, uint64_t resource_type, ibv_pd*& from);
void domain_free(ibv_pd* from, void* p, uint64_t resource_type);
template <class T>
T* domain_zalloc(ibv_pd* pd, uint64_t resource_type) {
  ibv_pd* from = nullptr;
  auto* t = static_cast<T*>(domain_alloc(pd, sizeof(T), resource_type, from));
  t->alloc_pd = from;
  return t;
}
template <class T>
void domain_zfree(T* t, uint64_t resource_type) {
  domain_free(t->alloc_pd, t, resource_type);
}

// One per opened device context: the engine, its port, the progress thread and the pipes libibverbs reads.
// An en::EventSink that also logs (provider/log.h); its ProgressShared base is what the app threads and
// the progress thread share (provider/progress_policy.h), the doorbell eventfd included.
struct ContextState final : urxe::provider::LoggingSink, ProgressShared {
  DeviceConfig config;
  urxe::provider::NetdevInfo netdev{};
  SteadyClock clock;
  std::unique_ptr<en::Port> port;
  // The device's fault rules on both sides of the capture (--pcap, $URXE_PCAP), following the device's
  // rules file (provider/fault_stack.h); with no rules it passes everything through. Its watcher is stopped
  // first at close; the stack is closed (~ContextState) after the engine, before the port.
  urxe::provider::FaultStack faults;
  std::unique_ptr<en::Engine> engine;
  int async_rd = -1, async_wr = -1;  // async_fd = async_rd (16-byte records)
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
  // GIDs follow the interface's addresses (provider/gid_watch.h): its rtnetlink fd is in the progress
  // thread's waits.
  urxe::provider::GidWatch gid_watch;
  // One IBV_EVENT_GID_CHANGE (element: port 1) per changed entry, as the kernel raises them.
  // The port follows the interface (up and carrier), as rxe's: IBV_EVENT_PORT_ERR / _ACTIVE, and sysfs's
  // link_downed (counted from the kernel's carrier_down_count, provider/stats.h) mirrored at once.
  void gid_update();  // progress.cc

  std::atomic<size_t> dm_bytes{0};  // device memory allocated (device_memory.cc)
  // XRC domains opened on a file (xrc.cc), by the file's (st_dev, st_ino): {engine XRCD, ibv_xrcds open
  // on it}. map_mu.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint32_t, uint32_t>> xrcd_files;

  // Progress-thread statistics, printed at close with URXE_DEBUG=1.
  uint64_t n_sleeps = 0, n_wake_doorbell = 0, n_wake_port = 0, n_rounds = 0, n_naps = 0;
  int progress_nice = 0;  // the nice the progress thread runs at (set_progress_nice)

  ~ContextState() override;

  bool post_async(uint64_t element, uint32_t type);  // false: the queue was full, the event dropped

  // ---- engine::EventSink (engine lock held) ----
  void async_event(const en::AsyncEvent& ev) override;
  void comp_event(uint32_t cq_handle) override;

  // ---- the progress policy (provider/progress_policy.h): the app's side, per packet, inline ----
  void app_poll() { on_app_poll(*engine); }  // an app thread's poll: it runs the round
  void cq_armed(UrxeCq* cq) { on_cq_armed(cq->armed); }
  void cq_disarmed(UrxeCq* cq) { on_cq_disarmed(cq->armed); }
  void doorbell(bool send) override { on_post(*engine, send); }  // (engine::EventSink, the posting thread)

  // The progress thread's loop (progress_policy.cc), until `stop`.
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
constexpr uint64_t kHcaCoreClockKhz = 1'000'000;  // the HCA clock ticks in ns (SteadyClock)
// domains.cc
ibv_td* urxe_alloc_td(ibv_context* ibctx, ibv_td_init_attr* attr);
int urxe_dealloc_td(ibv_td* ibtd);
ibv_pd* urxe_alloc_parent_domain(ibv_context* ibctx, ibv_parent_domain_init_attr* attr);
// verbs.cc
ibv_pd* urxe_alloc_pd(ibv_context* ibctx);
int urxe_dealloc_pd(ibv_pd* ibpd);
ibv_mr* urxe_reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access);
int urxe_rereg_mr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access);
int urxe_dereg_mr(verbs_mr* vmr);
int urxe_advise_mr(ibv_pd* ibpd, enum ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                   uint32_t num_sge);
ibv_dm* urxe_alloc_dm(ibv_context* ibctx, ibv_alloc_dm_attr* attr);
int urxe_free_dm(ibv_dm* ibdm);
ibv_mr* urxe_reg_dm_mr(ibv_pd* ibpd, ibv_dm* ibdm, uint64_t dm_offset, size_t length, unsigned int access);
// mw.cc
ibv_mw* urxe_alloc_mw(ibv_pd* ibpd, ibv_mw_type type);
int urxe_dealloc_mw(ibv_mw* mw);
int urxe_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);
ibv_ah* urxe_create_ah(ibv_pd* ibpd, ibv_ah_attr* attr);
int urxe_destroy_ah(ibv_ah* ibah);
int urxe_attach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid);
int urxe_detach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid);
ibv_srq* urxe_create_srq(ibv_pd* ibpd, ibv_srq_init_attr* attr);
int urxe_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask);
int urxe_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr);
int urxe_destroy_srq(ibv_srq* ibsrq);
int urxe_post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// xrc.cc
ibv_xrcd* urxe_open_xrcd(ibv_context* ibctx, ibv_xrcd_init_attr* attr);
int urxe_close_xrcd(ibv_xrcd* ibxrcd);
ibv_srq* urxe_create_srq_ex(ibv_context* ibctx, ibv_srq_init_attr_ex* attr);
int urxe_get_srq_num(ibv_srq* ibsrq, uint32_t* srq_num);
ibv_qp* urxe_create_xrc_target(ibv_context* ibctx, ibv_qp_init_attr_ex* ax);
ibv_qp* urxe_open_qp(ibv_context* ibctx, ibv_qp_open_attr* attr);
// tag_matching.cc
ibv_srq* urxe_create_tm_srq(ibv_context* ibctx,
                            ibv_srq_init_attr_ex* attr);  // (urxe_create_srq_ex's IBV_SRQT_TM)
int urxe_post_srq_ops(ibv_srq* ibsrq, ibv_ops_wr* wr, ibv_ops_wr** bad_wr);
void urxe_cq_read_tm_info(ibv_cq_ex* c, ibv_wc_tm_info* info);
void fill_tm_caps(ibv_tm_caps& caps);
// cq.cc
ibv_cq* urxe_create_cq(ibv_context* ibctx, int cqe, ibv_comp_channel* channel, int comp_vector);
ibv_cq_ex* urxe_create_cq_ex(ibv_context* ibctx, ibv_cq_init_attr_ex* attr);
int urxe_poll_cq(ibv_cq* ibcq, int n, ibv_wc* wc);
int urxe_req_notify_cq(ibv_cq* ibcq, int solicited_only);
void urxe_cq_event(ibv_cq*);
int urxe_resize_cq(ibv_cq* ibcq, int cqe);
int urxe_destroy_cq(ibv_cq* ibcq);
int urxe_query_rt_values(ibv_context* ibctx, ibv_values_ex* values);
// qp.cc
ibv_qp* urxe_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
ibv_qp* urxe_create_qp_ex(ibv_context* ibctx, ibv_qp_init_attr_ex* ax);
int urxe_modify_qp(ibv_qp* ibqp, ibv_qp_attr* a, int mask);
int urxe_query_qp(ibv_qp* ibqp, ibv_qp_attr* a, int mask, ibv_qp_init_attr* init);
int urxe_destroy_qp(ibv_qp* ibqp);
int urxe_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int urxe_post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

}  // namespace urxe::provider
