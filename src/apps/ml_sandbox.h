// The sandboxed ML runner: where users' TorchScript modules run.
//
// A TorchScript module is its author's code, and TorchScript can read and
// write files (torch.from_file, torch.save), so a user's module never runs
// in a worker, the agent or the coordinator. A task that trains one stages
// its inputs (the module, the data) in a scratch directory and starts
// `claw __ml-run` under the sandbox of exec tasks (sandbox/sandbox.h: no
// network, read-only system, only the scratch directory writable, memory,
// CPU and time limits), with the claw binary and the ML library bound in
// read-only. The runner reads /work/request.json, calls the ML library,
// and writes /work/result.json and its files under /work/out/. What comes
// back is treated as any untrusted output: sizes bounded, JSON checked,
// only regular files imported, each hashed into the blob cache.
// (ADR 0008.)
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/app.h"
#include "sandbox/sandbox.h"

namespace claw {

struct MlSandboxRun {
  nlohmann::json request;                     // for the runner (request.json)
  std::map<std::string, std::string> inputs;  // path in the scratch directory -> blob hash
  std::vector<std::string> outputs;           // paths under out/ to keep as blobs, if made
  SandboxLimits limits;
};

struct MlSandboxOutput {
  nlohmann::json result;  // the runner's result.json (checked to be an object)
  // Output path -> {"sha256", "size"} of the blob it became.
  std::map<std::string, nlohmann::json> files;
};

// The sandbox's limits for a task of a user's module: `timeout_s` of wall
// time, `threads` cores' worth of CPU time over it, `memory_mb`; each no
// more than the contributor's caps (ctx.caps).
SandboxLimits MlLimits(uint64_t timeout_s, uint64_t threads, uint64_t memory_mb, const RunContext& ctx);

// Runs the request in the sandbox. An error names what failed: the
// runner's own message (the module's error, a contract it breaks, data it
// cannot read), a limit it hit, or the sandbox.
Result<MlSandboxOutput> RunMlSandboxed(const MlSandboxRun& run, const RunContext& ctx);

// The body of `claw __ml-run` (inside the sandbox; the working directory is
// the scratch directory): 0 when result.json says ok, 2 when it holds an
// error.
int MlRunMain();

}  // namespace claw
