// NumPy's .npz archives (numpy.savez, numpy.savez_compressed): a ZIP file
// whose members are .npy files, one per array, named "<array>.npy".
//
// Only the CLI reads them, on the user's own machine: `claw submit --data
// FILE.npz` takes the archive apart and uploads each array as the .npy blob
// it already is, so agents never parse a ZIP (the .npy parser, npy.h, is
// all they meet). Still, the reader trusts nothing: the end record, the
// central directory (ZIP64 too, which numpy writes), every member's
// local header, name, method (stored or deflated alone), size and CRC-32
// are checked; an inflated member must come to exactly its declared size,
// never more than the limit (a ZIP bomb stops there); encrypted, split and
// duplicate members are refused. Errors name the member and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace claw::tensors {

struct NpzLimits {
  size_t max_members = 256;
  uint64_t max_member_bytes = uint64_t{16} << 30;  // inflated
  uint64_t max_total_bytes = uint64_t{64} << 30;
};

struct NpzMember {
  std::string name;   // the array's name: the member's, less ".npy"
  std::string bytes;  // the .npy file
};

// The members of an archive, in the order of its central directory. Names
// are plain (letters, digits, '_', '-', '.'; no directories) and end in
// ".npy"; the bytes are not parsed here (ParseNpy does that).
Result<std::vector<NpzMember>> ReadNpz(std::string_view archive, const NpzLimits& limits = {});

}  // namespace claw::tensors
