#include "agent/framing.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace claw {
namespace {

Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Unavailable(std::string("pipe write: ") + strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Unavailable("pipe closed");
    if (r < 0) return Unavailable(std::string("pipe read: ") + strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

}  // namespace

Status WriteFrame(int fd, const google::protobuf::MessageLite& msg) {
  std::string buf(4, '\0');
  if (!msg.AppendToString(&buf)) return Internal("cannot serialize frame");
  uint32_t n = static_cast<uint32_t>(buf.size() - 4);
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return WriteAll(fd, buf.data(), buf.size());
}

Status ReadFrame(int fd, google::protobuf::MessageLite* msg) {
  unsigned char hdr[4];
  CLAW_RETURN_IF_ERROR(ReadAll(fd, reinterpret_cast<char*>(hdr), 4));
  uint32_t n = hdr[0] | (hdr[1] << 8) | (hdr[2] << 16) | (static_cast<uint32_t>(hdr[3]) << 24);
  if (n > kMaxFrameBytes) return InvalidArgument("frame of " + std::to_string(n) + " bytes");
  std::string buf(n, '\0');
  CLAW_RETURN_IF_ERROR(ReadAll(fd, buf.data(), n));
  if (!msg->ParseFromString(buf)) return InvalidArgument("malformed frame");
  return Status::Ok();
}

}  // namespace claw
