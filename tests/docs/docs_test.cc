// The README, the docs and the examples, run as written.
//
// Every fenced block tagged `sh` in the Markdown files below is a command a
// newcomer will paste: each document's blocks run, in order, as one bash
// script with `set -e`, from a directory laid out like the repository's root
// after `make build` (build/claw, examples/), with build/ on the PATH as the
// documents ask (the README exports it; the others say so). Blocks tagged `sh norun` (the
// benchmarks, `make test` itself) only have their syntax checked.
//
// The script runs under bubblewrap with a network namespace of its own, so
// the documents' default ports (7450, 7451) never meet a coordinator already
// running on this machine, an /etc/hosts where coord.example is this
// machine, and an empty /var/lib (docs/operations.md keeps its data in
// /var/lib/claw). The sandbox keeps the host's /proc and root's capabilities
// so that agents' own exec sandboxes nest inside it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

namespace fs = std::filesystem;


struct Block {
  std::string info;  // the fence's info string: "sh", "sh norun", ...
  std::string text;
  int line = 0;      // where it starts in its file
};

// The fenced code blocks of a Markdown text (fences may be indented, as in
// a list item; the indentation is taken off the block's lines).
std::vector<Block> FencedBlocks(const std::string& markdown) {
  std::vector<Block> blocks;
  std::istringstream in(markdown);
  std::string line;
  int n = 0;
  std::optional<Block> open;
  size_t indent = 0;
  while (std::getline(in, line)) {
    ++n;
    size_t first = line.find_first_not_of(' ');
    bool fence = first != std::string::npos && line.compare(first, 3, "```") == 0;
    if (!open) {
      if (fence) {
        open = Block{line.substr(first + 3), "", n};
        indent = first;
      }
      continue;
    }
    if (fence && first <= indent) {
      blocks.push_back(*open);
      open.reset();
      continue;
    }
    open->text += (line.size() >= indent ? line.substr(indent) : std::string()) + "\n";
  }
  return blocks;
}

bool Runnable(const Block& b) { return b.info == "sh"; }
bool SyntaxOnly(const Block& b) { return b.info == "sh norun"; }

// The documents whose `sh` blocks run, relative to the source root.
const std::vector<std::string> kRunDocuments = {"README.md", "docs/operations.md",
                                                "examples/ml/README.md"};

// Runs `program ARGS` with its output into `log`; returns its exit code, or
// -1 after `limit` (then it is killed).
int RunTo(const std::string& program, std::vector<std::string> args, const std::string& log,
          std::chrono::seconds limit) {
  Process p(std::move(args), log, program);
  if (!p.Exited(limit)) {
    p.Kill(SIGKILL);
    return -1;
  }
  return p.exit_code();
}

// Kills every process whose working directory lies under `dir`: what a
// document started in the background (--detach) and did not stop, as when a
// command failed half-way.
void KillProcessesUnder(const fs::path& dir) {
  for (int round = 0; round < 3; ++round) {
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::error_code ec;
      fs::path cwd = fs::read_symlink(e.path() / "cwd", ec);
      if (!ec && cwd.string().rfind(dir.string(), 0) == 0) kill(std::stoi(name), SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

class Docs : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("claw-docs-" + std::string(info->name()) + "-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "work" / "build");
    fs::create_directories(dir_ / "home");
  }
  void TearDown() override {
    KillProcessesUnder(dir_);
    if (!HasFailure() && !std::getenv("CLAW_KEEP_TEST_DIRS")) fs::remove_all(dir_);
  }

  // Runs the `sh` blocks of `document` as described at the top; returns
  // what they printed, and fails the test unless they all succeeded. Needs
  // bubblewrap (the test checks NeedSandbox first).
  std::string RunDocument(const std::string& document, std::chrono::seconds limit) {
    std::string markdown = ReadFile((fs::path(CLAW_SOURCE_DIR) / document).string());
    EXPECT_FALSE(markdown.empty()) << document;
    std::string script =
        "set -euo pipefail\n"
        "PS4='+ ' && set -x\n";
    int blocks = 0;
    for (const Block& b : FencedBlocks(markdown)) {
      if (!Runnable(b)) continue;
      script += "# " + document + ":" + std::to_string(b.line) + "\n" + b.text;
      ++blocks;
    }
    EXPECT_GT(blocks, 0) << document << " has no sh blocks";
    fs::path work = dir_ / "work";
    // The repository's root as `make build` leaves it, for the commands'
    // relative paths (build/claw, examples/...).
    fs::create_symlink(CLAW_BINARY, work / "build" / "claw");
    fs::path ml = fs::path(CLAW_BINARY).parent_path() / "libclaw_ml.so";
    if (fs::exists(ml)) fs::create_symlink(ml, work / "build" / "libclaw_ml.so");
    fs::create_symlink(fs::path(CLAW_SOURCE_DIR) / "examples", work / "examples");
    std::ofstream(dir_ / "script.sh") << script;
    std::ofstream(dir_ / "hosts") << "127.0.0.1 localhost coord.example\n::1 localhost\n";

    std::vector<std::string> argv = {
        "--dev-bind", "/", "/", "--tmpfs", "/var/lib", "--ro-bind",
        (dir_ / "hosts").string(), "/etc/hosts", "--unshare-net", "--unshare-ipc",
        "--die-with-parent", "--chdir", work.string(), "--clearenv", "--setenv", "HOME",
        (dir_ / "home").string(), "--setenv", "PATH",
        (work / "build").string() + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "--setenv", "LANG", "C.UTF-8"};
    for (const char* pass : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TMPDIR"}) {
      if (const char* v = std::getenv(pass)) argv.insert(argv.end(), {"--setenv", pass, v});
    }
    if (geteuid() == 0) argv.insert(argv.end(), {"--cap-add", "ALL"});
    argv.insert(argv.end(), {"bash", (dir_ / "script.sh").string()});
    std::string log = (dir_ / "output.log").string();
    int code = RunTo("/usr/bin/bwrap", argv, log, limit);
    std::string out = ReadFile(log);
    EXPECT_EQ(code, 0) << document << " did not run as written (exit " << code
                       << "; -1: timed out); its output:\n"
                       << out;
    // `export X=$(cmd)` hides cmd's failure from `set -e`: every CLI error
    // starts with "error:", so none may appear.
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_NE(line.rfind("error:", 0), 0u) << document << ": " << line << "\n" << out;
    }
    return out;
  }

  fs::path dir_;
};

TEST_F(Docs, TheReadmeRunsAsWritten) {
  CLAW_REQUIRE(NeedSandbox());
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  CLAW_REQUIRE(NeedProgram("/usr/bin/povray", "povray"));
  CLAW_REQUIRE(NeedProgram("/usr/bin/curl", "curl"));
  std::string out = RunDocument("README.md", std::chrono::minutes(15));
  EXPECT_NE(out.find("Black-Scholes"), std::string::npos) << out;
  EXPECT_NE(out.find("8 files"), std::string::npos) << "the rendered frames\n" << out;
  EXPECT_NE(out.find("claw_jobs_submitted_total"), std::string::npos) << out;
  EXPECT_NE(out.find("coordinator on ./claw-data stopped"), std::string::npos) << out;
}

TEST_F(Docs, OperationsRunAsWritten) {
  CLAW_REQUIRE(NeedSandbox());
  CLAW_REQUIRE(NeedProgram("/usr/bin/sqlite3", "sqlite3"));
  std::string out = RunDocument("docs/operations.md", std::chrono::minutes(5));
  EXPECT_NE(out.find("user bob (researcher) created"), std::string::npos) << out;
  EXPECT_NE(out.find("coordinator on /var/lib/claw stopped"), std::string::npos) << out;
}

TEST_F(Docs, TheMlExampleRunsAsWritten) {
  CLAW_REQUIRE(NeedSandbox());
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  std::string out = RunDocument("examples/ml/README.md", std::chrono::minutes(25));
  EXPECT_NE(out.find("144 trials"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_ / "work" / "best" / "model.pt")) << out;
}

// Every `sh` block in the project's Markdown is run by one of the tests
// above, and every `sh norun` block at least parses.
TEST_F(Docs, EveryShellBlockIsRunOrChecked) {
  std::set<std::string> covered(kRunDocuments.begin(), kRunDocuments.end());
  fs::path root = CLAW_SOURCE_DIR;
  std::vector<fs::path> documents = {root / "README.md"};
  for (const char* sub : {"docs", "examples"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / sub)) {
      if (e.path().extension() == ".md") documents.push_back(e.path());
    }
  }
  for (const fs::path& doc : documents) {
    std::string rel = fs::relative(doc, root).string();
    for (const Block& b : FencedBlocks(ReadFile(doc.string()))) {
      if (Runnable(b)) {
        EXPECT_TRUE(covered.count(rel)) << rel << ":" << b.line
                                        << " has a `sh` block that no test runs: tag it "
                                           "`sh norun` or add the document to kRunDocuments";
      } else if (SyntaxOnly(b)) {
        std::string file = (dir_ / "block.sh").string();
        std::ofstream(file) << b.text;
        std::filesystem::remove(dir_ / "bash-n.log");
        EXPECT_EQ(RunTo("/bin/bash", {"-n", file}, (dir_ / "bash-n.log").string(),
                        std::chrono::seconds(10)),
                  0)
            << rel << ":" << b.line << ": " << ReadFile((dir_ / "bash-n.log").string());
      }
    }
  }
}

TEST(DocsParser, FindsFencedBlocksAndTheirTags) {
  auto blocks = FencedBlocks(
      "text\n```sh\necho a\n```\n- item\n\n  ```sh norun\n  make x\n  ```\n```text\nout\n```\n");
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].info, "sh");
  EXPECT_EQ(blocks[0].text, "echo a\n");
  EXPECT_EQ(blocks[0].line, 2);
  EXPECT_EQ(blocks[1].info, "sh norun");
  EXPECT_EQ(blocks[1].text, "make x\n");
  EXPECT_EQ(blocks[2].info, "text");
}

}  // namespace
}  // namespace claw::testing
