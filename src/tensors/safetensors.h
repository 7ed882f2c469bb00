// Named tensors and the safetensors file format, for models, optimizer
// state and model deltas (docs/adr/0007-training-in-rounds.md).
//
// The format (https://huggingface.co/docs/safetensors): an unsigned 64-bit
// little-endian header length N, N bytes of JSON
//   {"__metadata__": {"key": "value", ...},
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// (padded with spaces), then the tensors' bytes, little-endian, row-major;
// offsets count from the end of the header, and together the tensors cover
// the data exactly: no gap, no overlap, nothing after.
//
// Files come from other machines, so parsing trusts nothing: every size,
// offset, dtype, shape and name is checked, and an error names what is
// wrong. The dtypes: floats F64, F32, F16, BF16; integers I64, I32, I16, I8,
// U32, U16, U8; BOOL (one byte). Model deltas use F32, F16 and I8 alone
// (rounds/weights.h refuses the rest); datasets may use any.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace claw::tensors {

enum class DType { kF32, kF16, kI8, kF64, kBF16, kI64, kI32, kI16, kU8, kU16, kU32, kBool };

std::string_view DTypeName(DType t);  // "F32", "F16", "I8", ... as safetensors names them
size_t DTypeSize(DType t);

struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string data;  // the raw bytes, little-endian

  // Number of elements (the product of the shape; 1 for a scalar).
  int64_t elements() const;
};

struct TensorFile {
  std::map<std::string, std::string> metadata;
  std::vector<Tensor> tensors;  // in the order of their bytes in the file

  const Tensor* Find(std::string_view name) const;
};

struct ParseLimits {
  uint64_t max_header_bytes = 16 << 20;
  uint64_t max_tensors = 100'000;
  uint64_t max_elements = uint64_t{1} << 34;  // in any one tensor
  size_t max_dims = 8;
  size_t max_name_bytes = 1024;
};

// InvalidArgument naming the tensor or the field at fault.
Result<TensorFile> ParseSafetensors(std::string_view bytes, const ParseLimits& limits = {});

// The file's bytes: tensors in the order given, the header's keys sorted
// (so equal contents give equal bytes, and equal blob hashes).
std::string WriteSafetensors(const TensorFile& file);

// fp32 <-> tensors of F32 (copied), F16 (rounded to nearest even) or I8
// (not here: see rounds/compression.h, which needs a scale).
Tensor FloatTensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& values);
// InvalidArgument unless the tensor is F32 or F16.
Result<std::vector<float>> ToFloats(const Tensor& t);

// IEEE 754 binary16 conversions, portable and exact (round to nearest
// even; overflow to infinity; NaN kept as a NaN).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

}  // namespace claw::tensors
