#include "tensors/safetensors.h"

#include <nlohmann/json.hpp>

#include "common/names.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace claw::tensors {
namespace {

constexpr NameTable<DType, 12> kDTypes = {{{"F32", DType::kF32},
                                           {"F16", DType::kF16},
                                           {"I8", DType::kI8},
                                           {"F64", DType::kF64},
                                           {"BF16", DType::kBF16},
                                           {"I64", DType::kI64},
                                           {"I32", DType::kI32},
                                           {"I16", DType::kI16},
                                           {"U8", DType::kU8},
                                           {"U16", DType::kU16},
                                           {"U32", DType::kU32},
                                           {"BOOL", DType::kBool}}};

Result<DType> ParseDType(std::string_view s) {
  DType t;
  if (FromName(kDTypes, s, &t)) return t;
  return InvalidArgument("dtype " + std::string(s.substr(0, 16)) +
                         " is not supported (F64, F32, F16, BF16, I64, I32, I16, I8, U32, U16, "
                         "U8, BOOL)");
}

uint64_t ReadU64(std::string_view b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[static_cast<size_t>(i)]);
  return v;
}

// Whether JSON text nests at most 3 deep (the header, a tensor, its shape),
// looked at before parsing: a deep header would cost memory out of all
// proportion to its bytes.
bool ShallowJson(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > 3) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

struct Entry {
  Tensor tensor;
  uint64_t begin = 0, end = 0;
};

Result<Entry> ParseEntry(const std::string& name, const nlohmann::json& j, const ParseLimits& limits) {
  const std::string what = "tensor " + (name.size() <= 64 ? name : name.substr(0, 64) + "...");
  if (name.empty() || name.size() > limits.max_name_bytes) {
    return InvalidArgument("a tensor's name must have 1 to " + std::to_string(limits.max_name_bytes) +
                           " bytes");
  }
  if (!j.is_object() || j.size() != 3 || !j.contains("dtype") || !j.contains("shape") ||
      !j.contains("data_offsets")) {
    return InvalidArgument(what + ": must be {\"dtype\", \"shape\", \"data_offsets\"}");
  }
  Entry e;
  e.tensor.name = name;
  if (!j["dtype"].is_string()) return InvalidArgument(what + ": dtype must be a string");
  auto dtype = ParseDType(j["dtype"].get_ref<const std::string&>());
  if (!dtype.ok()) return InvalidArgument(what + ": " + dtype.status().message());
  e.tensor.dtype = *dtype;
  const auto& shape = j["shape"];
  if (!shape.is_array() || shape.size() > limits.max_dims) {
    return InvalidArgument(what + ": shape must be a list of at most " +
                           std::to_string(limits.max_dims) + " sizes");
  }
  uint64_t elements = 1;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) return InvalidArgument(what + ": shape: sizes must be integers >= 0");
    uint64_t n = d.get<uint64_t>();
    if (n > limits.max_elements || (n > 0 && elements > limits.max_elements / n)) {
      return InvalidArgument(what + ": shape: more than " + std::to_string(limits.max_elements) +
                             " elements");
    }
    elements *= n;
    e.tensor.shape.push_back(static_cast<int64_t>(n));
  }
  const auto& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return InvalidArgument(what + ": data_offsets must be [begin, end]");
  }
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin || e.end - e.begin != elements * DTypeSize(*dtype)) {
    return InvalidArgument(what + ": data_offsets [" + std::to_string(e.begin) + ", " +
                           std::to_string(e.end) + "] do not hold " + std::to_string(elements) +
                           " elements of " + std::string(DTypeName(*dtype)));
  }
  return e;
}

}  // namespace

std::string_view DTypeName(DType t) { return NameOf(kDTypes, t); }

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32:
    case DType::kU32: return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
    case DType::kU16: return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool: return 1;
  }
  return 1;
}

int64_t Tensor::elements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

const Tensor* TensorFile::Find(std::string_view name) const {
  for (const Tensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<TensorFile> ParseSafetensors(std::string_view bytes, const ParseLimits& limits) {
  if (bytes.size() < 8) return InvalidArgument("safetensors: shorter than its 8-byte header length");
  const uint64_t n = ReadU64(bytes.substr(0, 8));
  if (n > limits.max_header_bytes) {
    return InvalidArgument("safetensors: header of " + std::to_string(n) + " bytes (at most " +
                           std::to_string(limits.max_header_bytes) + ")");
  }
  if (n > bytes.size() - 8) {
    return InvalidArgument("safetensors: header of " + std::to_string(n) +
                           " bytes in a file of " + std::to_string(bytes.size()));
  }
  if (!ShallowJson(bytes.substr(8, n))) {
    return InvalidArgument("safetensors: the header nests deeper than a safetensors header does");
  }
  auto header = nlohmann::json::parse(bytes.substr(8, n), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return InvalidArgument("safetensors: the header is not a JSON object");
  const std::string_view data = bytes.substr(8 + n);
  TensorFile file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return InvalidArgument("safetensors: __metadata__ must be an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return InvalidArgument("safetensors: __metadata__." + k.substr(0, 64) + " must be a string");
        }
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (entries.size() >= limits.max_tensors) {
      return InvalidArgument("safetensors: more than " + std::to_string(limits.max_tensors) +
                             " tensors");
    }
    auto e = ParseEntry(key, value, limits);
    if (!e.ok()) return e.status();
    entries.push_back(std::move(e).value());
  }
  // The tensors tile the data: sorted by offset, each begins where the last ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (Entry& e : entries) {
    if (e.begin != at) {
      return InvalidArgument("safetensors: tensor " + e.tensor.name + " starts at byte " +
                             std::to_string(e.begin) + ", not " + std::to_string(at) +
                             " (a gap or an overlap)");
    }
    if (e.end > data.size()) {
      return InvalidArgument("safetensors: tensor " + e.tensor.name + " ends at byte " +
                             std::to_string(e.end) + " of " + std::to_string(data.size()));
    }
    e.tensor.data.assign(data.substr(e.begin, e.end - e.begin));
    at = e.end;
    file.tensors.push_back(std::move(e.tensor));
  }
  if (at != data.size()) {
    return InvalidArgument("safetensors: " + std::to_string(data.size() - at) +
                           " bytes after the last tensor");
  }
  return file;
}

std::string WriteSafetensors(const TensorFile& file) {
  nlohmann::json header = nlohmann::json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  uint64_t at = 0;
  for (const Tensor& t : file.tensors) {
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.reserve(8 + text.size() + at);
  out += text;
  for (const Tensor& t : file.tensors) out += t.data;
  return out;
}

Tensor FloatTensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& values) {
  Tensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = DType::kF32;
  t.data.resize(values.size() * 4);
  // Little-endian hosts only (x86-64, arm64), as everywhere in this project.
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

Result<std::vector<float>> ToFloats(const Tensor& t) {
  std::vector<float> out(t.data.size() / DTypeSize(t.dtype));
  if (t.dtype == DType::kF32) {
    std::memcpy(out.data(), t.data.data(), out.size() * 4);
  } else if (t.dtype == DType::kF16) {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      out[i] = HalfToFloat(h);
    }
  } else {
    return InvalidArgument("tensor " + t.name + ": " + std::string(DTypeName(t.dtype)) +
                           " needs a scale to become floats");
  }
  return out;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) {  // infinity, or a NaN (kept quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 | ((abs >> 13) & 0x3ff) : 0));
  }
  const uint32_t e = abs >> 23, m = abs & 0x7fffff;
  if (e > 142) return static_cast<uint16_t>(sign | 0x7c00);  // beyond 2^16: infinity
  auto round = [](uint32_t q, uint32_t rem, uint32_t half) {
    return rem > half || (rem == half && (q & 1)) ? q + 1 : q;
  };
  if (e < 113) {  // below 2^-14: a subnormal half (in units of 2^-24), or zero
    if (e < 102) return static_cast<uint16_t>(sign);
    const uint32_t full = m | 0x800000, shift = 126 - e;
    const uint32_t q = round(full >> shift, full & ((1u << shift) - 1), 1u << (shift - 1));
    return static_cast<uint16_t>(sign | q);  // 0x400 here is the smallest normal: right
  }
  // A carry out of the mantissa moves the exponent on, up to infinity: right too.
  const uint32_t q = round(((e - 112) << 10) | (m >> 13), m & 0x1fff, 0x1000);
  return static_cast<uint16_t>(sign | q);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  uint32_t bits;
  if (e == 0) {
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m × 2^-24, exact
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (e == 31) {
    bits = sign | 0x7f800000 | (m << 13);
  } else {
    bits = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace claw::tensors
