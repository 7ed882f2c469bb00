// The contributor's machine against a hostile command: each test is an
// attack that once worked (real bubblewrap, real processes, real cgroups
// where this machine lets them be made; bounded sizes).
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <sys/mman.h>
#ifdef __linux__
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "apps/exec.h"
#include "claw.pb.h"
#include "common/clock.h"
#include "sandbox/process_tree.h"
#include "sandbox/scratch.h"
#include "sandbox/seccomp_filter.h"
#include "sandbox/task_group.h"
#include "tests/requirements.h"

namespace claw {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    CLAW_REQUIRE(claw::testing::NeedSandbox());
    dir_ = std::filesystem::temp_directory_path() / ("claw-hostile-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    group_name_ = "claw-test-" + std::to_string(getpid()) + "/slot-0";
  }
  void TearDown() override {
    group_.reset();
    RemoveTaskGroup(group_name_);
    RemoveTree(dir_.string());
  }
  // The group a worker of this process would have.
  TaskGroup* Group(GroupMode mode = GroupMode::kAuto) {
    group_ = OpenTaskGroup(group_name_, getpid(), mode);
    return group_.get();
  }
  SandboxResult Run(const std::string& script, SandboxLimits limits = {}, TaskGroup* group = nullptr) {
    auto r = RunSandboxed({"sh", "-c", script}, dir_.string(), limits, group);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : SandboxResult{};
  }
  // Processes on this machine whose command line holds `marker`.
  static int Running(const std::string& marker) {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), {});
      if (cmd.find(marker) != std::string::npos && e.path().filename() != std::to_string(getpid())) {
        ++n;
      }
    }
    return n;
  }
  std::filesystem::path dir_;
  std::string group_name_;
  std::unique_ptr<TaskGroup> group_;
};

// Defect: /proc/1/environ (the launcher's) held the agent's environment,
// the contributor's CLAW_TOKEN with it; /proc/1/cmdline the host's paths.
TEST_F(Hostile, SeesNothingOfTheAgentsEnvironmentOrPaths) {
  setenv("CLAW_TOKEN", "contributors-secret-token", 1);
  auto r = Run("tr '\\0' '\\n' </proc/1/environ; tr '\\0' ' ' </proc/1/cmdline; echo; env; hostname");
  unsetenv("CLAW_TOKEN");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("contributors-secret-token"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find(dir_.string()), std::string::npos)
      << "the scratch directory's host path\n" << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("\nsandbox\n"), std::string::npos) << "hostname\n" << r.stdout_text;
}

// Defect: descriptors the agent inherited were open in the sandbox.
TEST_F(Hostile, GetsNoDescriptorOfTheAgents) {
  std::ofstream(dir_ / "secret.txt") << "inherited secret";
  int fd = open((dir_ / "secret.txt").c_str(), O_RDONLY);  // not close-on-exec
  ASSERT_GE(fd, 0);
  auto r = Run("ls /proc/self/fd; for n in 3 4 5 6 7 8 9 " + std::to_string(fd) +
               "; do cat <&$n 2>/dev/null; done; true");
  close(fd);
  EXPECT_EQ(r.stdout_text.find("inherited secret"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text, "0\n1\n2\n3\n") << "stdin, stdout, stderr (and ls's own)";
  // And few enough that the disk watch can look at each of them.
  EXPECT_EQ(Run("ulimit -n; ulimit -Hn").stdout_text, "1024\n1024\n");
}

// Defect: no seccomp, nested user namespaces allowed: ptrace of the
// launcher let a task outlive its timeout; `unshare -Ur` gave uid 0.
TEST_F(Hostile, CannotTraceMakeNamespacesOrMount) {
  ASSERT_TRUE(SandboxSeccompProgram().ok()) << SandboxSeccompProgram().status().ToString();
  auto r = Run(
      "grep Seccomp: /proc/self/status;"
      "unshare -Ur id && echo UNSHARED;"
      "unshare -n true && echo NET;"
      "python3 -c 'import ctypes,sys; libc=ctypes.CDLL(None, use_errno=True);"
      " r=libc.ptrace(16, 1, 0, 0); print(\"ptrace\", r, ctypes.get_errno())';"
      "mount -t tmpfs none /work 2>/dev/null && echo MOUNTED; true");
  EXPECT_NE(r.stdout_text.find("Seccomp:\t2"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("UNSHARED"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("NET"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("ptrace -1 1"), std::string::npos) << "EPERM\n" << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("MOUNTED"), std::string::npos) << r.stdout_text;
}

#if defined(__linux__) && defined(__x86_64__)
// How a child that makes a 32-bit call (int 0x80: i386 getpid) ends, with
// the sandbox's filter installed or not.
int ThirtyTwoBitCallEnds(const std::string* program) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // AddressSanitizer catches SIGSEGV, reports and exits 1: a kernel that
    // takes no 32-bit calls must show as the signal it sends.
    signal(SIGSEGV, SIG_DFL);
    if (program) {
      sock_fprog prog{static_cast<unsigned short>(program->size() / sizeof(sock_filter)),
                      reinterpret_cast<sock_filter*>(const_cast<char*>(program->data()))};
      if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
          prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        _exit(3);
      }
    }
    // A second thread makes the difference between the thread and the process.
    std::thread([] {
      sleep(5);
      _exit(4);  // only this thread was killed
    }).detach();
    long r;
    asm volatile("int $0x80" : "=a"(r) : "a"(20) : "memory");
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFSIGNALED(status) ? 1000 + WTERMSIG(status) : WEXITSTATUS(status);
}

// A 32-bit call would be checked against none of the filter's rules: it
// kills the whole process, other threads included. (Some kernels take no
// 32-bit calls at all: there the call faults, filter or not, and the
// process dies of SIGSEGV before any system call is made.)
TEST(SeccompFilter, AnotherArchitecturesCallKillsTheProcess) {
  auto program = SandboxSeccompProgram();
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  const int bare = ThirtyTwoBitCallEnds(nullptr);
  const int filtered = ThirtyTwoBitCallEnds(&*program);
  if (bare == 1000 + SIGSEGV) {
    EXPECT_EQ(filtered, 1000 + SIGSEGV) << "this kernel takes no 32-bit calls";
  } else {
    EXPECT_EQ(bare, 0) << "without the filter, the call returns";
    EXPECT_EQ(filtered, 1000 + SIGSYS) << "4: only the calling thread was killed";
  }
}
#endif

// Defect: a task that left its session and process group (and, once, its
// parent's death signal) ran on after its timeout. Now everything the task
// started is gone when RunSandboxed returns, on every kind of group.
TEST_F(Hostile, NothingOutlivesTheTimeout) {
  for (GroupMode mode : {GroupMode::kAuto, GroupMode::kNone}) {
    const std::string marker = "claw-outlive-" + std::to_string(static_cast<int>(mode));
    SandboxLimits limits;
    limits.wall_time = seconds(2);
    // Double fork into new sessions, ignoring SIGTERM and SIGHUP.
    Stopwatch watch;
    auto r = Run("cp /usr/bin/sleep /work/" + marker + "; "
                 "(trap '' TERM HUP; setsid sh -c 'trap \"\" TERM HUP; /work/" + marker +
                     " 300 & /work/" + marker + " 301 & wait' &) ; sleep 300",
                 limits, Group(mode));
    EXPECT_TRUE(r.timed_out);
    EXPECT_LT(watch.Seconds(), 10.0);
    EXPECT_EQ(Running(marker), 0) << group_->Describe();
    group_.reset();
  }
}

// Defect: memory was limited per process: four children of 1.5 GiB each
// under memory_mb=2048 held 4.8 GiB. And /tmp, /dev/shm and / were tmpfs
// without a size: 3 GiB written to /tmp under memory_mb=64.
TEST_F(Hostile, MemoryAndRamDisksAreBoundedForTheTaskAsAWhole) {
  SandboxLimits limits;
  limits.memory_bytes = 96 << 20;
  limits.wall_time = seconds(30);
  // RAM disks: sized (without a cgroup too), the root read-only.
  auto disks = Run("head -c 200000000 /dev/zero > /tmp/f; echo tmp=$?; ls -l /tmp/f;"
                   "head -c 200000000 /dev/zero > /dev/shm/f; echo shm=$?;"
                   "touch /evil 2>/dev/null || echo rootro",
                   limits, Group());
  EXPECT_NE(disks.stdout_text.find("tmp=1"), std::string::npos) << disks.stdout_text;
  EXPECT_NE(disks.stdout_text.find("shm=1"), std::string::npos) << disks.stdout_text;
  EXPECT_NE(disks.stdout_text.find("rootro"), std::string::npos) << disks.stdout_text;
  TaskGroup* group = Group();
  CLAW_REQUIRE(claw::testing::NeedTaskCgroup(*group));
  // Four processes of 60 MiB each, under 96 MiB for the task: one at least
  // is killed for want of memory, though each is under the limit alone.
  auto r = Run("for i in 1 2 3 4; do python3 -c 'import time; x = bytearray(60 << 20); "
               "x[::4096] = b\"y\" * len(x[::4096]); time.sleep(3)' & done; wait; echo done",
               limits, group);
  EXPECT_FALSE(r.killed_for.empty()) << r.stdout_text << r.stderr_text;
  EXPECT_NE(r.killed_for.find("out of memory"), std::string::npos) << r.killed_for;
}

// Defect: --cpu-seconds bound each process: several processes together
// used many times the allowance.
TEST_F(Hostile, CpuTimeIsCountedForAllProcessesTogether) {
  for (GroupMode mode : {GroupMode::kAuto, GroupMode::kNone}) {
    SandboxLimits limits;
    limits.cpu_seconds = 2;
    limits.cpu_cores = 0;  // no share: the count alone stops it
    limits.wall_time = seconds(60);
    Stopwatch watch;
    auto r = Run("for i in 1 2 3 4; do (while :; do :; done) & done; wait", limits, Group(mode));
    std::printf("cpu stop after %.1f s wall (%s)\n", watch.Seconds(), group_->Describe().c_str());
    EXPECT_NE(r.killed_for.find("CPU-seconds"), std::string::npos)
        << group_->Describe() << "\n" << r.stderr_text;
    EXPECT_LT(watch.Seconds(), 20.0);
  }
}

// Defect: file_mb capped each file, not all of them: 5 GiB went into /work.
TEST_F(Hostile, TheScratchDirectoryHasAQuota) {
  SandboxLimits limits;
  limits.disk_bytes = 20 << 20;
  limits.wall_time = seconds(60);
  auto r = Run("i=0; while [ $i -lt 40 ]; do head -c 2000000 /dev/zero > f$i; i=$((i+1)); "
               "sleep 0.05; done; echo wrote all",
               limits, Group());
  EXPECT_NE(r.killed_for.find("MiB in its scratch directory"), std::string::npos)
      << r.stdout_text << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("wrote all"), std::string::npos);
  EXPECT_LT(DiskUsage(dir_.string()), 40u << 20);
}

// A sandbox that could not be set up says so, not "exit status 125".
TEST_F(Hostile, ASandboxThatCannotStartSaysWhy) {
  class Unenterable final : public TaskGroup {
   public:
    std::string Describe() const override { return "a group no process can enter"; }
    bool BindsMemory() const override { return false; }
    bool BindsProcesses() const override { return false; }
    void SetLimits(const GroupLimits&) override {}
    bool EnterAfterFork() noexcept override { return false; }
    void Freeze() override {}
    void Thaw() override {}
    bool KillAll(std::chrono::milliseconds) override { return true; }
    std::vector<pid_t> Processes() override { return {}; }
    uint64_t CpuMicros() override { return 0; }
    uint64_t OomKills() override { return 0; }
  } group;
  auto r = Run("echo ran", {}, &group);
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_NE(r.stderr_text.find("could not start the command: cannot enter the task's cgroup"),
            std::string::npos)
      << r.stderr_text;
}

// A file removed while still open has no name to count by: it counts by
// the descriptor that holds it, in every kind of group.
TEST_F(Hostile, FilesRemovedButHeldOpenCountAgainstTheQuota) {
  for (GroupMode mode : {GroupMode::kAuto, GroupMode::kNone}) {
    SandboxLimits limits;
    limits.disk_bytes = 20 << 20;
    limits.wall_time = seconds(60);
    auto r = Run("exec 3>hidden; rm hidden; i=0; while [ $i -lt 40 ]; do "
                 "head -c 2000000 /dev/zero >&3; i=$((i+1)); sleep 0.05; done; echo wrote all",
                 limits, Group(mode));
    EXPECT_NE(r.killed_for.find("MiB in its scratch directory"), std::string::npos)
        << group_->Describe() << "\n" << r.stdout_text << r.stderr_text;
    EXPECT_EQ(r.stdout_text.find("wrote all"), std::string::npos);
    group_.reset();
  }
}

// Mapped with every descriptor closed: counted by its mapped extent.
TEST(HeldDeletedBytes, CountsFilesMappedAfterTheirNameAndDescriptorAreGone) {
  std::string dir = std::filesystem::temp_directory_path() / ("claw-held-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  std::string path = dir + "/mapped";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  constexpr size_t kSize = 8 << 20;
  ASSERT_EQ(ftruncate(fd, kSize), 0);
  void* map = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto held = [](dev_t dev) {
    uint64_t bytes = 0;
    EXPECT_TRUE(HeldDeletedBytes({getpid()}, dev, 1'000'000, &bytes));
    return bytes;
  };
  EXPECT_EQ(held(st.st_dev), 0u) << "it still has its name";
  unlink(path.c_str());
  EXPECT_EQ(held(st.st_dev), kSize) << "open and mapped: once";
  uint64_t partial = 0;
  EXPECT_FALSE(HeldDeletedBytes({getpid()}, st.st_dev, 3, &partial)) << "more than 3 entries";
  close(fd);
  EXPECT_EQ(held(st.st_dev), kSize);
  EXPECT_EQ(held(st.st_dev + 1), 0u) << "another filesystem's";
  munmap(map, kSize);
  EXPECT_EQ(held(st.st_dev), 0u);
  RemoveTree(dir);
}

// Defect: pausing stopped the worker, not the command, which ran on at
// 100% CPU. A frozen group uses no CPU until thawed.
TEST_F(Hostile, AFrozenTaskUsesNoCpu) {
  for (GroupMode mode : {GroupMode::kAuto, GroupMode::kNone}) {
    TaskGroup* group = Group(mode);
    SandboxLimits limits;
    limits.wall_time = seconds(4);
    std::thread run([&] { Run("while :; do :; done", limits, group); });
    std::this_thread::sleep_for(milliseconds(1500));
    // The agent's side: the same group, opened by name.
    auto agent_view = OpenTaskGroup(group_name_, getpid(), mode);
    agent_view->Freeze();
    uint64_t before = group->CpuMicros();
    std::this_thread::sleep_for(milliseconds(1000));
    uint64_t frozen = group->CpuMicros() - before;
    agent_view->Thaw();
    run.join();
    EXPECT_LT(frozen, 100'000u) << "CPU-µs used while frozen; " << group->Describe();
    group_.reset();
  }
}

// The kinds of group this machine offers, and the process tree that works
// everywhere: frozen, counted and killed as one.
TEST_F(Hostile, EveryKindOfGroupKillsItsWholeTree) {
  for (GroupMode mode : {GroupMode::kV2, GroupMode::kV1, GroupMode::kNone}) {
    TaskGroup* group = Group(mode);
    pid_t child = fork();
    if (child == 0) {
      if (!group->EnterAfterFork()) _exit(3);
      execl("/bin/sh", "sh", "-c", "sleep 300 & sleep 300 & sleep 300", nullptr);
      _exit(4);
    }
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_GE(Descendants({getpid()}).size(), 3u);
    EXPECT_TRUE(group->KillAll(seconds(5))) << group->Describe();
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status)) << group->Describe();
    EXPECT_TRUE(Descendants({getpid()}).empty()) << group->Describe();
    group_.reset();
  }
}

// Defect: an agent started with --memory-mb 512 ran a task with 4 GiB
// because the job asked; --cpu-seconds 3 let a task burn 10.
TEST_F(Hostile, TheContributorsCapsBindWhateverTheJobAsks) {
  ExecApp app;
  RunContext ctx;
  ctx.caps.memory_bytes = 64 << 20;
  ctx.caps.cpu_seconds = 1;
  ctx.scratch_dir = dir_.string();
  ctx.group = Group();
  auto r = app.Run(R"({"argv":["sh","-c","ulimit -v >&2; while :; do :; done"],"vars":{},
                       "timeout_s":60,"memory_mb":4096})",
                   ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 CPU-seconds"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(std::to_string(64 << 10)), std::string::npos)
      << "ulimit -v (KiB) shows the contributor's cap\n" << r.status().ToString();
}

// A command's stderr is arbitrary bytes: its failure still reaches the
// coordinator (as valid UTF-8, control characters escaped), never lost to
// an unparsable message.
TEST_F(Hostile, AFailureWithBinaryStderrKeepsItsMessage) {
  ExecApp app;
  RunContext ctx;
  ctx.scratch_dir = dir_.string();
  auto r = app.Run(R"({"argv":["sh","-c","printf 'bad \\377\\033[2J\\n' >&2; exit 5"],"vars":{},
                       "timeout_s":60})",
                   ctx);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("exit code 5"), std::string::npos) << m;
  EXPECT_NE(m.find("bad \\xff\\x1b[2J"), std::string::npos) << m;
  v1::WorkerResult res;
  res.set_error(r.status().ToString());
  std::string wire;
  ASSERT_TRUE(res.SerializeToString(&wire));
  EXPECT_TRUE(v1::WorkerResult().ParseFromString(wire)) << "a string field must be valid UTF-8";
}

// Defect: scratch directories of killed or cancelled tasks stayed in /tmp
// for good. A task's own directory goes with it; a worker clears its
// slot's at start; RemoveTree removes what a task made unremovable.
TEST_F(Hostile, ScratchDirectoriesGoOnEveryPath) {
  ExecApp app;
  RunContext ctx;
  ctx.scratch_dir = dir_.string();
  auto r = app.Run(R"({"argv":["sh","-c","mkdir -p a/b && touch a/b/f && chmod 0 a/b a && exit 3"],
                       "vars":{},"timeout_s":60})",
                   ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "a failed task's directory is removed";
  std::filesystem::create_directories(dir_ / "claw-task-old" / "x");
  chmod((dir_ / "claw-task-old" / "x").c_str(), 0);
  chmod((dir_ / "claw-task-old").c_str(), 0);
  EXPECT_TRUE(EmptyDirectory(dir_.string()));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

}  // namespace
}  // namespace claw
