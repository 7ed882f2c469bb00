// The `claw` command line. main() calls RunCli and nothing else.
#pragma once

namespace claw {

// Parses argv, runs the chosen subcommand, returns the process exit code:
// 0 success, 1 usage error, 2 the request was refused (bad input, not found),
// 3 the coordinator could not be reached.
int RunCli(int argc, char** argv);

}  // namespace claw
