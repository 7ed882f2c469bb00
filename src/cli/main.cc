#include "cli/commands.h"
#include "ml/api.h"

int main(int argc, char** argv) {
  claw::ml::SleepingOpenMpThreads();  // before any thread starts (ml/api.h)
  return claw::RunCli(argc, argv);
}
