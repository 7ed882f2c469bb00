#include "protocol/grpc_status.h"

#include <grpcpp/grpcpp.h>

namespace claw {

namespace {

bool Has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

}  // namespace

std::string DescribeUnreachable(const grpc::Status& st, Transport transport) {
  const std::string& m = st.error_message();
  std::string advice;
  if (Has(m, "wrong version number") || Has(m, "packet length too long") ||
      Has(m, "record layer failure")) {
    advice = "the coordinator does not speak TLS here (started with --insecure-local?): "
             "connect without --ca (and unset CLAW_CA)";
  } else if (Has(m, "certificate verify failed") || Has(m, "CERTIFICATE_VERIFY_FAILED")) {
    advice = "the coordinator's certificate is not signed by the CA given with --ca (or "
             "CLAW_CA): use the ca.pem from the coordinator's data directory";
  } else if (transport == Transport::kPlaintext &&
             (Has(m, "Socket closed") || Has(m, "Connection reset") ||
              Has(m, "before receiving SETTINGS frame") || Has(m, "Broken pipe"))) {
    advice = "if the coordinator uses TLS (the default), pin its CA: --ca <data>/ca.pem "
             "(or CLAW_CA)";
  } else if (Has(m, "Connection refused")) {
    advice = "nothing listens at that address: is the coordinator running, and is the "
             "address (--coordinator, -c or CLAW_COORDINATOR) right?";
  }
  return advice.empty() ? m : m + " — " + advice;
}

Status FromGrpc(const grpc::Status& st, Transport transport) {
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
    case C::DEADLINE_EXCEEDED:
      return Unavailable("coordinator unreachable: " + DescribeUnreachable(st, transport));
    default: return Internal(st.error_message());
  }
}

}  // namespace claw
