// The client side of BlobService (claw.proto): fetches and uploads blobs,
// checking every byte against the blob's name (its SHA-256) on the way in.
// Used by agents (calls signed with the agent's key) and by the CLI (calls
// carrying an API token); how a call authenticates is passed in.
//
// Thread-compatible: one BlobClient per thread (the channel may be shared).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "common/blobs.h"
#include "common/clock.h"
#include "common/status.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace claw {

class BlobClient {
 public:
  // Adds a call's credentials (metadata) for a call about blob `sha256`.
  using Authenticate = std::function<void(grpc::ClientContext& ctx, const std::string& sha256)>;

  // `stop`, if given, ends a transfer in progress (Unavailable) once it is
  // set: a process shutting down does not wait out a large download.
  BlobClient(std::shared_ptr<grpc::Channel> channel, Authenticate authenticate,
             const std::atomic<bool>* stop = nullptr);
  ~BlobClient();

  // Makes sure the blob is in `dir`, downloading it if needed. The download
  // is published only if it hashes to `sha256` (InvalidArgument if not).
  Status Fetch(const std::string& sha256, const BlobDir& dir);
  // Downloads the blob to the file `path` (replaced atomically), checked.
  Status Download(const std::string& sha256, const std::string& path);
  // Uploads the blob `sha256` from `dir`.
  Status Upload(const std::string& sha256, const BlobDir& dir);
  // Uploads the regular file at `path`; returns its SHA-256.
  Result<std::string> UploadFile(const std::string& path);

 private:
  // Streams the blob to `sink` chunk by chunk (the first call also carries
  // the announced size); checks the hash at the end.
  Status Get(const std::string& sha256,
             const std::function<Status(std::string_view data)>& sink);
  // Uploads what `source` produces, announced as `sha256` of `size` bytes.
  Status Put(const std::string& sha256, uint64_t size,
             const std::function<Status(const std::function<bool(std::string_view)>&)>& source);

  bool Stopped() const { return stop_ && stop_->load(); }

  struct Stub;
  std::unique_ptr<Stub> stub_;
  Authenticate authenticate_;
  const std::atomic<bool>* stop_;
};

// An Authenticate for agents: signs BlobCallMessage with the agent's key.
BlobClient::Authenticate AgentBlobAuth(std::string agent_id, std::string secret_key,
                                       const Clock* clock);
// An Authenticate for users: `authorization: Bearer <token>` (none if empty).
BlobClient::Authenticate TokenBlobAuth(std::string token);

}  // namespace claw
