// Any bytes as a .npy file: parsed with its header's grammar, dtype, shape
// and data size checked; never a crash, a hang or an allocation without
// bound.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzNpy(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
