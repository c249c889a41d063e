// The same-host path's shared-memory rings (dpdk/local_ring.h): frames arrive whole, in order per sender and
// exactly once, between threads and between processes; a full lane pushes back; a sleeping receiver is woken
// through its socket and a busy one costs no wake-up; lanes of senders that are gone are reclaimed once
// drained; a closed receiver or a file that is no segment is refused.
#include "dpdk/local_ring.h"
#include "tests/port/tmp_dir.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace urxe::dpdk {
namespace {

using TmpDir = urxe::test::TmpDir;

namespace fs = std::filesystem;

// Frame i of a sender: 4 bytes of sender id, 4 of sequence number, then a pattern; sizes vary 60..1500.
uint32_t frame_len(uint32_t seq) {
  return 60 + (seq * 37) % 1441;
}
void fill(std::vector<uint8_t>& f, uint32_t sender, uint32_t seq) {
  f.resize(frame_len(seq));
  std::memcpy(f.data(), &sender, 4);
  std::memcpy(f.data() + 4, &seq, 4);
  for (size_t i = 8; i < f.size(); i++) f[i] = static_cast<uint8_t>(seq * 7 + i * 13 + sender);
}
// Checks a received frame; returns its (sender, seq) or sender UINT32_MAX when corrupt.
std::pair<uint32_t, uint32_t> check(const engine::PacketBuf& b) {
  uint32_t sender = UINT32_MAX, seq = 0;
  if (b.len < 8) return {UINT32_MAX, 0};
  std::memcpy(&sender, b.data, 4);
  std::memcpy(&seq, b.data + 4, 4);
  if (b.len != frame_len(seq)) return {UINT32_MAX, seq};
  for (size_t i = 8; i < b.len; i++)
    if (b.data[i] != static_cast<uint8_t>(seq * 7 + i * 13 + sender)) return {UINT32_MAX, seq};
  return {sender, seq};
}

// Receives until every sender's `count` frames came (or the deadline): every frame intact, each sender's in
// order, none twice. Returns the number received.
uint64_t receive_all(LocalReceiver& rx, uint32_t senders, uint32_t count, int seconds) {
  std::vector<uint32_t> next(senders, 0);
  uint64_t got = 0, bad = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  engine::PacketBuf bufs[32];
  while (got < uint64_t{senders} * count && std::chrono::steady_clock::now() < end) {
    const uint32_t n = rx.rx_burst(bufs, 32);
    for (uint32_t i = 0; i < n; i++) {
      const auto [s, seq] = check(bufs[i]);
      if (s >= senders || seq != next[s]) {
        if (bad++ < 5) ADD_FAILURE() << "frame from sender " << s << " seq " << seq << " len " << bufs[i].len;
        continue;
      }
      next[s]++;
      got++;
    }
    rx.rx_free(bufs, n);
  }
  EXPECT_EQ(bad, 0u);
  return got;
}

TEST(LocalRing, FramesArriveWholeInOrderAndTheLaneFillsUp) {
  TmpDir d("urxe-local-ring");
  LocalReceiver rx;
  std::string err;
  LocalRingParams p;
  p.slots = 16;
  ASSERT_TRUE(rx.create(d.path, "r1", 42, p, err)) << err;
  EXPECT_EQ(local_segment_owner(d.path, "r1"), 42u);
  LocalSender tx;
  ASSERT_TRUE(tx.attach(d.path, "r1", 7, err)) << err;
  EXPECT_EQ(tx.receiver_id(), 42u);
  EXPECT_EQ(rx.lanes_in_use(), 1u);
  std::vector<uint8_t> f;
  // 16 slots: the 17th push is refused until the receiver returns a frame.
  for (uint32_t i = 0; i < 16; i++) {
    fill(f, 0, i);
    ASSERT_TRUE(tx.push(f.data(), static_cast<uint32_t>(f.size()))) << i;
  }
  fill(f, 0, 16);
  EXPECT_FALSE(tx.push(f.data(), static_cast<uint32_t>(f.size())));
  engine::PacketBuf b[4];
  ASSERT_EQ(rx.rx_burst(b, 4), 4u);
  EXPECT_FALSE(tx.push(f.data(), static_cast<uint32_t>(f.size())));  // handed out is not returned
  rx.rx_free(b, 4);
  for (uint32_t i = 16; i < 20; i++) {
    fill(f, 0, i);
    ASSERT_TRUE(tx.push(f.data(), static_cast<uint32_t>(f.size()))) << i;
  }
  std::vector<uint8_t> big(p.slot_bytes + 1, 0);
  EXPECT_FALSE(tx.push(big.data(), static_cast<uint32_t>(big.size())));  // larger than a slot
  // the 4 taken before, then 16 more: seq 4..19
  uint32_t expect = 4, n;
  while ((n = rx.rx_burst(b, 4)) != 0) {
    for (uint32_t i = 0; i < n; i++) {
      const auto [s, seq] = check(b[i]);
      EXPECT_EQ(s, 0u);
      EXPECT_EQ(seq, expect++);
    }
    rx.rx_free(b, n);
  }
  EXPECT_EQ(expect, 20u);
}

TEST(LocalRing, TwoProcessesStreamIntactFrames) {
  TmpDir d("urxe-local-ring");
  LocalReceiver rx;
  std::string err;
  ASSERT_TRUE(rx.create(d.path, "r", 1, LocalRingParams{}, err)) << err;
  constexpr uint32_t kSenders = 3, kCount = 100000;
  std::vector<pid_t> kids;
  for (uint32_t s = 0; s < kSenders; s++) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // a sender process: pushes its frames as fast as the lane takes them, for at most 60 s
      LocalSender tx;
      std::string e;
      if (!tx.attach(d.path, "r", 100 + s, e)) ::_exit(2);
      std::vector<uint8_t> f;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (uint32_t i = 0; i < kCount && std::chrono::steady_clock::now() < end;) {
        fill(f, s, i);
        if (tx.push(f.data(), static_cast<uint32_t>(f.size()))) {
          i++;
          if (i % 32 == 0) tx.kick();
        }
      }
      tx.kick();
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t got = receive_all(rx, kSenders, kCount, 60);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(got, uint64_t{kSenders} * kCount);
  for (pid_t pid : kids) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::printf("%u senders x %u frames (60..1500 B) in %.2f s: %.2f M frames/s\n", kSenders, kCount, secs,
              static_cast<double>(got) / secs / 1e6);
  // every sender has exited: after draining, their lanes are reclaimed
  EXPECT_EQ(rx.lanes_in_use(), kSenders);
  EXPECT_EQ(rx.reap([](uint64_t) { return false; }), kSenders);
  EXPECT_EQ(rx.lanes_in_use(), 0u);
}

TEST(LocalRing, ASleepingReceiverIsWokenAndABusyOneIsNot) {
  TmpDir d("urxe-local-ring");
  LocalReceiver rx;
  std::string err;
  ASSERT_TRUE(rx.create(d.path, "sleepy", 1, LocalRingParams{}, err)) << err;
  LocalSender tx;
  ASSERT_TRUE(tx.attach(d.path, "sleepy", 2, err)) << err;
  std::vector<uint8_t> f;
  pollfd pfd{rx.wake_fd(), POLLIN, 0};
  // not armed: a push and kick wake nothing
  fill(f, 0, 0);
  ASSERT_TRUE(tx.push(f.data(), static_cast<uint32_t>(f.size())));
  tx.kick();
  EXPECT_EQ(::poll(&pfd, 1, 50), 0);
  engine::PacketBuf b[4];
  ASSERT_EQ(rx.rx_burst(b, 4), 1u);
  rx.rx_free(b, 1);
  rx.arm(true);
  rx.arm(false);
  EXPECT_EQ(rx.last_kick_ns(), 0u);  // a kick while it was awake is no wake-up's cause
  // armed: another process pushes one frame after 100 ms; the poll returns for it
  const uint64_t armed_at = local_mono_ns();
  rx.arm(true);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    LocalSender t2;
    std::string e;
    if (!t2.attach(d.path, "sleepy", 3, e)) ::_exit(2);
    ::usleep(100000);
    std::vector<uint8_t> g;
    fill(g, 0, 1);
    if (!t2.push(g.data(), static_cast<uint32_t>(g.size()))) ::_exit(3);
    t2.kick();
    ::_exit(0);
  }
  ASSERT_EQ(rx.rx_burst(b, 4), 0u);  // the last look after arming
  EXPECT_EQ(::poll(&pfd, 1, 5000), 1);
  const uint64_t woken_at = local_mono_ns();
  rx.arm(false);
  // when that frame was sent (the sender's kick), not when we woke: the progress thread's spin learns from it
  EXPECT_GE(rx.last_kick_ns(), armed_at + 100'000'000u);
  EXPECT_LE(rx.last_kick_ns(), woken_at);
  EXPECT_EQ(::poll(&pfd, 1, 0), 0);  // arm(false) drained the socket
  ASSERT_EQ(rx.rx_burst(b, 4), 1u);
  EXPECT_EQ(check(b[0]).second, 1u);
  rx.rx_free(b, 1);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(LocalRing, LanesOfGoneSendersAreReclaimedOnlyOnceDrained) {
  TmpDir d("urxe-local-ring");
  LocalReceiver rx;
  std::string err;
  LocalRingParams p;
  p.lanes = 2;
  ASSERT_TRUE(rx.create(d.path, "r", 1, p, err)) << err;
  {
    LocalSender a, b;
    ASSERT_TRUE(a.attach(d.path, "r", 10, err)) << err;
    ASSERT_TRUE(b.attach(d.path, "r", 11, err)) << err;
    LocalSender c;
    EXPECT_FALSE(c.attach(d.path, "r", 12, err));  // both lanes taken
    std::vector<uint8_t> f;
    fill(f, 0, 0);
    ASSERT_TRUE(a.push(f.data(), static_cast<uint32_t>(f.size())));
    // a and b go away (as a process that exits): b's lane is empty and freed at once, a's holds a frame
  }
  EXPECT_EQ(rx.lanes_in_use(), 1u);
  EXPECT_EQ(rx.reap([](uint64_t) { return false; }), 0u);  // not drained yet
  engine::PacketBuf b[2];
  ASSERT_EQ(rx.rx_burst(b, 2), 1u);
  EXPECT_EQ(rx.reap([](uint64_t) { return false; }), 0u);  // handed out, not returned
  rx.rx_free(b, 1);
  EXPECT_EQ(rx.reap([](uint64_t id) { return id != 10; }), 1u);
  LocalSender x, y;
  EXPECT_TRUE(x.attach(d.path, "r", 20, err)) << err;
  EXPECT_TRUE(y.attach(d.path, "r", 21, err)) << err;
  // a live owner's lane is never reaped
  EXPECT_EQ(rx.reap([](uint64_t) { return true; }), 0u);
  // The new owners carry on where the lanes' last frames left them (a's lane had one frame, b's none): three
  // laps of each lane, in bursts that fill it, arrive whole and in order, and a full lane still refuses.
  std::vector<uint8_t> f;
  uint32_t next_in[2] = {0, 0}, next_out[2] = {0, 0};
  engine::PacketBuf got[16];
  for (int burst = 0; burst < 2 * 3 * 128 / 16 + 2; burst++) {
    for (uint32_t s = 0; s < 2; s++) {
      LocalSender& tx = s == 0 ? x : y;
      while (true) {
        fill(f, s, next_in[s]);
        if (!tx.push(f.data(), static_cast<uint32_t>(f.size()))) break;
        next_in[s]++;
      }
    }
    EXPECT_EQ(next_in[0] - next_out[0], p.slots) << "a lane holds its slots";
    const uint32_t n = rx.rx_burst(got, 16);
    ASSERT_EQ(n, 16u);
    for (uint32_t i = 0; i < n; i++) {
      const auto [s, seq] = check(got[i]);
      ASSERT_LT(s, 2u);
      EXPECT_EQ(seq, next_out[s]++);
    }
    rx.rx_free(got, n);
  }
  EXPECT_GE(std::min(next_out[0], next_out[1]), 3u * 128u);
}

TEST(LocalRing, AClosedReceiverOrAForeignFileIsRefused) {
  TmpDir d("urxe-local-ring");
  std::string err;
  {
    LocalReceiver rx;
    ASSERT_TRUE(rx.create(d.path, "r", 1, LocalRingParams{}, err)) << err;
    LocalSender tx;
    ASSERT_TRUE(tx.attach(d.path, "r", 2, err)) << err;
    rx.close();
    EXPECT_TRUE(tx.closed());
    std::vector<uint8_t> f(100, 1);
    EXPECT_FALSE(tx.push(f.data(), 100));
    tx.kick();  // no receiver socket any more: no signal, no error
  }
  EXPECT_FALSE(fs::exists(d.path + "/r.seg"));
  EXPECT_FALSE(fs::exists(d.path + "/r.wake"));
  LocalSender tx;
  EXPECT_FALSE(tx.attach(d.path, "r", 2, err));
  std::ofstream(d.path + "/junk.seg") << std::string(4096, 'x');
  EXPECT_FALSE(tx.attach(d.path, "junk", 2, err));
  EXPECT_NE(err.find("not a urxe local segment"), std::string::npos) << err;
  std::ofstream(d.path + "/short.seg") << "x";
  EXPECT_FALSE(tx.attach(d.path, "short", 2, err));
  EXPECT_EQ(local_segment_owner(d.path, "junk"), 0u);
}

TEST(LocalRing, ALongRunDirectoryStillHasAWakeSocket) {
  TmpDir d("urxe-local-ring");
  std::string dir = d.path;
  for (int i = 0; i < 6; i++) dir += "/a-rather-long-directory-name";
  fs::create_directories(dir);
  ASSERT_GT(dir.size(), 108u);
  LocalReceiver rx;
  std::string err;
  ASSERT_TRUE(rx.create(dir, "r", 1, LocalRingParams{}, err)) << err;
  LocalSender tx;
  ASSERT_TRUE(tx.attach(dir, "r", 2, err)) << err;
  rx.arm(true);
  std::vector<uint8_t> f(64, 1);
  ASSERT_TRUE(tx.push(f.data(), 64));
  tx.kick();
  pollfd pfd{rx.wake_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 2000), 1);
  rx.arm(false);
}

}  // namespace
}  // namespace urxe::dpdk
