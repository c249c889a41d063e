// Throughput of the wire codec's hot paths next to memcpy of the same bytes on the same core: CRC-32 with
// each backend, the ICRC, parse_frame with and without ICRC verification, build_frame, and build_headers
// alone (the engine's per-frame header work). Every benchmark
// takes the payload size as its argument (RC SEND_ONLY frames, 58 bytes of headers + ICRC around it) and
// reports bytes/s over the whole frame, so the figures compare directly. tools/bench prints the table.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/bench/crc_backends.h"
#include "wire/packet.h"

using namespace urxe::wire;
using namespace urxe::bench;

namespace {

FrameSpec spec() {
  FrameSpec s;
  s.src_ip = gid_from_ipv4({10, 0, 0, 1});
  s.dst_ip = gid_from_ipv4({10, 0, 0, 2});
  s.bth.opcode = op::kRc | op::send_only;
  s.bth.dqpn = 0x11;
  s.bth.psn = 1;
  return s;
}

std::vector<uint8_t> payload(int64_t n) {
  std::vector<uint8_t> p(static_cast<size_t>(n));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 13 + 7);
  return p;
}

std::vector<uint8_t> frame(int64_t payload_len) {
  const auto p = payload(payload_len);
  std::vector<uint8_t> f(frame_size(spec(), static_cast<uint32_t>(p.size())));
  if (build_frame(f, spec(), p) != f.size()) std::abort();
  return f;
}

void finish(benchmark::State& st, size_t bytes) {
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(bytes));
  st.counters["frame_bytes"] = static_cast<double>(bytes);
}

void bm_memcpy(benchmark::State& st) {
  const auto f = frame(st.range(0));
  std::vector<uint8_t> dst(f.size());
  for (auto _ : st) {
    std::memcpy(dst.data(), f.data(), f.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  finish(st, f.size());
}

void bm_crc32(benchmark::State& st, CrcImpl impl) {
  const auto f = frame(st.range(0));
  for (auto _ : st) {
    uint32_t c = crc32_with(impl, 0, f.data(), f.size());
    benchmark::DoNotOptimize(c);
  }
  finish(st, f.size());
}

void bm_icrc(benchmark::State& st, CrcImpl impl) {
  const auto f = frame(st.range(0));
  const ByteSpan l3(f.data() + kEthLen, f.size() - kEthLen - kIcrcLen);
  uint32_t want = load_le32(f.data() + f.size() - kIcrcLen);
  for (auto _ : st) {
    uint32_t c = compute_icrc(l3, 4, kIpv4MinLen, impl);
    if (c != want) st.SkipWithError("ICRC mismatch");
    benchmark::DoNotOptimize(c);
  }
  finish(st, f.size());
}

void bm_parse(benchmark::State& st, bool verify) {
  const auto f = frame(st.range(0));
  const ParseOptions opt{.verify_icrc = verify, .verify_checksums = true};
  Packet p;
  for (auto _ : st) {
    if (parse_frame(f, p, opt) != ParseError::ok) st.SkipWithError("parse failed");
    benchmark::DoNotOptimize(p.payload_len);
  }
  finish(st, f.size());
}

void bm_build(benchmark::State& st) {
  const auto p = payload(st.range(0));
  std::vector<uint8_t> out(frame_size(spec(), static_cast<uint32_t>(p.size())));
  const FrameSpec s = spec();
  for (auto _ : st) {
    uint32_t n = build_frame(out, s, p);
    benchmark::DoNotOptimize(n);
    benchmark::ClobberMemory();
  }
  finish(st, out.size());
}

// What the engine does per frame when the port fills the ICRC (the same-host path) or before it computes
// it: frame_size, then the Ethernet, IPv4, UDP and BTH headers (build_headers); no payload copy, no ICRC.
void bm_build_headers(benchmark::State& st) {
  const FrameSpec s = spec();
  const auto len = static_cast<uint32_t>(st.range(0));
  std::vector<uint8_t> out(frame_size(s, len));
  FrameLayout layout;
  for (auto _ : st) {
    const uint32_t n = frame_size(s, len);
    if (!build_headers(MutByteSpan(out.data(), n), s, len, layout)) st.SkipWithError("build failed");
    benchmark::DoNotOptimize(layout.payload_offset);
    benchmark::ClobberMemory();
  }
  finish(st, out.size());
}

template <class F>
void add(const std::string& name, F&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))->Arg(64)->Arg(1024)->Arg(4096);
}

}  // namespace

int main(int argc, char** argv) {
  add("memcpy", bm_memcpy);
  for (CrcImpl impl : {CrcImpl::fold, CrcImpl::isal, CrcImpl::zlib, CrcImpl::table}) {
    add(std::string("crc32.") + crc_impl_name(impl), [impl](benchmark::State& st) { bm_crc32(st, impl); });
    add(std::string("icrc.") + crc_impl_name(impl), [impl](benchmark::State& st) { bm_icrc(st, impl); });
  }
  add("parse", [](benchmark::State& st) { bm_parse(st, false); });
  add("parse+icrc", [](benchmark::State& st) { bm_parse(st, true); });
  add("build_frame", bm_build);
  add("build_headers", bm_build_headers);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
