// PDs, memory regions and memory windows as the engine keeps them (EngineImpl::pds, mrs, mws). Internal,
// as internal.h.
#pragma once
#include <cstdint>

#include "engine/verbs.h"

namespace urxe::engine {

struct Pd {
  bool used = false;
  uint32_t refs = 0;
};

// A memory region or a memory window: both live in EngineImpl::mrs (MRs at indices 1..max_mr, windows
// after them) and share one key space (index << 8 | key). A window's slot holds its bound part of an MR
// (addr/iova/length/access), so a remote access through it passes the MR checks; `is_mw` is
// tested where an MR's valid bit once was, and the rest of a window is in EngineImpl::mws: an app without
// windows pays nothing for them.
struct Mr {
  bool used = false;
  bool is_mw = false;
  uint16_t num_mw = 0;  // MR: windows bound to it (dereg and rereg refused while any)
  uint32_t pd = 0;
  uint8_t* addr = nullptr;
  uint64_t length = 0;
  uint64_t iova = 0;
  uint32_t access = 0;
  uint8_t key = 0;
};

// The rest of a memory window (EngineImpl::mws, by its slot index less mw_base).
struct Mw {
  MwType type = MW_TYPE_1;
  bool valid = false;  // VALID (type 1 always; type 2 while bound), else FREE
  uint32_t mr = 0;     // the index of the MR it is bound to (0: unbound)
  uint32_t qpn = 0;    // type 2: the QP that bound it, the only one it opens memory to
};

// `window`: the key names a memory window, which mr_resolve does not resolve (rkey_resolve does).
enum class MrError : uint8_t { ok, bad_key, bad_pd, bad_access, bad_bounds, window, not_mapped };

}  // namespace urxe::engine
