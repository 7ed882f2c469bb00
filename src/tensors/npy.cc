#include "tensors/npy.h"

#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>

#include "common/names.h"
#include "tensors/file_head.h"

namespace claw::tensors {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

// numpy's type codes (without the byte order) for each dtype it has.
constexpr NameTable<DType, 11> kNpyTypes = {{{"f8", DType::kF64},
                                             {"f4", DType::kF32},
                                             {"f2", DType::kF16},
                                             {"i8", DType::kI64},
                                             {"i4", DType::kI32},
                                             {"i2", DType::kI16},
                                             {"i1", DType::kI8},
                                             {"u4", DType::kU32},
                                             {"u2", DType::kU16},
                                             {"u1", DType::kU8},
                                             {"b1", DType::kBool}}};

// Attacker text in a message: short and printable.
std::string Quote(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 24)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "\"" + out + (s.size() > 24 ? "...\"" : "\"");
}

// The header's dict literal, read strictly: string keys; values that are
// strings, True/False or tuples of integers.
class HeaderReader {
 public:
  explicit HeaderReader(std::string_view text) : s_(text) {}

  struct Value {
    enum Kind { kString, kBool, kTuple } kind = kString;
    std::string text;
    bool flag = false;
    std::vector<uint64_t> numbers;
  };

  // Calls `field(key, value)` for each entry; InvalidArgument on a grammar
  // fault or on the first error `field` returns.
  template <typename F>
  Status ReadDict(F&& field) {
    Skip();
    if (!Eat('{')) return Fault("it does not start with {");
    for (;;) {
      Skip();
      if (Eat('}')) break;
      auto key = String();
      if (!key) return Fault("a key is not a quoted string");
      Skip();
      if (!Eat(':')) return Fault("no ':' after '" + *key + "'");
      Skip();
      auto value = ReadValue();
      if (!value && *key == "descr") {
        return InvalidArgument("npy: descr is not a simple dtype (structured arrays are not supported)");
      }
      if (!value) return Fault("the value of '" + *key + "' is not a string, True, False or a tuple of sizes");
      CLAW_RETURN_IF_ERROR(field(*key, *value));
      Skip();
      if (Eat('}')) break;
      if (!Eat(',')) return Fault("no ',' after the value of '" + *key + "'");
    }
    Skip();
    if (at_ != s_.size()) return Fault("text after the closing }");
    return Status::Ok();
  }

 private:
  Status Fault(const std::string& what) const {
    return InvalidArgument("npy header: " + what + " (at byte " + std::to_string(at_) + ")");
  }
  void Skip() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\t')) ++at_;
  }
  bool Eat(char c) {
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool EatWord(std::string_view w) {
    if (s_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }
  std::optional<std::string> String() {
    if (at_ >= s_.size() || (s_[at_] != '\'' && s_[at_] != '"')) return std::nullopt;
    char quote = s_[at_++];
    size_t end = s_.find(quote, at_);
    if (end == std::string_view::npos || end - at_ > 64) return std::nullopt;
    std::string out(s_.substr(at_, end - at_));
    if (out.find('\\') != std::string::npos) return std::nullopt;  // no escapes in a dtype or key
    at_ = end + 1;
    return out;
  }
  std::optional<uint64_t> Number() {
    size_t start = at_;
    uint64_t v = 0;
    while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') {
      if (at_ - start >= 15) return std::nullopt;  // 10^15: far beyond any limit
      v = v * 10 + static_cast<uint64_t>(s_[at_++] - '0');
    }
    if (at_ == start) return std::nullopt;
    if (at_ < s_.size() && s_[at_] == 'L') ++at_;  // Python 2's long
    return v;
  }
  std::optional<Value> ReadValue() {
    Value v;
    if (auto s = String()) {
      v.text = *s;
      return v;
    }
    if (EatWord("True") || EatWord("False")) {
      v.kind = Value::kBool;
      v.flag = s_[at_ - 1] == 'e' && s_[at_ - 2] == 'u';  // "True", not "False"
      return v;
    }
    if (!Eat('(')) return std::nullopt;
    v.kind = Value::kTuple;
    for (;;) {
      Skip();
      if (Eat(')')) return v;
      auto n = Number();
      if (!n || v.numbers.size() >= 64) return std::nullopt;
      v.numbers.push_back(*n);
      Skip();
      if (Eat(')')) return v;
      if (!Eat(',')) return std::nullopt;
    }
  }

  std::string_view s_;
  size_t at_ = 0;
};

Result<DType> NpyDType(const std::string& descr) {
  if (descr.size() == 3) {
    char order = descr[0];
    DType t;
    if (FromName(kNpyTypes, std::string_view(descr).substr(1), &t)) {
      bool one_byte = DTypeSize(t) == 1;
      if (order == '<' || (one_byte && (order == '|' || order == '>' || order == '='))) return t;
      if (order == '>') {
        return InvalidArgument("npy: dtype " + Quote(descr) +
                               " is big-endian; save it little-endian (a.astype('<" +
                               descr.substr(1) + "'))");
      }
    }
  }
  if (!descr.empty() && descr.find('O') != std::string::npos) {
    return InvalidArgument("npy: dtype " + Quote(descr) +
                           " holds Python objects (a pickle), which are never loaded");
  }
  return InvalidArgument("npy: dtype " + Quote(descr) +
                         " is not supported (little-endian f8, f4, f2, i8, i4, i2, i1, u4, u2, "
                         "u1, b1)");
}

}  // namespace

int64_t NpyHeader::elements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

Result<NpyHeader> ParseNpyHeader(std::string_view prefix, uint64_t file_size, const NpyLimits& limits) {
  if (prefix.size() < 10 || prefix.substr(0, kMagic.size()) != kMagic) {
    return InvalidArgument("npy: not a .npy file (no \\x93NUMPY magic)");
  }
  uint8_t major = static_cast<uint8_t>(prefix[6]);
  uint64_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(prefix[8]) | static_cast<uint64_t>(static_cast<uint8_t>(prefix[9])) << 8;
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (prefix.size() < 12) return InvalidArgument("npy: truncated before its header length");
    for (int i = 3; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(prefix[8 + static_cast<size_t>(i)]);
    header_at = 12;
  } else {
    return InvalidArgument("npy: format version " + std::to_string(major) + " is not 1, 2 or 3");
  }
  if (header_len > limits.max_header_bytes) {
    return InvalidArgument("npy: a header of " + std::to_string(header_len) + " bytes (at most " +
                           std::to_string(limits.max_header_bytes) + ")");
  }
  if (header_at + header_len > file_size || header_at + header_len > prefix.size()) {
    return InvalidArgument("npy: truncated in its header (" + std::to_string(header_len) +
                           " bytes said, the file has " + std::to_string(file_size) + ")");
  }
  std::string_view text = prefix.substr(header_at, header_len);
  if (text.empty() || text.back() != '\n') return InvalidArgument("npy header: it does not end with a newline");

  NpyHeader h;
  bool have_descr = false, have_order = false, have_shape = false;
  Status st = HeaderReader(text).ReadDict([&](const std::string& key, const HeaderReader::Value& v) -> Status {
    // A key given twice is refused: which one counts is a guess (numpy's
    // reader keeps the last), and a header is never written so.
    if ((key == "descr" && have_descr) || (key == "fortran_order" && have_order) ||
        (key == "shape" && have_shape)) {
      return InvalidArgument("npy: the header names " + key + " twice");
    }
    if (key == "descr") {
      if (v.kind != HeaderReader::Value::kString) {
        return InvalidArgument("npy: descr is not a simple dtype (structured arrays are not supported)");
      }
      auto t = NpyDType(v.text);
      if (!t.ok()) return t.status();
      h.dtype = *t;
      have_descr = true;
    } else if (key == "fortran_order") {
      if (v.kind != HeaderReader::Value::kBool) return InvalidArgument("npy: fortran_order is not True or False");
      if (v.flag) {
        return InvalidArgument("npy: the array is in Fortran order; save a C-ordered copy "
                               "(numpy.ascontiguousarray)");
      }
      have_order = true;
    } else if (key == "shape") {
      if (v.kind != HeaderReader::Value::kTuple) return InvalidArgument("npy: shape is not a tuple of sizes");
      if (v.numbers.size() > limits.max_dims) {
        return InvalidArgument("npy: shape has " + std::to_string(v.numbers.size()) +
                               " dimensions (at most " + std::to_string(limits.max_dims) + ")");
      }
      uint64_t elements = 1;
      for (uint64_t n : v.numbers) {
        if (n > limits.max_elements || (n > 0 && elements > limits.max_elements / n)) {
          return InvalidArgument("npy: shape: more than " + std::to_string(limits.max_elements) +
                                 " elements");
        }
        elements *= n;
        h.shape.push_back(static_cast<int64_t>(n));
      }
      have_shape = true;
    } else {
      return InvalidArgument("npy: unknown header key " + Quote(key));
    }
    return Status::Ok();
  });
  CLAW_RETURN_IF_ERROR(st);
  if (!have_descr || !have_order || !have_shape) {
    return InvalidArgument(std::string("npy: the header lacks ") +
                           (!have_descr ? "descr" : !have_order ? "fortran_order" : "shape"));
  }
  h.data_offset = header_at + header_len;
  h.bytes = static_cast<uint64_t>(h.elements()) * DTypeSize(h.dtype);
  if (file_size - h.data_offset != h.bytes) {
    return InvalidArgument("npy: the header says " + std::to_string(h.bytes) + " bytes of data (" +
                           std::to_string(h.elements()) + " elements of " +
                           std::string(DTypeName(h.dtype)) + "), the file holds " +
                           std::to_string(file_size - h.data_offset));
  }
  return h;
}

Result<NpyHeader> ReadNpyHeader(const std::string& path, const NpyLimits& limits) {
  auto head = ReadFileHead(path, limits.max_header_bytes + 12);
  if (!head.ok()) return head.status();
  return ParseNpyHeader(head->bytes, head->size, limits);
}

Result<Tensor> ParseNpy(std::string_view bytes, const NpyLimits& limits) {
  auto h = ParseNpyHeader(bytes, bytes.size(), limits);
  if (!h.ok()) return h.status();
  Tensor t;
  t.dtype = h->dtype;
  t.shape = h->shape;
  t.data.assign(bytes.substr(h->data_offset));
  return t;
}

Result<std::string> WriteNpy(const Tensor& t) {
  std::string code(NameOf(kNpyTypes, t.dtype));
  if (code == "?") return InvalidArgument("npy: " + std::string(DTypeName(t.dtype)) + " has no numpy dtype");
  std::string header = "{'descr': '" + std::string(DTypeSize(t.dtype) == 1 ? "|" : "<") + code +
                       "', 'fortran_order': False, 'shape': (";
  for (int64_t n : t.shape) header += std::to_string(n) + ", ";
  if (!t.shape.empty()) header.resize(header.size() - (t.shape.size() == 1 ? 1 : 2));  // "(5,)", "(2, 3)"
  header += "), }";
  // Padded with spaces so that the data starts at a multiple of 64, then '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) return InvalidArgument("npy: shape too long for a version 1.0 header");
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out += t.data;
  return out;
}

}  // namespace claw::tensors
