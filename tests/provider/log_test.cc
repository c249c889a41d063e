// provider/log.h at the default level (warn; ctest sets URXE_LOG=warn): engine lines pass through with the
// "urxe: LEVEL: DEVICE:" prefix; bad-frame notes give one line at once and then at most a summary per second;
// RNR NAKs are summarised and only a storm reaches warn.
#include "provider/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace urxe::provider {
namespace {
namespace en = urxe::engine;

// Collects what is written to fd 2 while alive.
class StderrCapture {
 public:
  StderrCapture() {
    file_ = std::tmpfile();
    saved_ = ::dup(2);
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }
  std::string text() {
    restore();
    std::string s;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) s.append(buf, n);
    return s;
  }

 private:
  void restore() {
    if (saved_ >= 0) {
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
  }
  FILE* file_ = nullptr;
  int saved_ = -1;
};

struct Sink : LoggingSink {
  Sink() { set_log_name("urxe7"); }
  void async_event(const en::AsyncEvent&) override {}
  void comp_event(uint32_t) override {}
};

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// `t` with the time each summary measured ("in the last 1.0 s") written as "in the last S s", for checks
// that do not depend on how fast this machine ran the test; the times go to `secs`, in order.
std::string without_times(const std::string& t, std::vector<double>* secs = nullptr) {
  static const std::regex kTime(R"(in the last ([0-9]+\.[0-9]) s)");
  std::string out;
  auto from = t.cbegin();
  for (std::sregex_iterator it(t.begin(), t.end(), kTime), end; it != end; ++it) {
    out.append(from, (*it)[0].first);
    out += "in the last S s";
    if (secs) secs->push_back(std::stod((*it)[1].str()));
    from = (*it)[0].second;
  }
  return out.append(from, t.cend());
}

TEST(ProviderLog, DefaultLevelIsWarn) {
  EXPECT_TRUE(log_enabled(en::LogLevel::error));
  EXPECT_TRUE(log_enabled(en::LogLevel::warn));
  EXPECT_FALSE(log_enabled(en::LogLevel::info));
  EXPECT_FALSE(log_enabled(en::LogLevel::debug));
}

TEST(ProviderLog, EngineLineGetsPrefixAndLevel) {
  StderrCapture cap;
  {
    Sink s;
    s.log(en::LogLevel::error, "QP 0x000011 (RC) to error: retry exhausted");
    s.log(en::LogLevel::debug, "not shown");
  }
  EXPECT_EQ(cap.text(), "urxe: error: urxe7: QP 0x000011 (RC) to error: retry exhausted\n");
}

TEST(ProviderLog, BadFramesOneLineThenOneSummaryNotOnePerPacket) {
  StderrCapture cap;
  {
    Sink s;
    for (int i = 0; i < 50; i++) s.note(en::Note::drop_bad_icrc, 0x11);
    for (int i = 0; i < 7; i++) s.note(en::Note::drop_unknown_qpn, 0x12);
  }
  const std::string t = without_times(cap.text());
  EXPECT_EQ(lines(t), 2) << t;
  EXPECT_NE(t.find("urxe: warn: urxe7: dropped a received frame: bad ICRC (BTH DestQP 0x000011)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("urxe: warn: urxe7: dropped 56 more received frames in the last S s: bad ICRC 49, "
                   "unknown QPN 7\n"),
            std::string::npos)
      << t;
}

TEST(ProviderLog, SummaryOncePerSecondWhileDropsGoOn) {
  StderrCapture cap;
  {
    Sink s;
    for (int i = 0; i < 3; i++) s.note(en::Note::drop_malformed, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1050));  // (a window is a second long)
    s.note(en::Note::drop_malformed, 0);                           // closes the first window, opens the next
  }
  std::vector<double> secs;
  const std::string t = without_times(cap.text(), &secs);
  EXPECT_EQ(lines(t), 3) << t;
  EXPECT_NE(t.find("dropped 2 more received frames in the last S s"), std::string::npos) << t;
  ASSERT_EQ(secs.size(), 1u) << t;  // the first window's summary (the last note opened a new window)
  EXPECT_GE(secs[0], 1.0) << t;     // the first window closed no sooner than a second after it opened
}

TEST(ProviderLog, OnlyARnrStormIsAWarning) {
  StderrCapture cap;
  {
    Sink s;
    for (int i = 0; i < 5; i++) s.note(en::Note::rnr_nak_received, 0x11);  // info: not shown
  }
  {
    Sink s;
    for (int i = 0; i < 150; i++) s.note(en::Note::rnr_nak_sent, 0x11);
    for (int i = 0; i < 10; i++) s.note(en::Note::rnr_nak_received, 0x11);
  }
  const std::string t = without_times(cap.text());
  EXPECT_EQ(lines(t), 1) << t;
  EXPECT_NE(t.find("urxe: warn: urxe7: RNR storm: 160 RNR NAKs in the last S s: RNR NAKs sent 150, RNR NAKs "
                   "received 10"),
            std::string::npos)
      << t;
}

TEST(ProviderLog, UnknownQpnAloneIsNotAWarning) {
  StderrCapture cap;
  {
    Sink s;
    s.note(en::Note::drop_unknown_qpn, 0x99);  // a QP destroyed while its peer still sends: info
    s.note(en::Note::drop_qp_state, 0x99);
  }
  EXPECT_EQ(cap.text(), "");
}

}  // namespace
}  // namespace urxe::provider
