#include "coordinator/blob_service.h"

#include <charconv>

#include "common/crypto.h"
#include "coordinator/grpc_services.h"

namespace claw {

Result<BlobServiceImpl::Caller> BlobServiceImpl::Identify(const grpc::ServerContext& ctx,
                                                          const std::string& hash) {
  std::string_view agent = Metadata(ctx, "claw-agent");
  if (agent.empty()) {
    auto user = CallingUser(ctx, coordinator_, insecure_local_);
    if (!user.ok()) return user.status();
    return Caller{std::move(user).value(), ""};
  }
  std::string_view time = Metadata(ctx, "claw-time");
  int64_t unix_ms = 0;
  auto [end, ec] = std::from_chars(time.data(), time.data() + time.size(), unix_ms);
  if (ec != std::errc() || end != time.data() + time.size()) {
    return PermissionDenied("claw-time: missing or not a number");
  }
  auto signature = FromHex(Metadata(ctx, "claw-signature"));
  if (!signature.ok()) return PermissionDenied("claw-signature: missing or not hex");
  CLAW_RETURN_IF_ERROR(coordinator_->AuthenticateAgentBlobCall(std::string(agent), unix_ms,
                                                               *signature, hash));
  return Caller{std::nullopt, std::string(agent)};
}

grpc::Status BlobServiceImpl::PutBlob(grpc::ServerContext* ctx,
                                      grpc::ServerReader<v1::BlobChunk>* reader,
                                      v1::BlobInfo* info) {
  const BlobDir* blobs = coordinator_->blobs();
  if (!blobs) return ToGrpc(FailedPrecondition("this coordinator keeps no blobs"));
  v1::BlobChunk chunk;
  if (!reader->Read(&chunk)) return ToGrpc(InvalidArgument("upload: no chunks"));
  const std::string hash = chunk.sha256();
  if (!IsBlobHash(hash)) {
    return ToGrpc(InvalidArgument("sha256: the first chunk must name the blob (64 lowercase hex "
                                  "digits of its SHA-256)"));
  }
  auto caller = Identify(*ctx, hash);
  if (!caller.ok()) return ToGrpc(caller.status());
  if (!caller->user) {
    Status may = coordinator_->MayAgentWriteBlob(caller->agent);
    if (!may.ok()) return ToGrpc(may);
  }
  const uint64_t size = chunk.size();
  if (size > coordinator_->max_blob_bytes()) {
    return ToGrpc(ResourceExhausted("size: " + std::to_string(size) + " bytes is more than the " +
                                    std::to_string(coordinator_->max_blob_bytes()) + " allowed"));
  }
  info->set_sha256(hash);
  info->set_size(size);
  auto record = [&]() -> grpc::Status {
    if (caller->user) return ToGrpc(coordinator_->BlobUploaded(hash, *caller->user));
    return grpc::Status::OK;
  };
  // An agent's upload of a blob already here needs no bytes (its writes
  // end). A user must send them all the same: knowing a hash must not be
  // enough to become an owner of someone else's file.
  if (!caller->user && blobs->Has(hash)) return grpc::Status::OK;
  auto writer = blobs->Begin(hash, size);
  if (!writer.ok()) return ToGrpc(writer.status());
  do {
    if (chunk.data().size() > kBlobChunkBytes) {
      return ToGrpc(InvalidArgument("data: a chunk is larger than 1 MiB"));
    }
    Status st = (*writer)->Write(chunk.data());
    if (!st.ok()) return ToGrpc(st);
  } while (reader->Read(&chunk));
  auto written = (*writer)->Commit();
  if (!written.ok()) return ToGrpc(written.status());
  if (!caller->user) coordinator_->CountAgentBlobBytes(0, *written);
  if (*written != size) {
    // The hash matched, so the content is right; the declared size was not.
    return ToGrpc(InvalidArgument("size: declared " + std::to_string(size) + ", sent " +
                                  std::to_string(*written)));
  }
  return record();
}

grpc::Status BlobServiceImpl::GetBlob(grpc::ServerContext* ctx, const v1::BlobRef* ref,
                                      grpc::ServerWriter<v1::BlobChunk>* writer) {
  const BlobDir* blobs = coordinator_->blobs();
  if (!blobs) return ToGrpc(FailedPrecondition("this coordinator keeps no blobs"));
  const std::string& hash = ref->sha256();
  if (!IsBlobHash(hash)) {
    return ToGrpc(InvalidArgument("sha256: not a blob name (64 lowercase hex digits)"));
  }
  auto caller = Identify(*ctx, hash);
  if (!caller.ok()) return ToGrpc(caller.status());
  Status may = caller->user ? coordinator_->MayReadBlob(hash, *caller->user)
                            : coordinator_->MayAgentReadBlob(hash, caller->agent);
  if (!may.ok()) return ToGrpc(may);
  auto size = blobs->Size(hash);
  if (!size.ok()) return ToGrpc(size.status());
  v1::BlobChunk chunk;
  chunk.set_sha256(hash);
  chunk.set_size(*size);
  bool first = true, sent = true;
  Status st = blobs->Read(hash, [&](std::string_view data) {
    if (!first) chunk.Clear();
    first = false;
    chunk.set_data(data.data(), data.size());
    sent = writer->Write(chunk);
    return sent;
  });
  if (!st.ok()) return ToGrpc(st);
  if (first) writer->Write(chunk);  // an empty blob: still one chunk with the name
  if (!caller->user && sent) coordinator_->CountAgentBlobBytes(*size, 0);
  return sent ? grpc::Status::OK : grpc::Status::CANCELLED;
}

}  // namespace claw
