// Any bytes as a .npz archive: its ZIP structure, names, sizes and CRCs
// checked, each member then parsed as a .npy file; never a crash, a hang or
// an allocation without bound.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzNpz(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
