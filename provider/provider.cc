// liburxe-rdmav34.so: the libibverbs provider. Each verb is translated onto one engine::Engine per device
// context, driven by one progress thread. This file holds only the ops tables, the registration and the
// exported entry; the verbs live in the files provider/README.md maps (built as urxe_provider_core). What
// the provider relies on in libibverbs' core (no kernel behind it): provider/README.md and abi34.h.
// Every entry point catches exceptions: none may unwind into libibverbs (C code).
#include "provider/internal.h"

using namespace urxe::provider;

extern "C" const verbs_device_ops urxe_dev_ops;

namespace {

verbs_context_ops make_ctx_ops() {
  verbs_context_ops o{};
  o.advise_mr = urxe_advise_mr;
  o.alloc_dm = urxe_alloc_dm;
  o.alloc_mw = urxe_alloc_mw;
  o.alloc_parent_domain = urxe_alloc_parent_domain;
  o.alloc_pd = urxe_alloc_pd;
  o.alloc_td = urxe_alloc_td;
  o.attach_mcast = urxe_attach_mcast;
  o.bind_mw = urxe_bind_mw;
  o.async_event = urxe_async_event;
  o.cq_event = urxe_cq_event;
  o.create_ah = urxe_create_ah;
  o.create_cq = urxe_create_cq;
  o.create_cq_ex = urxe_create_cq_ex;
  o.create_qp = urxe_create_qp;
  o.create_qp_ex = urxe_create_qp_ex;
  o.create_srq = urxe_create_srq;
  o.create_srq_ex = urxe_create_srq_ex;
  o.close_xrcd = urxe_close_xrcd;
  o.get_srq_num = urxe_get_srq_num;
  o.open_qp = urxe_open_qp;
  o.open_xrcd = urxe_open_xrcd;
  o.dealloc_mw = urxe_dealloc_mw;
  o.dealloc_pd = urxe_dealloc_pd;
  o.dealloc_td = urxe_dealloc_td;
  o.dereg_mr = urxe_dereg_mr;
  o.destroy_ah = urxe_destroy_ah;
  o.destroy_cq = urxe_destroy_cq;
  o.destroy_qp = urxe_destroy_qp;
  o.destroy_srq = urxe_destroy_srq;
  o.detach_mcast = urxe_detach_mcast;
  o.free_context = urxe_free_context;
  o.free_dm = urxe_free_dm;
  o.modify_qp = urxe_modify_qp;
  o.modify_srq = urxe_modify_srq;
  o.poll_cq = urxe_poll_cq;
  o.post_recv = urxe_post_recv;
  o.post_send = urxe_post_send;
  o.post_srq_ops = urxe_post_srq_ops;
  o.post_srq_recv = urxe_post_srq_recv;
  o.query_device_ex = urxe_query_device_ex;
  o.query_port = urxe_query_port;
  o.query_qp = urxe_query_qp;
  o.query_rt_values = urxe_query_rt_values;
  o.query_srq = urxe_query_srq;
  o.reg_dm_mr = urxe_reg_dm_mr;
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

verbs_context* urxe_alloc_context_entry(ibv_device* ibdev, int cmd_fd, void* /*private_data*/) {
  return urxe_alloc_context(ibdev, cmd_fd, ctx_ops());
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
    urxe_alloc_context_entry,
    nullptr,  // import_context: needs a kernel (EOPNOTSUPP from the core)
    urxe_alloc_device,
    urxe_uninit_device,
};
// The name static builds of rdma-core look for; an alias of the ops above.
extern const verbs_device_ops verbs_provider_urxe
    __attribute__((alias("urxe_dev_ops"), visibility("default")));

}  // extern "C"

// Registration before main(): with LD_PRELOAD this runs before device discovery, so libibverbs never needs
// to load drivers.
__attribute__((constructor)) static void urxe_register() {
  verbs_register_driver_34(&urxe_dev_ops);
}
