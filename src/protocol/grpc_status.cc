#include "protocol/grpc_status.h"

#include <grpcpp/grpcpp.h>

namespace claw {

Status FromGrpc(const grpc::Status& st) {
  using C = grpc::StatusCode;
  switch (st.error_code()) {
    case C::OK: return Status::Ok();
    case C::INVALID_ARGUMENT: return InvalidArgument(st.error_message());
    case C::NOT_FOUND: return NotFound(st.error_message());
    case C::ALREADY_EXISTS: return {StatusCode::kAlreadyExists, st.error_message()};
    case C::FAILED_PRECONDITION: return FailedPrecondition(st.error_message());
    case C::PERMISSION_DENIED: return PermissionDenied(st.error_message());
    case C::UNAUTHENTICATED: return Unauthenticated(st.error_message());
    case C::RESOURCE_EXHAUSTED: return ResourceExhausted(st.error_message());
    case C::UNAVAILABLE:
    case C::DEADLINE_EXCEEDED: return Unavailable("coordinator unreachable: " + st.error_message());
    default: return Internal(st.error_message());
  }
}

}  // namespace claw
