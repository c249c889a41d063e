// `urxe conform`: the catalogue's runs, the stimuli: both sides' stock tools and urxe's fault rules while
// they run (the scenarios that judge them are in conform_catalog.cc).
#include "tools/conform.h"

namespace urxe::tools::conform {
namespace {

// perftest: 20 messages of 64 KiB (64 packets each at path MTU 1024), -F: no CPU-frequency warning.
#define PERF(tool, extra) tool " -d {peer_dev} -x {peer_gid} -p {port} -F " extra
#define PERF_L(tool, extra) tool " -d {dev} -x {gid} -p {port} -F " extra " {peer_ip}"

const Run kRuns[] = {
    {.id = "write-gap",
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 20"),
     .local_cmd = PERF_L("ib_write_bw", "-s 65536 -n 20"),
     .rules = {"dir tx opcode rc_rdma_write_middle skip 3 first 1 drop"}},
    {.id = "send-dup",
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 1024 -n 5",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 1024 -n 5 {peer_ip}",
     .rules = {"dir tx opcode rc_send_only first 1 duplicate"}},
    {.id = "write-dup",
     .peer_cmd = PERF("ib_write_bw", "-s 1024 -n 20"),
     .local_cmd = PERF_L("ib_write_bw", "-s 1024 -n 20"),
     .rules = {"dir tx opcode rc_rdma_write_only skip 4 first 1 duplicate"}},
    {.id = "write-rkey",
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 5"),
     .local_cmd = PERF_L("ib_write_bw", "-s 65536 -n 5"),
     .rules = {"dir tx opcode rc_rdma_write_first skip 1 first 1 corrupt reth.rkey=0xabcdef"},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    {.id = "write-icrc",
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 20"),
     .local_cmd = PERF_L("ib_write_bw", "-s 65536 -n 20"),
     .rules = {"dir tx opcode rc_rdma_write_middle skip 3 first 1 corrupt icrc"}},
    {.id = "write-ce",
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 20"),
     .local_cmd = PERF_L("ib_write_bw", "-s 65536 -n 20"),
     .rules = {"dir tx class request every 8 ecn-ce"}},
    {.id = "write-range",
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 5"),
     .local_cmd = PERF_L("ib_write_bw", "-s 65536 -n 5"),
     .rules = {"dir tx opcode rc_rdma_write_first skip 1 first 1 corrupt reth.va=0x10"},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    {.id = "write-opseq",
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 5"),
     .local_cmd = PERF_L("ib_write_bw", "-s 65536 -n 5"),
     .rules = {"dir tx opcode rc_rdma_write_first skip 1 first 1 corrupt bth.opcode=0x07"},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    {.id = "send-pkey",
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 1024 -n 5",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 1024 -n 5 {peer_ip}",
     .rules = {"dir tx opcode rc_send_only first 1 corrupt bth.pkey=0x1234"}},
    {.id = "send-destqp",
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 1024 -n 5",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 1024 -n 5 {peer_ip}",
     .rules = {"dir tx opcode rc_send_only first 1 corrupt bth.destqp=0xabcde"}},
    {.id = "atomic-dup",
     .peer_cmd = PERF("ib_atomic_bw", "-A FETCH_AND_ADD -n 20"),
     .local_cmd = PERF_L("ib_atomic_bw", "-A FETCH_AND_ADD -n 20"),
     .rules = {"dir rx class atomic-ack skip 2 first 1 drop"}},
    {.id = "send-gap",
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 65536 -n 5",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 65536 -n 5 {peer_ip}",
     .rules = {"dir tx opcode rc_send_middle skip 3 first 1 drop"}},
    // CM retransmissions and duplicates (conform_judges_cm_retry.cc): rping; the peer's CM timers make the
    // resends come seconds apart, so each run combines stimuli that do not interfere.
    {.id = "cm-dup",
     .peer_cmd = "rping -s -a {peer_ip} -p {port} -C 3 -S 64",
     .local_cmd = "rping -c -a {peer_ip} -p {port} -C 3 -S 64",
     .rules = {"dir tx class cm:req first 1 duplicate", "dir tx class cm:dreq first 1 duplicate"},
     .timeout_ms = 5000},
    {.id = "cm-lost",
     .peer_cmd = "rping -s -a {peer_ip} -p {port} -C 3 -S 64",
     .local_cmd = "rping -c -a {peer_ip} -p {port} -C 3 -S 64",
     .rules = {"dir rx class cm:rep first 1 drop", "dir rx class cm:drep first 1 drop"},
     .timeout_ms = 9000,
     .linger_ms = 4400},  // urxe's DREQ resent 4096 ms after rping's disconnect
    {.id = "cm-peer-active",
     .peer_is_server = false,
     .peer_cmd = "rping -c -a {local_ip} -p {port} -C 3 -S 64",
     .local_cmd = "rping -s -a {local_ip} -p {port} -C 3 -S 64",
     .rules = {"dir rx class cm:req first 1 drop", "dir tx class cm:rep first 1 duplicate"},
     .timeout_ms = 9000,
     .server_wait_ms = 1000},  // urxe's CM service up: the first REQ must reach it to be dropped
    // The peer's rping killed (timeout(1)) before its connection is up: its CM rejects as it destroys the id.
    // Passive side in REP_SENT: urxe's RTU and first SEND never reach it (no COMM_EST either).
    {.id = "cm-kill-passive",
     .peer_cmd = "timeout 2 rping -s -a {peer_ip} -p {port} -C 3 -S 64",
     .local_cmd = "rping -c -a {peer_ip} -p {port} -C 3 -S 64",
     .rules = {"dir tx class cm:rtu drop", "dir tx opcode rc_send_only drop"},
     .timeout_ms = 3000,
     .tools_may_fail = true},
    // Active side in REQ_SENT: urxe's REPs never reach it.
    {.id = "cm-kill-active",
     .peer_is_server = false,
     .peer_cmd = "timeout 2 rping -c -a {local_ip} -p {port} -C 3 -S 64",
     .local_cmd = "rping -s -a {local_ip} -p {port} -C 3 -S 64",
     .rules = {"dir tx class cm:rep drop"},
     .timeout_ms = 3500,
     .server_wait_ms = 1000,
     .tools_may_fail = true},
    // B3 (CMP_SWAP), E3/E6/E7 (error NAKs), F4/F5/F6 (silent drops), G (framing), H2 (READ CNPs), A10.
    {.id = "atomic-cas-dup",
     .peer_cmd = PERF("ib_atomic_bw", "-A CMP_AND_SWAP -n 20"),
     .local_cmd = PERF_L("ib_atomic_bw", "-A CMP_AND_SWAP -n 20"),
     .rules = {"dir rx class atomic-ack skip 2 first 1 drop"}},
    // ib_send_bw's receive buffer is registered for local write only, its QP takes remote WRITEs: urxe's
    // ib_write_bw writes to the rkey and address the server advertises.
    {.id = "write-rights",
     .peer_cmd = PERF("ib_send_bw", "-s 1024 -n 5"),
     .local_cmd = PERF_L("ib_write_bw", "-s 1024 -n 5"),
     .rules = {},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    {.id = "write-short",
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 5"),
     .local_cmd = PERF_L("ib_write_bw", "-s 65536 -n 5"),
     .rules = {"dir tx opcode rc_rdma_write_first skip 1 first 1 truncate 8"},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    {.id = "send-overflow",
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 1024 -n 2",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 4096 -n 2 {peer_ip}",
     .rules = {},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    {.id = "atomic-align",
     .peer_cmd = PERF("ib_atomic_bw", "-A FETCH_AND_ADD -n 5"),
     .local_cmd = PERF_L("ib_atomic_bw", "-A FETCH_AND_ADD -n 5"),
     .rules = {"dir tx opcode rc_fetch_add skip 1 first 1 corrupt atomiceth.va"},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    // UD never resends: the pingpong stops at the message the peer drops; the run ends at its timeout.
    {.id = "ud-qkey",
     .peer_cmd = "ibv_ud_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 509 -n 5",
     .local_cmd = "ibv_ud_pingpong -d {dev} -g {gid} -p {port} -s 509 -n 5 {peer_ip}",
     .rules = {"dir tx opcode ud_send_only skip 2 first 1 corrupt deth.qkey"},
     .timeout_ms = 2000,
     .tools_may_fail = true},
    // 4099 bytes: FIRST, MIDDLEs and a LAST of 3 bytes (PadCnt 1) each way, for the G rows too.
    {.id = "send-tver",
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 4099 -n 5",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 4099 -n 5 {peer_ip}",
     .rules = {"dir tx opcode rc_send_last first 1 corrupt bth.tver=1"}},
    // urxe sends one message more than the peer waits for: the peer completes only if the messages after
    // the broken one are delivered.
    {.id = "uc-gap",
     .peer_cmd = PERF("ib_send_bw", "-c UC -s 65536 -n 5"),
     .local_cmd = PERF_L("ib_send_bw", "-c UC -s 65536 -n 6"),
     .rules = {"dir tx opcode uc_send_middle skip 3 first 1 drop"},
     .timeout_ms = 4000},
    {.id = "read-ce",
     .peer_is_server = false,
     .peer_cmd = "ib_read_bw -d {peer_dev} -x {peer_gid} -p {port} -F -s 65536 -n 20 {local_ip}",
     .local_cmd = "ib_read_bw -d {dev} -x {gid} -p {port} -F -s 65536 -n 20",
     .rules = {"dir tx class read-response every 8 ecn-ce"}},
    // H3 (conform_judges_ecn.cc): the peer writes at a paced 10 MiB/s (perftest's own pacer, so any NIC
    // keeps it, however slow; a tx queue's worth of messages a burst, which a DCQCN rate limit must hold
    // back) for its 3 s; from 800 ms into its
    // data, for 500 ms, urxe takes every request of it as CE-marked and answers with CNPs. A reaction point
    // cuts its rate under the pacer's while the CNPs come, and climbs back after. (By time, not by packet
    // count: the peer's speed is unknown.)
    {.id = "peer-write-cnp",
     .peer_is_server = false,
     .peer_cmd = PERF("ib_write_bw",
                      "-s 4096 -D 3 --rate_limit=10 --rate_units=M --rate_limit_type=SW "
                      "{local_ip}"),
     .local_cmd = "ib_write_bw -d {dev} -x {gid} -p {port} -F -s 4096 -D 3",
     .rules = {"dir rx class request after 800ms for 500ms ecn-ce"},
     .timeout_ms = 12000},
    // A, C, D: sequence, go-back-N, timers, RDMA READ, RNR with the peer as requester (or READ responder).
    {.id = "peer-write-gap",
     .peer_is_server = false,
     .peer_cmd = PERF("ib_write_bw", "-s 65536 -n 20 {local_ip}"),
     .local_cmd = "ib_write_bw -d {dev} -x {gid} -p {port} -F -s 65536 -n 20",
     .rules = {"dir rx opcode rc_rdma_write_middle skip 3 first 1 drop"}},
    {.id = "peer-send-gap",
     .peer_is_server = false,
     .peer_cmd = PERF("ib_send_bw", "-s 65536 -n 20 {local_ip}"),
     .local_cmd = "ib_send_bw -d {dev} -x {gid} -p {port} -F -s 65536 -n 20",
     .rules = {"dir rx opcode rc_send_middle skip 3 first 1 drop"}},
    {.id = "peer-pingpong-timeout",
     .peer_is_server = false,
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 1024 -n 5 {local_ip}",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 1024 -n 5",
     .rules = {"dir tx class ack first 1 drop", "dir rx class request psn +3 drop"},
     .timeout_ms = 4000,
     .tools_may_fail = true},
    {.id = "peer-pingpong-loss",
     .peer_is_server = false,
     .peer_cmd = "ibv_rc_pingpong -d {peer_dev} -g {peer_gid} -p {port} -s 1024 -n 10 {local_ip}",
     .local_cmd = "ibv_rc_pingpong -d {dev} -g {gid} -p {port} -s 1024 -n 10",
     .rules = {"dir rx class request every 2 drop"},
     .timeout_ms = 4000},
    {.id = "read-gaps",
     .peer_cmd = PERF("ib_read_bw", "-b -s 65536 -n 20"),
     .local_cmd = PERF_L("ib_read_bw", "-b -s 65536 -n 20"),
     .rules = {"dir tx opcode rc_rdma_read_response_middle skip 3 first 1 drop",
               "dir rx opcode rc_rdma_read_response_middle skip 3 first 1 drop",
               "dir rx opcode rc_rdma_read_response_first skip 10 first 1 drop"}},
    // One READ outstanding at a time: a gap inside it can only be noticed from that READ's own later
    // responses (an implied NAK), not from the responses of a READ behind it.
    {.id = "read-lat-gap",
     .peer_is_server = false,
     .peer_cmd = PERF("ib_read_lat", "-s 65536 -n 5 {local_ip}"),
     .local_cmd = "ib_read_lat -d {dev} -x {gid} -p {port} -F -s 65536 -n 5",
     .rules = {"dir tx opcode rc_rdma_read_response_middle skip 3 first 1 drop"}},
    {.id = "send-rnr",
     .peer_cmd = PERF("ib_send_bw", "-b -r 1 -s 1024 -n 200"),
     .local_cmd = PERF_L("ib_send_bw", "-b -r 1 -s 1024 -n 200"),
     .rules = {}},
    // I5 (conform_judges_cm_conn.cc): urxe's CM gets the peer's REQ twice; the copy finds it not yet accepted
    // and draws an MRA (ServiceTimeout 24: 68.7 s). urxe's REP at accept and its resend 4096 ms later (the
    // REQ's Local CM Response Timeout 20) are lost; the next, at 8192 ms, connects. The peer's own REQ
    // timeout (about 4.6 s from its REQ) falls inside that wait.
    {.id = "cm-mra",
     .peer_is_server = false,
     .peer_cmd = "rping -c -a {local_ip} -p {port} -C 3 -S 64",
     .local_cmd = "rping -s -a {local_ip} -p {port} -C 3 -S 64",
     .rules = {"dir rx class cm:req first 1 duplicate", "dir tx class cm:rep first 2 drop"},
     .timeout_ms = 11000,
     .server_wait_ms = 1000},  // urxe's CM service up: the first REQ must reach it to be duplicated
    // I6 (conform_judges_cm_conn.cc): two urxe clients one after the other, both with the block's first QPN
    // (URXE_QPN_START); the first one's DREQ is lost, so the peer's server (-P: it lives on) still holds that
    // connection when the second REQ comes. urxe's CM resends that DREQ only after 4096 ms, past the run.
    {.id = "cm-stale",
     .peer_cmd = "rping -s -P -a {peer_ip} -p {port} -S 64",
     .local_cmd = "sh -c 'URXE_QPN_START=0 rping -c -a {peer_ip} -p {port} -C 1 -S 64; "
                  "URXE_QPN_START=0 rping -c -a {peer_ip} -p {port} -C 1 -S 64'",
     .rules = {"dir tx class cm:dreq first 1 drop"},
     .timeout_ms = 3000,
     .tools_may_fail = true},
    // D4 (conform_judges_read.cc): ucmatose's client asks for RNR retry count 0 in its REQ (conn_param
    // zeroed), which the passive side's QP takes as its rnr_retry; the peer's server sends first, and urxe's
    // first ACK reaches it as an RNR NAK. Its QP fails (its flushed receives end its wait); urxe's client
    // waits for the messages that never come until the run's timeout ends it.
    {.id = "peer-send-rnr0",
     .peer_cmd = "ucmatose -b {peer_ip} -p {port}",
     .local_cmd = "ucmatose -s {peer_ip} -p {port}",
     .rules = {"dir tx class ack first 1 corrupt aeth.syndrome=0x21"},
     .timeout_ms = 3000,
     .server_wait_ms = 1000,
     .tools_may_fail = true},
    {.id = "cm-no-listener",
     .peer_cmd = "sleep 1",
     .local_cmd = "rping -c -a {peer_ip} -p {port} -C 1 -S 64",
     .rules = {},
     .timeout_ms = 5000,
     .tools_may_fail = true},
};

#undef PERF
#undef PERF_L

}  // namespace

std::span<const Run> runs() {
  return kRuns;
}

}  // namespace urxe::tools::conform
