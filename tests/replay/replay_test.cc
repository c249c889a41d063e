// Every capture in pcap-fixtures/ (and pcap-fixtures/interop/) replayed into the engine from each side that
// can be replayed, or listed here with the reason it cannot (tests/replay/README.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "tests/replay/replay.h"

namespace urxe::replay {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPeer1 = "52:54:00:77:00:01";  // rxe-qemu peer 1, and the interop runs' rxe guest
constexpr const char* kPeer2 = "52:54:00:77:00:02";  // rxe-qemu peer 2
constexpr const char* kUrxe = "52:54:00:77:02:02";   // urxe in the interop runs
constexpr const char* kVmA = "00:50:56:a7:12:9f";    // rxe-linlinw5 VMs
constexpr const char* kVmB = "00:50:56:a7:7d:03";

struct Case {
  const char* file;  // relative to pcap-fixtures/
  const char* play;  // MAC of the side the engine plays
  bool srq = false;
  // non-empty: not replayed from this side; the reason (a replay attempt must fail with it if `verify`)
  const char* not_replayed = "";
  bool verify = false;
  const char* peer = "";      // a capture of 3+ hosts: the played side's peer
  bool lossy_output = false;  // the played side's frames were captured after its egress netem
  bool app_writes = false;    // the application rewrites the buffer the peer READs (rping)
};

// The interop runs (urxe host <-> kernel rxe guest, pcap-fixtures/interop/): the engine plays rxe (compared
// with kernel rxe) and urxe (compared with the urxe that ran). In the lossy runs urxe's frames were captured
// before the guest's ingress netem dropped, delayed or duplicated them, so only urxe's side, whose input the
// capture shows exactly, is replayed.
const Case kCases[] = {
    {"interop/interop-rc_pingpong_s4097_urxe_client.pcap", kPeer1},
    {"interop/interop-rc_pingpong_s4097_urxe_client.pcap", kUrxe},
    {"interop/interop-rc_pingpong_s32768_m256_urxe_server.pcap", kPeer1},
    {"interop/interop-rc_pingpong_s32768_m256_urxe_server.pcap", kUrxe},
    {"interop/interop-uc_pingpong_s4097_urxe_server.pcap", kPeer1},
    {"interop/interop-uc_pingpong_s4097_urxe_server.pcap", kUrxe},
    {"interop/interop-ud_pingpong_s1024_urxe_client.pcap", kPeer1},
    {"interop/interop-ud_pingpong_s1024_urxe_client.pcap", kUrxe},
    {"interop/interop-srq_pingpong_s64_urxe_server.pcap", kPeer1, true},
    {"interop/interop-srq_pingpong_s64_urxe_server.pcap", kUrxe, true},
    {"interop/interop-rdma_check_s8192_c2048_m1024_urxe_client.pcap", kPeer1},
    {"interop/interop-rdma_check_s8192_c2048_m1024_urxe_client.pcap", kUrxe},
    {"interop/interop-rdma_check_s8192_c2048_m1024_urxe_server.pcap", kPeer1},
    {"interop/interop-rdma_check_s8192_c2048_m1024_urxe_server.pcap", kUrxe},
    {"interop/interop-rc_pingpong_s8193_m4096_urxe_client.pcap", kPeer1},
    {"interop/interop-rc_pingpong_s8193_m4096_urxe_client.pcap", kUrxe},
    {"interop/interop-rc_pingpong_s4097_v6_urxe_server.pcap", kPeer1},
    {"interop/interop-rc_pingpong_s4097_v6_urxe_server.pcap", kUrxe},
    {"interop/interop-rc_pingpong_s2048_m256_lossy_urxe_client.pcap", kUrxe},
    {"interop/interop-rc_pingpong_s2048_m256_lossy_urxe_client.pcap", kPeer1, false,
     "urxe's frames were captured before the guest's ingress netem: what rxe received is not in the capture"},
    {"interop/interop-rdma_check_s16384_c4096_m256_lossy_urxe_server.pcap", kUrxe},
    {"interop/interop-rdma_check_s16384_c4096_m256_lossy_urxe_server.pcap", kPeer1, false,
     "urxe's frames were captured before the guest's ingress netem: what rxe received is not in the capture"},

    // kernel rxe <-> kernel rxe in QEMU (both guests' egress netem in the lossy ones: the capture on peer 1's
    // tap shows what each side received), the engine in either role
    {"rxe-qemu-rc_send_s64.pcap", kPeer1},
    {"rxe-qemu-rc_send_s64.pcap", kPeer2},
    {"rxe-qemu-rc_send_s1001.pcap", kPeer1},
    {"rxe-qemu-rc_send_s1001.pcap", kPeer2},
    {"rxe-qemu-rc_send_s1024.pcap", kPeer1},
    {"rxe-qemu-rc_send_s1024.pcap", kPeer2},
    {"rxe-qemu-rc_send_s1500.pcap", kPeer1},
    {"rxe-qemu-rc_send_s1500.pcap", kPeer2},
    {"rxe-qemu-rc_send_s4096.pcap", kPeer1},
    {"rxe-qemu-rc_send_s4096.pcap", kPeer2},
    {"rxe-qemu-uc_send_s2048.pcap", kPeer1},
    {"rxe-qemu-uc_send_s2048.pcap", kPeer2},
    {"rxe-qemu-ud_send_s512.pcap", kPeer1},
    {"rxe-qemu-ud_send_s512.pcap", kPeer2},
    {"rxe-qemu-srq_send_q4_s256.pcap", kPeer1, true},
    {"rxe-qemu-srq_send_q4_s256.pcap", kPeer2, true},
    {"rxe-qemu-rc_write_bw_s4096.pcap", kPeer1},
    {"rxe-qemu-rc_write_bw_s4096.pcap", kPeer2},
    {"rxe-qemu-rc_write_lat_s64.pcap", kPeer1},
    {"rxe-qemu-rc_write_lat_s64.pcap", kPeer2},
    {"rxe-qemu-uc_write_bw_s2048.pcap", kPeer1},
    {"rxe-qemu-uc_write_bw_s2048.pcap", kPeer2},
    {"rxe-qemu-rc_read_bw_s4096.pcap", kPeer1},
    {"rxe-qemu-rc_read_bw_s4096.pcap", kPeer2},
    {"rxe-qemu-rc_read_lat_s64.pcap", kPeer1},
    {"rxe-qemu-rc_read_lat_s64.pcap", kPeer2},
    {"rxe-qemu-rc_send_bw_s2048.pcap", kPeer1},
    {"rxe-qemu-rc_send_bw_s2048.pcap", kPeer2},
    {"rxe-qemu-rc_send_lat_s64.pcap", kPeer1},
    {"rxe-qemu-rc_send_lat_s64.pcap", kPeer2},
    {"rxe-qemu-rc_atomic_fadd_bw.pcap", kPeer1},
    {"rxe-qemu-rc_atomic_fadd_bw.pcap", kPeer2},
    {"rxe-qemu-rc_atomic_cswap_bw.pcap", kPeer1},
    {"rxe-qemu-rc_atomic_cswap_bw.pcap", kPeer2},
    {"rxe-qemu-rc_atomic_fadd_lat.pcap", kPeer1},
    {"rxe-qemu-rc_atomic_fadd_lat.pcap", kPeer2},
    {"rxe-qemu-rdma_cm_rping.pcap", kPeer1, false, "", false, "", false, true},
    {"rxe-qemu-rdma_cm_rping.pcap", kPeer2, false, "", false, "", false, true},
    {"rxe-qemu-rdma_cm_send_bw.pcap", kPeer1},
    {"rxe-qemu-rdma_cm_send_bw.pcap", kPeer2},
    {"rxe-qemu-lossy_rc_write_bw.pcap", kPeer1, false, "", false, "", true},
    {"rxe-qemu-lossy_rc_write_bw.pcap", kPeer2, false, "", false, "", true},
    {"rxe-qemu-lossy_rc_send_s4096.pcap", kPeer1, false, "", false, "", true},
    {"rxe-qemu-lossy_rc_send_s4096.pcap", kPeer2, false, "", false, "", true},
    {"rxe-qemu-rc_ack_blackhole.pcap", kPeer1, false,
     "peer 2 dropped its ACKs and was killed: rxe retransmits forever (retry_cnt 7), the engine stops after "
     "7 retries"},
    {"rxe-qemu-rc_ack_blackhole.pcap", kPeer2, false,
     "peer 2 dropped its ACKs before the capture point: what it sent is not in the capture"},
    {"rxe-qemu-host_py_rc_send.pcap", kPeer1},
    {"rxe-qemu-host_py_rc_send.pcap", "52:54:00:77:00:fe"},

    // kernel rxe on VMware (github.com/linlinw5/rdma_ib_tutorial)
    {"rxe-linlinw5-pingpong_rc.pcap", kVmA},
    {"rxe-linlinw5-pingpong_rc.pcap", kVmB},
    {"rxe-linlinw5-pingpong_uc.pcap", kVmA},
    {"rxe-linlinw5-pingpong_uc.pcap", kVmB},
    {"rxe-linlinw5-pingpong_ud.pcap", kVmA},
    {"rxe-linlinw5-pingpong_ud.pcap", kVmB},
    {"rxe-linlinw5-rdma_send_bw.pcap", kVmA},
    {"rxe-linlinw5-rdma_send_bw.pcap", kVmB},
    {"rxe-linlinw5-rdma_write_bw.pcap", kVmA},
    {"rxe-linlinw5-rdma_write_bw.pcap", kVmB},
    {"rxe-linlinw5-rdma_write_lat.pcap", kVmA},
    {"rxe-linlinw5-rdma_write_lat.pcap", kVmB},
    {"rxe-linlinw5-rdma_read_bw.pcap", kVmA},
    {"rxe-linlinw5-rdma_read_bw.pcap", kVmB},
    {"rxe-linlinw5-rdma_read_lat.pcap", kVmA},
    {"rxe-linlinw5-rdma_read_lat.pcap", kVmB},
    {"rxe-linlinw5-rdma_atomic_bw.pcap", kVmA},
    {"rxe-linlinw5-rdma_atomic_bw.pcap", kVmB},
    {"rxe-linlinw5-rdma_cm.pcap", kVmA},
    {"rxe-linlinw5-rdma_cm.pcap", kVmB},
    {"rxe-linlinw5-rping.pcap", kVmA, false, "", false, "", false, true},
    {"rxe-linlinw5-rping.pcap", kVmB, false, "", false, "", false, true},
    {"rxe-linlinw5-nccl_ring2_node0.pcap", "fa:16:3e:a3:16:62", false, "between 3 MAC", true},
    {"rxe-linlinw5-nccl_ring2_node0.pcap", "fa:16:3e:a3:16:62", false, "", false, "fa:16:3e:d3:2d:18"},
    {"rxe-linlinw5-nccl_ring2_node0.pcap", "fa:16:3e:d3:2d:18", false, "", false, "fa:16:3e:a3:16:62"},
    {"rxe-linlinw5-nccl_ring2_node0.pcap", "fa:16:3e:a3:16:62", false, "", false, "fa:16:3e:1d:de:18"},
    {"rxe-linlinw5-nccl_ring2_node0.pcap", "fa:16:3e:1d:de:18", false, "", false, "fa:16:3e:a3:16:62"},

    // one-sided or synthetic
    {"cx4lx-scapy-cnp.pcap", "7c:fe:90:64:3b:32", false, "between 0 MAC", true},
    {"scapy-testvector-uc-send-only-pad2.pcap", "24:8a:07:a8:fa:22", false, "between 1 MAC", true},
    {"generated-scapy-ipv6-vlan-naks.pcap", "02:00:00:00:00:0a", false,
     "generated one frame per header case by make-generated.py: not a conversation (PSNs and QPs unrelated)"},
};

std::string case_name(const Case& c) {
  std::string n =
      fs::path(c.file).stem().string() + "_as_" + c.play + (*c.peer ? std::string("_with_") + c.peer : "");
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.file << " as " << c.play;
}

class Replay : public ::testing::TestWithParam<Case> {};

TEST_P(Replay, AgreesWithCapture) {
  const Case& c = GetParam();
  const std::string path = std::string(URXE_PCAP_FIXTURES) + "/" + c.file;
  Options opt;
  opt.play_mac = c.play;
  opt.srq = c.srq;
  opt.peer_mac = c.peer;
  opt.played_output_lossy = c.lossy_output;
  opt.app_writes = c.app_writes;
  if (*c.not_replayed && !c.verify) GTEST_SKIP() << "not replayed: " << c.not_replayed;
  fs::create_directories(URXE_REPLAY_OUT);
  if (!*c.not_replayed) opt.write_pcap = std::string(URXE_REPLAY_OUT) + "/" + case_name(c) + ".pcap";
  Result r = replay_capture(path, opt);
  if (*c.not_replayed) {
    EXPECT_FALSE(r.replayable) << "expected not replayable: " << c.not_replayed;
    EXPECT_NE(r.why.find(c.not_replayed), std::string::npos) << r.why;
    std::printf("not replayed: %s\n", r.why.c_str());
    return;
  }
  ASSERT_TRUE(r.replayable) << r.why;
  for (const auto& s : r.summary) std::printf("  %s\n", s.c_str());
  for (const auto& s : r.differences) std::printf("  allowed difference: %s\n", s.c_str());
  std::printf(
      "  fed %u frames, engine emitted %u; compared %u requests, %u READ responses/atomic ACKs; %u request "
      "messages "
      "acknowledged\n",
      r.fed, r.emitted, r.compared_requests, r.compared_responses, r.acks_covered);
  EXPECT_GT(r.fed + r.emitted, 0u);
  for (const auto& s : r.failures) ADD_FAILURE() << s;
}

INSTANTIATE_TEST_SUITE_P(Captures, Replay, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// Any capture, by hand: URXE_REPLAY_FILE=x.pcap URXE_REPLAY_PLAY=MAC [URXE_REPLAY_PEER=MAC]
// [URXE_REPLAY_SRQ=1] replay_test --gtest_filter=ReplayFile.*
TEST(ReplayFile, FromEnvironment) {
  const char* file = getenv("URXE_REPLAY_FILE");
  const char* play = getenv("URXE_REPLAY_PLAY");
  if (!file || !play) GTEST_SKIP() << "URXE_REPLAY_FILE and URXE_REPLAY_PLAY not set";
  Options opt;
  opt.play_mac = play;
  opt.peer_mac = getenv("URXE_REPLAY_PEER") ? getenv("URXE_REPLAY_PEER") : "";
  opt.srq = getenv("URXE_REPLAY_SRQ") != nullptr;
  Result r = replay_capture(file, opt);
  ASSERT_TRUE(r.replayable) << r.why;
  for (const auto& s : r.summary) std::printf("  %s\n", s.c_str());
  for (const auto& s : r.differences) std::printf("  allowed difference: %s\n", s.c_str());
  for (const auto& s : r.failures) ADD_FAILURE() << s;
}

// Every capture of pcap-fixtures/ is in the table above (replayed, or with the reason it is not).
TEST(ReplayTable, CoversEveryFixture) {
  std::set<std::string> listed;
  for (const Case& c : kCases) listed.insert(c.file);
  size_t n = 0;
  for (const char* sub : {"", "interop"})
    for (const auto& e : fs::directory_iterator(fs::path(URXE_PCAP_FIXTURES) / sub)) {
      if (e.path().extension() != ".pcap" && e.path().extension() != ".pcapng") continue;
      std::string rel = (*sub ? std::string(sub) + "/" : std::string()) + e.path().filename().string();
      EXPECT_TRUE(listed.count(rel))
          << rel << " is neither replayed nor listed with a reason in tests/replay/replay_test.cc";
      n++;
    }
  EXPECT_GE(n, 50u);
}

}  // namespace
}  // namespace urxe::replay
