#include "provider/fault_rules.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <system_error>

namespace urxe::provider {
namespace {

constexpr char kHeader[] =
    "# urxe fault rules: written by 'urxe fault add/del/clear' (and 'urxe link add --fault'), read by every\n"
    "# process that has the device open; see 'urxe fault --help'.\n";

bool parse_u64(std::string_view s, uint64_t& v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The next blank-separated word of `s` from `pos` (empty at the end).
std::string_view next_word(std::string_view s, size_t& pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
  const size_t start = pos;
  while (pos < s.size() && s[pos] != ' ' && s[pos] != '\t') ++pos;
  return s.substr(start, pos - start);
}

bool read_text(const std::string& path, std::string& out, int& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = errno;
    return false;
  }
  out.clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// Replaces `path` through a temporary in the same directory and a rename.
bool write_replace(const std::string& path, const std::string& text, std::string& err) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = tmp + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    err = path + ": " + std::strerror(ok ? errno : e);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

std::string fault_dir(const std::string& ibdev_path) {
  return ibdev_path + "/urxe.fault";
}
std::string fault_rules_path(const std::string& ibdev_path) {
  return fault_dir(ibdev_path) + "/rules";
}

std::string format_fault_rules(const FaultRuleSet& set) {
  std::string s = kHeader;
  s += "generation " + std::to_string(set.generation) + "\nnext-id " + std::to_string(set.next_id) + "\n";
  for (const auto& [id, rule] : set.rules)
    s += "rule " + std::to_string(id) + " " + wire::format_fault_rule(rule) + "\n";
  return s;
}

bool parse_fault_rules(std::string_view text, FaultRuleSet& out, std::string& err) {
  FaultRuleSet set;
  bool have_gen = false, have_next = false;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    size_t p = 0;
    const std::string_view key = next_word(line, p);
    if (key.empty() || key[0] == '#') continue;
    const std::string at = "line " + std::to_string(line_no) + ": ";
    const std::string_view num = next_word(line, p);
    uint64_t v = 0;
    if (!parse_u64(num, v)) {
      err = at + "'" + std::string(key) + "' needs a number, got '" + std::string(num) + "'";
      return false;
    }
    if (key == "generation" || key == "next-id") {
      if (!next_word(line, p).empty()) {
        err = at + "'" + std::string(key) + "' takes one number";
        return false;
      }
      if (key == "generation") {
        set.generation = v;
        have_gen = true;
      } else {
        if (v == 0 || v > UINT32_MAX) {
          err = at + "next-id " + std::string(num) + " is out of range";
          return false;
        }
        set.next_id = static_cast<uint32_t>(v);
        have_next = true;
      }
    } else if (key == "rule") {
      if (v == 0 || v > UINT32_MAX) {
        err = at + "rule id " + std::string(num) + " is out of range";
        return false;
      }
      const auto id = static_cast<uint32_t>(v);
      for (const auto& r : set.rules)
        if (r.first == id) {
          err = at + "rule id " + std::to_string(id) + " given twice";
          return false;
        }
      if (set.rules.size() == wire::kFaultTableSize) {
        err = at + "more than " + std::to_string(wire::kFaultTableSize) + " rules";
        return false;
      }
      const wire::FaultParse parsed = wire::parse_fault_rule(line.substr(p));
      if (!parsed) {
        err = at + "rule " + std::to_string(id) + ": " + parsed.error;
        return false;
      }
      set.rules.emplace_back(id, *parsed.rule);
    } else {
      err = at + "unknown word '" + std::string(key) + "' (generation, next-id, rule)";
      return false;
    }
  }
  if (!have_gen || !have_next) {
    err = std::string("no '") + (have_gen ? "next-id" : "generation") + "' line";
    return false;
  }
  for (const auto& r : set.rules)
    if (r.first >= set.next_id) {
      err = "rule id " + std::to_string(r.first) + " is not below next-id " + std::to_string(set.next_id);
      return false;
    }
  out = std::move(set);
  return true;
}

bool read_fault_rules(const std::string& ibdev_path, FaultRuleSet& out, std::string& err) {
  const std::string path = fault_rules_path(ibdev_path);
  std::string text;
  int e = 0;
  if (!read_text(path, text, e)) {
    if (e == ENOENT) {
      out = FaultRuleSet{};
      return true;
    }
    err = path + ": " + std::strerror(e);
    return false;
  }
  if (!parse_fault_rules(text, out, err)) {
    err = path + ": " + err;
    return false;
  }
  return true;
}

bool init_fault_rules(const std::string& ibdev_path, const std::vector<wire::FaultRule>& rules,
                      std::string& err) {
  const std::string dir = fault_dir(ibdev_path);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    err = dir + ": " + std::strerror(errno);
    return false;
  }
  if (rules.empty()) return true;
  if (rules.size() > wire::kFaultTableSize) {
    err = "more than " + std::to_string(wire::kFaultTableSize) + " fault rules";
    return false;
  }
  FaultRuleSet set;
  set.generation = 1;
  for (const wire::FaultRule& r : rules) set.rules.emplace_back(set.next_id++, r);
  return write_replace(fault_rules_path(ibdev_path), format_fault_rules(set), err);
}

bool update_fault_rules(const std::string& ibdev_path,
                        const std::function<bool(FaultRuleSet& set, std::string& err)>& edit,
                        std::string& err, FaultRuleSet* out) {
  const std::string dir = fault_dir(ibdev_path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    err = dir + " is missing (a device made by an older urxe: 'urxe link del' and 'link add' it again)";
    return false;
  }
  const std::string lock_path = dir + "/lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) {
    err = lock_path + ": " + std::strerror(errno);
    return false;
  }
  while (::flock(lock, LOCK_EX) != 0 && errno == EINTR) {
  }
  FaultRuleSet set;
  bool ok = read_fault_rules(ibdev_path, set, err) && edit(set, err);
  if (ok) {
    ++set.generation;
    ok = write_replace(fault_rules_path(ibdev_path), format_fault_rules(set), err);
  }
  ::close(lock);
  if (ok && out) *out = std::move(set);
  return ok;
}

// ---- FaultRulesWatcher

void FaultRulesWatcher::init(const std::string& ibdev_path, Callback cb, Warn warn) {
  ibdev_path_ = ibdev_path;
  cb_ = std::move(cb);
  warn_ = std::move(warn);
}

bool FaultRulesWatcher::check(bool force) {
  const std::string path = fault_rules_path(ibdev_path_);
  struct stat st {};
  Id id;
  if (::stat(path.c_str(), &st) == 0)
    id = {static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  if (id == last_ && !force) return false;
  last_ = id;
  FaultRuleSet set;  // no file: no rules
  std::string err;
  if (id.ino != 0 && !read_fault_rules(ibdev_path_, set, err)) {
    // Keep the last rules; one line per version of the file (an unchanged file is not read again).
    if (id == bad_) return false;
    bad_ = id;
    const std::string line =
        "fault rules: " + err + "; keeping the " + std::to_string(rules_.size()) + " rule(s) in force";
    if (warn_)
      warn_(line);
    else
      std::fprintf(stderr, "urxe: warn: %s\n", line.c_str());
    return false;
  }
  generation_.store(set.generation, std::memory_order_relaxed);
  if (delivered_ && set.rules == rules_) return false;
  rules_ = std::move(set.rules);
  delivered_ = true;
  if (cb_) cb_(rules_);
  return true;
}

bool FaultRulesWatcher::start(uint32_t period_ms, bool notify) {
  if (thread_.joinable()) return true;
  struct stat st {};
  if (::stat(fault_dir(ibdev_path_).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return false;
  inotify_fd_ = notify ? ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK) : -1;
  if (inotify_fd_ >= 0 &&
      ::inotify_add_watch(inotify_fd_, fault_dir(ibdev_path_).c_str(),
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE) < 0) {
    ::close(inotify_fd_);
    inotify_fd_ = -1;
  }
  try {
    thread_ = std::thread([this, period_ms] { loop(period_ms); });
  } catch (const std::system_error&) {
    stop();
    return false;
  }
  return true;
}

void FaultRulesWatcher::loop(uint32_t period_ms) {
  pthread_setname_np(pthread_self(), "urxe-faults");
  // A change between the owner's first check() and the watch being set is caught here.
  check();
  for (;;) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    const int n = ::poll(fds, inotify_fd_ >= 0 ? 2 : 1, inotify_fd_ >= 0 ? -1 : static_cast<int>(period_ms));
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    if (inotify_fd_ >= 0 && fds[1].revents) {
      alignas(inotify_event) char buf[4096];
      while (::read(inotify_fd_, buf, sizeof buf) > 0) {
      }
      // Read it whatever its stat says: a replacement may reuse the inode number, size and coarse mtime.
      check(true);
      continue;
    }
    check();
  }
}

void FaultRulesWatcher::stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  inotify_fd_ = stop_fd_ = -1;
}

// ---- counters

std::string format_fault_counters(std::span<const FaultRuleCounters> c) {
  std::string s;
  for (const FaultRuleCounters& r : c)
    s += std::to_string(r.id) + " " + std::to_string(r.matched) + " " + std::to_string(r.hits) + " " +
         std::to_string(r.applied) + "\n";
  return s;
}

std::vector<FaultRuleCounters> parse_fault_counters(std::string_view text) {
  std::vector<FaultRuleCounters> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    size_t p = 0;
    uint64_t v[4];
    bool ok = true;
    for (uint64_t& x : v) ok = ok && parse_u64(next_word(line, p), x);
    if (!ok || v[0] == 0 || v[0] > UINT32_MAX || !next_word(line, p).empty()) continue;
    const FaultRuleCounters r{static_cast<uint32_t>(v[0]), v[1], v[2], v[3]};
    add_fault_counters(out, std::span(&r, 1));
  }
  return out;
}

void add_fault_counters(std::vector<FaultRuleCounters>& into, std::span<const FaultRuleCounters> from) {
  for (const FaultRuleCounters& r : from) {
    auto it = std::lower_bound(into.begin(), into.end(), r.id,
                               [](const FaultRuleCounters& a, uint32_t id) { return a.id < id; });
    if (it == into.end() || it->id != r.id) it = into.insert(it, FaultRuleCounters{r.id, 0, 0, 0});
    it->matched += r.matched;
    it->hits += r.hits;
    it->applied += r.applied;
  }
}

FaultRuleCounters fault_counters_of(std::span<const FaultRuleCounters> c, uint32_t id) {
  for (const FaultRuleCounters& r : c)
    if (r.id == id) return r;
  return {id, 0, 0, 0};
}

}  // namespace urxe::provider
