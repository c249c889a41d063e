// Shared-memory frame rings between urxe processes on one host (local_ring.h says why this shape).
#include "dpdk/local_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace urxe::dpdk {

namespace {

constexpr uint64_t kMagic = 0x314c4f4345585255ull;  // "URXELOC1"
// 2: a slot's flags say whether the frame carries its ICRC (1 ignored them, and would have dropped such
// frames as corrupt; the version keeps the two apart: a peer of the other version sends the wire's way).
// 3: a slot may hold a batch frame (its flags say of how many packets; 2 would have taken one for a single
// packet too long for its path MTU).
// 4: the header's `claimed` (a receiver of 3 would not look at it, and one of 4 would miss a sender of 3).
constexpr uint32_t kVersion = 4;
constexpr uint32_t kSlotNoIcrc = 1;  // the sender left the ICRC out (PacketBuf::icrc_absent)
constexpr uint32_t kSlotBatchShift = 8;  // bits 8-15: PacketBuf::batch
constexpr size_t kLine = 64;

// The segment: this header, then `lanes` Lane records, then the slots lane by lane. Everything the two
// sides share is an atomic or written before a release store the other side acquires.
struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t lanes;
  uint32_t slots;
  uint32_t slot_bytes;
  uint64_t owner_id;
  uint64_t size;  // bytes of the whole segment
  // Bit l: lane l has an owner (set by the sender after it claims the lane, cleared before the lane is
  // freed). The receiver polls this one line instead of every lane's owner: 8 lines read on each poll, and
  // ~220 instructions of every empty one (the progress round of each small message posted) before.
  alignas(kLine) std::atomic<uint64_t> claimed;
  alignas(kLine) std::atomic<uint32_t> sleeping;
  std::atomic<uint32_t> closed;
  // CLOCK_MONOTONIC ns of the first kick since the receiver last armed (0: none): when the frames that woke
  // it came, which its wake-up time is not (that adds the wake-up's own latency, tens of us on a VM).
  std::atomic<uint64_t> kick_ns;
};
// Each read of a line the other side wrote since is a trip between the cores (~100-250 ns on these VMs):
// the sender reads `tail` only when the tail it saw last says the lane is full, and the receiver stores it
// once per run of frames it returns.
struct Lane {
  alignas(kLine) std::atomic<uint64_t> owner;  // 0 = free; else the sender's id
  alignas(kLine) std::atomic<uint32_t> head;   // frames published (the sender's)
  alignas(kLine) std::atomic<uint32_t> tail;   // frames returned (the receiver's)
};
struct Slot {
  uint32_t len;
  uint32_t flags;   // kSlotNoIcrc, the batch's packets << kSlotBatchShift
  uint8_t data[8];  // slot_bytes in fact
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the rings need address-free atomics");

constexpr size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}
size_t slot_stride(uint32_t slot_bytes) {
  return round_up(offsetof(Slot, data) + slot_bytes, kLine);
}
size_t lanes_offset() {
  return round_up(sizeof(Header), kLine);
}
size_t slots_offset(uint32_t lanes) {
  return lanes_offset() + round_up(size_t{lanes} * sizeof(Lane), kLine);
}
size_t segment_size(uint32_t lanes, uint32_t slots, uint32_t slot_bytes) {
  return slots_offset(lanes) + size_t{lanes} * slots * slot_stride(slot_bytes);
}
// Frees lane l of `owner`: its bit in `claimed` first, so that a sender claiming the lane next sets it
// after this clears it (clearing after the owner could erase the new owner's bit, its frames then unseen).
bool release_lane(Header& h, Lane& lane, uint32_t l, uint64_t owner) {
  const uint64_t bit = uint64_t{1} << l;
  h.claimed.fetch_and(~bit, std::memory_order_acq_rel);
  if (lane.owner.compare_exchange_strong(owner, 0, std::memory_order_acq_rel)) return true;
  h.claimed.fetch_or(bit, std::memory_order_acq_rel);  // (not ours to free after all)
  return false;
}

bool params_ok(uint32_t lanes, uint32_t slots, uint32_t slot_bytes) {
  return lanes >= 1 && lanes <= 64 && slots >= 2 && slots <= 4096 && (slots & (slots - 1)) == 0 &&
         slot_bytes >= 64 && slot_bytes <= 16384;
}

// A socket address for PATH: the path itself when it fits sun_path, else through /proc/self/fd of an open
// descriptor of its directory (kept in dir_fd), which any length of run directory fits.
bool wake_address(const std::string& path, sockaddr_un& a, socklen_t& len, int& dir_fd) {
  a = sockaddr_un{};
  a.sun_family = AF_UNIX;
  std::string p = path;
  if (p.size() >= sizeof a.sun_path) {
    const size_t slash = path.rfind('/');
    if (dir_fd < 0) dir_fd = ::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return false;
    p = "/proc/self/fd/" + std::to_string(dir_fd) + path.substr(slash);
    if (p.size() >= sizeof a.sun_path) return false;
  }
  std::memcpy(a.sun_path, p.c_str(), p.size() + 1);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + p.size() + 1);
  return true;
}

}  // namespace

struct Mapping {
  uint8_t* base = nullptr;
  size_t size = 0;
  Header* hdr = nullptr;
  Lane* lanes = nullptr;
  uint8_t* slots = nullptr;
  size_t stride = 0;
  std::vector<uint32_t> taken;  // receiver: frames handed out per lane (>= tail)
  int dir_fd = -1;              // for wake_address
  sockaddr_un wake{};           // sender: the receiver's wake socket
  socklen_t wake_len = 0;
  bool wake_connected = false;  // sender: the socket is connected to `wake`

  Slot* slot(uint32_t lane, uint32_t i) const {
    const uint32_t n = hdr->slots;
    return reinterpret_cast<Slot*>(slots + (size_t{lane} * n + (i & (n - 1))) * stride);
  }
  ~Mapping() {
    if (base) ::munmap(base, size);
    if (dir_fd >= 0) ::close(dir_fd);
  }
};

namespace {

// Maps an existing segment file and checks that its header describes exactly its size.
Mapping* map_segment(const std::string& path, std::string& err) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    err = path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Header)) {
    ::close(fd);
    err = path + ": not a segment (too short)";
    return nullptr;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    err = path + ": mmap: " + std::strerror(errno);
    return nullptr;
  }
  auto* m = new Mapping;
  m->base = static_cast<uint8_t*>(p);
  m->size = size;
  m->hdr = reinterpret_cast<Header*>(m->base);
  const Header& h = *m->hdr;
  if (h.magic != kMagic || h.version != kVersion || !params_ok(h.lanes, h.slots, h.slot_bytes) ||
      h.size != size || segment_size(h.lanes, h.slots, h.slot_bytes) != size) {
    delete m;
    err = path + ": not a urxe local segment of this version";
    return nullptr;
  }
  m->lanes = reinterpret_cast<Lane*>(m->base + lanes_offset());
  m->slots = m->base + slots_offset(h.lanes);
  m->stride = slot_stride(h.slot_bytes);
  return m;
}

}  // namespace

// ---- receiver ----

LocalReceiver::~LocalReceiver() {
  close();
}

bool LocalReceiver::create(const std::string& dir, const std::string& name, uint64_t owner_id,
                           const LocalRingParams& p, std::string& err) {
  close();
  if (!params_ok(p.lanes, p.slots, p.slot_bytes)) {
    err = "bad ring parameters";
    return false;
  }
  seg_path_ = dir + "/" + name + ".seg";
  wake_path_ = dir + "/" + name + ".wake";
  const std::string tmp = dir + "/." + name + ".tmp";
  const size_t size = segment_size(p.lanes, p.slots, p.slot_bytes);
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    err = tmp + ": " + std::strerror(errno);
    return false;
  }
  void* mem = ::ftruncate(fd, static_cast<off_t>(size)) == 0
                  ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
  ::close(fd);
  if (mem == MAP_FAILED) {
    err = tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  m_ = new Mapping;
  m_->base = static_cast<uint8_t*>(mem);
  m_->size = size;
  m_->hdr = new (m_->base) Header{};  // the file is zeroed: atomics start at 0
  Header& h = *m_->hdr;
  h.magic = kMagic;
  h.version = kVersion;
  h.lanes = p.lanes;
  h.slots = p.slots;
  h.slot_bytes = p.slot_bytes;
  h.owner_id = owner_id;
  h.size = size;
  m_->lanes = reinterpret_cast<Lane*>(m_->base + lanes_offset());
  for (uint32_t i = 0; i < p.lanes; i++) new (&m_->lanes[i]) Lane{};
  m_->slots = m_->base + slots_offset(p.lanes);
  m_->stride = slot_stride(p.slot_bytes);
  m_->taken.assign(p.lanes, 0);
  // The wake socket first, then the segment appears (rename): a sender that finds the segment can wake us.
  wake_rd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  socklen_t alen = 0;
  ::unlink(wake_path_.c_str());
  if (wake_rd_ < 0 || !wake_address(wake_path_, a, alen, m_->dir_fd) ||
      ::bind(wake_rd_, reinterpret_cast<sockaddr*>(&a), alen) != 0) {
    err = wake_path_ + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    close();
    return false;
  }
  ::chmod(wake_path_.c_str(), 0600);
  if (::rename(tmp.c_str(), seg_path_.c_str()) != 0) {
    err = seg_path_ + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    close();
    return false;
  }
  return true;
}

uint32_t LocalReceiver::rx_burst(engine::PacketBuf* bufs, uint32_t n) {
  if (!m_ || n == 0) return 0;
  const uint32_t lanes = m_->hdr->lanes;
  // (bits past the lanes, which no sender of ours sets, are not followed out of the lane records)
  const uint64_t claimed = m_->hdr->claimed.load(std::memory_order_acquire) &
                           (lanes >= 64 ? ~uint64_t{0} : (uint64_t{1} << lanes) - 1);
  if (claimed == 0) return 0;
  uint32_t got = 0;
  // The claimed lanes in turn from next_lane_: those at or above it, then those below (this runs on every
  // poll, so only the claimed lanes' bits are visited).
  const uint32_t from = next_lane_ < lanes ? next_lane_ : 0;
  const uint64_t above = claimed & (~uint64_t{0} << from);
  for (uint64_t pass : {above, claimed & ~above}) {
    for (; pass && got < n; pass &= pass - 1) {
      const auto l = static_cast<uint32_t>(__builtin_ctzll(pass));
      Lane& lane = m_->lanes[l];
      const uint32_t head = lane.head.load(std::memory_order_acquire);
      uint32_t& taken = m_->taken[l];
      while (taken != head && got < n) {
        Slot* s = m_->slot(l, taken);
        bufs[got].data = s->data;
        bufs[got].len = s->len <= m_->hdr->slot_bytes ? s->len : 0;  // a sender cannot make us read past it
        bufs[got].icrc_absent = (s->flags & kSlotNoIcrc) != 0;
        bufs[got].batch = static_cast<uint8_t>(s->flags >> kSlotBatchShift);
        bufs[got].opaque = reinterpret_cast<void*>(uintptr_t{l} + 1);
        taken++;
        got++;
      }
    }
  }
  next_lane_ = next_lane_ + 1 >= lanes ? 0 : next_lane_ + 1;
  return got;
}

void LocalReceiver::rx_free(engine::PacketBuf* bufs, uint32_t n) {
  for (uint32_t i = 0; i < n;) {
    const auto l = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(bufs[i].opaque) - 1);
    uint32_t k = 1;  // the run of this lane's frames (a burst is mostly runs)
    while (i + k < n && bufs[i + k].opaque == bufs[i].opaque) k++;
    Lane& lane = m_->lanes[l];
    lane.tail.store(lane.tail.load(std::memory_order_relaxed) + k, std::memory_order_release);
    i += k;
  }
}

bool LocalReceiver::owns(const uint8_t* data) const {
  return m_ && data >= m_->base && data < m_->base + m_->size;
}

void LocalReceiver::arm(bool armed) {
  if (!m_) return;
  if (armed) {
    m_->hdr->kick_ns.store(0, std::memory_order_relaxed);
    m_->hdr->sleeping.store(1, std::memory_order_seq_cst);
    return;
  }
  m_->hdr->sleeping.store(0, std::memory_order_relaxed);
  last_kick_ns_ = m_->hdr->kick_ns.exchange(0, std::memory_order_relaxed);
  char b[64];
  while (::recv(wake_rd_, b, sizeof b, MSG_DONTWAIT) > 0) {
  }
}

uint32_t LocalReceiver::reap(const std::function<bool(uint64_t)>& alive) {
  if (!m_) return 0;
  uint32_t freed = 0;
  for (uint32_t l = 0; l < m_->hdr->lanes; l++) {
    Lane& lane = m_->lanes[l];
    uint64_t owner = lane.owner.load(std::memory_order_acquire);
    if (owner == 0 || lane.head.load(std::memory_order_acquire) != lane.tail.load(std::memory_order_relaxed))
      continue;
    if (alive(owner)) continue;
    if (release_lane(*m_->hdr, lane, l, owner)) freed++;
  }
  return freed;
}

uint32_t LocalReceiver::lanes_in_use() const {
  uint32_t n = 0;
  if (m_)
    for (uint32_t l = 0; l < m_->hdr->lanes; l++)
      n += m_->lanes[l].owner.load(std::memory_order_relaxed) != 0;
  return n;
}

void LocalReceiver::unpublish() {
  if (m_ && !m_->hdr->closed.exchange(1, std::memory_order_acq_rel)) {
    ::unlink(seg_path_.c_str());
    ::unlink(wake_path_.c_str());
  }
}

void LocalReceiver::close() {
  if (m_) {
    unpublish();
    delete m_;
    m_ = nullptr;
  }
  if (wake_rd_ >= 0) ::close(wake_rd_);
  wake_rd_ = -1;
}

// ---- sender ----

LocalSender::~LocalSender() {
  detach();
}

bool LocalSender::attach(const std::string& dir, const std::string& name, uint64_t owner_id,
                         std::string& err) {
  detach();
  if (owner_id == 0) {
    err = "owner id 0";
    return false;
  }
  Mapping* m = map_segment(dir + "/" + name + ".seg", err);
  if (!m) return false;
  if (m->hdr->closed.load(std::memory_order_acquire)) {
    delete m;
    err = name + ": the receiver has closed";
    return false;
  }
  for (uint32_t l = 0; l < m->hdr->lanes; l++) {
    uint64_t expect = 0;
    if (m->lanes[l].owner.compare_exchange_strong(expect, owner_id, std::memory_order_acq_rel)) {
      m->hdr->claimed.fetch_or(uint64_t{1} << l, std::memory_order_acq_rel);  // (before any frame)
      m_ = m;
      lane_ = l;
      owner_ = owner_id;
      tail_seen_ = m->lanes[l].tail.load(std::memory_order_acquire);
      wake_wr_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (!wake_address(dir + "/" + name + ".wake", m->wake, m->wake_len, m->dir_fd)) m->wake_len = 0;
      // Connected once, so that a kick is a send without the path's lookup (a sendto to a path walks it
      // every time: a third of a kick's kernel time). A receiver that replaces its files is attached anew.
      if (wake_wr_ >= 0 && m->wake_len &&
          ::connect(wake_wr_, reinterpret_cast<const sockaddr*>(&m->wake), m->wake_len) == 0)
        m->wake_connected = true;
      return true;
    }
  }
  delete m;
  err = name + ": no free lane";
  return false;
}

bool LocalSender::push(const uint8_t* frame, uint32_t len, bool icrc_absent) {
  engine::PacketBuf b;
  b.data = const_cast<uint8_t*>(frame);  // (only read)
  b.len = len;
  b.icrc_absent = icrc_absent;
  return push(b);
}

bool LocalSender::push(const engine::PacketBuf& b) {
  const uint32_t len = b.len;
  if (!m_ || len > m_->hdr->slot_bytes || m_->hdr->closed.load(std::memory_order_relaxed)) return false;
  if (b.gather && uint32_t{b.gather_offset} + b.gather_len > len) return false;
  Lane& lane = m_->lanes[lane_];
  const uint32_t head = lane.head.load(std::memory_order_relaxed);
  if (head - tail_seen_ >= m_->hdr->slots) {
    tail_seen_ = lane.tail.load(std::memory_order_acquire);
    if (head - tail_seen_ >= m_->hdr->slots) return false;  // full
  }
  Slot* s = m_->slot(lane_, head);
  s->len = len;
  s->flags = (b.icrc_absent ? kSlotNoIcrc : 0) | uint32_t{b.batch} << kSlotBatchShift;
  if (b.gather) {  // headers, the payload from where it is, then the pad and ICRC room
    const uint32_t end = uint32_t{b.gather_offset} + b.gather_len;
    std::memcpy(s->data, b.data, b.gather_offset);
    std::memcpy(s->data + b.gather_offset, b.gather, b.gather_len);
    std::memcpy(s->data + end, b.data + end, len - end);
  } else {
    std::memcpy(s->data, b.data, len);
  }
  lane.head.store(head + 1, std::memory_order_release);
  return true;
}

void LocalSender::kick() {
  if (!m_) return;
  // Pairs with the receiver's arm(true) then last look: one of the two sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!m_->hdr->sleeping.load(std::memory_order_relaxed)) return;
  uint64_t none = 0;  // (a clock read beside a system call: the receiver sleeps)
  m_->hdr->kick_ns.compare_exchange_strong(none, local_mono_ns(), std::memory_order_relaxed);
  if (wake_wr_ < 0 || m_->wake_len == 0) return;
  if (m_->wake_connected)
    ::send(wake_wr_, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  else
    ::sendto(wake_wr_, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&m_->wake),
             m_->wake_len);
}

uint64_t local_mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t local_coarse_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

bool LocalSender::closed() const {
  return !m_ || m_->hdr->closed.load(std::memory_order_relaxed);
}

uint32_t LocalSender::slot_bytes() const {
  return m_ ? m_->hdr->slot_bytes : 0;
}

uint64_t LocalSender::receiver_id() const {
  return m_ ? m_->hdr->owner_id : 0;
}

void LocalSender::detach() {
  if (m_) {
    Lane& lane = m_->lanes[lane_];
    // Free the lane only when the receiver has everything; otherwise its reap() frees it later.
    if (lane.head.load(std::memory_order_relaxed) == lane.tail.load(std::memory_order_acquire)) {
      release_lane(*m_->hdr, lane, lane_, owner_);
    }
    delete m_;
    m_ = nullptr;
  }
  if (wake_wr_ >= 0) ::close(wake_wr_);
  wake_wr_ = -1;
}

uint64_t local_segment_owner(const std::string& dir, const std::string& name) {
  std::string err;
  Mapping* m = map_segment(dir + "/" + name + ".seg", err);
  if (!m) return 0;
  const uint64_t id = m->hdr->closed.load(std::memory_order_acquire) ? 0 : m->hdr->owner_id;
  delete m;
  return id;
}

}  // namespace urxe::dpdk
