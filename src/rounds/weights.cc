#include "rounds/weights.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "common/names.h"

namespace claw::rounds {
namespace {

using tensors::DType;
using tensors::Tensor;

std::string ScaleKey(const std::string& name) { return "scale:" + name; }

std::string FloatText(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);  // shortest text that reads back exactly
  return std::string(buf, r.ptr);
}

Tensor Int8Tensor(const Named& n, float* scale, std::vector<float>* decoded) {
  float max = 0;
  bool finite = true;
  for (float v : n.values) {
    finite = finite && std::isfinite(v);
    max = std::max(max, std::fabs(v));
  }
  *scale = finite ? max / 127.0f : std::numeric_limits<float>::quiet_NaN();
  Tensor t;
  t.name = n.name;
  t.shape = n.shape;
  t.dtype = DType::kI8;
  t.data.resize(n.values.size());
  decoded->resize(n.values.size());
  for (size_t i = 0; i < n.values.size(); ++i) {
    float q = finite && *scale > 0 ? std::clamp(std::nearbyint(n.values[i] / *scale), -127.0f, 127.0f) : 0.0f;
    auto b = static_cast<int8_t>(q);
    std::memcpy(&t.data[i], &b, 1);
    (*decoded)[i] = static_cast<float>(b) * *scale;
  }
  return t;
}

}  // namespace

constexpr NameTable<Codec, 3> kCodecs = {
    {{"fp32", Codec::kF32}, {"fp16", Codec::kF16}, {"int8", Codec::kI8}}};

bool ParseCodec(std::string_view text, Codec* codec) { return FromName(kCodecs, text, codec); }
std::string_view CodecName(Codec c) { return NameOf(kCodecs, c); }

tensors::TensorFile Encode(const Weights& w, Codec codec, Weights* residual) {
  tensors::TensorFile file;
  file.metadata["codec"] = std::string(CodecName(codec));
  if (residual && residual->empty()) *residual = ZerosLike(w);
  std::vector<float> decoded;
  Named fed;  // w + residual
  for (size_t k = 0; k < w.size(); ++k) {
    const Named* source = &w[k];
    if (residual) {
      fed = w[k];
      const std::vector<float>& r = (*residual)[k].values;
      for (size_t i = 0; i < fed.values.size(); ++i) fed.values[i] += r[i];
      source = &fed;
    }
    const Named& n = *source;
    switch (codec) {
      case Codec::kF32:
        file.tensors.push_back(tensors::FloatTensor(n.name, n.shape, n.values));
        decoded = n.values;
        break;
      case Codec::kF16: {
        Tensor t;
        t.name = n.name;
        t.shape = n.shape;
        t.dtype = DType::kF16;
        t.data.resize(n.values.size() * 2);
        decoded.resize(n.values.size());
        for (size_t i = 0; i < n.values.size(); ++i) {
          uint16_t h = tensors::FloatToHalf(n.values[i]);
          std::memcpy(&t.data[2 * i], &h, 2);
          decoded[i] = tensors::HalfToFloat(h);
        }
        file.tensors.push_back(std::move(t));
        break;
      }
      case Codec::kI8: {
        float scale = 0;
        file.tensors.push_back(Int8Tensor(n, &scale, &decoded));
        file.metadata[ScaleKey(n.name)] = FloatText(scale);
        break;
      }
    }
    if (residual) {
      std::vector<float>& r = (*residual)[k].values;
      for (size_t i = 0; i < r.size(); ++i) r[i] = n.values[i] - decoded[i];
    }
  }
  return file;
}

Result<Weights> Decode(const tensors::TensorFile& file) {
  Weights out;
  std::set<std::string> seen;
  for (const Tensor& t : file.tensors) {
    if (!seen.insert(t.name).second) return InvalidArgument("tensor " + t.name + ": named twice");
    Named n;
    n.name = t.name;
    n.shape = t.shape;
    if (t.dtype == DType::kI8) {
      auto it = file.metadata.find(ScaleKey(t.name));
      if (it == file.metadata.end()) {
        return InvalidArgument("tensor " + t.name + ": int8 without its scale (metadata " +
                               ScaleKey(t.name) + ")");
      }
      float scale = 0;
      const std::string& s = it->second;
      auto r = std::from_chars(s.data(), s.data() + s.size(), scale);
      if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(scale) || scale < 0) {
        return InvalidArgument("tensor " + t.name + ": its scale \"" + s.substr(0, 32) +
                               "\" is not a finite number >= 0");
      }
      n.values.resize(t.data.size());
      for (size_t i = 0; i < t.data.size(); ++i) {
        int8_t b;
        std::memcpy(&b, &t.data[i], 1);
        n.values[i] = static_cast<float>(b) * scale;
      }
    } else {
      auto values = tensors::ToFloats(t);
      if (!values.ok()) return values.status();
      n.values = std::move(values).value();
    }
    out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end(), [](const Named& a, const Named& b) { return a.name < b.name; });
  return out;
}

Status SameShapes(const Weights& a, const Weights& b) {
  // Both sorted by name: walked together, the first difference is named.
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].name < b[j].name)) {
      return InvalidArgument("tensor " + a[i].name.substr(0, 256) + ": missing");
    }
    if (i == a.size() || b[j].name < a[i].name) {
      return InvalidArgument("tensor " + b[j].name.substr(0, 256) + ": not in the model");
    }
    if (a[i].shape != b[j].shape) {
      return InvalidArgument("tensor " + b[j].name.substr(0, 256) + ": wrong shape");
    }
    ++i;
    ++j;
  }
  return Status::Ok();
}

double Norm(const Weights& w) {
  double sum = 0;
  for (const Named& n : w) {
    for (float v : n.values) sum += static_cast<double>(v) * v;
  }
  return std::sqrt(sum);
}

void AddScaled(Weights* a, const Weights& b, float scale) {
  for (size_t k = 0; k < a->size(); ++k) {
    std::vector<float>& x = (*a)[k].values;
    const std::vector<float>& y = b[k].values;
    for (size_t i = 0; i < x.size(); ++i) x[i] += scale * y[i];
  }
}

Weights ZerosLike(const Weights& w) {
  Weights z;
  z.reserve(w.size());
  for (const Named& n : w) z.push_back(Named{n.name, n.shape, std::vector<float>(n.values.size())});
  return z;
}

size_t ParameterCount(const Weights& w) {
  size_t n = 0;
  for (const Named& x : w) n += x.values.size();
  return n;
}

std::string ModelBytes(const Weights& w) {
  return tensors::WriteSafetensors(Encode(w, Codec::kF32));
}

Result<Weights> ReadWeights(std::string_view bytes) {
  auto file = tensors::ParseSafetensors(bytes);
  if (!file.ok()) return file.status();
  return Decode(*file);
}

Weights Rebuild(const Weights& prev, const Weights& update) {
  Weights out = prev;
  for (size_t t = 0; t < out.size(); ++t) {
    std::vector<float>& v = out[t].values;
    const std::vector<float>& u = update[t].values;
    for (size_t i = 0; i < v.size(); ++i) v[i] = v[i] + u[i];
  }
  return out;
}

}  // namespace claw::rounds
