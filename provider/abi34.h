// The libibverbs provider ABI of rdma-core v36..v56 (symbol version IBVERBS_PRIVATE_34), declared here
// because Debian ships no driver.h. Layouts follow rdma-core's driver.h, measured against the Debian 12
// library's disassembly; every size and offset the core relies on is pinned by a
// static_assert, so a layout slip fails the build instead of corrupting a running application.
#pragma once

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

// A ccan list_node: two pointers, owned by the core.
struct urxe_abi_list_node {
  void* next;
  void* prev;
};

// Kinds of verbs_match_ent (0 terminates a match table).
enum {
  URXE_VERBS_MATCH_SENTINEL = 0,
  URXE_VERBS_MATCH_PCI = 1,
  URXE_VERBS_MATCH_MODALIAS = 2,
  URXE_VERBS_MATCH_DRIVER_ID = 3,
};

struct verbs_match_ent {
  void* driver_data;
  union {
    const char* modalias;  // fnmatch() pattern applied to "rdma_device:N<ibdev>" or the modalias file
    uint64_t driver_id;
  } u;
  uint16_t vendor;
  uint16_t device;
  uint8_t kind;
};

// One device found in sysfs; allocated and owned by the core, read-only for the provider.
struct verbs_sysfs_dev {
  struct urxe_abi_list_node entry;
  void* provider_data;
  const struct verbs_match_ent* match;
  unsigned int flags;
  char sysfs_name[64];  // "uverbs0": the node under /dev/infiniband
  dev_t sysfs_cdev;
  char ibdev_name[64];   // "urxe0"
  char ibdev_path[256];  // "$SYSFS_PATH/class/infiniband/urxe0"
  char modalias[512];
  uint64_t node_guid;
  uint32_t driver_id;
  enum ibv_node_type node_type;
  int ibdev_idx;
  uint32_t num_ports;
  uint32_t abi_ver;
  struct timespec time_created;
};

struct verbs_device;

struct verbs_device_ops {
  const char* name;
  uint32_t match_min_abi_version;
  uint32_t match_max_abi_version;
  const struct verbs_match_ent* match_table;
  const struct verbs_device_ops** static_providers;
  bool (*match_device)(struct verbs_sysfs_dev* sysfs_dev);
  struct verbs_context* (*alloc_context)(struct ibv_device* device, int cmd_fd, void* private_data);
  struct verbs_context* (*import_context)(struct ibv_device* device, int cmd_fd);
  struct verbs_device* (*alloc_device)(struct verbs_sysfs_dev* sysfs_dev);
  void (*uninit_device)(struct verbs_device* device);
};

// Allocated by the provider's alloc_device (zeroed); the core fills ops, refcount, sysfs and the names.
struct verbs_device {
  struct ibv_device device;  // first: the core casts between the two
  const struct verbs_device_ops* ops;
  int refcount;  // atomic_int in C; only the core touches it
  struct urxe_abi_list_node entry;
  struct verbs_sysfs_dev* sysfs;
  uint64_t core_support;
};

enum urxe_verbs_mr_type {
  URXE_IBV_MR_TYPE_MR = 0,
  URXE_IBV_MR_TYPE_NULL_MR = 1,
  URXE_IBV_MR_TYPE_IMPORTED_MR = 2,
  URXE_IBV_MR_TYPE_DMABUF_MR = 3,
};

// What ibv_dereg_mr reads back (mr_type, access) to undo ibv_dontfork_range.
struct verbs_mr {
  struct ibv_mr ibv_mr;
  enum urxe_verbs_mr_type mr_type;
  int access;
};

struct verbs_dm {
  struct ibv_dm dm;
  uint32_t handle;
};

struct verbs_xrcd {
  struct ibv_xrcd xrcd;
  uint32_t comp_mask;
  uint32_t handle;
};

enum {
  URXE_VERBS_QP_XRCD = 1 << 0,
  URXE_VERBS_QP_EX = 1 << 1,  // ibv_qp_to_qp_ex returns &qp_ex only when this bit is set
};

struct verbs_qp {
  union {
    struct ibv_qp qp;
    struct ibv_qp_ex qp_ex;
  };
  uint32_t comp_mask;
  struct verbs_xrcd* xrcd;
};

struct verbs_cq {
  union {
    struct ibv_cq cq;
    struct ibv_cq_ex cq_ex;
  };
};

struct verbs_srq {
  struct ibv_srq srq;
  enum ibv_srq_type srq_type;
  struct verbs_xrcd* xrcd;
  struct ibv_cq* cq;
  uint32_t srq_num;
};

// The provider's op table: 76 slots in alphabetical order (the order is the ABI). verbs_set_ops copies only
// the non-NULL ones; a NULL slot keeps the core's dummy, which fails with EOPNOTSUPP.
struct verbs_context_ops {
  int (*advise_mr)(struct ibv_pd* pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                   struct ibv_sge* sg_list, uint32_t num_sges);
  struct ibv_dm* (*alloc_dm)(struct ibv_context* context, struct ibv_alloc_dm_attr* attr);
  struct ibv_mw* (*alloc_mw)(struct ibv_pd* pd, enum ibv_mw_type type);
  struct ibv_mr* (*alloc_null_mr)(struct ibv_pd* pd);
  struct ibv_pd* (*alloc_parent_domain)(struct ibv_context* context,
                                        struct ibv_parent_domain_init_attr* attr);
  struct ibv_pd* (*alloc_pd)(struct ibv_context* context);
  struct ibv_td* (*alloc_td)(struct ibv_context* context, struct ibv_td_init_attr* init_attr);
  void (*async_event)(struct ibv_context* context, struct ibv_async_event* event);
  int (*attach_counters_point_flow)(struct ibv_counters* counters, struct ibv_counter_attach_attr* attr,
                                    struct ibv_flow* flow);
  int (*attach_mcast)(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid);
  int (*bind_mw)(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mw_bind* mw_bind);
  int (*close_xrcd)(struct ibv_xrcd* xrcd);
  void (*cq_event)(struct ibv_cq* cq);
  struct ibv_ah* (*create_ah)(struct ibv_pd* pd, struct ibv_ah_attr* attr);
  struct ibv_counters* (*create_counters)(struct ibv_context* context,
                                          struct ibv_counters_init_attr* init_attr);
  struct ibv_cq* (*create_cq)(struct ibv_context* context, int cqe, struct ibv_comp_channel* channel,
                              int comp_vector);
  struct ibv_cq_ex* (*create_cq_ex)(struct ibv_context* context, struct ibv_cq_init_attr_ex* init_attr);
  struct ibv_flow* (*create_flow)(struct ibv_qp* qp, struct ibv_flow_attr* flow_attr);
  struct ibv_flow_action* (*create_flow_action_esp)(struct ibv_context* context,
                                                    struct ibv_flow_action_esp_attr* attr);
  struct ibv_qp* (*create_qp)(struct ibv_pd* pd, struct ibv_qp_init_attr* attr);
  struct ibv_qp* (*create_qp_ex)(struct ibv_context* context, struct ibv_qp_init_attr_ex* qp_init_attr_ex);
  struct ibv_rwq_ind_table* (*create_rwq_ind_table)(struct ibv_context* context,
                                                    struct ibv_rwq_ind_table_init_attr* init_attr);
  struct ibv_srq* (*create_srq)(struct ibv_pd* pd, struct ibv_srq_init_attr* srq_init_attr);
  struct ibv_srq* (*create_srq_ex)(struct ibv_context* context,
                                   struct ibv_srq_init_attr_ex* srq_init_attr_ex);
  struct ibv_wq* (*create_wq)(struct ibv_context* context, struct ibv_wq_init_attr* wq_init_attr);
  int (*dealloc_mw)(struct ibv_mw* mw);
  int (*dealloc_pd)(struct ibv_pd* pd);
  int (*dealloc_td)(struct ibv_td* td);
  int (*dereg_mr)(struct verbs_mr* vmr);
  int (*destroy_ah)(struct ibv_ah* ah);
  int (*destroy_counters)(struct ibv_counters* counters);
  int (*destroy_cq)(struct ibv_cq* cq);
  int (*destroy_flow)(struct ibv_flow* flow);
  int (*destroy_flow_action)(struct ibv_flow_action* action);
  int (*destroy_qp)(struct ibv_qp* qp);
  int (*destroy_rwq_ind_table)(struct ibv_rwq_ind_table* rwq_ind_table);
  int (*destroy_srq)(struct ibv_srq* srq);
  int (*destroy_wq)(struct ibv_wq* wq);
  int (*detach_mcast)(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid);
  void (*free_context)(struct ibv_context* context);
  int (*free_dm)(struct ibv_dm* dm);
  int (*get_srq_num)(struct ibv_srq* srq, uint32_t* srq_num);
  struct ibv_dm* (*import_dm)(struct ibv_context* context, uint32_t dm_handle);
  struct ibv_mr* (*import_mr)(struct ibv_pd* pd, uint32_t mr_handle);
  struct ibv_pd* (*import_pd)(struct ibv_context* context, uint32_t pd_handle);
  int (*modify_cq)(struct ibv_cq* cq, struct ibv_modify_cq_attr* attr);
  int (*modify_flow_action_esp)(struct ibv_flow_action* action, struct ibv_flow_action_esp_attr* attr);
  int (*modify_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask);
  int (*modify_qp_rate_limit)(struct ibv_qp* qp, struct ibv_qp_rate_limit_attr* attr);
  int (*modify_srq)(struct ibv_srq* srq, struct ibv_srq_attr* srq_attr, int srq_attr_mask);
  int (*modify_wq)(struct ibv_wq* wq, struct ibv_wq_attr* wq_attr);
  struct ibv_qp* (*open_qp)(struct ibv_context* context, struct ibv_qp_open_attr* attr);
  struct ibv_xrcd* (*open_xrcd)(struct ibv_context* context, struct ibv_xrcd_init_attr* xrcd_init_attr);
  int (*poll_cq)(struct ibv_cq* cq, int num_entries, struct ibv_wc* wc);
  int (*post_recv)(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr);
  int (*post_send)(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr);
  int (*post_srq_ops)(struct ibv_srq* srq, struct ibv_ops_wr* op, struct ibv_ops_wr** bad_op);
  int (*post_srq_recv)(struct ibv_srq* srq, struct ibv_recv_wr* recv_wr, struct ibv_recv_wr** bad_recv_wr);
  int (*query_device_ex)(struct ibv_context* context, const struct ibv_query_device_ex_input* input,
                         struct ibv_device_attr_ex* attr, size_t attr_size);
  int (*query_ece)(struct ibv_qp* qp, struct ibv_ece* ece);
  int (*query_port)(struct ibv_context* context, uint8_t port_num, struct ibv_port_attr* port_attr);
  int (*query_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask,
                  struct ibv_qp_init_attr* init_attr);
  int (*query_qp_data_in_order)(struct ibv_qp* qp, enum ibv_wr_opcode op, uint32_t flags);
  int (*query_rt_values)(struct ibv_context* context, struct ibv_values_ex* values);
  int (*query_srq)(struct ibv_srq* srq, struct ibv_srq_attr* srq_attr);
  int (*read_counters)(struct ibv_counters* counters, uint64_t* counters_value, uint32_t ncounters,
                       uint32_t flags);
  struct ibv_mr* (*reg_dm_mr)(struct ibv_pd* pd, struct ibv_dm* dm, uint64_t dm_offset, size_t length,
                              unsigned int access);
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                  int access);
  struct ibv_mr* (*reg_mr)(struct ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access);
  int (*req_notify_cq)(struct ibv_cq* cq, int solicited_only);
  int (*rereg_mr)(struct verbs_mr* vmr, int flags, struct ibv_pd* pd, void* addr, size_t length, int access);
  int (*resize_cq)(struct ibv_cq* cq, int cqe);
  int (*set_ece)(struct ibv_qp* qp, struct ibv_ece* ece);
  void (*unimport_dm)(struct ibv_dm* dm);
  void (*unimport_mr)(struct ibv_mr* mr);
  void (*unimport_pd)(struct ibv_pd* pd);
};

// Exported by libibverbs.so.1 under IBVERBS_PRIVATE_34 (linking against it binds these to that version).
void verbs_register_driver_34(const struct verbs_device_ops* ops);
// Allocates alloc_size bytes, zeroed, with the verbs_context at byte offset (passed as a pointer value),
// initialises it (cmd_fd, async_fd = -1, dummy ops, ioctl probe) and returns the start of the allocation.
void* _verbs_init_and_alloc_context(struct ibv_device* device, int cmd_fd, size_t alloc_size,
                                    struct verbs_context* context_offset, uint32_t driver_id);
void verbs_uninit_context(struct verbs_context* context);
void verbs_set_ops(struct verbs_context* vctx, const struct verbs_context_ops* ops);
void verbs_init_cq(struct ibv_cq* cq, struct ibv_context* context, struct ibv_comp_channel* channel,
                   void* cq_context);

#ifdef __cplusplus
}  // extern "C"
#endif

// ---- Pinned layout (x86-64, rdma-core v36..v56) ----
#ifdef __cplusplus
#define URXE_ABI_ASSERT static_assert
#else
#define URXE_ABI_ASSERT _Static_assert
#endif
#if defined(__x86_64__)
URXE_ABI_ASSERT(sizeof(struct verbs_match_ent) == 24, "verbs_match_ent");
URXE_ABI_ASSERT(offsetof(struct verbs_match_ent, kind) == 20, "verbs_match_ent.kind");

URXE_ABI_ASSERT(sizeof(struct verbs_sysfs_dev) == 992, "verbs_sysfs_dev");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, provider_data) == 16, "sysfs_dev.provider_data");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, match) == 24, "sysfs_dev.match");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, flags) == 32, "sysfs_dev.flags");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, sysfs_name) == 36, "sysfs_dev.sysfs_name");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, sysfs_cdev) == 104, "sysfs_dev.sysfs_cdev");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, ibdev_name) == 112, "sysfs_dev.ibdev_name");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, ibdev_path) == 176, "sysfs_dev.ibdev_path");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, modalias) == 432, "sysfs_dev.modalias");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, node_guid) == 944, "sysfs_dev.node_guid");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, driver_id) == 952, "sysfs_dev.driver_id");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, node_type) == 956, "sysfs_dev.node_type");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, ibdev_idx) == 960, "sysfs_dev.ibdev_idx");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, num_ports) == 964, "sysfs_dev.num_ports");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, abi_ver) == 968, "sysfs_dev.abi_ver");
URXE_ABI_ASSERT(offsetof(struct verbs_sysfs_dev, time_created) == 976, "sysfs_dev.time_created");

URXE_ABI_ASSERT(sizeof(struct verbs_device_ops) == 72, "verbs_device_ops");
URXE_ABI_ASSERT(offsetof(struct verbs_device_ops, alloc_context) == 40, "device_ops.alloc_context");
URXE_ABI_ASSERT(offsetof(struct verbs_device_ops, alloc_device) == 56, "device_ops.alloc_device");
URXE_ABI_ASSERT(offsetof(struct verbs_device_ops, uninit_device) == 64, "device_ops.uninit_device");

URXE_ABI_ASSERT(sizeof(struct ibv_device) == 664, "ibv_device");
URXE_ABI_ASSERT(sizeof(struct verbs_device) == 0x2c8, "verbs_device");
URXE_ABI_ASSERT(offsetof(struct verbs_device, ops) == 0x298, "verbs_device.ops");
URXE_ABI_ASSERT(offsetof(struct verbs_device, refcount) == 0x2a0, "verbs_device.refcount");
URXE_ABI_ASSERT(offsetof(struct verbs_device, entry) == 0x2a8, "verbs_device.entry");
URXE_ABI_ASSERT(offsetof(struct verbs_device, sysfs) == 0x2b8, "verbs_device.sysfs");
URXE_ABI_ASSERT(offsetof(struct verbs_device, core_support) == 0x2c0, "verbs_device.core_support");

URXE_ABI_ASSERT(sizeof(struct verbs_context_ops) == 76 * 8, "verbs_context_ops: 76 slots");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, alloc_pd) == 5 * 8, "ops.alloc_pd");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, async_event) == 7 * 8, "ops.async_event");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, cq_event) == 12 * 8, "ops.cq_event");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, create_cq) == 15 * 8, "ops.create_cq");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, create_qp) == 19 * 8, "ops.create_qp");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, create_srq) == 22 * 8, "ops.create_srq");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, dereg_mr) == 28 * 8, "ops.dereg_mr");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, destroy_qp) == 34 * 8, "ops.destroy_qp");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, free_context) == 39 * 8, "ops.free_context");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, modify_qp) == 47 * 8, "ops.modify_qp");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, poll_cq) == 53 * 8, "ops.poll_cq");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, post_send) == 55 * 8, "ops.post_send");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, post_srq_recv) == 57 * 8, "ops.post_srq_recv");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, query_device_ex) == 58 * 8, "ops.query_device_ex");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, query_port) == 60 * 8, "ops.query_port");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, query_qp_data_in_order) == 62 * 8,
                "ops.query_qp_data_in_order");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, reg_mr) == 68 * 8, "ops.reg_mr");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, req_notify_cq) == 69 * 8, "ops.req_notify_cq");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, rereg_mr) == 70 * 8, "ops.rereg_mr");
URXE_ABI_ASSERT(offsetof(struct verbs_context_ops, unimport_pd) == 75 * 8, "ops.unimport_pd");

URXE_ABI_ASSERT(sizeof(struct ibv_mr) == 48, "ibv_mr");
URXE_ABI_ASSERT(offsetof(struct verbs_mr, mr_type) == 48, "verbs_mr.mr_type");
URXE_ABI_ASSERT(offsetof(struct verbs_mr, access) == 52, "verbs_mr.access");
URXE_ABI_ASSERT(sizeof(struct verbs_dm) == 40, "verbs_dm: ibv_dm (32) + handle");
URXE_ABI_ASSERT(sizeof(struct ibv_qp_ex) == 0x160, "ibv_qp_ex");
URXE_ABI_ASSERT(offsetof(struct ibv_qp_ex, qp_base) == 0, "ibv_qp_ex.qp_base");
URXE_ABI_ASSERT(offsetof(struct verbs_qp, comp_mask) == 0x160, "verbs_qp.comp_mask");
URXE_ABI_ASSERT(offsetof(struct verbs_qp, xrcd) == 0x168, "verbs_qp.xrcd");
URXE_ABI_ASSERT(sizeof(struct verbs_cq) == sizeof(struct ibv_cq_ex), "verbs_cq");
URXE_ABI_ASSERT(offsetof(struct verbs_srq, srq_type) == sizeof(struct ibv_srq), "verbs_srq.srq_type");
URXE_ABI_ASSERT(offsetof(struct verbs_context, context) + sizeof(struct ibv_context) ==
                    sizeof(struct verbs_context),
                "verbs_context ends with ibv_context");
#else
#error "urxe's provider ABI is pinned for x86-64 only; re-measure the layouts for this architecture"
#endif
#undef URXE_ABI_ASSERT
