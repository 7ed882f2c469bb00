// Any bytes as a signed note, a checkpoint and a verifier key: what `claw
// ledger verify` reads from a coordinator it does not trust.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  claw::FuzzSignedNote(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
