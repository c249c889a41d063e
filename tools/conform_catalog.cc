// `urxe conform`: the catalogue. Runs (the stimuli: both sides' stock tools and urxe's fault rules) and
// scenarios (one catalogue row each, judged from a run's capture). Clauses name the InfiniBand Architecture
// Specification volume 1 chapter (9 transport, 10 verbs, 12 communication management) and the rule;
// compliance statement numbers only where public sources quote them (kernel rxe's comments).
#include <algorithm>
#include <map>
#include <set>

#include "tools/conform.h"
#include "tools/conform_judges.h"

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
    {.id = "cm-no-listener",
     .peer_cmd = "sleep 1",
     .local_cmd = "rping -c -a {peer_ip} -p {port} -C 1 -S 64",
     .rules = {},
     .timeout_ms = 5000,
     .tools_may_fail = true},
};

#undef PERF
#undef PERF_L

const Scenario kScenarios[] = {
    {.id = "A1.write",
     .run = "write-gap",
     .clause =
         "IBTA vol. 1 ch. 9, responder PSN check: a request PSN ahead of the expected PSN is a PSN sequence "
         "error (class B); the responder NAKs it with the expected PSN and discards the packet",
     .expect = "a NAK with syndrome 0x60 (PSN sequence error) naming the lost WRITE MIDDLE's PSN, and no ACK "
               "beyond the hole before urxe resends it",
     .judge = judge_seq_nak,
     .rxe_note = ""},
    {.id = "A2.write",
     .run = "write-gap",
     .clause = "IBTA vol. 1 ch. 9, responder PSN check: after a sequence-error NAK the responder discards "
               "later out-of-sequence "
               "packets silently until the expected PSN arrives",
     .expect = "exactly one PSN sequence error NAK for the hole, however many later packets arrive",
     .judge = judge_one_nak_per_gap,
     .rxe_note = ""},
    {.id = "A8.ackreq",
     .run = "write-gap",
     .clause = "IBTA vol. 1 ch. 9, responder ACK generation and requester ACK processing: a request with "
               "AckReq set is "
               "acknowledged; one ACK may cover several packets (coalescing) and ACK PSNs never go back",
     .expect = "every request urxe sent with AckReq covered by a later ACK/NAK at or beyond its PSN; ACK "
               "PSNs non-decreasing",
     .judge = judge_ackreq_covered,
     .rxe_note = ""},
    {.id = "A9.msn",
     .run = "write-gap",
     .clause = "IBTA vol. 1 ch. 9, AETH message sequence number: the AETH carries the responder's message "
               "sequence number, one more per "
               "completed message",
     .expect = "each ACK's MSN equals the number of whole WRITE messages up to its PSN (mod 2^24)",
     .judge = judge_msn,
     .rxe_note = ""},
    {.id = "D5.write",
     .run = "write-gap",
     .clause = "IBTA vol. 1 ch. 9, RNR NAK: only requests that consume a receive WQE (SEND, WRITE with "
               "immediate) can be RNR NAKed",
     .expect = "no RNR NAK during a stream of RDMA WRITEs",
     .judge = judge_no_rnr,
     .rxe_note = ""},
    {.id = "B1.send",
     .run = "send-dup",
     .clause = "IBTA vol. 1 ch. 9, duplicate requests (C9-105 as kernel rxe quotes it): a duplicate SEND is "
               "acknowledged again and never executed twice",
     .expect = "an ACK at or beyond the SEND ONLY's PSN after its duplicate (one may cover both), no NAK, "
               "and both pingpong "
               "programs complete every iteration (a second execution would consume a receive)",
     .judge = judge_dup_send_acked,
     .rxe_note = ""},
    {.id = "B5.send",
     .run = "send-dup",
     .clause = "IBTA vol. 1 ch. 9, responder PSN check: a PSN behind the expected PSN is a duplicate, never "
               "a sequence error",
     .expect = "no PSN sequence error NAK for the duplicate",
     .judge = judge_no_seq_nak,
     .rxe_note = ""},
    {.id = "E1.rkey",
     .run = "write-rkey",
     .clause =
         "IBTA vol. 1 ch. 9 (remote access error) and ch. 10 (R_Key checks): an invalid R_Key is a class C "
         "error: NAK remote access error, the responder QP goes to the error state",
     .expect = "a NAK with syndrome 0x62 naming the PSN of the WRITE FIRST whose R_Key urxe replaced",
     .judge = judge_access_nak,
     .rxe_note = ""},
    {.id = "E8.silence",
     .run = "write-rkey",
     .clause =
         "IBTA vol. 1 ch. 9, C9-220 (as quoted on linux-rdma): after an error NAK the requester flushes its "
         "later WQEs; the responder, in the error state, answers nothing more",
     .expect = "no ACK from the peer for any PSN after the NAKed one",
     .judge = judge_silence_after_error_nak,
     .rxe_note = ""},
    {.id = "F1.icrc",
     .run = "write-icrc",
     .clause =
         "RoCEv2 annex A17 / IBTA vol. 1 ch. 9, packet checks: a packet with a bad ICRC is dropped silently "
         "and the loss is repaired like any other",
     .expect =
         "no answer to the corrupted WRITE MIDDLE; the next packet draws a PSN sequence error NAK at its PSN",
     .judge = judge_seq_nak,
     .rxe_note = ""},
    {.id = "F2.ce",
     .run = "write-ce",
     .clause = "RoCEv2 annex A17: ECN is outside the ICRC; a CE-marked packet is delivered like any other",
     .expect = "no NAK and no retransmission for CE-marked WRITE packets; both tools complete",
     .judge = judge_ce_no_loss,
     .rxe_note = ""},
    {.id = "H1.cnp",
     .run = "write-ce",
     .clause =
         "RoCEv2 annex A17 (congestion notification): a notification point that receives a CE-marked RoCEv2 "
         "packet sends a CNP (opcode 0x81) to the sending QP",
     .expect = "at least one CNP from the peer, addressed to urxe's QP",
     .judge = judge_cnp_for_ce,
     .rxe_note = "kernel rxe has no congestion control: rxe_rcv never reads the IP ECN field and rxe builds "
                 "no CNP (0x81), so CE marks draw nothing"},
    {.id = "E2.range",
     .run = "write-range",
     .clause =
         "IBTA vol. 1 ch. 9 (remote access error) and ch. 10 (memory region bounds): a VA and length outside "
         "the region of the R_Key is a class C error",
     .expect = "a NAK with syndrome 0x62 naming the PSN of the WRITE FIRST whose VA urxe replaced",
     .judge = judge_range_nak,
     .rxe_note = ""},
    {.id = "E5.opseq",
     .run = "write-opseq",
     .clause =
         "IBTA vol. 1 ch. 9, opcode sequence check: a MIDDLE packet where a new message must begin is an "
         "invalid request",
     .expect = "a NAK with syndrome 0x61 (invalid request) at the PSN of the WRITE FIRST made a WRITE MIDDLE",
     .judge = judge_invalid_request_nak,
     .rxe_note = ""},
    {.id = "F3.pkey",
     .run = "send-pkey",
     .clause =
         "IBTA vol. 1 ch. 9, packet header validation: a P_Key that does not match the QP's partition is "
         "dropped silently (and counted)",
     .expect = "no ACK or NAK for the SEND with P_Key 0x1234; urxe's timeout resend of it is acknowledged",
     .judge = judge_silent_drop,
     .rxe_note = ""},
    {.id = "F5.destqp",
     .run = "send-destqp",
     .clause =
         "IBTA vol. 1 ch. 9, packet header validation: a packet for a QP that does not exist is dropped "
         "silently",
     .expect = "no answer to the SEND sent to QP 0xabcde; urxe's timeout resend of it is acknowledged",
     .judge = judge_silent_drop,
     .rxe_note = ""},
    {.id = "B3.fadd",
     .run = "atomic-dup",
     .clause =
         "IBTA vol. 1 ch. 9, duplicate atomic requests: answered from the saved result, never executed again",
     .expect =
         "two ATOMIC ACKNOWLEDGEs at the duplicated FETCH_ADD's PSN with the same original data; the next "
         "FETCH_ADD on the address sees one add",
     .judge = judge_dup_atomic_replayed,
     .rxe_note = ""},
    {.id = "A1.send",
     .run = "send-gap",
     .clause =
         "IBTA vol. 1 ch. 9, responder PSN check: a request PSN ahead of the expected PSN is a PSN sequence "
         "error (class B); the responder NAKs it with the expected PSN and discards the packet",
     .expect =
         "a NAK with syndrome 0x60 naming the lost SEND MIDDLE's PSN, and no ACK beyond the hole before urxe "
         "resends it",
     .judge = judge_seq_nak,
     .rxe_note = ""},
    {.id = "A2.send",
     .run = "send-gap",
     .clause =
         "IBTA vol. 1 ch. 9, responder PSN check: after a sequence-error NAK the responder discards later "
         "out-of-sequence packets silently until the expected PSN arrives",
     .expect = "exactly one PSN sequence error NAK for the hole in a 64 KiB SEND",
     .judge = judge_one_nak_per_gap,
     .rxe_note = ""},
    {.id = "I7.no-listener",
     .run = "cm-no-listener",
     .clause = "IBTA vol. 1 ch. 12, REJ reason 8 'invalid Service ID': a REQ for a service nobody "
               "listens on is rejected",
     .expect = "a REJ with reason 8 and MessageRejected 0 (REQ), carrying the REQ's local comm ID as its "
               "remote comm ID",
     .judge = judge_rej_no_listener,
     .rxe_note = ""},
};

}  // namespace

std::span<const Run> runs() {
  return kRuns;
}
std::span<const Scenario> scenarios() {
  return kScenarios;
}
const Run* find_run(std::string_view id) {
  for (const Run& r : kRuns)
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace urxe::tools::conform
