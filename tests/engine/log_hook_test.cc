// The engine's log hook (EventSink::log) and notes (EventSink::note): a QP going to error says why, once;
// bad frames and RNR NAKs are noted with their reason; healthy traffic produces neither.
#include <cstdio>
#include <functional>
#include <string>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

struct LogSink : Events {
  std::vector<std::pair<LogLevel, std::string>> lines;
  std::vector<std::pair<Note, uint32_t>> notes;
  void log(LogLevel level, const char* line) override { lines.emplace_back(level, line); }
  void note(Note n, uint32_t qpn) override { notes.emplace_back(n, qpn); }
  int count(Note n) const {
    int c = 0;
    for (auto& [k, q] : notes) c += k == n;
    return c;
  }
};

struct Logged {
  Loopback lb;
  LogSink sa, sb;
  Logged() {
    lb.a().eng->set_event_sink(&sa);
    lb.b().eng->set_event_sink(&sb);
  }
};

TEST(LogHook, HealthyTrafficLogsAndNotesNothing) {
  Logged t;
  auto [qa, qb] = t.lb.connect(QPT_RC);
  for (int i = 0; i < 20; i++) post_recv(t.lb.b(), qb, 0, 4096, i);
  Sge sge{t.lb.a().addr(0), 4096, t.lb.a().mr.lkey};
  for (int i = 0; i < 20; i++) post(t.lb.a(), qa, make_wr(WR_SEND, &sge, 1, i));
  ASSERT_EQ(t.lb.poll(t.lb.a(), 20).size(), 20u);
  EXPECT_TRUE(t.sa.lines.empty() && t.sb.lines.empty());
  EXPECT_TRUE(t.sa.notes.empty() && t.sb.notes.empty());
}

TEST(LogHook, RetryExhaustedIsOneErrorLineNamingTheCause) {
  Logged t;
  ConnOpts o;
  o.retry_cnt = 3;
  o.timeout = 10;
  auto [qa, qb] = t.lb.connect(QPT_RC, o);
  t.lb.link.hook = [](int side, const wire::Packet&, std::vector<uint8_t>&) {
    return side == 0 ? Fate::drop : Fate::pass;
  };
  Sge sge{t.lb.a().addr(0), 64, t.lb.a().mr.lkey};
  for (int i = 0; i < 4; i++) post(t.lb.a(), qa, make_wr(WR_SEND, &sge, 1, i));
  ASSERT_EQ(t.lb.poll(t.lb.a(), 4).size(), 4u);
  ASSERT_EQ(t.sa.lines.size(), 1u);  // one line for the QP, not one per WQE or retransmission
  EXPECT_EQ(t.sa.lines[0].first, LogLevel::error);
  const std::string& l = t.sa.lines[0].second;
  char qp[32];
  std::snprintf(qp, sizeof qp, "QP 0x%06x (RC) to error", qa);
  EXPECT_NE(l.find(qp), std::string::npos) << l;
  EXPECT_NE(l.find("retry exhausted"), std::string::npos) << l;
  EXPECT_NE(l.find("retry_cnt 3"), std::string::npos) << l;
}

TEST(LogHook, RemoteAccessErrorLoggedByBothSides) {
  Logged t;
  auto [qa, qb] = t.lb.connect(QPT_RC);
  Sge sge{t.lb.a().addr(0), 100, t.lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = t.lb.b().addr(0);
  w.rdma.rkey = t.lb.b().mr.rkey ^ 1;
  post(t.lb.a(), qa, w);
  ASSERT_EQ(t.lb.poll(t.lb.a(), 1).size(), 1u);
  ASSERT_EQ(t.sa.lines.size(), 1u);
  EXPECT_NE(t.sa.lines[0].second.find("remote access error NAK"), std::string::npos) << t.sa.lines[0].second;
  ASSERT_EQ(t.sb.lines.size(), 1u);
  EXPECT_NE(t.sb.lines[0].second.find("sent NAK remote access error"), std::string::npos)
      << t.sb.lines[0].second;
  EXPECT_NE(t.sb.lines[0].second.find("RDMA_WRITE_ONLY"), std::string::npos) << t.sb.lines[0].second;
}

TEST(LogHook, RnrRetryExhaustedAndRnrNaksNoted) {
  Logged t;
  ConnOpts o;
  o.rnr_retry = 2;
  auto [qa, qb] = t.lb.connect(QPT_RC, o);
  Sge sge{t.lb.a().addr(0), 64, t.lb.a().mr.lkey};
  post(t.lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  ASSERT_EQ(t.lb.poll(t.lb.a(), 1).size(), 1u);
  ASSERT_EQ(t.sa.lines.size(), 1u);
  EXPECT_NE(t.sa.lines[0].second.find("RNR retry exhausted"), std::string::npos) << t.sa.lines[0].second;
  EXPECT_EQ(t.sa.count(Note::rnr_nak_received), 3);  // first try + 2 retries
  EXPECT_EQ(t.sb.count(Note::rnr_nak_sent), 3);
}

TEST(LogHook, LocalProtectionErrorLogged) {
  Logged t;
  auto [qa, qb] = t.lb.connect(QPT_RC);
  Sge sge{t.lb.a().addr(0), 64, t.lb.a().mr.lkey ^ 0x1};  // wrong key
  post(t.lb.a(), qa, make_wr(WR_RDMA_WRITE, &sge, 1, 1));
  auto wa = t.lb.poll(t.lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  ASSERT_EQ(wa[0].status, WC_LOC_PROT_ERR);
  ASSERT_EQ(t.sa.lines.size(), 1u);
  EXPECT_NE(t.sa.lines[0].second.find("local protection error"), std::string::npos) << t.sa.lines[0].second;
}

// Sends `count` 64-byte SENDs A→B through `hook` (applied to A's SEND_ONLY frames, numbered from 1) and
// runs until everything settled. BTH at 42: Ethernet 14 + IPv4 20 + UDP 8.
constexpr size_t kBth = 42;
void send_through(Logged& t, uint32_t qa, uint32_t qb, int count,
                  std::function<void(int, std::vector<uint8_t>&)> f) {
  for (int i = 0; i < count; i++) post_recv(t.lb.b(), qb, 0, 64, i);
  int n = 0;
  t.lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side == 0 && p.bth.opcode == wire::op::send_only) f(++n, bytes);
    return Fate::pass;
  };
  Sge sge{t.lb.a().addr(0), 64, t.lb.a().mr.lkey};
  for (int i = 0; i < count; i++) post(t.lb.a(), qa, make_wr(WR_SEND, &sge, 1, i));
  t.lb.poll(t.lb.a(), static_cast<size_t>(count));
  t.lb.link.hook = nullptr;
}

void set_dqpn(std::vector<uint8_t>& b, uint32_t q) {
  b[kBth + 5] = static_cast<uint8_t>(q >> 16);
  b[kBth + 6] = static_cast<uint8_t>(q >> 8);
  b[kBth + 7] = static_cast<uint8_t>(q);
}

TEST(LogHook, BadIcrcAndMalformedFramesNoted) {
  Logged t;
  auto [qa, qb] = t.lb.connect(QPT_RC);
  send_through(t, qa, qb, 4, [](int n, std::vector<uint8_t>& b) {
    if (n == 1) b[kBth + 12] ^= 1;    // payload byte: ICRC mismatch
    if (n == 2) b[kBth + 1] |= 0x0f;  // BTH TVer 15: malformed (bad version)
  });
  ASSERT_EQ(t.sb.count(Note::drop_bad_icrc), 1);
  EXPECT_EQ(t.sb.count(Note::drop_malformed), 1);
  EXPECT_EQ(t.sb.notes[0].second, qb);
  EXPECT_TRUE(t.sb.lines.empty());  // a dropped frame is not a QP error (the sender retransmits)
}

TEST(LogHook, UnknownQpnOfOwnBlockNotedOtherBlocksNot) {
  EngineConfig cfg;
  cfg.verify_icrc = false;  // DestQP is ICRC-covered: rewrite it without resealing
  Loopback lb(cfg);
  LogSink sa, sb;
  lb.a().eng->set_event_sink(&sa);
  lb.b().eng->set_event_sink(&sb);
  auto [qa, qb] = lb.connect(QPT_RC);
  for (int i = 0; i < 4; i++) post_recv(lb.b(), qb, 0, 64, i);
  int n = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& b) {
    if (side != 0 || p.bth.opcode != wire::op::send_only) return Fate::pass;
    ++n;
    if (n == 1) set_dqpn(b, qb + 5);    // B's block, no such QP: noted
    if (n == 2) set_dqpn(b, 0x800000);  // another process's block on the device: not a bad frame
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  for (int i = 0; i < 4; i++) post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, i));
  ASSERT_EQ(lb.poll(lb.a(), 4).size(), 4u);
  ASSERT_EQ(sb.notes.size(), 1u);
  EXPECT_EQ(sb.notes[0].first, Note::drop_unknown_qpn);
  EXPECT_EQ(sb.notes[0].second, qb + 5);
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_qpn), 2u);  // both counted as before
}

}  // namespace
}  // namespace urxe::engine::test
