#include "cli/commands.h"

int main(int argc, char** argv) { return claw::RunCli(argc, argv); }
