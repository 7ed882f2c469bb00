// Any bytes as a safetensors file: parsed with every size, offset, dtype and
// shape checked; never a crash, a hang or an allocation without bound.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzSafetensors(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
