#include "dpdk/capture_port.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "wire/packet.h"

namespace urxe::dpdk {
namespace {

namespace en = urxe::engine;

// pcapng block types and option codes (draft-ietf-opsawg-pcapng).
constexpr uint32_t kShb = 0x0A0D0D0A, kIdb = 1, kEpb = 6;
constexpr uint16_t kOptEnd = 0, kOptComment = 1;
constexpr uint16_t kShbOs = 3, kShbUserAppl = 4;
constexpr uint16_t kIfName = 2, kIfDescription = 3, kIfTsresol = 9;
constexpr uint16_t kEpbFlags = 2;
constexpr uint32_t kInbound = 1, kOutbound = 2;  // epb_flags bits 0-1
constexpr uint16_t kLinkEthernet = 1;
constexpr uint32_t kSnapLen = 262144;

// Each of the two buffers. Pages are touched only as frames arrive. The writer is woken at a quarter, so on a
// loaded machine it has ~12 MiB of headroom (~100 ms at 1 Gbit/s) to get scheduled before frames are lost.
constexpr size_t kBufBytes = size_t{16} << 20;
constexpr uint32_t kMaxPacket = 4096 + 128;  // a packet of a batch frame: path MTU 4096 and its headers
constexpr uint32_t kMaxBurst = 256;          // frames recorded per tx_burst call (the rest go next call)
constexpr uint32_t kMaxComment = 128;
constexpr auto kFlushPeriod = std::chrono::milliseconds(250);
constexpr auto kMaxWait = std::chrono::milliseconds(200);  // a burst waits at most this for buffer room
constexpr uint32_t kEpbOverhead = 28 + 3 + 8 + 4 + kMaxComment + 4 + 4;  // EPB bytes besides the frame

constexpr uint32_t pad4(uint32_t n) {
  return (n + 3) & ~3u;
}

// Appends pcapng pieces to a byte buffer (host byte order: the SHB's byte-order magic says which).
struct Out {
  uint8_t* p;
  void u16(uint16_t v) {
    std::memcpy(p, &v, 2);
    p += 2;
  }
  void u32(uint32_t v) {
    std::memcpy(p, &v, 4);
    p += 4;
  }
  void bytes(const void* d, uint32_t n) {
    std::memcpy(p, d, n);
    std::memset(p + n, 0, pad4(n) - n);
    p += pad4(n);
  }
  void opt(uint16_t code, const void* d, uint32_t n) {
    u16(code);
    u16(static_cast<uint16_t>(n));
    bytes(d, n);
  }
  void opt_str(uint16_t code, const std::string& s) { opt(code, s.data(), static_cast<uint32_t>(s.size())); }
};

// SHB + IDB at the head of every file.
std::string file_header(const std::string& shb_comment, const std::string& ifname, const std::string& if_desc,
                        const std::string& idb_comment) {
  utsname u{};
  std::string os = ::uname(&u) == 0 ? std::string(u.sysname) + " " + u.release : "Linux";
  std::string buf(4096 + shb_comment.size() + idb_comment.size() + if_desc.size(), '\0');
  auto* base = reinterpret_cast<uint8_t*>(buf.data());
  Out o{base};
  // SHB
  uint8_t* blk = o.p;
  o.u32(kShb);
  o.u32(0);  // length, patched below
  o.u32(0x1A2B3C4D);
  o.u16(1);
  o.u16(0);
  o.u32(0xffffffff);  // section length: unknown (-1, 64 bits)
  o.u32(0xffffffff);
  o.opt_str(kOptComment, shb_comment);
  o.opt_str(kShbOs, os);
  o.opt_str(kShbUserAppl, "urxe");
  o.u32(kOptEnd);
  uint32_t len = static_cast<uint32_t>(o.p - blk) + 4;
  o.u32(len);
  std::memcpy(blk + 4, &len, 4);
  // IDB
  blk = o.p;
  o.u32(kIdb);
  o.u32(0);
  o.u16(kLinkEthernet);
  o.u16(0);
  o.u32(kSnapLen);
  o.opt_str(kIfName, ifname);
  o.opt_str(kIfDescription, if_desc);
  const uint8_t tsresol = 9;  // nanoseconds
  o.opt(kIfTsresol, &tsresol, 1);
  o.opt_str(kOptComment, idb_comment);
  o.u32(kOptEnd);
  len = static_cast<uint32_t>(o.p - blk) + 4;
  o.u32(len);
  std::memcpy(blk + 4, &len, 4);
  buf.resize(static_cast<size_t>(o.p - base));
  return buf;
}

// RoCEv2 QPNs of a frame: BTH DestQP, and for UD the DETH SrcQP (-1 when absent). False if not RoCEv2.
bool roce_qpns(const uint8_t* d, uint32_t len, uint32_t& dqpn, int64_t& sqpn) {
  uint32_t off = 12;
  if (len < 14) return false;
  uint16_t type = static_cast<uint16_t>(d[12] << 8 | d[13]);
  if (type == 0x8100 && len >= 18) {
    off += 4;
    type = static_cast<uint16_t>(d[16] << 8 | d[17]);
  }
  off += 2;
  uint32_t udp;
  if (type == 0x0800) {
    if (len < off + 20 || d[off + 9] != 17) return false;
    udp = off + (d[off] & 15u) * 4;
  } else if (type == 0x86DD) {
    if (len < off + 40 || d[off + 6] != 17) return false;
    udp = off + 40;
  } else {
    return false;
  }
  const uint32_t bth = udp + 8;
  if (len < bth + 12 || (d[udp + 2] << 8 | d[udp + 3]) != 4791) return false;
  dqpn = uint32_t{d[bth + 5]} << 16 | uint32_t{d[bth + 6]} << 8 | d[bth + 7];
  sqpn = -1;
  if ((d[bth] >> 5) == 3 && len >= bth + 12 + 8)  // UD opcodes carry a DETH: Q_Key, then SrcQP
    sqpn = int64_t{d[bth + 17]} << 16 | int64_t{d[bth + 18]} << 8 | d[bth + 19];
  return true;
}

std::string self_comm() {
  std::ifstream f("/proc/self/comm");
  std::string s;
  std::getline(f, s);
  return s.empty() ? "?" : s;
}

std::string file_safe(const std::string& s) {
  std::string r;
  for (char c : s) r += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '-';
  return r;
}

std::atomic<uint32_t> g_contexts{0};

class CapturePort;
// The captures of this process, so that exit() can flush them (stop_writer).
class LiveCaptures {
 public:
  void add(CapturePort* c);
  void remove(CapturePort* c);
  void flush_all();

 private:
  std::mutex mu_;
  std::vector<CapturePort*> live_;
};
LiveCaptures& live_captures() {
  static LiveCaptures* l = new LiveCaptures;  // never destroyed: exit handlers may still use it
  return *l;
}

class CapturePort final : public en::Port, public en::FaultObserver {
 public:
  CapturePort(en::Port& inner, CaptureConfig cfg) : inner_(inner), cfg_(std::move(cfg)) {
    const std::string& name = cfg_.device;
    const std::string& netdev = cfg_.netdev;
    pid_ = static_cast<uint32_t>(::getpid());
    comm_ = self_comm();
    const uint32_t ctx = g_contexts.fetch_add(1);
    prefix_ = cfg_.dir + "/" + file_safe(name) + "_" + std::to_string(pid_) +
              (ctx ? "." + std::to_string(ctx) : std::string()) + "_" + file_safe(comm_) + "_";
    char c[64];
    const int n = std::snprintf(c, sizeof c, "pid %u (%s) ", pid_, comm_.c_str());
    comment_prefix_.assign(c, static_cast<size_t>(n > 0 ? std::min(n, 40) : 0));
    std::string ring =
        cfg_.file_bytes ? "files of at most " + std::to_string(cfg_.file_bytes) + " bytes" : "one file";
    if (cfg_.file_bytes)
      ring += cfg_.files ? ", the newest " + std::to_string(cfg_.files) + " kept" : ", all kept";
    header_ = file_header("urxe capture of device " + name + " on interface " + netdev + ", pid " +
                              std::to_string(pid_) + " (" + comm_ + "); ring of " + ring,
                          netdev, "urxe device " + name + " on " + netdev,
                          "urxe device " + name + ", interface " + netdev + ", pid " + std::to_string(pid_) +
                              " (" + comm_ + ")");
    buf_[0].reset(new uint8_t[kBufBytes]);
    buf_[1].reset(new uint8_t[kBufBytes]);
    fill_ = buf_[0].get();
    spare_ = buf_[1].get();
  }

  // Opens the first file and starts the writer; false with a reason when the directory cannot be written.
  bool start(std::string& err) {
    if (::mkdir(cfg_.dir.c_str(), 0755) != 0 && errno != EEXIST) {
      err = "cannot create " + cfg_.dir + ": " + std::strerror(errno);
      return false;
    }
    if (!open_next(err)) return false;
    writer_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "urxe-pcap");
      writer_loop();
    });
    live_captures().add(this);
    return true;
  }

  ~CapturePort() override {
    live_captures().remove(this);
    stop_writer();
    if (fd_ >= 0) ::close(fd_);
    if (not_captured_)
      log(en::LogLevel::warn, "capture: " + std::to_string(not_captured_) + " frames were not written to " +
                                  prefix_ + "* (the writer fell behind or the disk failed)");
  }

  // Writes what is buffered and ends the writer. Also run at exit(): librdmacm applications (and many
  // others) never close their devices, and their last frames would otherwise be lost with the process.
  void stop_writer() {
    {
      std::lock_guard g(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (writer_.joinable() && writer_.get_id() != std::this_thread::get_id()) writer_.join();
  }

  const en::PortAttr& attr() const override { return inner_.attr(); }
  bool tx_alloc(uint32_t size, en::PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  void tx_free(en::PacketBuf& buf) override { inner_.tx_free(buf); }
  void rx_free(en::PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  int rx_wait_fd() const override { return inner_.rx_wait_fd(); }
  void rx_wait_arm(bool armed) override { inner_.rx_wait_arm(armed); }
  uint64_t rx_wait_event_ns() const override { return inner_.rx_wait_event_ns(); }
  en::PortRxLoss rx_loss() override { return inner_.rx_loss(); }
  bool set_multicast_mac(const wire::MacAddr& mac, bool member) override {
    return inner_.set_multicast_mac(mac, member);
  }

  // Frames are copied before the inner port takes them (it may free them at once); the records of frames it
  // did not take are cut off again (the engine offers them again later).
  uint32_t tx_burst(en::PacketBuf* bufs, uint32_t n) override {
    if (n > kMaxBurst) n = kMaxBurst;
    size_t offs[kMaxBurst + 1];
    bool recorded[kMaxBurst];
    std::unique_lock lk(mu_);
    reserve(lk, bufs, n);
    const uint64_t ts = now_realtime_ns();
    for (uint32_t i = 0; i < n; ++i) {
      offs[i] = fill_len_;
      recorded[i] = record(bufs[i].data, bufs[i].len, true, ts, bufs[i].fault_rule, bufs[i].fault_action);
    }
    offs[n] = fill_len_;
    const uint32_t k = inner_.tx_burst(bufs, n);
    if (k < n) {
      for (uint32_t i = k; i < n; ++i) not_captured_ -= recorded[i] ? 0 : 1;
      fill_len_ = offs[k];
    }
    kick_if_half_full();
    return k;
  }

  uint32_t rx_burst(en::PacketBuf* bufs, uint32_t n) override {
    const uint32_t k = inner_.rx_burst(bufs, n);
    if (k == 0) return 0;
    std::unique_lock lk(mu_);
    reserve(lk, bufs, k);
    const uint64_t ts = now_realtime_ns();
    for (uint32_t i = 0; i < k; ++i) {
      // A frame that crossed the same-host path without its ICRC gets it here, so that the capture shows
      // the frame the wire would have carried. (This port hides the path's ICRC offload from the engine,
      // so what it sends is whole already.)
      // A batch frame (the same-host path's run of a message's middle packets) is recorded as the packets
      // it stands for, each whole with its ICRC. (A fault rule never leaves one: with rules the fault port's
      // receive face, below this port, cuts batches into their packets first.)
      if (bufs[i].batch) {
        uint8_t pkt[kMaxPacket];
        for (uint32_t j = 0; j < bufs[i].batch; ++j) {
          const uint32_t len = wire::batch_packet(wire::ByteSpan(bufs[i].data, bufs[i].len), bufs[i].batch, j,
                                                  wire::MutByteSpan(pkt));
          if (len) record(pkt, len, false, ts);
        }
        continue;
      }
      if (bufs[i].icrc_absent) wire::write_icrc(wire::MutByteSpan(bufs[i].data, bufs[i].len));
      // A frame the fault port's receive face made or changed carries the rule. The marks are cleared once
      // recorded: a port below that fills only some fields of the array it is given then cannot leave a
      // stale one for the next burst.
      record(bufs[i].data, bufs[i].len, false, ts, bufs[i].fault_rule, bufs[i].fault_action);
      bufs[i].fault_rule = 0;
      bufs[i].fault_action = 0;
    }
    kick_if_half_full();
    return k;
  }

  // A frame a fault rule dropped: recorded, so the capture shows what was lost ("(not sent)" for a frame
  // the device was to send, "(not delivered)" for one it received). Other frames a rule made or changed
  // come through tx_burst / rx_burst marked: the fault port's faces sit on both sides of this port
  // (engine::FaultPort::split_rx), so frames are recorded as they went out and as the engine took them.
  // (rx hits come from inside inner_.rx_burst, before rx_burst takes mu_.)
  void fault_hit(wire::FaultDir dir, const uint8_t* frame, uint32_t len, uint32_t rule_id,
                 wire::FaultAction action) override {
    if (action != wire::FaultAction::drop) return;
    const bool out = dir == wire::FaultDir::tx;
    std::unique_lock lk(mu_);
    record(frame, len, out, now_realtime_ns(), rule_id, static_cast<uint8_t>(action),
           out ? " (not sent)" : " (not delivered)");
    kick_if_half_full();
  }

 private:
  static uint64_t now_realtime_ns() {
    timespec t{};
    ::clock_gettime(CLOCK_REALTIME, &t);  // vDSO: no syscall
    return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
  }

  // One EPB into the fill buffer (mu_ held). A frame that does not fit is counted as not captured.
  // `fault_rule`: the fault rule that made or changed the frame (engine::PacketBuf::fault_rule), named in
  // the comment with its action and `note`.
  bool record(const uint8_t* data, uint32_t len, bool out, uint64_t ts, uint32_t fault_rule = 0,
              uint8_t fault_action = 0, const char* note = "") {
    char comment[kMaxComment];
    uint32_t dqpn = 0;
    int64_t sqpn = -1;
    int clen;
    if (roce_qpns(data, len, dqpn, sqpn)) {
      clen = sqpn >= 0 ? std::snprintf(comment, sizeof comment, "%s%s, to QP 0x%06x, from QP 0x%06x",
                                       comment_prefix_.c_str(), out ? "out" : "in", dqpn,
                                       static_cast<uint32_t>(sqpn))
                       : std::snprintf(comment, sizeof comment, "%s%s, to QP 0x%06x", comment_prefix_.c_str(),
                                       out ? "out" : "in", dqpn);
    } else {
      clen = std::snprintf(comment, sizeof comment, "%s%s", comment_prefix_.c_str(), out ? "out" : "in");
    }
    if (fault_rule && clen > 0 && static_cast<uint32_t>(clen) < kMaxComment) {
      const std::string_view a = wire::fault_action_name(static_cast<wire::FaultAction>(fault_action));
      const int more =
          std::snprintf(comment + clen, kMaxComment - static_cast<uint32_t>(clen), ", fault rule %u: %.*s%s",
                        fault_rule, static_cast<int>(a.size()), a.data(), note);
      if (more > 0) clen += more;
    }
    const uint32_t cl = clen > 0 ? std::min<uint32_t>(static_cast<uint32_t>(clen), kMaxComment - 1) : 0;
    const uint32_t caplen = std::min(len, kSnapLen);
    const uint32_t total = 28 + pad4(caplen) + 8 + 4 + pad4(cl) + 4 + 4;
    if (fill_len_ + total > kBufBytes || failed_.load(std::memory_order_relaxed)) {
      ++not_captured_;
      if (!kicked_) {
        kicked_ = true;
        cv_.notify_one();
      }
      return false;
    }
    Out o{fill_ + fill_len_};
    o.u32(kEpb);
    o.u32(total);
    o.u32(0);  // interface 0
    o.u32(static_cast<uint32_t>(ts >> 32));
    o.u32(static_cast<uint32_t>(ts));
    o.u32(caplen);
    o.u32(len);
    o.bytes(data, caplen);
    const uint32_t flags = out ? kOutbound : kInbound;
    o.opt(kEpbFlags, &flags, 4);
    o.opt(kOptComment, comment, cl);
    o.u32(kOptEnd);
    o.u32(total);
    fill_len_ += total;
    return true;
  }

  // Room for a whole burst in the fill buffer, so its records never straddle a swap: when the writer is
  // behind, wait for it (up to kMaxWait: the device slows to the disk's pace rather than lose frames), then
  // give up and let record() count what does not fit.
  void reserve(std::unique_lock<std::mutex>& lk, const en::PacketBuf* bufs, uint32_t n) {
    size_t need = 0;
    // (a batch frame is recorded as its packets: their headers once more each)
    for (uint32_t i = 0; i < n; ++i)
      need += (kEpbOverhead + 128) * std::max<uint32_t>(bufs[i].batch, 1) + std::min(bufs[i].len, kSnapLen);
    if (fill_len_ + need <= kBufBytes || failed_.load(std::memory_order_relaxed)) return;
    kicked_ = true;
    cv_.notify_one();
    space_cv_.wait_for(lk, kMaxWait, [&] { return fill_len_ + need <= kBufBytes || stop_; });
  }

  void kick_if_half_full() {
    if (!kicked_ && fill_len_ >= kBufBytes / 4) {
      kicked_ = true;
      cv_.notify_one();
    }
  }

  void writer_loop() {
    for (;;) {
      uint8_t* data;
      size_t len;
      bool stopping;
      {
        std::unique_lock lk(mu_);
        cv_.wait_for(lk, kFlushPeriod, [this] { return stop_ || kicked_; });
        data = fill_;
        len = fill_len_;
        fill_ = spare_;
        fill_len_ = 0;
        spare_ = data;
        kicked_ = false;
        stopping = stop_;
      }
      space_cv_.notify_all();
      write_records(data, len);
      if (stopping) return;
    }
  }

  // Writes whole EPBs, starting a new file before one that would take the current file over the bound.
  void write_records(const uint8_t* data, size_t len) {
    size_t pos = 0, run = 0;  // [run, pos) is the pending piece for the current file
    while (pos < len) {
      uint32_t blk;
      std::memcpy(&blk, data + pos + 4, 4);
      if (cfg_.file_bytes && file_len_ + (pos - run) + blk > cfg_.file_bytes &&
          file_len_ + (pos - run) > header_.size()) {
        flush(data + run, pos - run);
        run = pos;
        std::string err;
        if (!failed_ && !open_next(err)) fail(err);
      }
      pos += blk;
    }
    flush(data + run, pos - run);
  }

  void flush(const uint8_t* p, size_t n) {
    if (failed_ || n == 0) return;
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        fail(std::string("write ") + cur_name_ + ": " + std::strerror(errno));
        return;
      }
      p += w;
      n -= static_cast<size_t>(w);
      file_len_ += static_cast<uint64_t>(w);
    }
  }

  void fail(const std::string& why) {
    log(en::LogLevel::error, "capture stopped: " + why);
    failed_.store(true);
  }

  void log(en::LogLevel level, const std::string& line) const {
    if (cfg_.log) cfg_.log(level, line);
  }

  // Closes the current file, opens the next of the ring (deleting the oldest beyond the limit).
  bool open_next(std::string& err) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    char stamp[32];
    const time_t now = ::time(nullptr);
    tm t{};
    ::localtime_r(&now, &t);
    std::strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", &t);
    char seq[16];
    std::snprintf(seq, sizeof seq, "%05u", ++seq_);
    cur_name_ = prefix_ + seq + "_" + stamp + ".pcapng";
    fd_ = ::open(cur_name_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      err = "cannot create " + cur_name_ + ": " + std::strerror(errno);
      return false;
    }
    files_.push_back(cur_name_);
    while (cfg_.files && files_.size() > cfg_.files) {
      ::unlink(files_.front().c_str());
      files_.pop_front();
    }
    file_len_ = 0;
    flush(reinterpret_cast<const uint8_t*>(header_.data()), header_.size());
    return true;
  }

  en::Port& inner_;
  const CaptureConfig cfg_;
  uint32_t pid_ = 0;
  std::string comm_, prefix_, comment_prefix_, header_;

  // producer side (under mu_)
  std::mutex mu_;
  std::condition_variable cv_;        // wakes the writer
  std::condition_variable space_cv_;  // the writer swapped buffers: room for a producer waiting in reserve()
  std::unique_ptr<uint8_t[]> buf_[2];
  uint8_t* fill_ = nullptr;
  uint8_t* spare_ = nullptr;
  size_t fill_len_ = 0;
  bool kicked_ = false, stop_ = false;
  std::atomic<bool> failed_{false};  // set by the writer: nothing more is captured
  uint64_t not_captured_ = 0;

  // writer side
  std::thread writer_;
  int fd_ = -1;
  uint64_t file_len_ = 0;
  uint32_t seq_ = 0;
  std::string cur_name_;
  std::deque<std::string> files_;
};

void LiveCaptures::add(CapturePort* c) {
  std::lock_guard g(mu_);
  live_.push_back(c);
  static std::once_flag once;
  std::call_once(once, [] { std::atexit([] { live_captures().flush_all(); }); });
}
void LiveCaptures::remove(CapturePort* c) {
  std::lock_guard g(mu_);
  live_.erase(std::remove(live_.begin(), live_.end(), c), live_.end());
}
void LiveCaptures::flush_all() {
  std::lock_guard g(mu_);
  for (CapturePort* c : live_) c->stop_writer();
}

}  // namespace

std::unique_ptr<en::Port> open_capture(en::Port& inner, CaptureConfig cfg) {
  if (cfg.dir.empty()) return nullptr;
  auto log = cfg.log;
  auto port = std::make_unique<CapturePort>(inner, std::move(cfg));
  std::string err;
  if (!port->start(err)) {
    if (log) log(en::LogLevel::error, "capture off: " + err);
    return nullptr;
  }
  return port;
}

}  // namespace urxe::dpdk
