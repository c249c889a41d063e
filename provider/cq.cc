// CQ verbs: create (plain and ibv_cq_ex, with completion timestamps), poll, arm, resize, destroy; the
// device clock (ibv_query_rt_values_ex).
#include "provider/internal.h"

namespace urxe::provider {

bool is_our_channel(ibv_comp_channel* ch) {
  return ch && is_urxe_context(ch->context) && reinterpret_cast<UrxeChannel*>(ch)->magic == kChannelMagic;
}

// en::Wc is ibv_wc field for field (internal.h), so the engine writes the completions straight into the
// caller's array: one copy, from the CQ ring, and no stack buffer.
int urxe_poll_cq(ibv_cq* ibcq, int n, ibv_wc* wc) {
  return guarded(-EIO, [&] {
    UrxeCq* cq = to_cq(ibcq);
    cq->ctx->app_poll();
    if (n < 0) return 0;  // as ibv_poll_cq has always answered; the engine would say -EINVAL
    return cq->ctx->engine->poll_cq(cq->handle, n, reinterpret_cast<en::Wc*>(wc));
  });
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

namespace {

// parent_domain: IBV_CQ_INIT_ATTR_MASK_PD's (held by the CQ, its allocator gives the CQ's memory), or null.
UrxeCq* create_cq_common(ibv_context* ibctx, int cqe, ibv_comp_channel* channel, int comp_vector,
                         const en::CqOptions& options = {}, ibv_pd* parent_domain = nullptr) {
  ContextState& st = state_of(ibctx);
  if (cqe < 1 || static_cast<uint32_t>(cqe) > st.engine->device_attr().max_cqe || comp_vector < 0 ||
      comp_vector >= ibctx->num_comp_vectors || (channel && !is_our_channel(channel))) {
    errno = EINVAL;
    return nullptr;
  }
  uint32_t h, actual = 0;
  auto* cq = domain_zalloc<UrxeCq>(parent_domain, kResTypeCq);
  if (int rc = st.engine->create_cq(static_cast<uint32_t>(cqe), h, &actual, options)) {
    domain_zfree(cq, kResTypeCq);
    errno = rc;
    return nullptr;
  }
  cq->parent_domain = parent_domain;
  pd_hold(parent_domain);
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

}  // namespace

ibv_cq* urxe_create_cq(ibv_context* ibctx, int cqe, ibv_comp_channel* channel, int comp_vector) {
  return guarded<ibv_cq*>(nullptr, [&]() -> ibv_cq* {
    UrxeCq* cq = create_cq_common(ibctx, cqe, channel, comp_vector);
    return cq ? &cq->vcq.cq : nullptr;
  });
}

namespace {

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
// The same for a CQ with timestamps: the completion's time comes with it.
int cqx_fetch_ts(ibv_cq_ex* c) {
  UrxeCq* cq = cqx(c);
  const int got = cq->ctx->engine->poll_cq_ts(cq->handle, 1, &cq->cur, &cq->cur_ts);
  if (got < 0) return -got;
  if (got == 0) return ENOENT;
  c->wr_id = cq->cur.wr_id;
  c->status = static_cast<ibv_wc_status>(cq->cur.status);
  return 0;
}
template <int (*kFetch)(ibv_cq_ex*)>
int cqx_start_poll(ibv_cq_ex* c, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  return guarded(EIO, [&] {
    cqx(c)->ctx->app_poll();
    return kFetch(c);
  });
}
template <int (*kFetch)(ibv_cq_ex*)>
int cqx_next_poll(ibv_cq_ex* c) {
  return guarded(EIO, [&] { return kFetch(c); });
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
// In HCA clock units: CLOCK_MONOTONIC ns (SteadyClock), when the engine wrote the completion.
uint64_t cqx_read_completion_ts(ibv_cq_ex* c) {
  return cqx(c)->cur_ts;
}
// The same time on CLOCK_REALTIME, by the two clocks' offset now (the kernel slews both alike; a step of
// the wall clock since the completion moves it too, as it does mlx5's conversion). The wall clock is read
// between two reads of the monotonic one and set against their middle; read again (a few times at most)
// when they lie far apart, as when the thread was preempted in between.
uint64_t cqx_read_completion_wallclock_ns(ibv_cq_ex* c) {
  constexpr uint64_t kMaxSpreadNs = 500;
  uint64_t m1, real, m2;
  for (int tries = 0;; tries++) {
    m1 = clock_ns(CLOCK_MONOTONIC);
    real = clock_ns(CLOCK_REALTIME);
    m2 = clock_ns(CLOCK_MONOTONIC);
    if (m2 - m1 <= kMaxSpreadNs || tries == 3) break;
  }
  return cqx(c)->cur_ts + (real - (m1 + (m2 - m1) / 2));
}

}  // namespace

ibv_cq_ex* urxe_create_cq_ex(ibv_context* ibctx, ibv_cq_init_attr_ex* attr) {
  return guarded<ibv_cq_ex*>(nullptr, [&]() -> ibv_cq_ex* {
    constexpr uint64_t kTimestamps =
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    constexpr uint64_t kWcFlags = IBV_WC_STANDARD_FLAGS | kTimestamps | IBV_WC_EX_WITH_TM_INFO;
    if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    if ((attr->wc_flags & ~kWcFlags) || ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                                         (attr->flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)))) {
      errno = EOPNOTSUPP;  // CVLAN, flow tag, ignore-overrun: not supported
      return nullptr;
    }
    // A parent domain (not a PD) of this context; under a thread domain, or SINGLE_THREADED, polls take no
    // lock (as mlx5).
    ibv_pd* pdom = nullptr;
    if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
      pdom = attr->parent_domain;
      if (!parent_domain_of(pdom) || pdom->context != ibctx) {
        errno = EINVAL;
        return nullptr;
      }
    }
    en::CqOptions options;
    options.timestamps = (attr->wc_flags & kTimestamps) != 0;
    options.single_threaded = in_thread_domain(pdom) || ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                                                         (attr->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED));
    UrxeCq* cq = create_cq_common(ibctx, static_cast<int>(attr->cqe), attr->channel,
                                  static_cast<int>(attr->comp_vector), options, pdom);
    if (!cq) return nullptr;
    ibv_cq_ex& x = cq->vcq.cq_ex;
    // Only a CQ with timestamps copies them: the others poll as before.
    x.start_poll = options.timestamps ? cqx_start_poll<cqx_fetch_ts> : cqx_start_poll<cqx_fetch>;
    x.next_poll = options.timestamps ? cqx_next_poll<cqx_fetch_ts> : cqx_next_poll<cqx_fetch>;
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
    if (attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) x.read_completion_ts = cqx_read_completion_ts;
    if (attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
      x.read_completion_wallclock_ns = cqx_read_completion_wallclock_ns;
    if (attr->wc_flags & IBV_WC_EX_WITH_TM_INFO) x.read_tm_info = urxe_cq_read_tm_info;  // tag_matching.cc
    return &x;
  });
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
    ibv_pd* pdom = cq->parent_domain;
    domain_zfree(cq, kResTypeCq);
    pd_release(pdom);
    return 0;
  });
}

// ibv_query_rt_values_ex: the HCA clock now, as mlx5 gives it (ticks in tv_nsec, tv_sec 0; here ticks are
// ns). Unknown mask bits: EINVAL; comp_mask says what was returned.
int urxe_query_rt_values(ibv_context* ibctx, ibv_values_ex* values) {
  return guarded(EIO, [&] {
    if (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
    uint32_t done = 0;
    if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
      values->raw_clock.tv_sec = 0;
      values->raw_clock.tv_nsec = static_cast<long>(state_of(ibctx).clock.now_ns());
      done |= IBV_VALUES_MASK_RAW_CLOCK;
    }
    values->comp_mask = done;
    return 0;
  });
}

}  // namespace urxe::provider
