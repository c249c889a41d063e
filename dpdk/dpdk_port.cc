#include "dpdk/dpdk_port.h"

#include <dirent.h>
#include <linux/capability.h>
#include <rte_bus_vdev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/if_ether.h>
#include <linux/if_packet.h>

#include <arpa/inet.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "dpdk/port_factory.h"
#include "dpdk/socket_port.h"
#include "engine/engine.h"
#include "hostnet/capability.h"
#include "wire/bytes.h"
#include "wire/opcode.h"

namespace urxe::dpdk {
namespace {

std::mutex g_mu;
bool g_eal_tried = false, g_eal_ok = false;
// The process that started EAL. DPDK does not survive fork(): a child (pyverbs and other test drivers fork
// workers after opening a device) sees EAL's memory and device list but cannot use them, so it gets the
// socket port instead, and never tears down the parent's DPDK objects.
pid_t g_eal_pid = 0;
std::string g_eal_err;
std::set<uint16_t> g_ports_in_use;
// Interfaces with one of our af_packet ports open in this process (by ifindex). DPDK's af_packet PMD puts
// every socket it opens into the PACKET_FANOUT group (pid ^ ifindex): a second port on the same interface
// would join the first one's group and the kernel would split the interface's frames between the two, so
// each would lose about half of its QPs' frames. A second context on the device (librdmacm's next to the
// app's, as UCX opens them) therefore gets the socket port instead.
std::map<int, int> g_af_packet_users;
std::atomic<uint32_t> g_seq{0};

uint64_t read_u64(const char* path) {
  std::ifstream f(path);
  uint64_t v = 0;
  f >> v;
  return v;
}

// Free hugepage memory in MiB (2 MiB and 1 GiB pages).
uint64_t free_hugepage_mb() {
  return read_u64("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") * 2 +
         read_u64("/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages") * 1024;
}

std::string cpu_list() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "0";
  std::string s;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s.empty() ? "0" : s;
}

// Shell-like split: whitespace separates words; single or double quotes group.
std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

bool names_pci_device(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "-a" || a.rfind("--allow", 0) == 0 || a == "-w" || a.rfind("-a", 0) == 0) return true;
  return false;
}

// af_packet ring geometry for frames up to `max_frame` bytes: the block size must be a multiple of the page
// and of the frame size (otherwise tx stalls after one ring's worth, as measured).
void af_packet_geometry(uint32_t max_frame, uint32_t& framesz, uint32_t& blocksz) {
  framesz = (max_frame + 128 + 2047) / 2048 * 2048;
  uint32_t page = static_cast<uint32_t>(getpagesize());
  blocksz = framesz;
  while (blocksz % page) blocksz += framesz;
}

// The destination QP of a RoCE frame (untagged IPv4/IPv6, UDP 4791); false for anything else.
bool roce_dqpn(const uint8_t* d, uint32_t len, uint32_t& qpn) {
  uint32_t bth;
  if (len >= 14 + 20 + 8 + 12 && d[12] == 0x08 && d[13] == 0x00 && d[23] == 17) {
    bth = 14 + (d[14] & 0xfu) * 4 + 8;
  } else if (len >= 14 + 40 + 8 + 12 && d[12] == 0x86 && d[13] == 0xdd && d[20] == 17) {
    bth = 14 + 40 + 8;
  } else {
    return false;
  }
  if (bth + 12 > len || wire::load_be16(d + bth - 6) != wire::kRoceV2Port) return false;
  qpn = wire::load_be24(d + bth + 5);
  return true;
}

// Gives a non-EAL thread (the progress thread, or an application thread that polls its CQ and so runs
// the engine) an lcore id, so mempool per-lcore caches work. At thread exit the lcore's cached mbufs go
// back to their pools and the id is released: apps that poll from short-lived threads must not strand
// mbufs in dead caches nor run out of lcore ids.
struct LcoreRegistration {
  bool registered = false;
  ~LcoreRegistration() {
    if (!registered) return;
    const unsigned lcore = rte_lcore_id();
    rte_mempool_walk(
        [](rte_mempool* mp, void* arg) {
          if (rte_mempool_cache* c = rte_mempool_default_cache(mp, *static_cast<unsigned*>(arg)))
            rte_mempool_cache_flush(c, mp);
        },
        const_cast<unsigned*>(&lcore));
    rte_thread_unregister();
  }
};
thread_local bool t_registered = false;
thread_local LcoreRegistration t_lcore;

inline void ensure_lcore() {
  if (__builtin_expect(t_registered, 1)) return;
  t_registered = true;
  if (rte_lcore_id() == LCORE_ID_ANY) t_lcore.registered = rte_thread_register() == 0;
}

}  // namespace

std::vector<std::string> eal_default_args(uint32_t mem_mb) {
  std::vector<std::string> a = {"urxe"};
  a.push_back("--file-prefix=urxe-" + std::to_string(getpid()) + "-" + std::to_string(g_seq.fetch_add(1)));
  if (free_hugepage_mb() < mem_mb) {
    a.push_back("--no-huge");
    a.push_back("-m");
    a.push_back(std::to_string(mem_mb));
  }
  a.push_back("--no-shconf");
  a.push_back("--no-telemetry");
  a.push_back("--lcores=0@(" + cpu_list() + ")");
  a.push_back("--log-level=lib.eal:warning");
  a.push_back("--log-level=pmd.*:warning");
  return a;
}

bool eal_init_once(const std::vector<std::string>& extra, uint32_t mem_mb, std::string* err) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_eal_tried && g_eal_ok && getpid() != g_eal_pid) {
    if (err)
      *err = "DPDK's EAL belongs to the parent process (pid " + std::to_string(g_eal_pid) +
             "); not usable after fork()";
    return false;
  }
  if (g_eal_tried) {
    if (!g_eal_ok && err) *err = g_eal_err;
    if (g_eal_ok && !extra.empty())
      fprintf(stderr,
              "urxe: DPDK EAL already running in this process; EAL arguments ignored (--vdev still used)\n");
    return g_eal_ok;
  }
  g_eal_tried = true;
  std::vector<std::string> args = eal_default_args(mem_mb);
  if (!names_pci_device(extra)) args.push_back("--no-pci");
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  int r = rte_eal_init(static_cast<int>(args.size()), argv.data());
  if (r < 0) {
    g_eal_err = std::string("rte_eal_init: ") + rte_strerror(rte_errno);
    for (const auto& s : args) g_eal_err += " " + s;
    if (err) *err = g_eal_err;
    return false;
  }
  g_eal_ok = true;
  g_eal_pid = getpid();
  return true;
}

// The AF_PACKET sockets of this process bound to `ifindex` (by fd): how we find the af_packet PMD's own
// socket, which DPDK does not expose.
static std::set<int> packet_socket_fds(int ifindex) {
  std::set<int> out;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (!end || *end || fd < 0 || fd == dirfd(d)) continue;
    int domain = 0;
    socklen_t len = sizeof domain;
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_PACKET)
      continue;
    sockaddr_ll sll{};
    len = sizeof sll;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&sll), &len) == 0 &&
        sll.sll_ifindex == ifindex)
      out.insert(static_cast<int>(fd));
  }
  closedir(d);
  return out;
}

// DpdkPort::open's steps. Each failing step leaves what it took in the port's members: ~DpdkPort releases it.

// Splits the user's words: every --vdev is hot-plugged after EAL is up (so a second port in the same process
// works too); the rest are EAL arguments.
static void split_dpdk_args(const std::string& dpdk_args, std::vector<std::string>& eal_extra,
                            std::vector<std::string>& vdevs) {
  std::vector<std::string> words = split_words(dpdk_args);
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--vdev" && i + 1 < words.size())
      vdevs.push_back(words[++i]);
    else if (words[i].rfind("--vdev=", 0) == 0)
      vdevs.push_back(words[i].substr(7));
    else
      eal_extra.push_back(words[i]);
  }
}

// The default af_packet vdev's ring frames: the receive ring's byte budget as the socket port's (the PMD
// sizes rx and tx alike), in whole blocks. The PMD maps its rings MAP_LOCKED: without CAP_IPC_LOCK they must
// fit RLIMIT_MEMLOCK (Debian's default 8 MiB; Docker's may be 64 KiB), so they take at most a quarter of it,
// else the old 512.
static uint32_t af_packet_framecnt(uint32_t framesz, uint32_t blocksz) {
  uint64_t budget = kRxRingBytes;
  rlimit rl{};
  if (!hostnet::have_capability(CAP_IPC_LOCK) && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
      rl.rlim_cur != RLIM_INFINITY)
    budget = std::min<uint64_t>(budget, rl.rlim_cur / 4);
  const uint32_t per_block = blocksz / framesz;
  const uint32_t want = std::max<uint32_t>(512, static_cast<uint32_t>(budget / framesz));
  return (want + per_block - 1) / per_block * per_block;
}

std::unique_ptr<DpdkPort> DpdkPort::open(const DpdkPortConfig& cfg, std::string* err) {
  std::unique_ptr<DpdkPort> p(new DpdkPort());
  if (!hostnet::query_interface(cfg.ifname, p->info_, err)) return nullptr;
  p->attr_.mac = p->info_.mac;
  p->attr_.mtu = p->info_.mtu;
  p->attr_.gids = cfg.gids.empty() ? hostnet::build_gid_table(p->info_) : cfg.gids;

  std::vector<std::string> eal_extra, vdevs;
  split_dpdk_args(cfg.dpdk_args, eal_extra, vdevs);
  if (!eal_init_once(eal_extra, cfg.eal_mem_mb, err)) return nullptr;

  const uint32_t max_frame = p->info_.mtu + 18;
  uint32_t framesz = 0, blocksz = 0;
  af_packet_geometry(max_frame, framesz, blocksz);
  std::string vdev_args;
  const bool af_packet = p->pick_device(cfg, eal_extra, vdevs, framesz, blocksz, vdev_args);
  if (af_packet) {
    p->open_wakeup_socket();
    if (!p->claim_af_packet_interface(cfg.ifname, err)) return nullptr;
  }
  const std::set<int> packet_fds_before = af_packet ? packet_socket_fds(p->info_.ifindex) : std::set<int>{};
  if (!p->attach_ethdev(vdev_args, err)) return nullptr;
  bool rx_intr = false;
  if (!p->start_ethdev(cfg, framesz, af_packet, rx_intr, err)) return nullptr;
  p->pick_wait_fd(rx_intr, af_packet, packet_fds_before);
  if (!p->loop_.open(p->info_.ifindex, err)) return nullptr;
  if (cfg.guard_udp_port) {
    std::string gerr;
    if (!p->guard_.open(&gerr))
      fprintf(stderr, "urxe: %s: cannot hold UDP port 4791 (%s); the kernel may answer RoCE with ICMP\n",
              cfg.ifname.c_str(), gerr.c_str());
  }
  return p;
}

// The device to hot-plug (dev_name_ and its `vdev_args`): the user's first --vdev, else (no PCI NIC named
// either) an af_packet vdev on the interface; none for a PCI NIC. True when it is an af_packet one.
bool DpdkPort::pick_device(const DpdkPortConfig& cfg, const std::vector<std::string>& eal_extra,
                           const std::vector<std::string>& vdevs, uint32_t framesz, uint32_t blocksz,
                           std::string& vdev_args) {
  bool af_packet = false;
  if (vdevs.empty() && !names_pci_device(eal_extra)) {
    af_packet = true;
    dev_name_ = "net_af_packet_urxe" + std::to_string(g_seq.fetch_add(1));
    const uint32_t framecnt = af_packet_framecnt(framesz, blocksz);
    attr_.rx_ring_frames = framecnt;
    vdev_args = "iface=" + cfg.ifname + ",qpairs=1,qdisc_bypass=1,blocksz=" + std::to_string(blocksz) +
                ",framesz=" + std::to_string(framesz) + ",framecnt=" + std::to_string(framecnt);
  } else if (!vdevs.empty()) {
    auto comma = vdevs[0].find(',');
    dev_name_ = vdevs[0].substr(0, comma);
    vdev_args = comma == std::string::npos ? "" : vdevs[0].substr(comma + 1);
    af_packet = dev_name_.rfind("net_af_packet", 0) == 0;
  }
  return af_packet;
}

// The idle wakeup socket (best effort), opened before the PMD's own socket: the kernel serves the newest
// packet socket of an interface first, so the PMD's ring gets each frame before this socket signals it.
void DpdkPort::open_wakeup_socket() {
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = info_.ifindex;
  if (fd >= 0 && attach_drop_filter(fd, nullptr) &&
      bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) == 0) {
    wait_fd_ = fd;
    wait_is_socket_ = true;
  } else if (fd >= 0) {
    close(fd);
  }
}

// Counts this port among the interface's af_packet users; refuses a second one (see g_af_packet_users).
bool DpdkPort::claim_af_packet_interface(const std::string& ifname, std::string* err) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_af_packet_users[info_.ifindex] > 0) {
    if (err)
      *err = "DPDK af_packet already open on " + ifname +
             " in this process (a second one would join its PACKET_FANOUT group and split its frames)";
    return false;
  }
  ++g_af_packet_users[info_.ifindex];
  af_packet_ifindex_ = info_.ifindex;
  return true;
}

// port_id_: the hot-plugged vdev's ethdev, else the PCI NIC's; claimed for this port.
bool DpdkPort::attach_ethdev(const std::string& vdev_args, std::string* err) {
  if (!dev_name_.empty()) {
    if (!hotplug_vdev(vdev_args, err)) return false;
  } else if (!find_pci_ethdev(err)) {
    return false;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  g_ports_in_use.insert(port_id_);
  have_port_ = true;
  return true;
}

bool DpdkPort::hotplug_vdev(const std::string& vdev_args, std::string* err) {
  int r = rte_vdev_init(dev_name_.c_str(), vdev_args.c_str());
  if (r != 0) {
    if (err) *err = "rte_vdev_init(" + dev_name_ + "," + vdev_args + ") failed: " + rte_strerror(-r);
    return false;
  }
  hotplugged_ = true;
  if (rte_eth_dev_get_port_by_name(dev_name_.c_str(), &port_id_) != 0) {
    if (err) *err = "no ethdev named " + dev_name_;
    return false;
  }
  return true;
}

// A PCI NIC named with -a: the first ethdev no other DpdkPort uses.
bool DpdkPort::find_pci_ethdev(std::string* err) {
  std::lock_guard<std::mutex> lk(g_mu);
  bool found = false;
  for (uint16_t pid = 0; pid < RTE_MAX_ETHPORTS; ++pid) {
    if (rte_eth_dev_is_valid_port(pid) && !g_ports_in_use.count(pid)) {
      port_id_ = pid;
      found = true;
      break;
    }
  }
  if (!found) {
    if (err) *err = "no DPDK ethdev available (check the -a argument)";
    return false;
  }
  char name[RTE_ETH_NAME_MAX_LEN];
  rte_eth_dev_get_name_by_port(port_id_, name);
  dev_name_ = name;
  return true;
}

// The mbuf pool, one rx and one tx queue, and the ethdev started. `rx_intr`: the rx queue has an interrupt.
bool DpdkPort::start_ethdev(const DpdkPortConfig& cfg, uint32_t framesz, bool af_packet, bool& rx_intr,
                            std::string* err) {
  // mbufs hold a whole frame (af_packet refuses queues whose ring frames would not fit one mbuf).
  buf_size_ = std::max<uint32_t>(framesz, RTE_MBUF_DEFAULT_DATAROOM);
  int socket_id = rte_eth_dev_socket_id(port_id_);
  if (socket_id < 0) socket_id = SOCKET_ID_ANY;
  std::string pool_name = "urxe_mp" + std::to_string(port_id_);
  pool_ = rte_pktmbuf_pool_create(pool_name.c_str(), cfg.mbufs, 256, 0,
                                  static_cast<uint16_t>(buf_size_ + RTE_PKTMBUF_HEADROOM), socket_id);
  if (!pool_) {
    if (err) *err = std::string("rte_pktmbuf_pool_create: ") + rte_strerror(rte_errno);
    return false;
  }
  rte_eth_conf conf{};
  rx_intr = !af_packet;  // af_packet has no rx interrupt; try it elsewhere (memif, NIC PMDs)
  conf.intr_conf.rxq = rx_intr ? 1 : 0;
  int r = rte_eth_dev_configure(port_id_, 1, 1, &conf);
  if (r != 0 && rx_intr) {
    rx_intr = false;
    conf.intr_conf.rxq = 0;
    r = rte_eth_dev_configure(port_id_, 1, 1, &conf);
  }
  if (r != 0) {
    if (err) *err = "rte_eth_dev_configure(" + dev_name_ + "): " + rte_strerror(-r);
    return false;
  }
  if (!af_packet) rte_eth_dev_set_mtu(port_id_, static_cast<uint16_t>(info_.mtu));  // best effort
  r = rte_eth_rx_queue_setup(port_id_, 0, cfg.rx_desc, static_cast<unsigned>(socket_id), nullptr, pool_);
  if (r == 0) r = rte_eth_tx_queue_setup(port_id_, 0, cfg.tx_desc, static_cast<unsigned>(socket_id), nullptr);
  if (r != 0) {
    if (err) *err = "queue setup(" + dev_name_ + "): " + rte_strerror(-r);
    return false;
  }
  r = rte_eth_dev_start(port_id_);
  if (r != 0) {
    if (err)
      *err = "rte_eth_dev_start(" + dev_name_ + "): " + rte_strerror(-r) +
             (af_packet ? " (net_af_packet needs CAP_NET_RAW and CAP_NET_ADMIN)" : "");
    return false;
  }
  started_ = true;
  return true;
}

// What the idle thread sleeps on: the rx queue's interrupt fd; for af_packet, the PMD's ring socket (the one
// packet socket on the interface not in `packet_fds_before`) in place of the wakeup socket, once filtered.
void DpdkPort::pick_wait_fd(bool rx_intr, bool af_packet, const std::set<int>& packet_fds_before) {
  if (rx_intr) {
    int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(port_id_, 0);
    if (fd >= 0) wait_fd_ = fd;
  }
  if (af_packet) {
    // The PMD's queue is one packet socket with an rx ring, and poll() on such a socket reports POLLIN
    // exactly when the ring holds a frame the PMD has not taken: the thread can sleep on the ring itself.
    // That spares the second socket (a clone of every frame while asleep), the BPF program swapped in and
    // out (a JIT compile) at every sleep, and the race between the two sockets. A socket filter on the ring
    // keeps everything but RoCE to our MAC and QPNs out of it (the PMD copies every frame it gets).
    std::set<int> now = packet_socket_fds(info_.ifindex);
    std::vector<int> fresh;
    for (int fd : now)
      if (!packet_fds_before.count(fd)) fresh.push_back(fd);
    if (fresh.size() == 1 && attach_roce_filter(fresh[0], info_.mac, UINT32_MAX, qpns_, nullptr)) {
      ring_fd_ = fresh[0];
      if (wait_fd_ >= 0 && wait_is_socket_) close(wait_fd_);
      wait_fd_ = ring_fd_;
      wait_is_socket_ = false;
    }
  }
}

DpdkPort::~DpdkPort() {
  if (wait_fd_ >= 0 && wait_is_socket_) close(wait_fd_);
  if (getpid() != g_eal_pid) return;  // a fork()ed child: the DPDK objects are the parent's
  while (stash_pos_ < stash_n_) rte_pktmbuf_free(stash_[stash_pos_++]);
  if (started_) rte_eth_dev_stop(port_id_);
  if (g_eal_ok && !dev_name_.empty()) {
    if (have_port_) rte_eth_dev_close(port_id_);
    if (hotplugged_) rte_vdev_uninit(dev_name_.c_str());
    std::lock_guard<std::mutex> lk(g_mu);
    if (have_port_) g_ports_in_use.erase(port_id_);
  }
  if (af_packet_ifindex_ >= 0) {
    std::lock_guard<std::mutex> lk(g_mu);
    --g_af_packet_users[af_packet_ifindex_];
  }
  if (pool_) rte_mempool_free(pool_);
}

bool DpdkPort::tx_alloc(uint32_t size, engine::PacketBuf& buf) {
  ensure_lcore();
  if (size > buf_size_) return false;
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) return false;
  buf.data = rte_pktmbuf_mtod(m, uint8_t*);
  buf.len = 0;
  buf.opaque = m;
  return true;
}

void DpdkPort::tx_free(engine::PacketBuf& buf) {
  if (buf.opaque) rte_pktmbuf_free(static_cast<rte_mbuf*>(buf.opaque));
  buf.opaque = nullptr;
  buf.data = nullptr;
}

uint32_t DpdkPort::tx_burst(engine::PacketBuf* bufs, uint32_t n) {
  constexpr uint32_t kMax = 64;
  rte_mbuf* m[kMax];
  uint32_t total = 0;
  while (total < n) {
    // Frames to our own MAC or to a group go through the loopback socket (see LoopbackSender: the other
    // processes on this device see them too), in order with the rest.
    if (looped(bufs[total])) {
      if (!loop_.send(bufs[total].data, bufs[total].len)) break;
      tx_free(bufs[total]);
      ++total;
      continue;
    }
    uint32_t k = 0;
    while (k < kMax && total + k < n && !looped(bufs[total + k])) {
      m[k] = static_cast<rte_mbuf*>(bufs[total + k].opaque);
      m[k]->data_len = static_cast<uint16_t>(bufs[total + k].len);
      m[k]->pkt_len = bufs[total + k].len;
      ++k;
    }
    uint16_t sent = rte_eth_tx_burst(port_id_, 0, m, static_cast<uint16_t>(k));
    for (uint16_t i = 0; i < sent; ++i) {
      bufs[total + i].opaque = nullptr;
      bufs[total + i].data = nullptr;
    }
    total += sent;
    if (sent < k) break;
  }
  return total;
}

uint32_t DpdkPort::rx_burst(engine::PacketBuf* bufs, uint32_t n) {
  ensure_lcore();
  constexpr uint32_t kMax = 64;
  rte_mbuf* m[kMax];
  const uint32_t want = std::min(kMax, n);
  uint32_t got = 0;
  while (stash_pos_ < stash_n_ && got < want) m[got++] = stash_[stash_pos_++];
  if (got < want) got += rte_eth_rx_burst(port_id_, 0, m + got, static_cast<uint16_t>(want - got));
  uint32_t out = 0;
  for (uint32_t i = 0; i < got; ++i) {
    if (m[i]->nb_segs != 1) {  // the engine takes contiguous frames; our mbufs fit any frame the link allows
      __atomic_fetch_add(&multiseg_dropped_, 1, __ATOMIC_RELAXED);  // read by rx_loss()
      rte_pktmbuf_free(m[i]);
      continue;
    }
    // af_packet runs the interface promiscuous: keep only frames to our MAC, as the socket port and a NIC do.
    // With a multicast group, also frames to a group's MAC and DestQP 0xFFFFFF (the engine drops groups it
    // has no member of).
    const uint8_t* d = rte_pktmbuf_mtod(m[i], const uint8_t*);
    const bool to_us = m[i]->data_len >= 14 && std::memcmp(d, attr_.mac.data(), 6) == 0;
    const bool to_group =
        !to_us && m[i]->data_len >= 14 && (d[0] & 1) && mc_any_.load(std::memory_order_relaxed);
    if (!to_us && !to_group) {
      ++not_ours_dropped_;
      rte_pktmbuf_free(m[i]);
      continue;
    }
    uint32_t qpn = 0;
    if (to_group ? !roce_dqpn(d, m[i]->data_len, qpn) || qpn != engine::kMulticastQpn
                 : qpn_filter_ && roce_dqpn(d, m[i]->data_len, qpn) && !qpns_.contains(qpn)) {
      ++not_ours_dropped_;
      rte_pktmbuf_free(m[i]);
      continue;
    }
    bufs[out++] =
        engine::PacketBuf{.data = rte_pktmbuf_mtod(m[i], uint8_t*), .len = m[i]->data_len, .opaque = m[i]};
  }
  return out;
}

void DpdkPort::rx_free(engine::PacketBuf* bufs, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    if (bufs[i].opaque) rte_pktmbuf_free(static_cast<rte_mbuf*>(bufs[i].opaque));
    bufs[i].opaque = nullptr;
  }
}

uint32_t DpdkPort::drain_wait_fd() {
  uint8_t buf[64];
  uint32_t n = 0;
  while (recv(wait_fd_, buf, sizeof buf, MSG_DONTWAIT) > 0) ++n;
  return n;
}

void DpdkPort::rx_wait_arm(bool armed) {
  if (wait_fd_ < 0 || wait_fd_ == ring_fd_) return;
  if (wait_is_socket_) {
    // Armed: frames for us are queued (1 byte each) on the wakeup socket; disarmed: dropped in the filter.
    if (armed) {
      attach_roce_filter(wait_fd_, info_.mac, 1, qpns_, nullptr, mc_any_.load(std::memory_order_relaxed));
    } else {
      attach_drop_filter(wait_fd_, nullptr);
      // The kernel hands a frame to the packet sockets one after the other: the wakeup socket can have it
      // before the PMD's ring does. If it saw one, wait (bounded) until the ring has it too, so the caller's
      // next rx_burst does not come back empty and put the thread back to sleep on a frame already here.
      if (drain_wait_fd() > 0 && stash_pos_ == stash_n_) {
        stash_pos_ = stash_n_ = 0;
        auto t0 = std::chrono::steady_clock::now();
        do {
          stash_n_ = rte_eth_rx_burst(port_id_, 0, stash_, kStash);
        } while (stash_n_ == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(200));
      }
    }
  } else if (armed) {
    rte_eth_dev_rx_intr_enable(port_id_, 0);
  } else {
    rte_eth_dev_rx_intr_disable(port_id_, 0);
    uint64_t v;
    [[maybe_unused]] ssize_t n = read(wait_fd_, &v, sizeof v);
  }
}

bool DpdkPort::set_rx_qpn_range(uint32_t first, uint32_t end) {
  qpns_ = {first, end};
  qpn_filter_ = first != 0 || end != (1u << 24);
  if (ring_fd_ >= 0)
    return attach_roce_filter(ring_fd_, info_.mac, UINT32_MAX, qpns_, nullptr, !mc_macs_.empty());
  return true;
}

bool DpdkPort::set_multicast_mac(const wire::MacAddr& mac, bool member) {
  const size_t before = mc_macs_.size();
  if (member)
    mc_macs_.push_back(mac);
  else
    std::erase(mc_macs_, mac);
  // The NIC's list; a PMD without one (af_packet: promiscuous anyway) takes all multicast.
  std::vector<rte_ether_addr> list(mc_macs_.size());
  for (size_t i = 0; i < mc_macs_.size(); i++) std::memcpy(list[i].addr_bytes, mc_macs_[i].data(), 6);
  if (rte_eth_dev_set_mc_addr_list(port_id_, list.data(), static_cast<uint32_t>(list.size())) != 0 && member)
    rte_eth_allmulticast_enable(port_id_);
  mc_any_.store(!mc_macs_.empty(), std::memory_order_relaxed);
  if (ring_fd_ >= 0 && (before == 0) != mc_macs_.empty())
    attach_roce_filter(ring_fd_, info_.mac, UINT32_MAX, qpns_, nullptr, !mc_macs_.empty());
  return true;
}

engine::PortRxLoss DpdkPort::rx_loss() {
  rte_eth_stats st{};
  engine::PortRxLoss l;
  if (rte_eth_stats_get(port_id_, &st) == 0) {
    l.ring_full = st.imissed;
    l.no_buffer = st.rx_nombuf;
    l.errors = st.ierrors;
  }
  l.errors += __atomic_load_n(&multiseg_dropped_, __ATOMIC_RELAXED);
  // The af_packet PMD (DPDK 22.11) reports no imissed: its ring socket's own count (reset on each read).
  if (ring_fd_ >= 0) {
    tpacket_stats ts{};
    socklen_t len = sizeof ts;
    std::lock_guard<std::mutex> g(loss_mu_);
    if (getsockopt(ring_fd_, SOL_PACKET, PACKET_STATISTICS, &ts, &len) == 0) ring_drops_ += ts.tp_drops;
    l.ring_full += ring_drops_;
  }
  return l;
}

DpdkPortStats DpdkPort::stats() const {
  DpdkPortStats s;
  rte_eth_stats st{};
  if (rte_eth_stats_get(port_id_, &st) == 0) {
    s.ipackets = st.ipackets;
    s.opackets = st.opackets;
    s.imissed = st.imissed;
    s.ierrors = st.ierrors;
    s.oerrors = st.oerrors;
    s.rx_nombuf = st.rx_nombuf;
  }
  s.rx_multiseg_dropped = __atomic_load_n(&multiseg_dropped_, __ATOMIC_RELAXED);
  s.rx_not_ours_dropped = not_ours_dropped_;
  s.tx_loopback = loop_.sent();
  return s;
}

}  // namespace urxe::dpdk
