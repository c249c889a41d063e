#include "provider/log.h"

#include <strings.h>
#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace urxe::provider {
namespace en = urxe::engine;

namespace {

constexpr int kOff = -1;

int read_level() {
  const char* v = std::getenv("URXE_LOG");
  if (v && *v) {
    const struct {
      const char* name;
      int level;
    } names[] = {{"error", 0}, {"warn", 1},   {"warning", 1}, {"info", 2},
                 {"debug", 3}, {"off", kOff}, {"none", kOff}};
    for (const auto& n : names)
      if (strcasecmp(v, n.name) == 0) return n.level;
    std::fprintf(stderr,
                 "urxe: warn: URXE_LOG='%s' is not a level (error, warn, info, debug, off); using warn\n", v);
    return 1;
  }
  const char* d = std::getenv("URXE_DEBUG");
  return d && *d && *d != '0' ? 3 : 1;
}

int level_setting() {
  static const int level = read_level();
  return level;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

constexpr uint64_t kWindowNs = 1000000000;  // at most one summary per group per second
constexpr uint32_t kRnrStorm = 100;         // RNR NAKs per window that make a storm (warn)
constexpr int kDrops = 0, kRnr = 1;

int group_of(en::Note n) {
  return n == en::Note::rnr_nak_sent || n == en::Note::rnr_nak_received ? kRnr : kDrops;
}
// Frames that say something is wrong on the wire or in a peer's setup; the others (a QP that is gone or not
// ready yet) happen around setup and teardown of healthy runs.
bool drop_is_warning(en::Note n) {
  return n == en::Note::drop_malformed || n == en::Note::drop_bad_icrc || n == en::Note::drop_bad_pkey ||
         n == en::Note::drop_bad_qkey;
}

}  // namespace

bool log_enabled(en::LogLevel level) {
  return static_cast<int>(level) <= level_setting();
}

const char* log_level_name(en::LogLevel level) {
  switch (level) {
    case en::LogLevel::error:
      return "error";
    case en::LogLevel::warn:
      return "warn";
    case en::LogLevel::info:
      return "info";
    case en::LogLevel::debug:
      return "debug";
  }
  return "?";
}

void log_printf(en::LogLevel level, const std::string& device, const char* fmt, ...) {
  if (!log_enabled(level)) return;
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "urxe: %s: %s%s", log_level_name(level), device.c_str(),
                        device.empty() ? "" : ": ");
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  const int m = std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n), fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = std::min(sizeof buf - 2, static_cast<size_t>(n) + static_cast<size_t>(m));
  buf[len++] = '\n';
  // One write so lines of several threads and processes sharing stderr do not interleave.
  [[maybe_unused]] auto r = ::write(2, buf, len);
}

LoggingSink::~LoggingSink() {
  const uint64_t now = now_ns();
  close_window(kDrops, now);
  close_window(kRnr, now);
}

void LoggingSink::log(en::LogLevel level, const char* line) {
  log_printf(level, device_, "%s", line);
}

void LoggingSink::note(en::Note n, uint32_t qpn) {
  const int g = group_of(n);
  Window& w = win_[g];
  const uint64_t now = now_ns();
  if (w.open && now - w.start_ns >= kWindowNs) close_window(g, now);
  if (!w.open) {
    w = Window{};
    w.open = true;
    w.start_ns = now;
    // The first of a window is told at once, the rest summarised when the window closes.
    if (g == kDrops) {
      log_printf(drop_is_warning(n) ? en::LogLevel::warn : en::LogLevel::info, device_,
                 "dropped a received frame: %s (BTH DestQP 0x%06x); more are summarised once a second",
                 en::note_name(n), qpn);
      return;
    }
    log_printf(en::LogLevel::debug, device_, "QP 0x%06x: %s", qpn,
               n == en::Note::rnr_nak_sent ? "sent an RNR NAK (no receive posted)"
                                           : "received an RNR NAK (the peer has no receive posted)");
  }
  w.counts[static_cast<size_t>(n)]++;
}

void LoggingSink::close_window(int g, uint64_t now) {
  Window& w = win_[g];
  if (!w.open) return;
  w.open = false;
  uint64_t total = 0;
  bool warn = false;
  char detail[512];
  size_t len = 0;
  detail[0] = 0;
  for (size_t i = 0; i < static_cast<size_t>(en::Note::num_notes); ++i) {
    const auto n = static_cast<en::Note>(i);
    if (!w.counts[i] || group_of(n) != g) continue;
    total += w.counts[i];
    warn = warn || drop_is_warning(n);
    const int k = std::snprintf(detail + len, sizeof detail - len, "%s%s %llu", len ? ", " : "",
                                en::note_name(n), static_cast<unsigned long long>(w.counts[i]));
    if (k > 0) len = std::min(sizeof detail - 1, len + static_cast<size_t>(k));
  }
  if (!total) return;
  const double secs = static_cast<double>(now - w.start_ns) / 1e9;
  if (g == kDrops) {
    log_printf(warn ? en::LogLevel::warn : en::LogLevel::info, device_,
               "dropped %llu more received frames in the last %.1f s: %s",
               static_cast<unsigned long long>(total), secs, detail);
  } else {
    const bool storm = total >= kRnrStorm;
    log_printf(
        storm ? en::LogLevel::warn : en::LogLevel::info, device_, "%s%llu RNR NAKs in the last %.1f s: %s%s",
        storm ? "RNR storm: " : "", static_cast<unsigned long long>(total), secs, detail,
        storm ? " (receivers are not posting receive WQEs fast enough; post more, or raise min_rnr_timer)"
              : "");
  }
}

}  // namespace urxe::provider
