// Any bytes as a token file: header, size and every token checked; never a
// crash, a hang or an allocation without bound.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzTokens(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
