// Length-prefixed protobuf messages over a file descriptor (the agent's pipes
// to its workers): a 4-byte little-endian length, then the message.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace claw {

inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

// Writes the whole frame (retrying short writes). Unavailable on a closed pipe.
Status WriteFrame(int fd, const google::protobuf::MessageLite& msg);
// Reads one frame into `msg`. Unavailable on end of file (peer gone);
// InvalidArgument on a malformed or oversized frame.
Status ReadFrame(int fd, google::protobuf::MessageLite* msg);

}  // namespace claw
