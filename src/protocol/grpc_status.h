// gRPC statuses as Status values, for the client side of every service.
#pragma once

#include <string>

#include "common/status.h"

namespace grpc {
class Status;
}

namespace claw {

// How a caller connects to the coordinator, for advice when it cannot.
enum class Transport { kUnknown, kPlaintext, kTls };

// UNAVAILABLE and DEADLINE_EXCEEDED become Unavailable ("coordinator
// unreachable: ..." with DescribeUnreachable's advice); other codes map to
// their namesakes.
Status FromGrpc(const grpc::Status& st, Transport transport = Transport::kUnknown);

// gRPC's message for a call that reached no coordinator, followed by what to
// do where the cause is recognisable: a TLS client on a plaintext port, a
// plaintext client on a TLS port, a certificate from another CA.
std::string DescribeUnreachable(const grpc::Status& st, Transport transport);

}  // namespace claw
