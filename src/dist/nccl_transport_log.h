// defines: NcclDebugLog / plan_nccl_debug_log (where NCCL's INFO log goes, so that the rank log can
// name the transport NCCL chose), nccl_debug_env, summarize_nccl_transports (that name, out of the
// log's lines).
// NCCL has no API that says which transport a communicator uses between two ranks (P2P over NVLink
// or PCIe, shared memory, the network); its INFO log says it, one line per connection ("Channel 00/0 :
// 0[0] -> 1[1] via P2P/CUMEM/read"). Needs neither CUDA nor NCCL: tested on CPU.
#pragma once

#include "dist/bootstrap.h"  // defines: EnvMap

#include <string>
#include <utility>
#include <vector>

namespace moco::dist {

struct NcclDebugLog {
  // To set before NCCL's first call in the process: it reads its debug settings once.
  std::vector<std::pair<std::string, std::string>> set;
  std::string file;      // NCCL's log, to read the transport from; empty when there is none
  std::string why_none;  // when `file` is empty: why, for the rank log
};

// What to do for a rank whose NCCL log may go to `file` (in the run folder; "" when there is none),
// given NCCL's variables in `env`, and `host` and `pid`, which NCCL puts for %h and %p in
// NCCL_DEBUG_FILE:
//  - NCCL_DEBUG unset: NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,P2P,NET unless set, NCCL_DEBUG_FILE=
//    `file` unless set (the user's file is read then); nothing without a file, since NCCL would
//    print its INFO lines on stdout;
//  - NCCL_DEBUG=INFO or TRACE with NCCL_DEBUG_FILE: that file is read;
//  - else nothing is set or read (NCCL_DEBUG=INFO without a file prints the lines on stdout).
// Pure.
NcclDebugLog plan_nccl_debug_log(const EnvMap& env, const std::string& file, const std::string& host, int pid);

// NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE from this process's environment.
EnvMap nccl_debug_env();

// The transports in NCCL's log text as seen from `rank`, in the order they first appear, e.g.
// "P2P/CUMEM/read with rank 1 (4 connections); NET/IB/0/GDRDMA with ranks 2, 3 (8 connections);
// network IB". Empty when the text holds no connection line. Pure.
std::string summarize_nccl_transports(const std::string& log_text, int rank);

}  // namespace moco::dist
