// A model's parameters, or a change to them (a delta), as fp32 tensors by
// name: what round-based training aggregates (docs/adr/0007-training-in-
// rounds.md). Plain C++, no libtorch: the coordinator works on these.
//
// Deltas travel compressed (Codec): fp32; fp16; or int8 with one scale per
// tensor (scale = max|x| / 127, q = round(x / scale), kept in the file's
// metadata as "scale:<name>"). Decoding is exact and the same on every
// machine (this library is built without floating-point contraction), so a
// model rebuilt from an earlier one and a decoded update has the same bytes
// everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "tensors/safetensors.h"

namespace claw::rounds {

struct Named {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Sorted by name; names unique.
using Weights = std::vector<Named>;

enum class Codec { kF32, kF16, kI8 };
// "fp32", "fp16", "int8"; false if unknown.
bool ParseCodec(std::string_view text, Codec* codec);
std::string_view CodecName(Codec c);

// The file of `w` under `codec`. With `residual` (error feedback, kept by
// the sender from one round to the next; empty at first, then shaped as
// `w`): what is encoded is w + residual, and the residual becomes what that
// encoding lost, so over rounds nothing is lost for good. A value that is
// not finite makes its int8 tensor's scale NaN, which Decode refuses (fp16
// and fp32 keep it, and the delta checks refuse it).
tensors::TensorFile Encode(const Weights& w, Codec codec, Weights* residual = nullptr);

// The weights a file holds, sorted by name. InvalidArgument naming the
// tensor: an I8 tensor without its scale, a scale that is not a finite
// number >= 0, a duplicate name.
Result<Weights> Decode(const tensors::TensorFile& file);

// InvalidArgument naming the first tensor whose name or shape differs.
Status SameShapes(const Weights& a, const Weights& b);

// The L2 norm over every value (double accumulation in order); infinity or
// NaN if a value is not finite.
double Norm(const Weights& w);

// `a` += `scale` × `b` (same shapes).
void AddScaled(Weights* a, const Weights& b, float scale);

// Zeros shaped as `w`.
Weights ZerosLike(const Weights& w);

size_t ParameterCount(const Weights& w);

// A model's file: fp32 safetensors, names sorted (equal weights, equal
// bytes, equal blob hash on every machine).
std::string ModelBytes(const Weights& w);
// The weights of a safetensors file's bytes (any codec). InvalidArgument
// naming what is wrong.
Result<Weights> ReadWeights(std::string_view bytes);
// The next model from the last and a decoded update: prev + update, value
// by value (same shapes), computed identically everywhere.
Weights Rebuild(const Weights& prev, const Weights& update);

}  // namespace claw::rounds
