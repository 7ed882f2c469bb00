// What tests need from the machine beyond the build, and what to install
// when a piece is missing.
//
// A test whose piece is missing FAILS with a message naming the package:
// a skipped test on a fresh machine would hide a missing install step from
// CI (scripts/setup.sh must install everything the tests use). On a machine
// that cannot have the piece (a Mac has no bubblewrap), set
// CLAW_TESTS_MAY_SKIP=1 to skip such tests instead.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "sandbox/sandbox.h"
#include "common/status.h"

namespace claw::testing {

inline bool MaySkip() {
  const char* env = std::getenv("CLAW_TESTS_MAY_SKIP");
  return env && *env && std::string(env) != "0";
}

// An executable at `path`, from the Debian package `package`.
inline Status NeedProgram(const std::string& path, const std::string& package) {
  if (access(path.c_str(), X_OK) == 0) return Status::Ok();
  return FailedPrecondition(path + " is missing: apt-get install " + package +
                            " (scripts/setup.sh installs it)");
}

// A data file at `path`, from the Debian package `package`.
inline Status NeedFile(const std::string& path, const std::string& package) {
  if (std::filesystem::exists(path)) return Status::Ok();
  return FailedPrecondition(path + " is missing: apt-get install " + package +
                            " (scripts/setup.sh installs it)");
}

inline Status NeedSandbox() {
  Status st = SandboxAvailable();
  if (st.ok()) return st;
  return FailedPrecondition("no sandbox for exec tasks on this machine: " + st.message());
}

// A cgroup that binds a task's memory as a whole (sandbox/task_group.h):
// root, or a delegated cgroup v2 subtree, and a writable /sys/fs/cgroup.
inline Status NeedTaskCgroup(const TaskGroup& group) {
  if (group.BindsMemory()) return Status::Ok();
  return FailedPrecondition("no cgroup binds a task's memory here (" + group.Describe() +
                            "): run as root, or in a delegated cgroup v2 subtree "
                            "(systemd-run --user --scope -p Delegate=yes), with /sys/fs/cgroup "
                            "writable");
}

// The directory with Fashion-MNIST's four IDX files (gzipped as Debian ships
// them): $CLAW_FASHION_MNIST, else Debian's place.
inline std::string FashionMnistDir() {
  const char* env = std::getenv("CLAW_FASHION_MNIST");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

inline Status NeedFashionMnist() {
  std::string file = FashionMnistDir() + "/train-images-idx3-ubyte.gz";
  if (std::filesystem::exists(file)) return Status::Ok();
  return FailedPrecondition("no Fashion-MNIST at " + FashionMnistDir() +
                            ": apt-get install dataset-fashion-mnist (scripts/setup.sh installs "
                            "it), or set CLAW_FASHION_MNIST to a directory with its IDX files");
}

// The ML apps (train, infer) are built only where libtorch was found.
inline Status NeedMlBuild() {
#ifdef CLAW_WITH_TORCH
  return Status::Ok();
#else
  return FailedPrecondition(
      "built without libtorch, so there is no train or infer app: apt-get install libtorch-dev "
      "(scripts/setup.sh installs it), then configure the build again");
#endif
}

// Debian's PyTorch and numpy under /usr/bin/python3: tests make users'
// TorchScript models and .npy files with them, as users do.
inline Status NeedPythonTorch() {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") == 0) {
    return Status::Ok();
  }
  return FailedPrecondition("/usr/bin/python3 cannot import torch and numpy: apt-get install "
                            "python3-torch python3-numpy (scripts/setup.sh installs them)");
}

// The language model example's pre-training text (examples/lm/corpus.py).
inline Status NeedFortunes() {
  if (std::system("test -f /usr/share/games/fortunes/science") == 0) return Status::Ok();
  return FailedPrecondition("no /usr/share/games/fortunes: apt-get install fortunes (scripts/setup.sh "
                            "installs it)");
}

}  // namespace claw::testing

// Fails the test (or, with CLAW_TESTS_MAY_SKIP=1, skips it) when the Status
// `need` is not ok, with its message. Use in a test body or SetUp.
#define CLAW_REQUIRE(need)                                              \
  do {                                                                  \
    ::claw::Status claw_need_ = (need);                                 \
    if (!claw_need_.ok()) {                                             \
      if (::claw::testing::MaySkip()) GTEST_SKIP() << claw_need_.message(); \
      FAIL() << claw_need_.message();                                   \
    }                                                                   \
  } while (0)
