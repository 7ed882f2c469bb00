// The agent's local control socket, <state>/control.sock: what `claw agent
// pause | finish | resume | status` speak. Unix-domain, mode 0600, and the
// agent answers only a peer running as its own user (or root), so another
// user of the machine — or anything on the network — can neither pause the
// agent nor read its state. One request per connection: a command word and
// a newline; the answer is one line of JSON, the agent's status.
#pragma once

#include <string>

#include "common/status.h"

namespace claw {

inline constexpr const char* kAgentControlSocket = "control.sock";

// Sends `command` (pause, finish, resume, status) to the agent running on
// `state_dir` and returns its answer. Unavailable when no agent listens
// there; PermissionDenied when it is not ours to control.
Result<std::string> SendAgentControl(const std::string& state_dir, const std::string& command);

}  // namespace claw
