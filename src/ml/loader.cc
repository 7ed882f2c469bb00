#include <dlfcn.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "ml/api.h"

namespace claw::ml {
namespace {

std::string ExecutableDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// What a user without the ML library does about it.
constexpr const char* kMlInstallHint =
    "install libtorch (Debian: apt-get install libtorch-dev; macOS: brew install pytorch; "
    "scripts/setup.sh does it) and rebuild, or point CLAW_ML_LIBRARY at libclaw_ml";

// A process about to train or evaluate with libtorch keeps freed memory
// for reuse. glibc serves a block over its mmap threshold (at most 32 MB)
// with mmap and unmaps it when freed, so a tensor that big (a batch of 1000
// images through the CNN makes several of ~100 MB) is page-faulted in and
// zeroed anew on every call, and the heap above M_TRIM_THRESHOLD goes back
// to the kernel just as often. Measured on this project's 2-core machine,
// evaluating the CNN on 10,000 images in batches of 1,000 took 14 s before
// and 1.6 s after (bench/models_bench.py; docs/benchmarks.md). The cost:
// a worker holds its peak heap (up to 1 GiB freed) until it exits, as
// PyTorch's users get from jemalloc or tcmalloc.
void KeepLargeBlocks() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

std::vector<std::string> Candidates() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("CLAW_ML_LIBRARY")) candidates.push_back(env);
  std::string dir = ExecutableDir();
#ifdef __APPLE__
  const char* name = "libclaw_ml.dylib";
#else
  const char* name = "libclaw_ml.so";
#endif
  if (!dir.empty()) candidates.push_back(dir + "/" + name);
#ifdef CLAW_ML_LIBRARY_PATH
  candidates.push_back(CLAW_ML_LIBRARY_PATH);
#endif
  return candidates;
}

Result<const MlApi*> Load() {
  std::vector<std::string> candidates = Candidates();
  std::string why;
  for (const std::string& path : candidates) {
    if (!std::filesystem::exists(path)) {
      why += " " + path + " (absent);";
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      why += " " + path + " (" + dlerror() + ");";
      continue;
    }
    using Entry = const MlApi* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "claw_ml_api"));
    const MlApi* api = entry ? entry() : nullptr;
    if (!api || api->version != kMlApiVersion) {
      why += " " + path + " (not this version's ML library);";
      continue;
    }
    KeepLargeBlocks();
    return api;  // kept loaded for the life of the process
  }
  return FailedPrecondition("this process cannot run ML tasks: no usable libclaw_ml (built with "
                            "libtorch) at" + why + " " + kMlInstallHint);
}

}  // namespace

Result<std::string> FindMl() {
  for (const std::string& path : Candidates()) {
    if (std::filesystem::exists(path)) return path;
  }
  return FailedPrecondition(std::string("no libclaw_ml (the ML library, built with libtorch) here; ") +
                            kMlInstallHint);
}

void SleepingOpenMpThreads() { setenv("OMP_WAIT_POLICY", "PASSIVE", 0); }

Result<const MlApi*> LoadMl() {
  static std::once_flag once;
  static Result<const MlApi*> loaded = FailedPrecondition("not loaded");
  std::call_once(once, [] { loaded = Load(); });
  return loaded;
}

}  // namespace claw::ml
