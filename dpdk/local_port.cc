// The same-host path between urxe devices of one run directory (local_port.h says what and why).
#include "dpdk/local_port.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "wire/packet.h"

namespace urxe::dpdk {

namespace {

constexpr uint64_t kRetryNs =
    100'000'000;  // attach again, check a peer's file, reap lanes: at most this often

std::string ring_name(uint32_t block) {
  return "b" + std::to_string(block);
}

// Rings of this process, unpublished at exit(): an application that exits without closing its device
// (perftest after a failed completion) must not leave its ring for the next process to trip over.
std::mutex live_mu;
std::vector<LocalReceiver*>& live_rings() {
  static std::vector<LocalReceiver*> v;
  return v;
}
void unpublish_all() {
  std::lock_guard g(live_mu);
  for (LocalReceiver* r : live_rings()) r->unpublish();
}

// Removes the rings in dir whose process is gone (killed: nothing unpublished them).
void sweep_dead(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.size() < 5 || f.compare(f.size() - 4, 4, ".seg") != 0) continue;
    const std::string name = f.substr(0, f.size() - 4);
    const uint64_t owner = local_segment_owner(dir, name);
    if (owner != 0 && !local_owner_alive(owner)) {
      ::unlink((dir + "/" + f).c_str());
      ::unlink((dir + "/" + name + ".wake").c_str());
    }
  }
}

}  // namespace

std::string local_mac_dir(const std::string& dir, const uint8_t* mac) {
  char hex[13];
  std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x%02x%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
  return dir + "/" + hex;
}

uint64_t local_owner_id(uint32_t block) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(::getpid())) << 32) | (block + 1u);
}

bool local_owner_alive(uint64_t id) {
  const auto pid = static_cast<pid_t>(id >> 32);
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

struct LocalPathPort::Peer {
  LocalSender tx;
  std::string name, seg_path, wake_path;  // built once, at open: the data path allocates nothing
  ino_t ino = 0;                          // the segment file attached to
  uint64_t next_try_ns = 0;               // no ring: when to look again
  uint64_t check_ns = 0;                  // attached: when to check that the file is still the same
  uint64_t full_since_ns = 0;             // its lane has been full since then (0: not full)
  bool kicked = false;                    // pushed to in this burst
};

// A destination MAC: a urxe device of this run directory when its directory exists (looked for again at
// most every 100 ms while it does not), else a frame to it goes to the real port.
struct LocalPathPort::Dest {
  wire::MacAddr mac{};
  bool used = false;
  bool present = false;
  uint64_t next_try_ns = 0;
  std::string dir;
  std::vector<std::unique_ptr<Peer>> peers;  // by block; made the first time a frame goes there

  bool busy() const {  // a peer attached (or pushed to in this burst): not to be replaced
    for (const auto& p : peers)
      if (p && (p->tx.attached() || p->kicked)) return true;
    return false;
  }
  void assign(const uint8_t* m, const std::string& root) {
    std::memcpy(mac.data(), m, 6);
    used = true;
    present = false;
    next_try_ns = 0;
    dir = local_mac_dir(root, m);
    for (auto& p : peers) p.reset();
  }
};

std::unique_ptr<LocalPathPort> LocalPathPort::open(std::unique_ptr<engine::Port>& inner,
                                                   const LocalPathConfig& cfg, std::string& err) {
  const std::string own_dir = local_mac_dir(cfg.dir, inner->attr().mac.data());
  for (const std::string& d : {cfg.dir, own_dir}) {
    // 01777 as /tmp: every user's processes publish their rings there, and only remove their own.
    if (::mkdir(d.c_str(), 01777) != 0 && errno != EEXIST) {
      err = d + ": " + std::strerror(errno);
      return nullptr;
    }
    ::chmod(d.c_str(), 01777);  // (whatever the umask took away)
  }
  std::unique_ptr<LocalPathPort> p(new LocalPathPort);
  p->cfg_ = cfg;
  p->owner_id_ = local_owner_id(cfg.block);
  sweep_dead(own_dir);
  LocalRingParams rp;
  // A slot holds a frame of the device's MTU (with its Ethernet header and a VLAN tag) or a batch of 8 KiB
  // of payload, whichever is larger; a batch may fill the slot (4 KiB batches measured slower). Devices of
  // one MTU take each other's batches whole; a batch too large for a peer's slots is cut for the wire.
  rp.slot_bytes = (std::max(inner->attr().mtu + 14 + 4, kMinBatchBytes + kBatchHeadroom) + 63) / 64 * 64;
  p->batch_bytes_ = rp.slot_bytes - kBatchHeadroom;
  p->big_buf_bytes_ = rp.slot_bytes;
  if (!p->rx_.create(own_dir, ring_name(cfg.block), p->owner_id_, rp, err)) return nullptr;
  p->big_pool_.resize(size_t{kBigBufs} * p->big_buf_bytes_);
  for (uint32_t i = kBigBufs; i-- > 0;) p->big_free_.push_back(i);
  p->dests_.reserve(kMaxDests);
  for (uint32_t i = 0; i < kMaxDests; i++) {
    auto d = std::make_unique<Dest>();
    d->peers.resize(cfg.blocks);
    p->dests_.push_back(std::move(d));
  }
  p->dests_[0]->assign(inner->attr().mac.data(), cfg.dir);  // our own device, never replaced
  p->kicked_.reserve(static_cast<size_t>(kMaxDests) * cfg.blocks);
  const int inner_fd = inner->rx_wait_fd();
  if (inner_fd >= 0) {
    p->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (p->epoll_fd_ < 0 || ::epoll_ctl(p->epoll_fd_, EPOLL_CTL_ADD, inner_fd, &ev) != 0 ||
        ::epoll_ctl(p->epoll_fd_, EPOLL_CTL_ADD, p->rx_.wake_fd(), &ev) != 0) {
      err = std::string("epoll: ") + std::strerror(errno);
      return nullptr;
    }
  }
  p->inner_ = std::move(inner);
  p->inner_icrc_ = p->inner_->tx_icrc_offload();
  {
    static std::once_flag once;
    // the list first: statics are destroyed in reverse order of construction, after this exit handler
    std::call_once(once, [] {
      live_rings();
      std::atexit(unpublish_all);
    });
    std::lock_guard g(live_mu);
    live_rings().push_back(&p->rx_);
  }
  return p;
}

LocalPathPort::~LocalPathPort() {
  {
    std::lock_guard g(live_mu);
    auto& v = live_rings();
    v.erase(std::remove(v.begin(), v.end(), &rx_), v.end());
  }
  for (auto& d : dests_)
    for (auto& peer : d->peers)
      if (peer) peer->tx.detach();
  rx_.close();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

// The Dest of a destination MAC (taking a slot for a new one), or nullptr when every slot is busy.
LocalPathPort::Dest* LocalPathPort::dest_for(const uint8_t* mac, uint64_t now) {
  Dest* d = nullptr;
  for (auto& x : dests_) {
    if (x->used && std::memcmp(x->mac.data(), mac, 6) == 0) {
      d = x.get();
      break;
    }
  }
  if (!d) {
    // A MAC not seen yet (once per peer device, not per frame): a free slot, else one nothing is attached to.
    for (uint32_t tries = 0; tries < kMaxDests && !d; tries++) {
      next_victim_ = next_victim_ % (kMaxDests - 1) + 1;  // (slot 0 is our own device)
      Dest* x = dests_[next_victim_].get();
      if (!x->used || !x->busy()) d = x;
    }
    if (!d) return nullptr;
    last_peer_ = nullptr;  // (it may be one of the peers assign() drops)
    d->assign(mac, cfg_.dir);
  }
  if (!d->present && now >= d->next_try_ns) {
    d->next_try_ns = now + kRetryNs;
    struct stat st {};
    d->present = ::stat(d->dir.c_str(), &st) == 0;
  }
  return d->present ? d : nullptr;
}

// The peer whose ring takes this frame, or nullptr: not RoCE to a urxe device of this run directory, a QPN
// outside the device's blocks (QP1's CM MADs go to whoever serves them through the real port), or no ring
// there.
LocalPathPort::Peer* LocalPathPort::peer_for(const engine::PacketBuf& buf, uint64_t now) {
  const uint8_t* frame = buf.data;
  const uint32_t len = buf.len;
  if (len < 14 || (frame[0] & 1)) return nullptr;  // (multicast and broadcast: the wire's way)
  uint32_t dqpn = 0;
  if (buf.bth_offset >= wire::kEthLen && buf.bth_offset + wire::kBthLen <= len) {
    dqpn = wire::bth_dqpn(frame + buf.bth_offset);  // the engine's frame: no parse (a quarter of the
                                                    // sender's time for 64 B WRITEs)
  } else {
    wire::Packet pkt;
    if (wire::parse_frame(wire::ByteSpan(frame, len), pkt,
                          {.verify_icrc = false, .verify_checksums = false, .bth_only = true}) !=
        wire::ParseError::ok)
      return nullptr;
    dqpn = pkt.bth.dqpn;
  }
  Peer* p = peer_to(frame, dqpn, now);
  return p && len <= p->tx.slot_bytes() ? p : nullptr;  // (a larger frame than its slots: the wire's way)
}

// The peer with a ring for QP dqpn of the device at `mac`, attaching to it if due; nullptr if none.
LocalPathPort::Peer* LocalPathPort::peer_to(const uint8_t* mac, uint32_t dqpn, uint64_t now) {
  if (dqpn < cfg_.qpn_base0) return nullptr;
  const uint32_t block = (dqpn - cfg_.qpn_base0) / cfg_.block_size;
  if (block >= cfg_.blocks) return nullptr;
  Dest* d = dest_for(mac, now);
  if (!d) return nullptr;
  std::unique_ptr<Peer>& slot = d->peers[block];
  if (!slot) {  // the first frame to this block of that device (not per frame)
    slot = std::make_unique<Peer>();
    slot->name = ring_name(block);
    slot->seg_path = d->dir + "/" + slot->name + ".seg";
    slot->wake_path = d->dir + "/" + slot->name + ".wake";
  }
  Peer& p = *slot;
  if (p.tx.attached() && now >= p.check_ns) {
    // The ring may have gone (its process closed it) or been replaced (a new process in that block).
    p.check_ns = now + kRetryNs;
    struct stat st {};
    if (p.tx.closed() || ::stat(p.seg_path.c_str(), &st) != 0 || st.st_ino != p.ino) {
      p.tx.detach();
      p.next_try_ns = 0;
    }
  }
  if (!p.tx.attached()) {
    if (now < p.next_try_ns) return nullptr;
    p.next_try_ns = now + kRetryNs;
    struct stat st {};
    if (::stat(p.seg_path.c_str(), &st) != 0) return nullptr;
    std::string err;
    if (!p.tx.attach(d->dir, p.name, owner_id_, err)) return nullptr;
    p.ino = st.st_ino;
    p.check_ns = now + kRetryNs;
    p.full_since_ns = 0;
  }
  last_peer_ = &p;
  last_qpn_lo_ = cfg_.qpn_base0 + block * cfg_.block_size;
  last_qpn_end_ = last_qpn_lo_ + cfg_.block_size;
  std::memcpy(last_mac_.data(), mac, 6);
  return &p;
}

uint32_t LocalPathPort::tx_batch_bytes_to(const uint8_t* dst_mac, uint32_t dqpn) {
  if (dst_mac[0] & 1) return 0;
  const Peer* p = peer_to(dst_mac, dqpn, local_coarse_ns());
  const uint32_t slot = p ? p->tx.slot_bytes() : 0;
  return slot > kBatchHeadroom ? std::min(batch_bytes_, slot - kBatchHeadroom) : 0;
}

bool LocalPathPort::tx_alloc(uint32_t size, engine::PacketBuf& buf) {
  if (size <= attr().mtu + 18 || size > big_buf_bytes_ || big_free_.empty())
    return inner_->tx_alloc(size, buf);
  buf.data = big_pool_.data() + size_t{big_free_.back()} * big_buf_bytes_;
  big_free_.pop_back();
  buf.len = 0;
  buf.opaque = nullptr;
  return true;
}

void LocalPathPort::tx_free(engine::PacketBuf& buf) {
  if (!big_buf(buf.data)) return inner_->tx_free(buf);
  big_free_.push_back(static_cast<uint32_t>((buf.data - big_pool_.data()) / big_buf_bytes_));
  buf.data = nullptr;
}

// A frame in one of our large buffers that goes to the real port (no ring for it) is copied into the
// port's: a batch frame as its packets, each a whole frame with its ICRC, as the engine would have sent
// them one by one. False when the port has no buffers for them now (the frame stays the engine's); what
// the port then does not take is lost, as on a wire.
bool LocalPathPort::send_cut(engine::PacketBuf& b) {
  const uint32_t room = attr().mtu + 18;
  const uint32_t k = b.batch < 2 ? 1 : std::min<uint32_t>(b.batch, engine::Port::kMaxBatch);
  std::array<engine::PacketBuf, engine::Port::kMaxBatch> cut{};
  uint32_t n = 0;
  while (n < k && inner_->tx_alloc(room, cut[n])) n++;
  if (n < k) {
    for (uint32_t i = 0; i < n; i++) inner_->tx_free(cut[i]);
    return false;
  }
  make_whole(b);
  bool ok = true;
  for (uint32_t i = 0; i < k && ok; i++) {
    const wire::MutByteSpan out(cut[i].data, room);
    if (k > 1) {
      cut[i].len = wire::batch_packet(wire::ByteSpan(b.data, b.len), k, i, out);
    } else if (b.len <= room) {
      std::memcpy(cut[i].data, b.data, b.len);
      cut[i].len = b.len;
      if (b.icrc_absent && !wire::write_icrc(wire::MutByteSpan(cut[i].data, b.len))) cut[i].len = 0;
    }
    ok = cut[i].len != 0;
  }
  // (a frame that is neither, or larger than the port's MTU, could not have gone out: dropped)
  const uint32_t sent = ok ? inner_->tx_burst(cut.data(), k) : 0;
  for (uint32_t i = sent; i < k; i++) inner_->tx_free(cut[i]);  // lost, as on a full wire
  if (ok && k > 1) stats_.tx_batch_cut++;
  tx_free(b);
  return true;
}

uint32_t LocalPathPort::send_inner(engine::PacketBuf* bufs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {  // (once per frame: a frame the port refuses has it next time)
    make_whole(bufs[i]);
    if (bufs[i].icrc_absent && !inner_icrc_) {  // (a port that writes ICRCs itself gets none)
      wire::write_icrc(wire::MutByteSpan(bufs[i].data, bufs[i].len));
      bufs[i].icrc_absent = false;
    }
  }
  return n ? inner_->tx_burst(bufs, n) : 0;
}

// peer_for's last answer again, when this frame is the engine's (BTH where it says), to the same MAC and
// QPN block, and that peer is attached and not due for its check: a burst is mostly one QP's frames, and
// the full lookup (MAC search, a division by the block size, a large stack frame) was a tenth of the
// sender's time in a 64 KiB stream between two processes. A leaf of its own, apart from peer_for: folded
// into peer_for (one BTH check, one QPN read), the lookup and tx_burst took 15.8-16.2 % of that sender's
// samples instead of 12.9-13.5 (peer_for's prologue, for the calls it makes, then ran on every frame).
LocalPathPort::Peer* LocalPathPort::last_peer_for(const engine::PacketBuf& buf, uint64_t now) const {
  const uint32_t len = buf.len;
  if (!last_peer_ || buf.bth_offset < wire::kEthLen || buf.bth_offset + wire::kBthLen > len ||
      std::memcmp(last_mac_.data(), buf.data, 6) != 0)
    return nullptr;
  const uint32_t dqpn = wire::bth_dqpn(buf.data + buf.bth_offset);
  if (dqpn < last_qpn_lo_ || dqpn >= last_qpn_end_ || !last_peer_->tx.attached() ||
      now >= last_peer_->check_ns || len > last_peer_->tx.slot_bytes())
    return nullptr;
  return last_peer_;
}

uint32_t LocalPathPort::tx_burst(engine::PacketBuf* bufs, uint32_t n) {
  uint32_t done = 0, run = 0;  // bufs[run, i) go to the real port, in order with the local ones
  bool stop = false;
  // (once per burst; the path's timers are of kRetryNs, all on this clock)
  const uint64_t now = local_coarse_ns();
  uint32_t i = 0;
  for (; i < n && !stop; i++) {
    Peer* p = last_peer_for(bufs[i], now);
    if (!p) p = peer_for(bufs[i], now);
    // A batch frame (whichever pool its buffer came from), or another frame in one of our large buffers,
    // must not go to the real port as it is.
    const bool big = bufs[i].batch || big_buf(bufs[i].data);
    if (!p && !big) continue;  // the real port's, with the run
    const uint32_t k = send_inner(bufs + run, i - run);
    done += k;
    if (k < i - run) return done;  // the real port pushes back: the rest stays the engine's, in order
    run = i + 1;
    if (!p) {  // no ring: to the real port (a batch as its packets), in order after the run
      if (send_cut(bufs[i])) {
        done++;
        continue;
      }
      stop = true;
      run = i;
      continue;
    }
    if (p->tx.push(bufs[i])) {
      p->full_since_ns = 0;
      stats_.tx_local++;
      if (bufs[i].batch) stats_.tx_batches++;
      tx_free(bufs[i]);
      done++;
      if (!p->kicked) {
        p->kicked = true;
        kicked_.push_back(p);  // (reserved for every peer at open: no allocation)
      }
      continue;
    }
    if (p->tx.closed()) {  // the receiver left: as the wire would, the frame goes out and finds nobody
      p->tx.detach();
      run = i;
      if (big) {  // (cut, as above)
        if (send_cut(bufs[i])) {
          done++;
          run = i + 1;
        } else {
          stop = true;
        }
      }
      continue;
    }
    // Full: a slow receiver holds us up (the engine keeps the frame and retries), a dead one must not.
    if (p->full_since_ns == 0) p->full_since_ns = now;
    if (now - p->full_since_ns > kRetryNs && !local_owner_alive(p->tx.receiver_id())) {
      // Its process died without closing the ring: remove what it left (if still that file), drop the
      // frame as the wire would, and send the next ones the wire's way until a new process is there.
      stats_.tx_dropped_dead++;
      struct stat st {};
      if (::stat(p->seg_path.c_str(), &st) == 0 && st.st_ino == p->ino) {
        ::unlink(p->seg_path.c_str());
        ::unlink(p->wake_path.c_str());
      }
      p->tx.detach();
      p->next_try_ns = now + kRetryNs;
      tx_free(bufs[i]);
      done++;
      continue;
    }
    stop = true;
    run = i;  // bufs[i] is not taken
  }
  if (!stop) done += send_inner(bufs + run, n - run);
  for (Peer* p : kicked_) {  // wake the receivers that sleep, once per burst
    p->kicked = false;
    p->tx.kick();
  }
  kicked_.clear();
  return done;
}

uint32_t LocalPathPort::rx_burst(engine::PacketBuf* bufs, uint32_t n) {
  // At most half a burst from the ring first, so that a busy local peer cannot starve the port's ring
  // (which would then overflow); the rest of the room for either. The ring is looked at again only when
  // the first look filled its half (one that took less found it empty: a second scan of its lanes would
  // find little more, and cost a busy-polling app a pass over every lane per poll).
  const uint32_t half = n > 1 ? n / 2 : n;
  const uint32_t local = rx_.rx_burst(bufs, half);
  const uint32_t k = local + inner_->rx_burst(bufs + local, n - local);
  for (uint32_t i = local; i < k; i++) {  // (the ring's set these per frame)
    bufs[i].icrc_absent = false;
    bufs[i].batch = 0;
  }
  const uint32_t more = k < n && local == half ? rx_.rx_burst(bufs + k, n - k) : 0;
  stats_.rx_local += local + more;
  return k + more;
}

void LocalPathPort::rx_free(engine::PacketBuf* bufs, uint32_t n) {
  uint32_t i = 0;
  while (i < n) {  // runs of the ring's frames and of the real port's
    const bool local = rx_.owns(bufs[i].data);
    uint32_t j = i + 1;
    while (j < n && rx_.owns(bufs[j].data) == local) j++;
    if (local) {
      rx_.rx_free(bufs + i, j - i);
    } else {
      inner_->rx_free(bufs + i, j - i);
    }
    i = j;
  }
}

void LocalPathPort::rx_wait_arm(bool armed) {
  inner_->rx_wait_arm(armed);
  rx_.arm(armed);
  if (armed) {
    const uint64_t now = local_coarse_ns();
    if (now - last_reap_ns_ > kRetryNs) {
      last_reap_ns_ = now;
      rx_.reap(local_owner_alive);
    }
  }
}

}  // namespace urxe::dpdk
