// Any bytes as client requests: a spec to submit, then job ids to read,
// watch and cancel.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzClientRequests(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
