// Mutex and MutexLock: std::mutex and std::unique_lock with Clang's
// thread-safety annotations, so that what each mutex guards is checked at
// compile time. Members carry CLAW_GUARDED_BY(mu_), functions that expect the
// lock held CLAW_REQUIRES(mu_), those that take it CLAW_EXCLUDES(mu_); the clang build
// (make fuzz) compiles every library with -Werror=thread-safety, so a missed
// lock fails the build. Under GCC the annotations expand to nothing.
//
// Wait on a std::condition_variable_any with the MutexLock itself.
#pragma once

#include <mutex>

#if defined(__clang__)
#define CLAW_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CLAW_THREAD_ANNOTATION(x)
#endif

#define CLAW_CAPABILITY(x) CLAW_THREAD_ANNOTATION(capability(x))
#define CLAW_SCOPED_CAPABILITY CLAW_THREAD_ANNOTATION(scoped_lockable)
#define CLAW_GUARDED_BY(x) CLAW_THREAD_ANNOTATION(guarded_by(x))
#define CLAW_PT_GUARDED_BY(x) CLAW_THREAD_ANNOTATION(pt_guarded_by(x))
#define CLAW_REQUIRES(...) CLAW_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define CLAW_EXCLUDES(...) CLAW_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define CLAW_ACQUIRE(...) CLAW_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define CLAW_RELEASE(...) CLAW_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define CLAW_NO_THREAD_SAFETY_ANALYSIS CLAW_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace claw {

class CLAW_CAPABILITY("mutex") Mutex {
 public:
  void lock() CLAW_ACQUIRE() { mu_.lock(); }
  void unlock() CLAW_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction; unlock() and lock() in
// between (and std::condition_variable_any's waits, which call them).
class CLAW_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) CLAW_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() CLAW_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() CLAW_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void unlock() CLAW_RELEASE() {
    held_ = false;
    mu_.unlock();
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace claw
