"""The interop matrix: every case (pingpong, perftest, rdma_check) by group; `interop.py list`."""
import re

from interop_common import OOB_PORT


PINGPONG = {"rc": "ibv_rc_pingpong", "uc": "ibv_uc_pingpong", "ud": "ibv_ud_pingpong", "srq": "ibv_srq_pingpong"}


def pingpong(group, kind, size, iters, mtu=1500, fam="v4", path_mtu=None, netem=None, extra=""):
    args = f"-s {size} -n {iters} -c {extra}".strip()
    if path_mtu and kind != "ud":
        args += f" -m {path_mtu}"
    if kind == "srq":
        args += " -q 4"
    out = []
    for role in ("server", "client"):
        name = f"{kind}_pingpong_s{size}" + (f"_m{path_mtu}" if path_mtu else "") + \
            ("" if fam == "v4" else f"_{fam}") + ("_lossy" if netem else "") + f"_urxe_{role}"
        out.append({"name": name, "group": group, "tool": PINGPONG[kind], "kind": "pingpong", "args": args,
                    "urxe_role": role, "mtu": mtu, "fam": fam, "netem": netem, "timeout": 30 if netem else 60,
                    # ibv_*_pingpong prints "<n> iters in <t> seconds" on success, on both sides
                    "ok_pattern": rf"{iters} iters in"})
    return out


def perftest(group, tool, args, mtu=1500, fam="v4", netem=None, frames_from=("urxe", "rxe")):
    out = []
    for role in ("server", "client"):
        tag = re.sub(r"[^A-Za-z0-9]+", "_", args).strip("_").lower()
        name = f"{tool}_{tag}" + ("" if fam == "v4" else f"_{fam}") + ("_lossy" if netem else "") + \
            f"_urxe_{role}"
        out.append({"name": name, "group": group, "tool": tool, "kind": "perftest", "args": f"-F {args}",
                    "urxe_role": role, "mtu": mtu, "fam": fam, "netem": netem, "timeout": 150 if netem else 90,
                    "frames_from": frames_from,
                    # perftest prints its result table ("#bytes ...") once the test ran; in the READ and
                    # atomic latency tests only the client does (the server's CPU takes no part)
                    "ok_pattern": r"#bytes",
                    "server_pattern": r"remote address" if tool in ("ib_read_lat", "ib_atomic_lat") else None})
    return out


def rdma_check(group, size, chunk, mtu=1500, path_mtu=1024, fam="v4", netem=None, mw=0):
    """Our data check (rdma_check.c): READ pattern A, WRITE pattern B, READ it back, 16 FETCH_AND_ADD + 2
    CMP_AND_SWAP with every original value checked, then the server checks its own memory. mw 1 or 2: all
    of it through a memory window of that type on the server, which is then invalidated (type 2: by the
    client's SEND_WITH_INV) and must refuse a READ."""
    out = []
    for role in ("server", "client"):
        name = f"rdma_check_s{size}_c{chunk}_m{path_mtu}" + ("" if fam == "v4" else f"_{fam}") + \
            ("_lossy" if netem else "") + (f"_mw{mw}" if mw else "") + f"_urxe_{role}"
        out.append({"name": name, "group": group, "tool": "rdma_check", "kind": "rdma_check",
                    "args": f"-s {size} -c {chunk} -n 16 -m {path_mtu} -p {OOB_PORT}" + (f" -w {mw}" if mw else ""),
                    "urxe_role": role,
                    "mtu": mtu, "fam": fam, "netem": netem, "timeout": 150 if netem else 90,
                    "ok_pattern": r"all checks passed"})
    return out


def rdmacm(group, tool, server_args, client_args, ok_pattern, name=None, netem=None, timeout=60, cm=None,
           server_pattern=None, reconnects=0, count=1, client_tool=None, mcast_group=None, frames_from=None):
    """An unmodified librdmacm program (rdmacm-utils, perftest -R): no out-of-band TCP port, the connection
    is made by CM MADs on QP1. {addr} in the client's arguments becomes the server's IPv4 address; tool is the
    server's program, client_tool the client's if another. cm: the CM messages the capture must hold ("REQ" =
    from the client, "REP" = from the server, "DREQ"/"DREP" = from either side, the DREP from the side that
    did not send a DREQ). count: how often ok_pattern must match (rping's "ping data" lines). reconnects: the
    client runs that many times in a loop against one server."""
    out = []
    for role in ("server", "client"):
        n = (name or tool) + ("_lossy" if netem else "") + f"_urxe_{role}"
        out.append({"name": n, "group": group, "tool": tool, "kind": "rdmacm", "args": client_args,
                    "server_args": server_args, "urxe_role": role, "mtu": 1500, "fam": "v4", "netem": netem,
                    "timeout": timeout, "ok_pattern": ok_pattern, "server_pattern": server_pattern,
                    "cm": cm if cm is not None else ("REQ", "REP", "RTU", "DREQ", "DREP"), "reconnects": reconnects,
                    "ok_count": count, "client_tool": client_tool or tool, "mcast_group": mcast_group,
                    "frames_from": frames_from(role) if frames_from else ("urxe", "rxe")})
    return out


# netem for the lossy runs: applied in the guest on egress (rxe -> urxe) and, through ifb0, on ingress
# (urxe -> rxe). reorder needs a delay to reorder against; the queue limit is raised from netem's 1000 so
# that its drops are the random 2%, not tail drops of a queue that fills while the TCG guest is slow.
LOSSY = "limit 20000 delay 1ms reorder 10% 50% duplicate 1% loss 2%"
# netem with `ecn` marks ECN-capable frames CE where it would drop them (others it drops)
ECN_NETEM = "limit 20000 loss 5% ecn"


def matrix():
    m = []
    # ibv_*_pingpong with data checks (-c), several sizes vs. the 1024-byte path MTU (1500-byte link):
    # 1 byte, exactly one MTU, 4097 (5 packets, pad 3), 256 KiB (256 packets: more than rxe's 64-packet
    # AckReq window, so coalesced ACKs).
    for s, n in ((1, 10), (1024, 10), (4097, 5), (262144, 3)):
        m += pingpong("pingpong", "rc", s, n)
    for s, n in ((1, 10), (4097, 5)):
        m += pingpong("pingpong", "uc", s, n)
    for s, n in ((1, 10), (1024, 10)):
        m += pingpong("pingpong", "ud", s, n)
    for s, n in ((64, 5), (4097, 3)):
        m += pingpong("pingpong", "srq", s, n)
    # perftest, RC unless noted: 64 KiB messages for bandwidth (READ responses of 64 packets)
    for tool, a in (("ib_send_bw", "-n 50 -s 65536"), ("ib_send_lat", "-n 50 -s 64"),
                    ("ib_write_bw", "-n 50 -s 65536"), ("ib_write_lat", "-n 50 -s 64"),
                    ("ib_read_bw", "-n 50 -s 65536"), ("ib_read_lat", "-n 50 -s 64"),
                    ("ib_atomic_bw", "-n 50 -A FETCH_AND_ADD"), ("ib_atomic_bw", "-n 50 -A CMP_AND_SWAP"),
                    ("ib_atomic_lat", "-n 50 -A FETCH_AND_ADD"), ("ib_atomic_lat", "-n 50 -A CMP_AND_SWAP")):
        m += perftest("perftest", tool, a)
    for tool, a in (("ib_send_bw", "-c UD -n 50 -s 1024"), ("ib_write_bw", "-c UC -n 50 -s 4096")):
        for role_case in perftest("perftest", tool, a):
            # UD SEND and UC WRITE: data flows client -> server only, nothing comes back
            role_case["frames_from"] = ("urxe",) if role_case["urxe_role"] == "client" else ("rxe",)
            m.append(role_case)
    # our data check of WRITE/READ/atomics: 1 MiB in 64 KiB READs/WRITEs (64 packets each, READ responses
    # spanning 64 packets), and in 2 KiB pieces
    m += rdma_check("datacheck", 1 << 20, 65536)
    m += rdma_check("datacheck", 65536, 2048)
    # memory windows, type 1 and type 2: each side's accesses through the other's window, and invalidation
    m += rdma_check("datacheck", 65536, 16384, mw=1)
    m += rdma_check("datacheck", 65536, 16384, mw=2)
    # path MTU 4096 (4200-byte link)
    m += pingpong("mtu4096", "rc", 65536, 5, mtu=4200, path_mtu=4096)
    m += pingpong("mtu4096", "ud", 4096, 5, mtu=4200)
    m += perftest("mtu4096", "ib_write_bw", "-n 50 -s 65536 -m 4096", mtu=4200)
    m += perftest("mtu4096", "ib_read_bw", "-n 50 -s 65536 -m 4096", mtu=4200)
    m += rdma_check("mtu4096", 1 << 20, 65536, mtu=4200, path_mtu=4096)
    # IPv6 GIDs: a global (ULA) address, and the link-local default GID
    m += pingpong("ipv6", "rc", 4097, 5, fam="v6")
    m += pingpong("ipv6", "ud", 1024, 5, fam="v6")
    m += perftest("ipv6", "ib_write_bw", "-n 50 -s 65536", fam="v6")
    m += perftest("ipv6", "ib_read_lat", "-n 50 -s 64", fam="v6")
    m += perftest("ipv6", "ib_atomic_lat", "-n 50 -A CMP_AND_SWAP", fam="v6")
    m += pingpong("ipv6", "rc", 4097, 5, fam="ll")
    m += rdma_check("ipv6", 1 << 20, 65536, fam="v6")
    # lossy link: RC SEND (with data check), WRITE, READ under loss, reordering and duplication
    m += pingpong("lossy", "rc", 65536, 10, netem=LOSSY)
    m += perftest("lossy", "ib_write_bw", "-n 100 -s 65536", netem=LOSSY)
    m += perftest("lossy", "ib_read_bw", "-n 100 -s 65536", netem=LOSSY)
    m += perftest("lossy", "ib_send_bw", "-n 100 -s 65536", netem=LOSSY)
    m += rdma_check("lossy", 1 << 20, 65536, netem=LOSSY)
    # ECN: netem marks ECN-capable frames CE instead of dropping them; traffic class 2 (ECT(0)) makes rxe's
    # frames ECN-capable. urxe must answer CE-marked data from rxe (WRITEs to a urxe server, READ responses
    # to a urxe client) with CNPs, which rxe (no congestion control) drops, and everything still completes.
    for c in perftest("lossy", "ib_write_bw", "-n 200 -s 65536 --tclass=2", netem=ECN_NETEM):
        if c["urxe_role"] == "server":
            m.append(dict(c, expect_cnp=True))
    for c in perftest("lossy", "ib_read_bw", "-n 200 -s 65536 --tclass=2", netem=ECN_NETEM):
        if c["urxe_role"] == "client":
            m.append(dict(c, expect_cnp=True))
    return m + cm_cases() + fixture_cases()


# netem of the lossy CM runs: more loss than LOSSY, since an rping of 10 iterations has only some 200 frames and
# at 2% would often lose none (the run must show drops); a lost MAD costs a retransmission after ~4.6 s.
CM_NETEM = "limit 20000 delay 1ms reorder 10% 50% duplicate 1% loss 5%"


def cm_cases():
    """Group cm: the RDMA CM (REQ/REP/RTU, DREQ/DREP, SIDR) between urxe's CM service and the kernel's."""
    m = []
    # rping: -V verifies the data, -v prints each iteration ("ping data"), on both sides
    m += rdmacm("cm", "rping", "-s -a 0.0.0.0 -C 20 -V -S 4096 -v", "-c -a {addr} -C 20 -V -S 4096 -v",
                r"ping data", name="rping_c20_s4096",
                count=20)
    # the largest rping buffer; without -v (64 KiB a line)
    m += rdmacm("cm", "rping", "-s -a 0.0.0.0 -C 5 -V -S 65535", "-c -a {addr} -C 5 -V -S 65535", r"^",
                name="rping_c5_s65535")
    # two connections at once, each with SENDs both ways
    m += rdmacm("cm", "ucmatose", "-c 2", "-s {addr} -c 2", r"test complete", name="ucmatose_c2")
    # UD: address and QPN by SIDR_REQ/SIDR_REP, no connection
    m += rdmacm("cm", "udaddy", "", "-s {addr}", r"test complete", cm=("SIDR_REQ", "SIDR_REP"))
    # UD multicast through RDMA CM joins (no CM MADs: a RoCE join is local, plus IGMP): the "server" receives
    # (mckey waits for 10 messages), the "client" sends them to the group once joined; the bridge forwards the
    # group to the receiver's port because its join sent an IGMP report. The receiver is ready once its
    # interface is in the group (mcast_group: `ip maddr` in the guest, `urxe cm show` on urxe's side).
    m += rdmacm("cm", "mckey", "-m 239.77.0.9 -b {self}", "-m 239.77.0.9 -b {self} -s",
                r"data transfers complete", cm=(), mcast_group="239.77.0.9",
                frames_from=lambda role: ("urxe",) if role == "client" else ("rxe",))
    # librdmacm's own examples (rdma_getaddrinfo, rdma_create_ep, rdma_get_request)
    m += rdmacm("cm", "rdma_server", "", "-s {addr}", r"rdma_client: end 0", name="rdma_server_client",
                client_tool="rdma_client",
                server_pattern=r"rdma_server: end 0")
    # perftest -R: the rxe server listens for its second connection only after the first has carried the
    # parameter exchange; a urxe client's REQs are delayed 200 ms on their way in so that it is listening
    # (req_delay_on in interop.py)
    perftest_r = rdmacm("cm", "ib_write_bw", "-R -F -n 50 -s 65536", "-R -F -n 50 -s 65536 {addr}", r"#bytes",
                        name="ib_write_bw_R_n50_s65536", timeout=90)
    # in the READ latency test only the client prints the table
    perftest_r += rdmacm("cm", "ib_read_lat", "-R -F -n 50", "-R -F -n 50 {addr}", r"#bytes",
                         name="ib_read_lat_R_n50", server_pattern=r"remote address", timeout=90)
    for c in perftest_r:
        if c["urxe_role"] == "client":
            c["req_delay_ms"] = 200
    m += perftest_r
    # a lost REQ, REP, RTU, DREP or urxe's DREQ is retransmitted after ~4.6 s; rxe's RC retransmit timer is ~2 s.
    # rxe's DREQ is sent once and so spared from netem (GUEST_DREQ_FILTERS in interop.py).
    # Besides netem's random loss, every 16th frame from urxe is dropped (tc gact determ): an rping of some 130
    # frames could otherwise lose none at all, and the run must show recovery every time.
    for c in rdmacm("cm", "rping", "-s -a 0.0.0.0 -C 10 -V -v", "-c -a {addr} -C 10 -V -v", r"ping data",
                    name="rping_c10", netem=CM_NETEM, timeout=150, count=10):
        c["determ_drop"] = 16
        m.append(c)
    # every CM MAD from urxe dropped for the first 2 s: a urxe client's REQ is lost (retransmitted after
    # ~4.6 s), a urxe server's REP (retransmitted after ~4.1 s, or sent again for rxe's retransmitted REQ)
    for c in rdmacm("cm", "rping", "-s -a 0.0.0.0 -C 2 -V -v", "-c -a {addr} -C 2 -V -v", r"ping data",
                    name="rping_cm_mad_lost", timeout=60, count=2):
        c["cm_block"] = 2
        m.append(c)
    # 20 connections one after the other against one persistent server (-P): every one gets a new comm ID and
    # QPN (the kernel rejects a REQ from a QPN it still has connected, REJ 10). The server is killed at the
    # end, so its buffered output is lost: the client's 20 lines and the capture tell.
    m += rdmacm("cm", "rping", "-s -P -a 0.0.0.0 -C 1 -v", "-c -a {addr} -C 1 -v", r"ping data",
                name="rping_reconnect20", reconnects=20, server_pattern=r"^", timeout=150, count=20)
    return m


GROUPS = ("pingpong", "perftest", "datacheck", "mtu4096", "ipv6", "lossy", "cm", "fixtures")


def cmd_list():
    for c in matrix():
        print(f"{c['group']:9} {c['name']:55} {c['tool']} {c['args']}  (urxe {c['urxe_role']}, mtu {c['mtu']}, "
              f"{c['fam']}{', netem ' + c['netem'] if c['netem'] else ''})")
    return 0


# A small representative set of runs for pcap-fixtures/interop/ (tests/replay replays them): every transport,
# both roles, multi-packet SENDs/READ responses, a message above rxe's 64-packet AckReq window, WRITE/READ/
# FETCH_AND_ADD/CMP_AND_SWAP with known data, IPv6, MTU 4096, and recovery under loss. Group "fixtures" (not a
# ctest); sizes chosen so the whole set stays well under 1 MB (path MTU 256 where many packets are wanted).
FIXTURE_NETEM = "limit 20000 delay 1ms reorder 10% 50% duplicate 1% loss 5%"


def fixture_cases():
    m = []

    def pick(cases, role):
        for c in cases:
            if c["urxe_role"] == role:
                c["name"] = "fx_" + c["name"]
                c["group"] = "fixtures"
                m.append(c)
    pick(pingpong("fixtures", "rc", 4097, 3), "client")
    pick(pingpong("fixtures", "rc", 32768, 1, path_mtu=256), "server")
    pick(pingpong("fixtures", "uc", 4097, 3), "server")
    pick(pingpong("fixtures", "ud", 1024, 3), "client")
    pick(pingpong("fixtures", "srq", 64, 3), "server")
    pick(rdma_check("fixtures", 8192, 2048), "client")
    pick(rdma_check("fixtures", 8192, 2048), "server")
    pick(pingpong("fixtures", "rc", 8193, 3, mtu=4200, path_mtu=4096), "client")
    pick(pingpong("fixtures", "rc", 4097, 3, fam="v6"), "server")
    pick(pingpong("fixtures", "rc", 2048, 20, path_mtu=256, netem=FIXTURE_NETEM), "client")
    pick(rdma_check("fixtures", 16384, 4096, path_mtu=256, netem=FIXTURE_NETEM), "server")
    return m
