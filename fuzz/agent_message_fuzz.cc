// Any bytes as an agent's session message (and as its Hello) against a live
// coordinator with a job in flight.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzAgentMessage(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
