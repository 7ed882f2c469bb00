// Any bytes as a job spec: parsing and planning either succeed or return an
// error naming the problem; they never crash, hang or allocate without bound.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzJobSpec(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
