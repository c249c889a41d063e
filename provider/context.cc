// The device and its contexts: match/alloc of the device libibverbs found in sysfs, alloc/free of a context
// (ContextState: port, engine, progress thread, async fd), query_device/query_port, and the engine's events
// turned into the records libibverbs reads (async fd, completion channels).
#include <endian.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <system_error>
#include <vector>

#include "dpdk/local_port.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "provider/internal.h"
#include "provider/ports.h"
#include "provider/user_memory.h"
#include "wire/crc32_fold.h"

namespace urxe::provider {

void log_line(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("urxe: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

namespace {
// The contexts of this process whose progress threads run (send_held_acks).
std::mutex g_live_mu;
std::vector<ContextState*> g_live;
}  // namespace

void send_held_acks() {
  std::lock_guard<std::mutex> lock(g_live_mu);
  for (ContextState* st : g_live)
    if (st->engine->acks_held()) st->engine->try_progress();
}

// A context is ours when its device's ops are urxe's (provider.cc), known by their alloc_device.
bool is_urxe_context(ibv_context* c) {
  if (!c || !c->device) return false;
  const verbs_device_ops* ops = reinterpret_cast<verbs_device*>(c->device)->ops;
  return ops && ops->alloc_device == urxe_alloc_device;
}

ContextState::~ContextState() {
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live.erase(std::remove(g_live.begin(), g_live.end(), this), g_live.end());
  }
  faults.stop_watch();
  counter_file.stop_mirror();  // its per-QP source uses the engine
  stop.store(true);
  wake();
  if (progress_thread.joinable()) progress_thread.join();
  // A last round: ACKs the app's last poll held for its answer (Engine::acks_held) go out, as destroy_qp's
  // round does for a QP destroyed first.
  if (engine) engine->progress();
  URXE_DEBUG(
      "progress: %llu busy rounds, %llu sleeps, %llu naps, woken by doorbell %llu, by port %llu; nice %d",
      (unsigned long long)n_rounds, (unsigned long long)n_sleeps, (unsigned long long)n_naps,
      (unsigned long long)n_wake_doorbell, (unsigned long long)n_wake_port, progress_nice);
  if (const auto* local = dynamic_cast<const urxe::dpdk::LocalPathPort*>(port.get())) {
    const urxe::dpdk::LocalPathStats& ls = local->stats();
    URXE_DEBUG(
        "same-host path: %llu frames sent (%llu of them batches), %llu received, %llu dropped for a peer "
        "that died, %llu batches cut for the port",
        (unsigned long long)ls.tx_local, (unsigned long long)ls.tx_batches, (unsigned long long)ls.rx_local,
        (unsigned long long)ls.tx_dropped_dead, (unsigned long long)ls.tx_batch_cut);
  }
  if (debug_on() && engine) {
    std::string line;
    for (uint32_t c = 0; c < static_cast<uint32_t>(en::Counter::num_counters); ++c) {
      const uint64_t v = engine->counter(static_cast<en::Counter>(c));
      if (v)
        line += std::string(" ") + en::counter_name(static_cast<en::Counter>(c)) + "=" + std::to_string(v);
    }
    URXE_DEBUG("counters:%s", line.c_str());
  }
  // Each before what it stands on (the fault stack gives back its held frames through the capture and the
  // port).
  engine.reset();
  faults.close();
  port.reset();
  if (async_wr >= 0) ::close(async_wr);
  if (doorbell_fd >= 0) ::close(doorbell_fd);
  if (qpn_lock_fd >= 0) ::close(qpn_lock_fd);
  // async_rd is the context's async_fd: verbs_uninit_context closes it.
}

bool ContextState::post_async(uint64_t element, uint32_t type) {
  struct {
    uint64_t element;
    uint32_t event_type;
    uint32_t reserved;
  } rec{element, type, 0};
  static_assert(sizeof rec == 16);
  if (::write(async_wr, &rec, sizeof rec) == sizeof rec) return true;
  URXE_DEBUG("async pipe full, event %u dropped", type);
  return false;
}

void ContextState::async_event(const en::AsyncEvent& ev) {
  std::lock_guard g(map_mu);
  switch (ev.type) {
    case en::EVENT_CQ_ERR: {
      auto it = cqs.find(ev.element);
      if (it == cqs.end()) return;
      // Reported only if queued: destroy waits until the app acknowledged every reported event.
      if (post_async(reinterpret_cast<uintptr_t>(&it->second->vcq.cq), ev.type)) it->second->async_reported++;
      return;
    }
    case en::EVENT_SRQ_ERR:
    case en::EVENT_SRQ_LIMIT_REACHED: {
      auto it = srqs.find(ev.element);
      if (it == srqs.end()) return;
      // Reported only if queued: destroy waits until the app acknowledged every reported event.
      if (post_async(reinterpret_cast<uintptr_t>(&it->second->vsrq.srq), ev.type))
        it->second->async_reported++;
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
      // Reported only if queued: destroy waits until the app acknowledged every reported event.
      if (post_async(reinterpret_cast<uintptr_t>(&it->second->vqp.qp), ev.type)) it->second->async_reported++;
      return;
    }
  }
}

void ContextState::comp_event(uint32_t cq_handle) {
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

// Waits (on the object's own mutex/cond, which the ack verbs signal) until the app acknowledged every event
// reported for it, as the kernel did before destroy returned.
void wait_acked(pthread_mutex_t* mu, pthread_cond_t* cond, const uint32_t* done_a, uint32_t want_a,
                const uint32_t* done_b, uint32_t want_b) {
  pthread_mutex_lock(mu);
  while (*done_a != want_a || (done_b && *done_b != want_b)) pthread_cond_wait(cond, mu);
  pthread_mutex_unlock(mu);
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

namespace {

// urxe_alloc_context's steps. A failing step says why in an AllocFailure; fail_context then undoes the
// context.

// Why a context could not be made: the errno alloc_context leaves and the line it prints.
struct AllocFailure {
  int err = 0;
  std::string why;
};

// A context that could not be made: says why, frees its ContextState and the core's part, leaves f.err in
// errno.
verbs_context* fail_context(const UrxeDevice* dev, UrxeContext* ctx, const AllocFailure& f) {
  std::fprintf(stderr, "urxe: %s: %s\n", dev->config->name.c_str(), f.why.c_str());
  delete ctx->state;
  ctx->state = nullptr;
  verbs_uninit_context(&ctx->vctx);
  std::free(ctx);
  errno = f.err;
  return nullptr;
}

// The core's part of the context, on /dev/null in place of cmd_fd (closed). libibverbs writes legacy
// commands to cmd_fd (notably CREATE_COMP_CHANNEL when our interposer is not preloaded). /dev/null opened
// read-only makes those fail cleanly with EBADF instead of "succeeding".
UrxeContext* init_verbs_context(ibv_device* ibdev, int cmd_fd) {
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  ::close(cmd_fd);
  auto* ctx = static_cast<UrxeContext*>(_verbs_init_and_alloc_context(
      ibdev, fd, sizeof(UrxeContext), reinterpret_cast<verbs_context*>(offsetof(UrxeContext, vctx)), 0));
  if (!ctx) {
    ::close(fd);
    return nullptr;
  }
  return ctx;
}

// The async event records' socket pair (its read end the context's async_fd) and the doorbell eventfd.
bool open_event_fds(UrxeContext* ctx, ContextState* st, AllocFailure& f) {
  if (!record_pair(st->async_rd, st->async_wr)) {
    f = {errno, "socketpair"};
    return false;
  }
  ::fcntl(st->async_wr, F_SETFL, O_NONBLOCK);  // the progress thread must never block on a slow reader
  {
    // Room for thousands of events (COMM_EST of every QP of a large job, which perftest never reads):
    // the kernel's uverbs queue is unbounded; one event that does not fit is dropped, not reported.
    const int bytes = 8 << 20;
    if (::setsockopt(st->async_wr, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
      ::setsockopt(st->async_wr, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  ctx->vctx.context.async_fd = st->async_rd;  // from here on verbs_uninit_context closes it
  st->doorbell_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (st->doorbell_fd < 0) {
    f = {errno, "eventfd"};
    return false;
  }
  return true;
}

// The netdev and the port on it (ports.h's make_port).
bool open_port(const UrxeDevice* dev, ContextState* st, AllocFailure& f) {
  std::string err;
  if (!urxe::provider::query_netdev(st->config.netdev, st->netdev, &err)) {
    f = {ENODEV, err};
    return false;
  }
  urxe::provider::PortRequest req;
  req.config = st->config;
  req.netdev = st->netdev;
  req.attr.mac = st->netdev.mac;
  req.attr.mtu = st->config.mtu ? st->config.mtu : st->netdev.mtu;
  // The port's GID table is the one the app sees in sysfs, slot for slot.
  req.attr.gids = st->gid_watch.open(dev->ibdev_path, st->config, st->netdev.ifindex);
  st->port = urxe::provider::make_port(st->config.port, req, err);
  if (!st->port) {
    f = {ENODEV, err};
    return false;
  }
  st->set_log_name(st->config.name);
  return true;
}

// This context's block of QPNs: the one claimed in the device's lock file, else one picked from the pid.
int qpn_block(const UrxeDevice* dev, ContextState* st, uint32_t max_qp) {
  int block = claim_qpn_block(dev->ibdev_path, max_qp, st->qpn_lock_fd);
  if (block < 0) {
    // No lock file we may write: pick a block from the pid; processes could then collide, so say so.
    const uint32_t blocks = ((1u << 24) - 0x11) / max_qp;
    block = static_cast<int>(static_cast<uint32_t>(::getpid()) % blocks);
    std::fprintf(
        stderr, "urxe: %s: cannot lock %s/urxe.qpn (%s); QPNs from block %d may clash with another process\n",
        dev->config->name.c_str(), dev->ibdev_path, std::strerror(errno), block);
  }
  return block;
}

// The engine's configuration (QPN block, DCQCN, shared counters), and the port made ready for it: the
// same-host path, only the block's QPNs let in.
en::EngineConfig configure_engine(const UrxeDevice* dev, ContextState* st) {
  en::EngineConfig ecfg;
  const int block = qpn_block(dev, st, ecfg.device.max_qp);
  ecfg.qpn_base = 0x11 + static_cast<uint32_t>(block) * ecfg.device.max_qp;
  urxe::provider::add_local_path(st->port, st->config, st->netdev.ifindex, dev->ibdev_path,
                                 static_cast<uint32_t>(block), ecfg.device.max_qp);
  // A random first QPN in the block, so a restarted process does not offer a peer the QPN its previous
  // connection had (the peer's CM may still hold it and would reject; see EngineConfig::qpn_start).
  ecfg.qpn_start = static_cast<uint32_t>(std::random_device{}());
  // URXE_QPN_START fixes it instead: a test that wants a new process to reuse a QPN (a stale connection).
  if (const char* v = std::getenv("URXE_QPN_START"); v && *v)
    ecfg.qpn_start = static_cast<uint32_t>(std::strtoul(v, nullptr, 0));
  // DCQCN's parameters as the device's cc_params/ files say; a QP's line rate is the link's speed
  read_cc_params(dev->ibdev_path, ecfg.dcqcn);
  if (urxe::provider::odp_available()) ecfg.odp_fault_in = urxe::provider::odp_fault_in;
  if (!ecfg.dcqcn.rp_max_rate) ecfg.dcqcn.rp_max_rate = urxe::hostnet::link_speed_mbps(st->config.netdev);
  st->port->set_rx_qpn_range(ecfg.qpn_base, ecfg.qpn_base + ecfg.device.max_qp);
  const char* names[static_cast<size_t>(en::Counter::num_counters)];
  for (size_t c = 0; c < std::size(names); ++c) names[c] = en::counter_name(static_cast<en::Counter>(c));
  std::string err;
  if (st->counter_file.open(dev->ibdev_path, names, ecfg.qpn_base, err))
    ecfg.counter_storage = st->counter_file.values();
  else
    URXE_DEBUG("counters stay private to this process: %s", err.c_str());
  return ecfg;
}

// The counter file's per-QP lines: each QP's counters, state and (paced) rate.
std::string qp_counter_lines(ContextState* st) {
  std::vector<std::pair<uint32_t, en::QpType>> qps;
  {
    std::lock_guard<std::mutex> g(st->map_mu);
    for (const auto& [qpn, qp] : st->qps) qps.emplace_back(qpn, qp->type);
  }
  std::string text;
  uint64_t v[static_cast<size_t>(en::Counter::num_counters)];
  en::QpState state;
  for (const auto& [qpn, type] : qps)
    if (st->engine->qp_counters(qpn, state, v) == 0) {
      std::string line = st->counter_file.qp_line(qpn,
                                                  type == en::QPT_RC   ? "RC"
                                                  : type == en::QPT_UC ? "UC"
                                                                       : "UD",
                                                  en::qp_state_str(state), v);
      // a paced QP's current rate (DCQCN reaction point), next to its counters
      if (const uint32_t mbps = st->engine->qp_rate_mbps(qpn))
        line.insert(line.size() - 1, " rate_mbps=" + std::to_string(mbps));
      text += line;
    }
  return text;
}

// The engine on the device's fault rules and capture (provider/fault_stack.h) on the port; its events to
// `st`, the counter file's sources set and its mirror started.
bool start_engine(ContextState* st, const char* ibdev_path, const en::EngineConfig& ecfg, AllocFailure& f) {
  try {
    st->faults.open(*st->port, st->clock, st->config);
    st->engine = std::make_unique<en::Engine>(st->faults.port(), st->clock, ecfg);
  } catch (const std::exception& ex) {
    f = {ENOMEM, std::string("engine: ") + ex.what()};
    return false;
  }
  st->engine->set_event_sink(st);
  st->counter_file.set_port_source([st](uint64_t* v) {  // on the stats thread: may make a syscall
    const en::PortRxLoss l = st->port->rx_loss();
    __atomic_store_n(&v[static_cast<size_t>(en::Counter::rx_ring_drops)], l.ring_full, __ATOMIC_RELAXED);
    __atomic_store_n(&v[static_cast<size_t>(en::Counter::rx_nombuf)], l.no_buffer, __ATOMIC_RELAXED);
    __atomic_store_n(&v[static_cast<size_t>(en::Counter::rx_port_errors)], l.errors, __ATOMIC_RELAXED);
  });
  // on the stats thread, once a second at most
  st->counter_file.set_qp_source([st] { return qp_counter_lines(st); });
  // The port's state files follow the interface: refreshed with the counters (best effort, as they are).
  st->counter_file.set_port_state([path = std::string(ibdev_path), cfg = st->config] {
    std::string e;
    refresh_port_state(path, cfg, e);
  });
  // The device's fault rules: read now, then followed by the watcher's thread (none for a device without
  // urxe.fault/); their counters published with the others.
  st->faults.follow(ibdev_path, st->counter_file, [st](en::LogLevel level, const std::string& line) {
    log_printf(level, st->config.name, "%s", line.c_str());
  });
  st->counter_file.start_mirror();
  return true;
}

// The progress thread (ContextState::run), named urxe-progress, at its nice.
bool start_progress_thread(ContextState* st, AllocFailure& f) {
  try {
    st->progress_thread = std::thread([st] {
      pthread_setname_np(pthread_self(), "urxe-progress");
      st->progress_nice = set_progress_nice();
      request_short_slice(st->progress_nice);
      try {
        st->run();
      } catch (...) {
        std::fprintf(stderr, "urxe: progress thread stopped by an exception\n");
      }
    });
  } catch (const std::system_error& ex) {
    f = {EAGAIN, std::string("progress thread: ") + ex.what()};
    return false;
  }
  return true;
}

}  // namespace

// ops: the context verbs (provider.cc's table).
verbs_context* urxe_alloc_context(ibv_device* ibdev, int cmd_fd, const verbs_context_ops& ops) {
  return guarded<verbs_context*>(nullptr, [&]() -> verbs_context* {
    UrxeDevice* dev = to_dev(ibdev);
    auto* ctx = init_verbs_context(ibdev, cmd_fd);
    if (!ctx) return nullptr;
    auto st = new ContextState;
    ctx->state = st;
    st->config = *dev->config;
    if (const char* p = std::getenv("URXE_PORT"); p && *p) st->config.port = p;
    AllocFailure f;
    if (!open_event_fds(ctx, st, f) || !open_port(dev, st, f)) return fail_context(dev, ctx, f);
    const en::EngineConfig ecfg = configure_engine(dev, st);
    if (!start_engine(st, dev->ibdev_path, ecfg, f)) return fail_context(dev, ctx, f);
    verbs_set_ops(&ctx->vctx, &ops);
    ctx->vctx.context.num_comp_vectors = 1;
    if (!start_progress_thread(st, f)) return fail_context(dev, ctx, f);
    {
      std::lock_guard<std::mutex> lock(g_live_mu);
      g_live.push_back(st);
    }
    URXE_DEBUG("alloc_context(%s): port %s, async_fd %d, qpn_base 0x%x, CRC-32 %s / %s (below / from 256 B)",
               dev->config->name.c_str(), st->config.port.c_str(), st->async_rd, ecfg.qpn_base,
               urxe::wire::crc_fold_level_name(urxe::wire::crc_fold_best_level(0)),
               urxe::wire::crc_fold_level_name(urxe::wire::crc_fold_best_level(256)));
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
    const uint64_t guid = urxe::hostnet::eui64(st.netdev.mac);
    a.orig_attr.node_guid = htobe64(guid);
    a.orig_attr.sys_image_guid = htobe64(guid);
    a.orig_attr.max_mr_size = d.max_mr_size;
    a.orig_attr.page_size_cap = 0xfffff000;
    a.orig_attr.vendor_id = 0xffffff;
    a.orig_attr.vendor_part_id = 0;
    a.orig_attr.hw_ver = 0;
    a.orig_attr.max_qp = static_cast<int>(d.max_qp);
    a.orig_attr.max_qp_wr = static_cast<int>(d.max_qp_wr);
    // Memory windows of type 1 and 2B, as rxe. Not IBV_DEVICE_MEM_MGT_EXTENSIONS: it promises fast-register
    // MRs that LOCAL_INV / SEND_WITH_INV invalidate, which only kernel consumers have; here those two
    // invalidate type-2 windows only (part of MEM_WINDOW_TYPE_2B). XRC (Annex A14), as ConnectX.
    a.orig_attr.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
                                   IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
                                   IBV_DEVICE_N_NOTIFY_CQ | IBV_DEVICE_MEM_WINDOW |
                                   IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
    a.orig_attr.max_sge = static_cast<int>(d.max_sge);
    a.orig_attr.max_sge_rd = static_cast<int>(d.max_sge_rd);
    a.orig_attr.max_cq = static_cast<int>(d.max_cq);
    a.orig_attr.max_cqe = static_cast<int>(d.max_cqe);
    a.orig_attr.max_mr = static_cast<int>(d.max_mr);
    a.orig_attr.max_mw = static_cast<int>(d.max_mw);
    a.orig_attr.max_pd = static_cast<int>(d.max_pd);
    a.orig_attr.max_qp_rd_atom = static_cast<int>(d.max_qp_rd_atom);
    a.orig_attr.max_res_rd_atom = static_cast<int>(d.max_qp_rd_atom * d.max_qp);
    a.orig_attr.max_qp_init_rd_atom = static_cast<int>(d.max_qp_init_rd_atom);
    a.orig_attr.atomic_cap = IBV_ATOMIC_HCA;
    a.orig_attr.max_srq = static_cast<int>(d.max_srq);
    a.orig_attr.max_srq_wr = static_cast<int>(d.max_srq_wr);
    a.orig_attr.max_srq_sge = static_cast<int>(d.max_srq_sge);
    a.orig_attr.max_ah = static_cast<int>(d.max_ah);
    a.orig_attr.max_mcast_grp = static_cast<int>(d.max_mcast_grp);
    a.orig_attr.max_mcast_qp_attach = static_cast<int>(d.max_mcast_qp_attach);
    a.orig_attr.max_total_mcast_qp_attach = static_cast<int>(d.max_total_mcast_qp_attach);
    a.orig_attr.max_pkeys = 1;
    a.orig_attr.local_ca_ack_delay = 15;
    a.orig_attr.phys_port_cnt = 1;
    a.max_dm_size = kDeviceMemoryBytes;
    if (urxe::provider::odp_available()) {
      // ODP everywhere the engine touches an MR's memory (engine::OdpFaultIn), implicit MRs included.
      a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
      constexpr uint32_t kRecv = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
      a.odp_caps.per_transport_caps.rc_odp_caps =
          kRecv | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;
      a.odp_caps.per_transport_caps.uc_odp_caps = kRecv | IBV_ODP_SUPPORT_WRITE;
      a.odp_caps.per_transport_caps.ud_odp_caps = kRecv;
      // XRC: the initiator's SEND/WRITE/READ/atomic sources, the target's XRC SRQ receives and its peers'
      // WRITE/READ/atomics (no RECV: an XRC QP has no receive queue)
      a.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV | IBV_ODP_SUPPORT_WRITE |
                       IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;
    }
    fill_tm_caps(a.tm_caps);  // tag matching: RC (provider/tag_matching.cc)
    a.phys_port_cnt_ex = 1;
    a.completion_timestamp_mask = ~uint64_t{0};  // 64-bit ns: never wraps in practice
    a.hca_core_clock = kHcaCoreClockKhz;
    std::memcpy(attr, &a, std::min(attr_size, sizeof a));
    return 0;
  });
}

namespace {
// IBV_DEVICE_BAD_PKEY_CNTR / IBV_DEVICE_BAD_QKEY_CNTR: packets dropped for a P_Key other than the default
// and UD Q_Key violations, over the device as kernel rxe's port counts them: every process's shared
// counters (provider/stats.h), plus this context's when it counts privately. Saturated to 32 bits.
void port_violation_counters(ibv_context* ibctx, ContextState& st, uint32_t& bad_pkey, uint32_t& qkey_viol) {
  uint64_t pkey = 0, qkey = 0;
  urxe::provider::DeviceCounters dc;
  std::string err;
  if (urxe::provider::read_device_counters(to_dev(ibctx->device)->ibdev_path, false, dc, err)) {
    pkey = dc.total.get(en::counter_name(en::Counter::rx_drop_pkey));
    qkey = dc.total.get(en::counter_name(en::Counter::rx_drop_qkey));
  }
  if (!st.counter_file.values()) {
    pkey += st.engine->counter(en::Counter::rx_drop_pkey);
    qkey += st.engine->counter(en::Counter::rx_drop_qkey);
  }
  bad_pkey = static_cast<uint32_t>(std::min<uint64_t>(pkey, UINT32_MAX));
  qkey_viol = static_cast<uint32_t>(std::min<uint64_t>(qkey, UINT32_MAX));
}
}  // namespace

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
    pa->port_cap_flags = urxe::provider::kPortCapFlags;  // IBV_PORT_CM_SUP, as sysfs cap_mask shows
    pa->max_msg_sz = st.engine->device_attr().max_msg_sz;
    port_violation_counters(ibctx, st, pa->bad_pkey_cntr, pa->qkey_viol_cntr);
    pa->pkey_tbl_len = 1;
    pa->lid = 0;
    pa->sm_lid = 0;
    pa->lmc = 0;
    pa->max_vl_num = 1;
    pa->sm_sl = 0;
    pa->subnet_timeout = 0;
    pa->init_type_reply = 0;
    const PortSpeed ps = eth_port_speed(urxe::hostnet::link_speed_mbps(st.config.netdev));  // this netns's
    pa->active_width = ps.width;
    pa->active_speed = ps.speed;
    pa->phys_state = up ? 5 /* LinkUp */ : 3 /* Disabled */;
    pa->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
  });
}

}  // namespace urxe::provider
