// Small file helpers shared by the coordinator and the agent.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace claw {

// Writes `content` to `path` through a temporary file and a rename, so a
// reader sees the old file or the new one, never half of one; the file gets
// `mode` (e.g. 0600 for keys and tokens) before it appears under its name.
Status WriteFileAtomically(const std::string& path, const std::string& content, mode_t mode);

// The whole file; NotFound naming it when it cannot be read.
Result<std::string> ReadWholeFile(const std::string& path);

// Closes every descriptor from `first` up (close_range where there is one).
// Async-signal-safe: for a child between fork and exec.
void CloseFrom(int first) noexcept;

}  // namespace claw
