// gRPC BlobService (claw.proto): uploads and downloads of content-addressed
// blobs, for users (bearer token) and agents (a signed claw-agent header).
//
// It uses gRPC's synchronous API: a transfer is a loop of blocking file
// reads or writes, which belong on gRPC's sync thread pool rather than on
// the callback threads that serve agent sessions. Bytes go straight between
// the stream and the BlobDir, never whole into memory; an upload is
// published only when it hashes to the name it declared (BlobDir::Writer).
#pragma once

#include <grpcpp/grpcpp.h>

#include "claw.grpc.pb.h"
#include "coordinator/coordinator.h"

namespace claw {

class BlobServiceImpl final : public v1::BlobService::Service {
 public:
  // `insecure_local`: users need no token (agents still sign).
  BlobServiceImpl(Coordinator* c, bool insecure_local)
      : coordinator_(c), insecure_local_(insecure_local) {}

  grpc::Status PutBlob(grpc::ServerContext* ctx, grpc::ServerReader<v1::BlobChunk>* reader,
                       v1::BlobInfo* info) override;
  grpc::Status GetBlob(grpc::ServerContext* ctx, const v1::BlobRef* ref,
                       grpc::ServerWriter<v1::BlobChunk>* writer) override;

 private:
  // Who is calling about `hash`: a user, or an agent whose signature checks
  // out. An error when neither.
  struct Caller {
    std::optional<UserRecord> user;  // set for a user
    AgentId agent;                   // set for an agent
  };
  Result<Caller> Identify(const grpc::ServerContext& ctx, const std::string& hash);

  Coordinator* coordinator_;
  bool insecure_local_;
};

}  // namespace claw
