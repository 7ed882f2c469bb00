// NumPy's .npy array files (the format of numpy.save; numpy.lib.format):
//
//   "\x93NUMPY", major, minor (1.0: a 2-byte header length; 2.0 and 3.0: 4),
//   the header length, little-endian, then the header, a Python dict
//   literal ending in '\n':
//     {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
//   then the array's bytes, row-major.
//
// Datasets come from users and travel to other people's machines, so parsing
// trusts nothing: the header's grammar, its length, the dtype, every size of
// the shape and the data's length are checked, and an error names what is
// wrong. Accepted: little-endian (or one-byte) numbers of the dtypes of
// safetensors.h but BF16 (numpy has none), C order. Refused with their
// reason: big-endian data, Fortran order, object arrays (pickles: never
// loaded), structured and string dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tensors/safetensors.h"

namespace claw::tensors {

struct NpyLimits {
  uint64_t max_header_bytes = 65536;  // numpy itself refuses more than 10,000 by default
  uint64_t max_elements = uint64_t{1} << 36;
  size_t max_dims = 8;
};

// What the header says, checked against the file's size: the array's bytes
// are [data_offset, data_offset + bytes) and end the file.
struct NpyHeader {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;
  uint64_t bytes = 0;

  int64_t elements() const;
};

// `prefix`: the file's first bytes (at least the header; all of it is fine);
// `file_size`: its whole size. InvalidArgument naming the fault.
Result<NpyHeader> ParseNpyHeader(std::string_view prefix, uint64_t file_size,
                                 const NpyLimits& limits = {});

// The header of the .npy file at `path` (reads its first bytes alone).
Result<NpyHeader> ReadNpyHeader(const std::string& path, const NpyLimits& limits = {});

// A whole file as a tensor (its data copied; name "").
Result<Tensor> ParseNpy(std::string_view bytes, const NpyLimits& limits = {});

// A version 1.0 file of the tensor (numpy.load reads it). BF16 has no numpy
// dtype: InvalidArgument.
Result<std::string> WriteNpy(const Tensor& t);

}  // namespace claw::tensors
