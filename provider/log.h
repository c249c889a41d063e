// The provider's log: one line per event that matters, on stderr, "urxe: LEVEL: DEVICE: text".
// Level from $URXE_LOG = error | warn (default) | info | debug | off; URXE_DEBUG=1 (without URXE_LOG) means
// debug. Engine lines (a QP going to the error state and why) come through engine::EventSink::log; engine
// notes (bad frames dropped, RNR NAKs) are summarised at most about once a second per kind, never one line
// per packet.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <string>

#include "engine/engine.h"

namespace urxe::provider {

// Whether lines of `level` are printed (the environment is read once).
bool log_enabled(engine::LogLevel level);
const char* log_level_name(engine::LogLevel level);
// "urxe: LEVEL: " + text + "\n" on stderr in one write(2), if the level is enabled. `device` may be empty.
void log_printf(engine::LogLevel level, const std::string& device, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// An EventSink base that logs the engine's lines and summarises its notes for one device. Its callbacks
// run under the engine lock (one at a time); the destructor prints what is still unsummarised.
class LoggingSink : public engine::EventSink {
 public:
  ~LoggingSink() override;
  void set_log_name(const std::string& device) { device_ = device; }
  void log(engine::LogLevel level, const char* line) override;
  void note(engine::Note n, uint32_t qpn) override;

 private:
  // A summary window per group (bad frames, RNR): opened by its first note, closed by the first note
  // arriving a second or more later, or at close.
  struct Window {
    bool open = false;
    uint64_t start_ns = 0;
    uint64_t counts[static_cast<size_t>(engine::Note::num_notes)] = {};
  };
  void close_window(int group, uint64_t now_ns);
  std::string device_;
  Window win_[2];
};

}  // namespace urxe::provider
