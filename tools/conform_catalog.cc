// `urxe conform`: the catalogue's scenarios (one row each, judged from a run's capture; the runs they judge
// are in conform_runs.cc). Clauses name the InfiniBand Architecture Specification volume 1 chapter (9
// transport, 10 verbs, 12 communication management) and the rule; compliance statement numbers only where
// public sources quote them (kernel rxe's comments).
#include "tools/conform.h"
#include "tools/conform_judges.h"

namespace urxe::tools::conform {
namespace {

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
               "acknowledged; one ACK may cover several packets (coalescing) and ACK PSNs never go back, "
               "but for the ACK of a duplicate request",
     .expect = "every request urxe sent with AckReq covered by a later ACK/NAK at or beyond its PSN; ACK "
               "PSNs non-decreasing except right after urxe resent an already acknowledged PSN",
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
     .judge = judge_dup_request_acked,
     .rxe_note = ""},
    {.id = "B1.write",
     .run = "write-dup",
     .clause = "IBTA vol. 1 ch. 9, duplicate requests: a duplicate RDMA WRITE is acknowledged again, with no "
               "NAK (writing its data again changes nothing)",
     .expect = "an ACK at or beyond the WRITE ONLY's PSN after its duplicate (one may cover both), no NAK, "
               "and both ib_write_bw programs complete",
     .judge = judge_dup_request_acked,
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
    // CM retransmissions and duplicates (conform_judges_cm_retry.cc).
    {.id = "I1.req-resend",
     .run = "cm-peer-active",
     .clause = "IBTA vol. 1 ch. 12, REQ timeout: a REQ not answered within its timeout is sent again, the "
               "same message (transaction ID, local comm ID), up to Max CM Retries times (the kernel's "
               "ib_send_cm_req: 2 x PacketLifeTime + Remote CM Response Timeout)",
     .expect = "the peer's REQ urxe lost is sent again with the same transaction ID and comm ID, no sooner "
               "than 0.95 x 4.096 us x 2^(the REQ's Remote CM Response Timeout) less 100 ms (capture jitter)",
     .judge = judge_req_resent,
     .rxe_note = ""},
    {.id = "I4.dup-rep",
     .run = "cm-peer-active",
     .clause = "IBTA vol. 1 ch. 12, duplicate REP at the active side (the kernel's cm_dup_rep_handler): "
               "answered with the RTU again once established, with an MRA while one was sent for it, "
               "otherwise ignored",
     .expect = "no REJ; one RTU, or one for each copy the peer received once established; rping completes",
     .judge = judge_dup_rep,
     .rxe_note = ""},
    {.id = "I3.dup-req",
     .run = "cm-dup",
     .clause = "IBTA vol. 1 ch. 12, duplicate REQ at the passive side (the kernel's cm_dup_req_handler): "
               "ignored while the REQ is being handled, answered with an MRA (REQ) once the CM sent or "
               "withheld one, ignored once the REP is out (the REP is resent only by its own timer)",
     .expect =
         "for the REQ sent twice: one REP (a second only after the REP timeout), at most an MRA for the "
         "copy, no REJ; rping completes",
     .judge = judge_dup_req,
     .rxe_note = ""},
    {.id = "I9.dup-dreq",
     .run = "cm-dup",
     .clause = "IBTA vol. 1 ch. 12, DREQ: answered with a DREP; a duplicate DREQ is answered again in "
               "TimeWait and may be ignored while the first is being handled (the kernel's "
               "cm_dreq_handler in DREQ_RCVD)",
     .expect = "a DREP for urxe's DREQ sent twice back to back, no more DREPs than DREQs, and one for every "
               "copy that reached the peer after its first DREP",
     .judge = judge_dup_dreq,
     .rxe_note = ""},
    {.id = "I2.rep-resend",
     .run = "cm-lost",
     .clause = "IBTA vol. 1 ch. 12, REP timeout: a REP not answered by an RTU is sent again after the "
               "active side's Local CM Response Timeout from the REQ (the kernel's cm_req_handler), up to "
               "Max CM Retries",
     .expect =
         "the REP urxe lost is sent again, same transaction ID and comm IDs, no sooner than 0.95 x "
         "4.096 us x 2^(the REQ's Local CM Response Timeout) less 100 ms (capture jitter); the connection "
         "completes",
     .judge = judge_rep_resent,
     .rxe_note = ""},
    {.id = "I9.drep-lost",
     .run = "cm-lost",
     .clause =
         "IBTA vol. 1 ch. 12, DREQ: a DREQ for a connection in TimeWait, or one the CM no longer knows, "
         "is answered with a DREP (the kernel's cm_dreq_handler, cm_issue_drep)",
     .expect = "urxe's DREQ, resent after the peer's DREP was lost, answered with a DREP",
     .judge = judge_dreq_resend_answered,
     .rxe_note = ""},
    {.id = "I8.rep-sent",
     .run = "cm-kill-passive",
     .clause = "IBTA vol. 1 ch. 12, REJ: a passive side that gives up a connection after its REP, before the "
               "RTU, rejects it (the kernel's cm_destroy_id in REP_SENT: consumer reject, MessageRejected "
               "'no message' from cm_format_rej)",
     .expect = "once the peer's rping is killed with its REP unanswered: a REJ with reason 28 and "
               "MessageRejected 2 for the connection",
     .judge = judge_rej_destroyed_rep_sent,
     .rxe_note = ""},
    {.id = "I8.req-sent",
     .run = "cm-kill-active",
     .clause = "IBTA vol. 1 ch. 12, REJ: an active side that gives up its REQ before a REP rejects it with "
               "reason 4 'timeout', its node GUID as the additional reject information (the kernel's "
               "cm_destroy_id in REQ_SENT)",
     .expect = "once the peer's rping is killed with urxe's REPs lost: a REJ with reason 4, ARI = the REQ's "
               "local CA GUID, MessageRejected 2, naming the REQ's comm ID",
     .judge = judge_rej_destroyed_req_sent,
     .rxe_note = ""},
    // B3 (CMP_SWAP), E3/E6/E7 (error NAKs), F4/F5/F6 (silent drops), G (framing), H2 (READ CNPs), A10.
    {.id = "B3.cas",
     .run = "atomic-cas-dup",
     .clause =
         "IBTA vol. 1 ch. 9, duplicate atomic requests: answered from the saved result, never executed again",
     .expect = "a second ATOMIC ACKNOWLEDGE at the duplicated CMP_SWAP's PSN with the same original data "
               "(perftest swaps 0 for 0: a second execution would change nothing, so this row shows the "
               "replayed answer, not the absence of a second execution)",
     .judge = judge_dup_atomic_replayed,
     .rxe_note = ""},
    {.id = "E3.rights",
     .run = "write-rights",
     .clause =
         "IBTA vol. 1 ch. 9 (remote access error) and ch. 10 (memory region access rights): an RDMA WRITE "
         "to a region registered without remote write access is a class C error",
     .expect =
         "a NAK with syndrome 0x62 (remote access error) at the PSN of urxe's first WRITE, which names the "
         "rkey of a receive buffer the peer registered for local write only",
     .judge = judge_rights_nak,
     .rxe_note = ""},
    {.id = "E6.write",
     .run = "write-short",
     .clause = "IBTA vol. 1 ch. 9, length checks: a FIRST or MIDDLE packet carries exactly the path MTU of "
               "payload; any other length is an invalid request",
     .expect =
         "a NAK with syndrome 0x61 (invalid request) at the PSN of the WRITE FIRST urxe cut 8 bytes from",
     .judge = judge_invalid_request_nak,
     .rxe_note = ""},
    {.id = "E6.send",
     .run = "send-overflow",
     .clause = "IBTA vol. 1 ch. 9, length checks: a SEND longer than the receive WQE's buffers is an invalid "
               "request",
     .expect = "a NAK with syndrome 0x61 at a PSN of urxe's 4096-byte SEND (the peer posted 1024-byte "
               "receives), and no ACK for the whole message",
     .judge = judge_overflow_nak,
     .rxe_note =
         "kernel rxe answers 0x63 (remote operational error) instead: its copy_data returns -EINVAL, not "
         "-ENOSPC, for a message longer than the receive WQE, so send_data_in takes the malformed-WQE "
         "path (RESPST_ERR_MALFORMED_WQE) rather than the length error"},
    {.id = "E7.align",
     .run = "atomic-align",
     .clause = "IBTA vol. 1 ch. 9, atomic operations: the virtual address of an atomic must be 8-byte "
               "aligned; a misaligned one is an invalid request",
     .expect = "a NAK with syndrome 0x61 at the PSN of the FETCH_ADD whose VA urxe made odd",
     .judge = judge_invalid_request_nak,
     .rxe_note = ""},
    {.id = "F4.qkey",
     .run = "ud-qkey",
     .clause = "IBTA vol. 1 ch. 9 and 10, UD: a datagram whose DETH Q_Key differs from the QP's Q_Key is "
               "dropped silently (and counted)",
     .expect = "no reply to the UD SEND whose Q_Key urxe changed (the peer answered the earlier ones)",
     .judge = judge_qkey_dropped,
     .rxe_note = ""},
    {.id = "F5.tver",
     .run = "send-tver",
     .clause = "IBTA vol. 1 ch. 9, packet header validation: a BTH transport header version other than 0 is "
               "dropped silently",
     .expect = "no answer to the SEND LAST with TVer 1; urxe's timeout resend of it is acknowledged",
     .judge = judge_tver_dropped,
     .rxe_note = ""},
    {.id = "F6.uc",
     .run = "uc-gap",
     .clause = "IBTA vol. 1 ch. 9, UC responder: after a missing packet the rest of the message is dropped "
               "silently and the next message starting with FIRST or ONLY is received; UC has no ACK or NAK",
     .expect =
         "no frame at all from the peer; its ib_send_bw receives the 5 messages it waits for from the 5 "
         "of 6 urxe sent whole",
     .judge = judge_uc_gap,
     .rxe_note = "kernel rxe drops the next message too: its FIRST meets the broken message's opcode state "
                 "(check_op_seq, class D1: the receive WQE is reset and that packet dropped), so the peer "
                 "receives 4 of the 5 it waits for"},
    {.id = "G1.udp",
     .run = "send-tver",
     .clause = "RoCEv2 annex A17, UDP encapsulation: destination port 4791; the source port is the flow's "
               "entropy, one per QP so the network keeps its packets in order",
     .expect = "every frame of the peer's QP with destination port 4791 and one source port (CNPs and QP1 "
               "aside); the source port in 0xC000-0xFFFF as the Linux drivers choose it is reported, not "
               "required",
     .judge = judge_udp_ports,
     .rxe_note = ""},
    {.id = "G2.pad",
     .run = "send-tver",
     .clause = "IBTA vol. 1 ch. 9, BTH PadCnt: the pad aligns the payload to 4 bytes, only on a message's "
               "last packet; pad bytes are zero",
     .expect = "PadCnt 0 on the peer's SEND FIRST/MIDDLE, PadCnt 1 with a zero pad byte on its 3-byte SEND "
               "LASTs",
     .judge = judge_pad,
     .rxe_note = ""},
    {.id = "G3.len",
     .run = "send-tver",
     .clause = "IBTA vol. 1 ch. 9, packet lengths: FIRST and MIDDLE packets carry exactly the path MTU of "
               "payload, LAST and ONLY between 1 byte (LAST) or 0 (ONLY) and the path MTU",
     .expect = "the peer's FIRST/MIDDLE payloads all one IB MTU (256-4096), its LAST/ONLY payloads no longer",
     .judge = judge_payload_lengths,
     .rxe_note = ""},
    {.id = "A10.credits",
     .run = "send-tver",
     .clause = "IBTA vol. 1 ch. 9, AETH: an ACK syndrome is 000 and a 5-bit credit code (0x1F: no credit "
               "count, as with an SRQ); RNR NAK 001, NAK 011; 010 and bit 7 are reserved",
     .expect = "every AETH from the peer with a defined syndrome; its ACK credit codes are reported",
     .judge = judge_credit_codes,
     .rxe_note = ""},
    {.id = "H2.read-cnp",
     .run = "read-ce",
     .clause = "RoCEv2 annex A17 (congestion notification): the receiver of CE-marked packets is the "
               "notification point; for READ responses that is the READ requester, which sends the CNP to "
               "the responder's QP",
     .expect = "at least one CNP from the peer (the ib_read_bw client) to the QP of urxe's that sent the "
               "CE-marked READ responses",
     .judge = judge_cnp_for_read_ce,
     .rxe_note = "kernel rxe has no congestion control: rxe_rcv never reads the IP ECN field and rxe builds "
                 "no CNP (0x81), so CE-marked READ responses draw nothing"},
    {.id = "H3.cnp-rate",
     .run = "peer-write-cnp",
     .clause = "RoCEv2 annex A17, congestion management (optional there; DCQCN on ConnectX and urxe): a "
               "reaction point lowers a QP's injection rate while CNPs for it arrive, and raises it again "
               "once they stop",
     .expect =
         "the peer writes at a paced 10 MiB/s; while urxe takes its requests as CE-marked (500 ms) and "
         "answers with CNPs, the rate it sends at (bytes over the 2 ms it sends in) falls under a third "
         "of what it was before; after them it climbs back over half",
     .judge = judge_cnp_reaction,
     .rxe_note = "kernel rxe implements no congestion management: an incoming CNP (0x81) fails its QP-type "
                 "check and is dropped, so the pacer's rate goes on under the CNPs"},
    // A, C, D: sequence, go-back-N, timers, RDMA READ, RNR with the peer as requester (or READ responder).
    {.id = "A3.write",
     .run = "peer-write-gap",
     .clause =
         "IBTA vol. 1 ch. 9, requester NAK processing: a NAK acknowledges every request packet before the "
         "PSN it names (kernel rxe: 'a nak implicitly acks all packets with psns before')",
     .expect =
         "the peer as requester (ib_write_bw client): after urxe's PSN sequence error NAK at the dropped "
         "WRITE MIDDLE's PSN p, no request from the peer below p",
     .judge = judge_nak_acks_below,
     .rxe_note = ""},
    {.id = "A4.write",
     .run = "peer-write-gap",
     .clause =
         "IBTA vol. 1 ch. 9, requester retry (go-back-N): after a sequence error NAK the requester resends "
         "from the NAKed PSN every packet it had sent after it, in order; resumed mid-message, with the "
         "packet's own opcode and data",
     .expect =
         "the peer's next request at p is a WRITE MIDDLE (no RETH) with the dropped packet's data, then "
         "p+1, p+2, ... up to the highest PSN it had sent, in order",
     .judge = judge_go_back_n,
     .rxe_note = ""},
    {.id = "A3.send",
     .run = "peer-send-gap",
     .clause =
         "IBTA vol. 1 ch. 9, requester NAK processing: a NAK acknowledges every request packet before the "
         "PSN it names",
     .expect =
         "the peer as requester (ib_send_bw client): after urxe's PSN sequence error NAK at the dropped "
         "SEND MIDDLE's PSN p, no request from the peer below p",
     .judge = judge_nak_acks_below,
     .rxe_note = ""},
    {.id = "A4.send",
     .run = "peer-send-gap",
     .clause =
         "IBTA vol. 1 ch. 9, requester retry (go-back-N): after a sequence error NAK the requester resends "
         "from the NAKed PSN every packet it had sent after it, in order; resumed mid-message, with the "
         "packet's own opcode and data",
     .expect =
         "the peer's next request at p is a SEND MIDDLE with the dropped packet's data, then p+1, p+2, ... "
         "up to the highest PSN it had sent, in order",
     .judge = judge_go_back_n,
     .rxe_note = ""},
    {.id = "A5.timeout",
     .run = "peer-pingpong-timeout",
     .clause =
         "IBTA vol. 1 ch. 9, local ACK timeout: a requester that gets no acknowledgement resends from the "
         "oldest unacknowledged PSN when its transport timer, 4.096 us x 2^timeout, runs out",
     .expect =
         "urxe drops its ACK of the peer's first SEND (ibv_rc_pingpong client: timeout 14, 67.1 ms): the "
         "peer resends that PSN, no sooner than 3/4 of 67.1 ms after urxe received it (a ConnectX with "
         "adaptive retransmission on may resend sooner)",
     .judge = judge_ack_timeout,
     .rxe_note = ""},
    {.id = "A6.retry",
     .run = "peer-pingpong-timeout",
     .clause = "IBTA vol. 1 ch. 9 and ch. 10 (retry_cnt): a requester resends a request at most retry_cnt "
               "times (7 is seven; only rnr_retry 7 means forever), then completes it with "
               "IBV_WC_RETRY_EXC_ERR and the QP goes to the error state",
     .expect = "every transmission of the peer's 4th SEND dropped (ibv_rc_pingpong client: retry_cnt 7): "
               "exactly 8 transmissions, however early, then none, and the peer's program fails",
     .judge = judge_retry_count,
     .rxe_note = "kernel rxe takes retry_cnt 7 as infinite (rxe_comp.c decrements it only when it is not 7): "
                 "it resends until the run ends"},
    {.id = "A7.reset",
     .run = "peer-pingpong-loss",
     .clause = "IBTA vol. 1 ch. 9: the retry counter starts again when a request makes progress, so losses "
               "spread over many messages never exhaust it",
     .expect =
         "every 2nd transmission of the peer dropped (9 in all, more than ibv_rc_pingpong's retry_cnt 7): "
         "each dropped PSN delivered later and both programs complete",
     .judge = judge_retry_reset,
     .rxe_note = ""},
    {.id = "C1.read",
     .run = "read-gaps",
     .clause =
         "IBTA vol. 1 ch. 9, requester READ retry: a READ is resumed at the first response PSN p that did "
         "not arrive, its RETH advanced past the bytes received: VA + (p - first PSN) x PMTU, the "
         "length less the same",
     .expect = "ib_read_bw -b, both sides READ: urxe drops its 4th READ RESPONSE MIDDLE to the peer: the "
               "peer's next READ request for that READ has PSN p, that VA and length, and the same R_Key",
     .judge = judge_read_resume,
     .rxe_note = ""},
    {.id = "C2.read",
     .run = "read-lat-gap",
     .clause =
         "IBTA vol. 1 ch. 9, requester response checking: a READ response PSN beyond the expected one is "
         "an implied NAK (sequence error), and the requester asks again at once (ConnectX counts these "
         "as implied_nak_seq_err)",
     .expect =
         "the peer (ib_read_lat: one 64 KiB READ outstanding) asks again for the response urxe dropped less "
         "than half its local ACK timeout (perftest timeout 14: 67.1 ms) after urxe's next response of the "
         "same READ; a requester that waits for its timer takes the whole of it",
     .judge = judge_read_implied_nak,
     .rxe_note =
         "kernel rxe takes a response beyond the expected PSN as an implied NAK only when it lies beyond "
         "the whole current READ (check_psn: past wqe->last_psn, COMPST_ERROR_RETRY); a gap inside the READ "
         "is dropped (COMPST_DONE) and waits for the retransmit timer"},
    {.id = "C3.read",
     .run = "read-gaps",
     .clause =
         "IBTA vol. 1 ch. 9, READ responses: the answer to a READ request opens with RDMA READ RESPONSE "
         "FIRST (ONLY when one packet) at its PSN, also for a READ resumed in its middle (kernel rxe "
         "commit 030e46e4: 'may restart from read response first or read response only')",
     .expect = "urxe drops the peer's 4th READ RESPONSE MIDDLE and resumes the READ at its PSN p: the peer's "
               "first response at p is FIRST, or ONLY when at most one PMTU is left",
     .judge = judge_read_restart_first,
     .rxe_note = "kernel rxe answers a READ resumed in its middle with READ RESPONSE MIDDLE/LAST (it replays "
                 "the original READ's responses)"},
    {.id = "C4.read",
     .run = "read-gaps",
     .clause = "IBTA vol. 1 ch. 9, packet formats: RDMA READ RESPONSE FIRST, LAST and ONLY carry an AETH, "
               "MIDDLE none; FIRST and MIDDLE carry exactly the path MTU",
     .expect =
         "each READ response of the peer has the payload its opcode's layout gives: FIRST/MIDDLE "
         "exactly PMTU, LAST/ONLY the rest of the READ, an AETH with an ACK syndrome on FIRST/LAST/ONLY",
     .judge = judge_read_layout,
     .rxe_note = ""},
    {.id = "B2.middle",
     .run = "read-gaps",
     .clause = "IBTA vol. 1 ch. 9, duplicate READ requests: a READ request whose PSN lies in a READ already "
               "executed is executed again from that PSN (the memory read again) and answered from there",
     .expect = "the peer answers urxe's READ resumed at p (a duplicate) with every response from p to the "
               "READ's end again, each with the data of the first answer",
     .judge = judge_dup_read_middle,
     .rxe_note = ""},
    {.id = "B2.whole",
     .run = "read-gaps",
     .clause = "IBTA vol. 1 ch. 9, duplicate READ requests: a READ request repeated whole is executed again "
               "and answered whole",
     .expect = "urxe drops the peer's 11th READ RESPONSE FIRST and asks for that READ again whole: the peer "
               "answers from READ RESPONSE FIRST to LAST again, each with the data of the first answer",
     .judge = judge_dup_read_whole,
     .rxe_note = ""},
    {.id = "C4.atomic",
     .run = "atomic-dup",
     .clause = "IBTA vol. 1 ch. 9, packet formats: an ATOMIC ACKNOWLEDGE is a BTH, an AETH and an "
               "AtomicAckETH",
     .expect =
         "each ATOMIC ACKNOWLEDGE of the peer (ib_atomic_bw server) is 36 UDP bytes: BTH, an AETH with an "
         "ACK syndrome, the 8-byte AtomicAckETH, ICRC, no payload",
     .judge = judge_atomic_ack_layout,
     .rxe_note = ""},
    {.id = "D1.send",
     .run = "send-rnr",
     .clause =
         "IBTA vol. 1 ch. 9, receiver not ready: a SEND that finds no receive WQE is answered with an RNR "
         "NAK (AETH 001 and the responder's min_rnr_timer) naming its PSN; nothing from it on executes",
     .expect =
         "ib_send_bw -b -r 1 on both sides: the peer's first RNR NAK has syndrome 0x2c (perftest's "
         "min_rnr_timer 12: 0.64 ms), names the PSN of a SEND urxe sent, and no ACK at or past it comes "
         "before urxe resends that SEND",
     .judge = judge_rnr_nak,
     .rxe_note = ""},
    {.id = "D3.send",
     .run = "send-rnr",
     .clause = "IBTA vol. 1 ch. 9, RNR NAK processing: the requester waits at least the time the NAK's timer "
               "field codes (IBTA table 45) before it resends from the NAKed PSN",
     .expect = "urxe's RNR NAKs in the same run (min_rnr_timer 12: 0.64 ms): the peer resends each NAKed PSN "
               "no sooner than 0.95 x the coded time after the NAK",
     .judge = judge_rnr_wait,
     .rxe_note = ""},
    // The peer after urxe's MRA, a stale connection (conform_judges_cm_conn.cc).
    {.id = "D4.rnr-retry",
     .run = "peer-send-rnr0",
     .clause = "IBTA vol. 1 ch. 9, RNR NAK processing, and ch. 12, REQ RNR Retry Count: a requester retries "
               "an RNR NAKed request rnr_retry times (7: without end), then fails the WQE "
               "(IBV_WC_RNR_RETRY_EXC_ERR); the passive side's QP takes the count from the REQ",
     .expect = "urxe's REQ (ucmatose client) asks for RNR retry count 0; urxe's first ACK to the peer's "
               "SENDs reaches it as an RNR NAK (timer 0.01 ms): the peer never sends that PSN again",
     .judge = judge_rnr_retry_zero,
     .rxe_note = ""},
    {.id = "I5.mra",
     .run = "cm-mra",
     .clause = "IBTA vol. 1 ch. 12, MRA: the sender of the message MRAed waits ServiceTimeout + "
               "PacketLifeTime before resending it (the kernel's cm_mra_handler), so a slow answer does not "
               "time the connection out",
     .expect = "after urxe's MRA (REQ) no REQ again and no REJ for 0.95 x 4.096 us x 2^ServiceTimeout less "
               "100 ms, or until the REP that urxe lets through past the peer's own REQ timeout; that REP is "
               "answered by RTU",
     .judge = judge_mra_honoured,
     .rxe_note = ""},
    {.id = "I6.stale",
     .run = "cm-stale",
     .clause = "IBTA vol. 1 ch. 12, stale connections: a REQ from a QPN the CM holds in a live connection is "
               "rejected (reason 10, stale connection) and the old connection is taken down (the kernel's "
               "cm_match_req: REJ and a DREQ)",
     .expect =
         "the second REQ from the QPN of the connection whose DREQ was lost: REJ reason 10, then a DREQ "
         "for that connection",
     .judge = judge_stale_connection,
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

std::span<const Scenario> scenarios() {
  return kScenarios;
}
const Run* find_run(std::string_view id) {
  for (const Run& r : runs())
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace urxe::tools::conform
