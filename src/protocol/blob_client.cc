#include "protocol/blob_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <grpcpp/grpcpp.h>

#include "claw.grpc.pb.h"
#include "common/crypto.h"
#include "protocol/grpc_status.h"
#include "protocol/signing.h"

namespace claw {
namespace {

Status FromGrpc(const grpc::Status& st, const std::string& what) {
  Status s = claw::FromGrpc(st);
  return s.ok() ? s : Status(s.code(), what + ": " + s.message());
}

constexpr auto kTransferDeadline = std::chrono::hours(1);

}  // namespace

struct BlobClient::Stub {
  std::unique_ptr<v1::BlobService::Stub> stub;
};

BlobClient::BlobClient(std::shared_ptr<grpc::Channel> channel, Authenticate authenticate,
                       const std::atomic<bool>* stop)
    : stub_(new Stub{v1::BlobService::NewStub(channel)}),
      authenticate_(std::move(authenticate)),
      stop_(stop) {}

BlobClient::~BlobClient() = default;

Status BlobClient::Get(const std::string& sha256,
                       const std::function<Status(std::string_view)>& sink) {
  if (!IsBlobHash(sha256)) return InvalidArgument("not a blob name: " + sha256.substr(0, 80));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kTransferDeadline);
  authenticate_(ctx, sha256);
  v1::BlobRef ref;
  ref.set_sha256(sha256);
  auto reader = stub_->stub->GetBlob(&ctx, ref);
  v1::BlobChunk chunk;
  Sha256 sha;
  uint64_t got = 0;
  Status st = Status::Ok();
  while (st.ok() && reader->Read(&chunk)) {
    sha.Update(chunk.data());
    got += chunk.data().size();
    st = Stopped() ? Unavailable("blob " + sha256 + ": stopped") : sink(chunk.data());
  }
  if (!st.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return st;
  }
  CLAW_RETURN_IF_ERROR(FromGrpc(reader->Finish(), "blob " + sha256));
  std::string actual = sha.FinishHex();
  if (actual != sha256) {
    return InvalidArgument("blob " + sha256 + ": received " + std::to_string(got) +
                           " bytes that hash to " + actual + "; refused");
  }
  return Status::Ok();
}

Status BlobClient::Fetch(const std::string& sha256, const BlobDir& dir) {
  if (dir.Has(sha256)) return Status::Ok();
  auto writer = dir.Begin(sha256, UINT64_MAX);
  if (!writer.ok()) return writer.status();
  CLAW_RETURN_IF_ERROR(Get(sha256, [&](std::string_view d) { return (*writer)->Write(d); }));
  auto committed = (*writer)->Commit();  // checks the hash once more
  return committed.ok() ? Status::Ok() : committed.status();
}

Status BlobClient::Download(const std::string& sha256, const std::string& path) {
  std::string tmp = path + ".claw-" + RandomHex(4);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot create " + tmp + ": " + strerror(errno));
  Status st = Get(sha256, [&](std::string_view d) -> Status {
    while (!d.empty()) {
      ssize_t n = write(fd, d.data(), d.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Unavailable("write " + tmp + ": " + strerror(errno));
      d.remove_prefix(static_cast<size_t>(n));
    }
    return Status::Ok();
  });
  close(fd);
  if (st.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    st = Unavailable("cannot create " + path + ": " + strerror(errno));
  }
  if (!st.ok()) unlink(tmp.c_str());
  return st;
}

Status BlobClient::Put(
    const std::string& sha256, uint64_t size,
    const std::function<Status(const std::function<bool(std::string_view)>&)>& source) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kTransferDeadline);
  authenticate_(ctx, sha256);
  v1::BlobInfo info;
  auto writer = stub_->stub->PutBlob(&ctx, &info);
  v1::BlobChunk chunk;
  chunk.set_sha256(sha256);
  chunk.set_size(size);
  bool first = true, open = true;
  Status st = source([&](std::string_view d) {
    if (!first) chunk.Clear();
    first = false;
    chunk.set_data(d.data(), d.size());
    // false: the server ended the call (it has the blob, or refused it).
    open = !Stopped() && writer->Write(chunk);
    return open;
  });
  if (Stopped()) {
    ctx.TryCancel();
    writer->Finish();
    return Unavailable("upload of " + sha256 + ": stopped");
  }
  if (first && open) writer->Write(chunk);  // an empty blob: one chunk with the name
  writer->WritesDone();
  grpc::Status done = writer->Finish();
  CLAW_RETURN_IF_ERROR(st);
  return FromGrpc(done, "upload of " + sha256);
}

Status BlobClient::Upload(const std::string& sha256, const BlobDir& dir) {
  auto size = dir.Size(sha256);
  if (!size.ok()) return size.status();
  return Put(sha256, *size, [&](const std::function<bool(std::string_view)>& send) {
    return dir.Read(sha256, send);
  });
}

Result<std::string> BlobClient::UploadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open " + path + ": " + strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument(path + " is not a regular file");
  }
  auto read_all = [&](const std::function<bool(std::string_view)>& sink) -> Status {
    if (lseek(fd, 0, SEEK_SET) != 0) return Unavailable("cannot rewind " + path);
    std::string buf(kBlobChunkBytes, '\0');
    for (;;) {
      ssize_t n = read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Unavailable("read " + path + ": " + strerror(errno));
      if (n == 0 || !sink(std::string_view(buf.data(), static_cast<size_t>(n)))) {
        return Status::Ok();
      }
    }
  };
  Sha256 sha;
  Status hashed = read_all([&](std::string_view d) {
    sha.Update(d);
    return true;
  });
  std::string hash = sha.FinishHex();
  Status sent = hashed.ok() ? Put(hash, static_cast<uint64_t>(st.st_size), read_all) : hashed;
  close(fd);
  if (!sent.ok()) return sent;
  return hash;
}

BlobClient::Authenticate AgentBlobAuth(std::string agent_id, std::string secret_key,
                                       const Clock* clock) {
  return [agent_id = std::move(agent_id), key = std::move(secret_key), clock](
             grpc::ClientContext& ctx, const std::string& hash) {
    int64_t now = clock->Now().unix_ms();
    ctx.AddMetadata("claw-agent", agent_id);
    ctx.AddMetadata("claw-time", std::to_string(now));
    ctx.AddMetadata("claw-signature", ToHex(Sign(BlobCallMessage(agent_id, now, hash), key)));
  };
}

BlobClient::Authenticate TokenBlobAuth(std::string token) {
  return [token = std::move(token)](grpc::ClientContext& ctx, const std::string&) {
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  };
}

}  // namespace claw
