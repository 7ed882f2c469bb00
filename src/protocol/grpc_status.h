// gRPC statuses as Status values, for the client side of every service.
#pragma once

#include "common/status.h"

namespace grpc {
class Status;
}

namespace claw {

// UNAVAILABLE and DEADLINE_EXCEEDED become Unavailable ("coordinator
// unreachable: ..."); other codes map to their namesakes.
Status FromGrpc(const grpc::Status& st);

}  // namespace claw
