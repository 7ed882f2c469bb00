#include "tensors/npz.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace claw::tensors {
namespace {

// Record signatures and fixed sizes (PKWARE's APPNOTE.TXT, 4.3).
constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22, kEnd64Size = 56, kLocatorSize = 20;
constexpr uint16_t kZip64Extra = 0x0001;
constexpr uint16_t kStored = 0, kDeflated = 8;

// Little-endian fields of `bytes` at `at`, which the caller has checked.
uint64_t Le(std::string_view bytes, uint64_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<uint64_t>(i)]);
  return v;
}

bool PlainName(std::string_view name) {
  if (name.size() < 5 || name.size() > 255 || name.substr(name.size() - 4) != ".npy" || name[0] == '.') {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

struct Entry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, offset = 0;
};

// Where the central directory is and how many entries it has: from the end
// record, or the ZIP64 end record it points to.
Status FindDirectory(std::string_view z, uint64_t* dir, uint64_t* dir_size, uint64_t* count) {
  if (z.size() < kEndSize) return InvalidArgument("npz: not a ZIP archive (too short)");
  // The end record is the last thing but a comment of at most 65,535 bytes.
  uint64_t lowest = z.size() > kEndSize + 65535 ? z.size() - kEndSize - 65535 : 0;
  uint64_t at = z.size() - kEndSize;
  for (;; --at) {
    if (Le(z, at, 4) == kEndSig && at + kEndSize + Le(z, at + 20, 2) == z.size()) break;
    if (at == lowest) return InvalidArgument("npz: not a ZIP archive (no end of central directory)");
  }
  if (Le(z, at + 4, 2) != 0 || Le(z, at + 6, 2) != 0) return InvalidArgument("npz: a split archive");
  *count = Le(z, at + 10, 2);
  *dir_size = Le(z, at + 12, 4);
  *dir = Le(z, at + 16, 4);
  if (*count == 0xffff || *dir_size == 0xffffffff || *dir == 0xffffffff) {
    if (at < kLocatorSize || Le(z, at - kLocatorSize, 4) != kLocator64Sig) {
      return InvalidArgument("npz: a ZIP64 archive without its end-record locator");
    }
    uint64_t end64 = Le(z, at - kLocatorSize + 8, 8);
    if (end64 > z.size() || z.size() - end64 < kEnd64Size || Le(z, end64, 4) != kEnd64Sig) {
      return InvalidArgument("npz: the ZIP64 end record is not where its locator says");
    }
    *count = Le(z, end64 + 32, 8);
    *dir_size = Le(z, end64 + 40, 8);
    *dir = Le(z, end64 + 48, 8);
  }
  if (*dir > z.size() || *dir_size > z.size() - *dir) {
    return InvalidArgument("npz: the central directory lies outside the archive");
  }
  return Status::Ok();
}

// One central-directory entry at `*at`, moved past it.
Result<Entry> ReadEntry(std::string_view z, uint64_t end, uint64_t* at) {
  if (end - *at < kCentralSize || Le(z, *at, 4) != kCentralSig) {
    return InvalidArgument("npz: a central directory entry is malformed");
  }
  Entry e;
  e.flags = static_cast<uint16_t>(Le(z, *at + 8, 2));
  e.method = static_cast<uint16_t>(Le(z, *at + 10, 2));
  e.crc = static_cast<uint32_t>(Le(z, *at + 16, 4));
  e.compressed = Le(z, *at + 20, 4);
  e.size = Le(z, *at + 24, 4);
  const uint64_t name_len = Le(z, *at + 28, 2), extra_len = Le(z, *at + 30, 2), comment_len = Le(z, *at + 32, 2);
  e.offset = Le(z, *at + 42, 4);
  uint64_t next = *at + kCentralSize + name_len + extra_len + comment_len;
  if (next > end) return InvalidArgument("npz: a central directory entry runs past the directory");
  e.name = std::string(z.substr(*at + kCentralSize, name_len));
  // ZIP64: the sizes and offset that do not fit 32 bits, in this order.
  uint64_t x = *at + kCentralSize + name_len, x_end = x + extra_len;
  while (x_end - x >= 4) {
    uint64_t id = Le(z, x, 2), len = Le(z, x + 2, 2);
    if (len > x_end - x - 4) return InvalidArgument("npz: member " + e.name.substr(0, 64) + ": a malformed extra field");
    if (id == kZip64Extra) {
      uint64_t f = x + 4, f_end = f + len;
      for (uint64_t* field : {&e.size, &e.compressed, &e.offset}) {
        if (*field != 0xffffffff) continue;
        if (f_end - f < 8) return InvalidArgument("npz: member " + e.name.substr(0, 64) + ": a short ZIP64 field");
        *field = Le(z, f, 8);
        f += 8;
      }
    }
    x += 4 + len;
  }
  *at = next;
  return e;
}

// The member's bytes: stored, or inflated to exactly its declared size.
Result<std::string> Extract(std::string_view z, const Entry& e) {
  const std::string who = "npz: member " + e.name;
  if (e.offset > z.size() || z.size() - e.offset < kLocalSize || Le(z, e.offset, 4) != kLocalSig) {
    return InvalidArgument(who + ": no local header where the directory says");
  }
  uint64_t data = e.offset + kLocalSize + Le(z, e.offset + 26, 2) + Le(z, e.offset + 28, 2);
  if (data > z.size() || e.compressed > z.size() - data) return InvalidArgument(who + ": its data runs past the archive");
  std::string_view in = z.substr(data, e.compressed);
  std::string out;
  if (e.method == kStored) {
    if (e.compressed != e.size) return InvalidArgument(who + ": stored, but its two sizes differ");
    out.assign(in);
  } else {
    out.resize(e.size);
    z_stream s{};
    if (inflateInit2(&s, -MAX_WBITS) != Z_OK) return Internal("zlib: inflateInit2 failed");
    uint64_t in_left = in.size(), out_at = 0;
    int rc = Z_OK;
    char spare;  // where output beyond the declared size would land
    while (rc == Z_OK) {
      const uInt chunk_in = static_cast<uInt>(std::min<uint64_t>(in_left, 1 << 30));
      s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + (in.size() - in_left)));
      s.avail_in = chunk_in;
      const bool full = out_at == out.size();
      s.next_out = reinterpret_cast<Bytef*>(full ? &spare : out.data() + out_at);
      s.avail_out = full ? 1 : static_cast<uInt>(std::min<uint64_t>(out.size() - out_at, 1 << 30));
      const uInt avail_out = s.avail_out;
      rc = inflate(&s, Z_NO_FLUSH);
      in_left -= chunk_in - s.avail_in;
      if (full && s.avail_out == 0) {
        rc = Z_DATA_ERROR;
        break;
      }
      out_at += avail_out - s.avail_out;  // (Z_BUF_ERROR: no progress, the input ended early)
    }
    inflateEnd(&s);
    if (rc != Z_STREAM_END || out_at != out.size()) {
      return InvalidArgument(who + ": the deflated data does not inflate to its declared " +
                             std::to_string(e.size) + " bytes");
    }
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t at = 0; at < out.size(); at += 1 << 30) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(out.data() + at),
                static_cast<uInt>(std::min<uint64_t>(out.size() - at, 1 << 30)));
  }
  if (static_cast<uint32_t>(crc) != e.crc) return InvalidArgument(who + ": its CRC-32 does not match (damaged)");
  return out;
}

}  // namespace

Result<std::vector<NpzMember>> ReadNpz(std::string_view z, const NpzLimits& limits) {
  uint64_t dir = 0, dir_size = 0, count = 0;
  CLAW_RETURN_IF_ERROR(FindDirectory(z, &dir, &dir_size, &count));
  if (count > limits.max_members) {
    return InvalidArgument("npz: " + std::to_string(count) + " members (at most " +
                           std::to_string(limits.max_members) + ")");
  }
  std::vector<Entry> entries;
  uint64_t at = dir, total = 0;
  std::set<std::string> names;
  for (uint64_t i = 0; i < count; ++i) {
    auto e = ReadEntry(z, dir + dir_size, &at);
    if (!e.ok()) return e.status();
    const std::string who = "npz: member " + e->name.substr(0, 64);
    if (!PlainName(e->name)) {
      return InvalidArgument(who + ": not a plain name ending in .npy (letters, digits, '_', '-', '.')");
    }
    if (!names.insert(e->name).second) return InvalidArgument(who + ": in the archive twice");
    if (e->flags & 1) return InvalidArgument(who + ": encrypted");
    if (e->method != kStored && e->method != kDeflated) {
      return InvalidArgument(who + ": compression method " + std::to_string(e->method) +
                             " (only stored and deflated: numpy.savez, numpy.savez_compressed)");
    }
    if (e->size > limits.max_member_bytes || e->size > limits.max_total_bytes - total) {
      return InvalidArgument(who + ": " + std::to_string(e->size) + " bytes is over the limit");
    }
    total += e->size;
    entries.push_back(std::move(*e));
  }
  std::vector<NpzMember> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) {
    auto bytes = Extract(z, e);
    if (!bytes.ok()) return bytes.status();
    out.push_back({e.name.substr(0, e.name.size() - 4), std::move(*bytes)});
  }
  return out;
}

}  // namespace claw::tensors
