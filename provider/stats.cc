#include "provider/stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "engine/engine.h"
#include "hostnet/interface.h"
#include "provider/shared_file.h"

namespace fs = std::filesystem;

namespace urxe::provider {
namespace {

constexpr char kMagic[8] = {'U', 'R', 'X', 'E', 'C', 'T', 'R', '1'};
constexpr uint32_t kNameSize = 32;

// On-disk header of a counters file (this machine's byte order: the file never leaves it).
struct FileHeader {
  char magic[8];
  uint32_t header_size;
  uint32_t num;  // counters
  uint32_t name_size;
  uint32_t values_offset;  // 8-aligned; values[num] uint64 follow
  int32_t pid;
  uint32_t qpn_base;
  uint64_t start_ns;
  char comm[16];
  uint8_t reserved[72];
};
static_assert(sizeof(FileHeader) == 128);

// Kernel rxe's hw_counters, in its order: the first rows of the engine's counter table.
constexpr auto kRxeNames = [] {
  std::array<const char*, engine::kNumRxeCounters> names{};
  for (size_t i = 0; i < names.size(); i++) names[i] = engine::kCounterTable[i].name;
  return names;
}();

// Values another process's engine is updating: relaxed atomic loads (a plain load on x86-64, so also on a
// read-only mapping).
uint64_t load(const uint64_t* p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_relaxed);
}

CounterSet with_rxe_names() {
  CounterSet s;
  for (const char* n : kRxeNames) s.values.emplace_back(n, 0);
  return s;
}

size_t values_offset(uint32_t num) {
  return (sizeof(FileHeader) + size_t{num} * kNameSize + 7) & ~size_t{7};
}

// Parses a whole counters file (header, names, values read with relaxed atomic loads when `data` is a live
// mapping). False when it is not one.
bool parse(const uint8_t* data, size_t len, ProcessCounters& out) {
  FileHeader h;
  if (len < sizeof h) return false;
  std::memcpy(&h, data, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.name_size != kNameSize ||
      h.header_size < sizeof h || h.num > 4096 || h.values_offset % 8 ||
      h.values_offset < h.header_size + size_t{h.num} * kNameSize ||
      len < h.values_offset + size_t{h.num} * 8)
    return false;
  out.pid = h.pid;
  out.comm.assign(h.comm, strnlen(h.comm, sizeof h.comm));
  out.qpn_base = h.qpn_base;
  out.start_ns = h.start_ns;
  const auto* values = reinterpret_cast<const uint64_t*>(data + h.values_offset);
  for (uint32_t i = 0; i < h.num; ++i) {
    const char* name = reinterpret_cast<const char*>(data + h.header_size + size_t{i} * kNameSize);
    out.counters.add(std::string(name, strnlen(name, kNameSize)), load(values + i));
  }
  return true;
}

std::string serialize(const CounterSet& s, pid_t pid, uint32_t qpn_base, uint64_t start_ns,
                      const std::string& comm) {
  const auto num = static_cast<uint32_t>(s.values.size());
  std::string out(values_offset(num) + size_t{num} * 8, '\0');
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.header_size = sizeof h;
  h.num = num;
  h.name_size = kNameSize;
  h.values_offset = static_cast<uint32_t>(values_offset(num));
  h.pid = pid;
  h.qpn_base = qpn_base;
  h.start_ns = start_ns;
  std::memcpy(h.comm, comm.data(), std::min(comm.size(), sizeof h.comm - 1));
  std::memcpy(out.data(), &h, sizeof h);
  for (uint32_t i = 0; i < num; ++i) {
    const std::string& n = s.values[i].first;
    std::memcpy(out.data() + sizeof h + size_t{i} * kNameSize, n.data(),
                std::min<size_t>(n.size(), kNameSize - 1));
    std::memcpy(out.data() + h.values_offset + size_t{i} * 8, &s.values[i].second, 8);
  }
  return out;
}

bool lock_byte0(int fd, short type, bool wait) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  for (;;) {
    if (::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0) return true;
    if (errno != EINTR) return false;
  }
}

// True while some open file description (the owning context) holds the file's lock.
bool owner_alive(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: treat as alive (never fold twice)
  return fl.l_type != F_UNLCK;
}

// The lock that orders folds (write lock) against readers (read lock) of one device.
struct DeviceLock {
  int fd = -1;
  bool exclusive = false;
  DeviceLock(const std::string& dir, bool want_exclusive) {
    const std::string path = dir + "/lock";
    if (want_exclusive) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd >= 0) {
        ::fchmod(fd, 0666);  // whoever creates it: every user's apps lock it
        exclusive = lock_byte0(fd, F_WRLCK, true);
        if (exclusive) return;
        ::close(fd);
        fd = -1;
      }
    }
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && !lock_byte0(fd, F_RDLCK, true)) {
      ::close(fd);
      fd = -1;
    }
  }
  ~DeviceLock() {
    if (fd >= 0) ::close(fd);
  }
};

bool read_whole(int fd, std::string& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return true;
}

CounterSet read_total(const std::string& dir) {
  CounterSet s = with_rxe_names();
  const int fd = ::open((dir + "/total").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  std::string bytes;
  ProcessCounters pc;
  if (read_whole(fd, bytes) && parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), pc))
    for (auto& [n, v] : pc.counters.values) s.add(n, v);
  ::close(fd);
  return s;
}

// Replaces the total through a temporary and a rename (a crash mid-write leaves the old total). Device lock
// held exclusively.
bool write_total(const std::string& dir, const CounterSet& s) {
  const std::string tmp = dir + "/.total.tmp", path = dir + "/total";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  ::fchmod(fd, 0666);
  const std::string bytes = serialize(s, 0, 0, 0, "total");
  const bool ok = ::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// link_downed from the kernel: carrier losses of the interface named in urxe.stats/carrier since then.
bool link_downed_now(const std::string& dir, uint64_t& out) {
  const int fd = ::open((dir + "/carrier").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string text;
  const bool ok = read_whole(fd, text);
  ::close(fd);
  char netdev[64] = {};
  unsigned long long base = 0;
  uint64_t now = 0;
  if (!ok || std::sscanf(text.c_str(), "%63s %llu", netdev, &base) != 2 ||
      !hostnet::carrier_down_count(netdev, now))
    return false;
  out = now >= base ? now - base : 0;  // below: the interface was made anew, so count none rather than wrap
  return true;
}

std::string qps_path(const std::string& ctr_path) {
  return ctr_path.substr(0, ctr_path.size() - 4) + ".qps";
}
std::string faults_path(const std::string& ctr_path) {
  return ctr_path.substr(0, ctr_path.size() - 4) + ".faults";
}

std::vector<FaultRuleCounters> read_faults(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  read_whole(fd, text);
  ::close(fd);
  return parse_fault_counters(text);
}

// Replaces a small file through a temporary and a rename (readers see the old or the new text).
bool write_replace(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// Lines "QPN TYPE STATE name=value ..." (CounterFile::qp_line).
void read_qps(const std::string& path, std::vector<QpCounters>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  std::string text;
  read_whole(fd, text);
  ::close(fd);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::vector<std::string> words;
    for (size_t i = pos; i < end;) {
      const size_t sp = std::min(text.find(' ', i), end);
      if (sp > i) words.push_back(text.substr(i, sp - i));
      i = sp + 1;
    }
    pos = end + 1;
    if (words.size() < 3) continue;
    QpCounters q;
    q.qpn = static_cast<uint32_t>(std::strtoul(words[0].c_str(), nullptr, 10));
    q.type = words[1];
    q.state = words[2];
    for (size_t i = 3; i < words.size(); ++i) {
      const size_t eq = words[i].find('=');
      if (eq != std::string::npos)
        q.counters.add(words[i].substr(0, eq), std::strtoull(words[i].c_str() + eq + 1, nullptr, 10));
    }
    out.push_back(std::move(q));
  }
}

// (/proc files have size 0 to fstat: read_whole would read nothing)
std::string self_comm() {
  char buf[64];
  ssize_t n = -1;
  const int fd = ::open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = ::read(fd, buf, sizeof buf);
    ::close(fd);
  }
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

uint64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

std::span<const char* const> rxe_counter_names() {
  return kRxeNames;
}

uint64_t CounterSet::get(const std::string& name) const {
  for (const auto& [n, v] : values)
    if (n == name) return v;
  return 0;
}

void CounterSet::set(const std::string& name, uint64_t v) {
  for (auto& [n, x] : values) {
    if (n == name) {
      x = v;
      return;
    }
  }
  values.emplace_back(name, v);
}

void CounterSet::add(const std::string& name, uint64_t v) {
  for (auto& [n, x] : values) {
    if (n == name) {
      x += v;
      return;
    }
  }
  values.emplace_back(name, v);
}

std::string stats_dir(const std::string& ibdev_path) {
  return ibdev_path + "/urxe.stats";
}
std::string hw_counters_dir(const std::string& ibdev_path) {
  return ibdev_path + "/ports/1/hw_counters";
}
std::string port_counters_dir(const std::string& ibdev_path) {
  return ibdev_path + "/ports/1/counters";
}

std::vector<std::pair<std::string, uint64_t>> port_counters(const CounterSet& c) {
  // The PMA's data counters count 32-bit words (octets / 4), as the kernel shows them.
  return {{"port_xmit_data", c.get("sent_bytes") / 4},
          {"port_rcv_data", c.get("rcvd_bytes") / 4},
          {"port_xmit_packets", c.get("sent_pkts")},
          {"port_rcv_packets", c.get("rcvd_pkts")}};
}

bool write_cm_counters(const std::string& ibdev_path, const CmCounterTable& t, std::string& err) {
  for (size_t g = 0; g < t.size(); ++g) {
    const std::string dir = ibdev_path + "/ports/1/" + kCmCounterGroups[g];
    if (::mkdir(dir.c_str(), 0777) == 0) {
      ::chmod(dir.c_str(), 0777);  // whoever makes it: the CM service of any user writes here
    } else if (errno != EEXIST) {
      err = dir + ": " + std::strerror(errno);
      return false;
    }
    for (size_t m = 0; m < t[g].size(); ++m)
      if (!write_shared_file(dir + "/" + kCmCounterMessages[m], std::to_string(t[g][m]) + "\n", err))
        return false;
  }
  return true;
}

bool read_cm_counters(const std::string& ibdev_path, CmCounterTable& t) {
  for (size_t g = 0; g < t.size(); ++g)
    for (size_t m = 0; m < t[g].size(); ++m) {
      std::ifstream f(ibdev_path + "/ports/1/" + kCmCounterGroups[g] + "/" + kCmCounterMessages[m]);
      if (!(f >> t[g][m])) return false;
    }
  return true;
}

bool init_device_stats(const std::string& ibdev_path, const std::string& netdev, std::string& err) {
  std::error_code ec;
  for (const std::string& d :
       {stats_dir(ibdev_path), hw_counters_dir(ibdev_path), port_counters_dir(ibdev_path)}) {
    fs::create_directories(d, ec);
    // Apps of every user add their own counters file, and mirror into hw_counters.
    if (ec || ::chmod(d.c_str(), 0777) != 0) {
      err = d + ": " + (ec ? ec.message() : std::strerror(errno));
      return false;
    }
  }
  const int fd = ::open((hw_counters_dir(ibdev_path) + "/lifespan").c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // rxe's hw_counters have the core's default lifespan (ms between refreshes): 10.
  if (fd < 0 || ::write(fd, "10\n", 3) != 3) {
    if (fd >= 0) ::close(fd);
    err = hw_counters_dir(ibdev_path) + "/lifespan: " + std::strerror(errno);
    return false;
  }
  ::close(fd);
  uint64_t down = 0;
  hostnet::carrier_down_count(netdev, down);  // 0 when absent: counts from the interface's creation
  if (!write_replace(stats_dir(ibdev_path) + "/carrier", netdev + " " + std::to_string(down) + "\n")) {
    err = stats_dir(ibdev_path) + "/carrier: " + std::strerror(errno);
    return false;
  }
  // The CM groups too, zero until a CM service writes them (as the kernel shows them before any MAD): made
  // here by `urxe link add`, so that an unprivileged user's service can write them later.
  return mirror_hw_counters(ibdev_path, with_rxe_names(), err) && write_cm_counters(ibdev_path, {}, err);
}

bool read_device_counters(const std::string& ibdev_path, bool fold_dead, DeviceCounters& out,
                          std::string& err) {
  out = DeviceCounters{};
  const std::string dir = stats_dir(ibdev_path);
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    err = dir + ": " + std::strerror(errno) +
          (errno == ENOENT ? " (device made by an older urxe: 'urxe link del' and 'link add' it again)" : "");
    return false;
  }
  DeviceLock lock(dir, fold_dead);
  const bool can_fold = fold_dead && lock.exclusive;
  out.exited = read_total(dir);
  out.faults_exited = read_faults(dir + "/total.faults");
  bool faults_folded = false;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || name.size() < 5 || name.compare(name.size() - 4, 4, ".ctr") != 0)
      continue;
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // folded by its owner since readdir
    struct stat st {};
    ProcessCounters pc;
    bool ok = false;
    if (::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof(FileHeader))) {
      void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        ok = parse(static_cast<const uint8_t*>(m), static_cast<size_t>(st.st_size), pc);
        ::munmap(m, static_cast<size_t>(st.st_size));
      }
    }
    pc.alive = owner_alive(fd);
    ::close(fd);
    if (!ok) continue;
    // A dead process's file: add it to the total once (unlink first, so a failed unlink never counts twice).
    if (!pc.alive && can_fold && ::unlink(path.c_str()) == 0) {
      ::unlink(qps_path(path).c_str());
      for (auto& [n, v] : pc.counters.values) out.exited.add(n, v);
      const std::vector<FaultRuleCounters> f = read_faults(faults_path(path));
      if (!f.empty()) {
        add_fault_counters(out.faults_exited, f);
        faults_folded = true;
      }
      ::unlink(faults_path(path).c_str());
      ++out.folded_dead;
      continue;
    }
    read_qps(qps_path(path), pc.qps);
    pc.faults = read_faults(faults_path(path));
    out.processes.push_back(std::move(pc));
  }
  ::closedir(d);
  uint64_t downed = 0;
  const bool live_downed = link_downed_now(dir, downed);
  // Kept in the total (monotonic) so a reader that cannot see the interface still shows the last count.
  const bool keep_downed = live_downed && can_fold && downed > out.exited.get("link_downed");
  if (keep_downed) out.exited.set("link_downed", downed);
  if (out.folded_dead || keep_downed) write_total(dir, out.exited);
  if (faults_folded) write_replace(dir + "/total.faults", format_fault_counters(out.faults_exited));
  out.total = out.exited;
  out.faults = out.faults_exited;
  for (const ProcessCounters& p : out.processes) {
    for (const auto& [n, v] : p.counters.values) out.total.add(n, v);
    add_fault_counters(out.faults, p.faults);
  }
  if (live_downed && downed > out.total.get("link_downed")) out.total.set("link_downed", downed);
  return true;
}

bool mirror_hw_counters(const std::string& ibdev_path, const CounterSet& counters, std::string& err,
                        MirrorCache* written) {
  CounterSet all = with_rxe_names();
  for (const auto& [n, v] : counters.values) all.add(n, v);
  bool ok = true;
  // In place (write_shared_file), not through a rename: counters only grow, so the new text is never
  // shorter and a reader sees the old or the new number; and any user's app may write a file another
  // user's app created.
  auto put = [&](const std::string& path, uint64_t v) {
    if (written) {
      const auto it = written->find(path);
      if (it != written->end() && it->second == v) return;
    }
    std::string e;
    if (!write_shared_file(path, std::to_string(v) + "\n", e)) {
      if (ok) err = e;
      ok = false;
      if (written) written->erase(path);
      return;
    }
    if (written) (*written)[path] = v;
  };
  for (const auto& [n, v] : all.values) put(hw_counters_dir(ibdev_path) + "/" + n, v);
  for (const auto& [n, v] : port_counters(all)) put(port_counters_dir(ibdev_path) + "/" + n, v);
  return ok;
}

bool CounterFile::open(const std::string& ibdev_path, std::span<const char* const> names, uint32_t qpn_base,
                       std::string& err) {
  close();
  const std::string dir = stats_dir(ibdev_path);
  uint64_t tag = 0;
  if (::getrandom(&tag, sizeof tag, GRND_NONBLOCK) != sizeof tag)
    tag = realtime_ns() ^ reinterpret_cast<uintptr_t>(this);
  char base[64];
  std::snprintf(base, sizeof base, "p%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(tag));
  const std::string tmp = dir + "/." + base + ".tmp";
  const std::string path = dir + "/" + base + ".ctr";
  CounterSet zero;
  for (const char* n : names) zero.values.emplace_back(n, 0);
  const std::string bytes = serialize(zero, ::getpid(), qpn_base, realtime_ns(), self_comm());
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = tmp + ": " + std::strerror(errno);
    return false;
  }
  void* m = MAP_FAILED;
  if (!lock_byte0(fd, F_WRLCK, false) ||
      ::pwrite(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()) ||
      (m = ::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ||
      ::rename(tmp.c_str(), path.c_str()) != 0) {
    err = tmp + ": " + std::strerror(errno);
    if (m != MAP_FAILED) ::munmap(m, bytes.size());
    ::unlink(tmp.c_str());
    ::close(fd);
    return false;
  }
  ibdev_path_ = ibdev_path;
  path_ = path;
  fd_ = fd;
  map_ = m;
  map_len_ = bytes.size();
  values_ = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(m) +
                                        values_offset(static_cast<uint32_t>(zero.values.size())));
  names_.clear();
  for (const char* n : names) names_.emplace_back(n);
  return true;
}

void CounterFile::start_mirror(uint32_t period_ms) {
  if (fd_ < 0 || thread_.joinable()) return;
  stop_ = false;
  try {
    thread_ = std::thread([this, period_ms] { mirror_loop(period_ms); });
  } catch (const std::system_error&) {
    // no thread: sysfs is then refreshed by `urxe stats` and at close only
  }
}

void CounterFile::poke() {
  {
    std::lock_guard<std::mutex> g(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

void CounterFile::mirror_loop(uint32_t period_ms) {
  pthread_setname_np(pthread_self(), "urxe-stats");
  uint64_t last = 0;
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait_for(g, std::chrono::milliseconds(period_ms), [this] { return stop_ || poked_; });
    if (stop_) break;
    if (port_source_ && values_) port_source_(values_);
    if (fault_source_) {
      g.unlock();
      publish_fault_counters(fault_source_());
      g.lock();
      if (stop_) break;
    }
    // Counters only grow, so their sum changes exactly when one of them does.
    uint64_t sum = 0;
    for (size_t i = 0; i < names_.size(); ++i) sum += load(values_ + i);
    if (sum == last && !poked_) continue;
    poked_ = false;
    last = sum;
    g.unlock();
    DeviceCounters dc;
    std::string err;
    // Only the files whose total changed (~20 of 46 in a stream: ~5 syscalls each), and all of them every
    // 16th pass: another process may have written an older total over one of ours meanwhile.
    if (++passes_ % 16 == 0) mirrored_.clear();
    if (read_device_counters(ibdev_path_, true, dc, err)) {
      mirror_hw_counters(ibdev_path_, dc.total, err, &mirrored_);
      if (port_state_) port_state_();
    }
    if (qp_source_) write_replace(qps_path(path_), qp_source_());
    g.lock();
  }
}

std::string CounterFile::qp_line(uint32_t qpn, const char* type, const char* state,
                                 const uint64_t* values) const {
  std::string line = std::to_string(qpn) + " " + type + " " + state;
  for (size_t i = 0; i < names_.size(); ++i)
    if (values[i]) line += " " + names_[i] + "=" + std::to_string(values[i]);
  return line + "\n";
}

void CounterFile::stop_mirror() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (port_source_ && values_) port_source_(values_);  // the port's last losses, while it still exists
  if (fault_source_ && fd_ >= 0) publish_fault_counters(fault_source_());
}

void CounterFile::publish_fault_counters(std::span<const FaultRuleCounters> counters) {
  std::lock_guard<std::mutex> g(faults_mu_);
  if (fd_ < 0) return;
  // Per id (never reused on a device): a rule no longer reported keeps its last counts, and a count that
  // went down (the port's counters started afresh) adds to what was published before.
  for (const FaultRuleCounters& c : counters) {
    FaultTally& t = fault_tally_[c.id];
    if (c.matched < t.last.matched || c.hits < t.last.hits || c.applied < t.last.applied) {
      t.base.matched += t.last.matched;
      t.base.hits += t.last.hits;
      t.base.applied += t.last.applied;
    }
    t.last = c;
  }
  std::vector<FaultRuleCounters> out;
  for (const auto& [id, t] : fault_tally_)
    out.push_back(
        {id, t.base.matched + t.last.matched, t.base.hits + t.last.hits, t.base.applied + t.last.applied});
  std::string text = format_fault_counters(out);
  if (text == faults_written_) return;
  if (write_replace(faults_path(path_), text)) faults_written_ = std::move(text);
}

void CounterFile::close() {
  stop_mirror();
  if (fd_ < 0) return;
  ::unlink(qps_path(path_).c_str());
  const std::string dir = stats_dir(ibdev_path_);
  {
    DeviceLock lock(dir, true);
    // Unlink first: if that fails the file stays and is folded later as a dead process's, never twice.
    if (lock.exclusive && ::unlink(path_.c_str()) == 0) {
      CounterSet total = read_total(dir);
      for (size_t i = 0; i < names_.size(); ++i) total.add(names_[i], load(values_ + i));
      write_total(dir, total);
      const std::vector<FaultRuleCounters> f = read_faults(faults_path(path_));
      if (!f.empty()) {
        std::vector<FaultRuleCounters> ft = read_faults(dir + "/total.faults");
        add_fault_counters(ft, f);
        write_replace(dir + "/total.faults", format_fault_counters(ft));
      }
      ::unlink(faults_path(path_).c_str());
    }
  }
  ::munmap(map_, map_len_);
  {
    std::lock_guard<std::mutex> g(faults_mu_);
    ::close(fd_);  // releases the liveness lock
    fd_ = -1;
    faults_written_.clear();
    fault_tally_.clear();
  }
  map_ = nullptr;
  values_ = nullptr;
  DeviceCounters dc;
  std::string err;
  if (read_device_counters(ibdev_path_, true, dc, err)) {
    mirror_hw_counters(ibdev_path_, dc.total, err);
    if (port_state_) port_state_();
  }
}

}  // namespace urxe::provider
