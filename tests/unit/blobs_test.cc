// BlobDir: content-addressed files that are checked on every way in and out.
#include "common/blobs.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace claw {
namespace {

namespace fs = std::filesystem;

class BlobDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("claw-blobs-" + std::to_string(getpid()));
    fs::remove_all(root_);
    ASSERT_TRUE(dir_.Init().ok());
  }
  void TearDown() override { fs::remove_all(root_); }
  static std::string ReadAll(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  fs::path root_ = fs::temp_directory_path() / ("claw-blobs-" + std::to_string(getpid()));
  BlobDir dir_{root_.string()};
};

TEST(Sha256, MatchesTheStandardTestVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(IsBlobHash(Sha256Hex("")));
  EXPECT_FALSE(IsBlobHash("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
  EXPECT_FALSE(IsBlobHash("../../etc/passwd"));
}

TEST_F(BlobDirTest, AWriterPublishesOnlyContentThatMatchesItsName) {
  std::string hash = Sha256Hex("hello");
  auto w = dir_.Begin(hash, 100);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write("hel").ok());
  ASSERT_TRUE((*w)->Write("lo").ok());
  auto n = (*w)->Commit();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 5u);
  EXPECT_TRUE(dir_.Has(hash));
  EXPECT_EQ(ReadAll(dir_.PathOf(hash)), "hello");

  std::string other = Sha256Hex("something else");
  auto forged = dir_.Begin(other, 100);
  ASSERT_TRUE(forged.ok());
  ASSERT_TRUE((*forged)->Write("not that").ok());
  auto refused = (*forged)->Commit();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(other), std::string::npos);
  EXPECT_FALSE(dir_.Has(other));
  forged->reset();
  EXPECT_TRUE(fs::is_empty(root_ / "tmp")) << "no temporary file is left behind";
}

TEST_F(BlobDirTest, SizeLimitsAndBadNamesAreRefused) {
  auto w = dir_.Begin(Sha256Hex("0123456789"), 4);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Write("0123456789").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(dir_.Begin("../x", 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(dir_.Has("../x"));
}

TEST_F(BlobDirTest, ImportHashesAFileAndRefusesLinks) {
  std::ofstream(root_ / "f.txt") << "file content";
  auto h = dir_.Import((root_ / "f.txt").string(), 1 << 20);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, Sha256Hex("file content"));
  fs::create_symlink(root_ / "f.txt", root_ / "link");
  auto link = dir_.Import((root_ / "link").string(), 1 << 20);
  EXPECT_EQ(link.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dir_.Import((root_ / "f.txt").string(), 3).status().code(),
            StatusCode::kResourceExhausted);
}

TEST_F(BlobDirTest, ExportChecksTheStoredCopyAndDropsACorruptOne) {
  std::ofstream(root_ / "f.txt") << "precious";
  auto h = dir_.Import((root_ / "f.txt").string(), 1 << 20);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(dir_.Export(*h, (root_ / "copy").string()).ok());
  EXPECT_EQ(ReadAll(root_ / "copy"), "precious");
  std::ofstream(dir_.PathOf(*h), std::ios::trunc) << "tampered";  // bit rot, or a bad actor
  Status st = dir_.Export(*h, (root_ / "copy2").string());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_FALSE(fs::exists(root_ / "copy2"));
  EXPECT_FALSE(dir_.Has(*h)) << "removed, so it is fetched again";
}

TEST_F(BlobDirTest, InitClearsTemporaryFilesLeftByACrash) {
  std::ofstream(root_ / "tmp" / "half-written") << "x";
  ASSERT_TRUE(dir_.Init().ok());
  EXPECT_TRUE(fs::is_empty(root_ / "tmp"));
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

// An agent's cache is bounded: least recently used blobs go first, and
// blobs a held task needs are never removed.
TEST_F(BlobDirTest, TrimRemovesTheLeastRecentlyUsedButNeverWhatIsKept) {
  std::vector<std::string> hashes;
  for (int i = 0; i < 5; ++i) {
    auto h = dir_.Put(std::string(1000, static_cast<char>('a' + i)));
    ASSERT_TRUE(h.ok());
    hashes.push_back(*h);
    // Distinct times of use: a, b, c, d, e from oldest.
    timespec t[2] = {{1000 + i, 0}, {1000 + i, 0}};
    utimensat(AT_FDCWD, dir_.PathOf(*h).c_str(), t, 0);
  }
  dir_.Touch(hashes[0]);  // a used just now
  auto keep = [&](std::string_view h) { return h == hashes[1]; };  // b pinned
  EXPECT_EQ(dir_.Trim(5000, keep), 0u) << "under the limit: nothing goes";
  EXPECT_EQ(dir_.Trim(2500, keep), 3000u);
  EXPECT_TRUE(dir_.Has(hashes[0])) << "recently used";
  EXPECT_TRUE(dir_.Has(hashes[1])) << "kept";
  EXPECT_FALSE(dir_.Has(hashes[2]));
  EXPECT_FALSE(dir_.Has(hashes[3]));
  EXPECT_FALSE(dir_.Has(hashes[4])) << "e: newer than c and d, older than a";
  dir_.Remove(hashes[0]);
  EXPECT_FALSE(dir_.Has(hashes[0]));
  dir_.Remove(hashes[0]);  // absent: fine
}

// A file a task has just written is not trimmed before the agent can pin
// it, however small the cache.
TEST_F(BlobDirTest, TrimSparesBlobsNewerThanItsSpare) {
  auto old = dir_.Put(std::string(1000, 'o')), fresh = dir_.Put(std::string(1000, 'f'));
  ASSERT_TRUE(old.ok() && fresh.ok());
  timespec t[2] = {{1000, 0}, {1000, 0}};
  utimensat(AT_FDCWD, dir_.PathOf(*old).c_str(), t, 0);
  EXPECT_EQ(dir_.Trim(0, nullptr, std::chrono::seconds(60)), 1000u);
  EXPECT_FALSE(dir_.Has(*old));
  EXPECT_TRUE(dir_.Has(*fresh)) << "written just now";
  EXPECT_EQ(dir_.Trim(0, nullptr), 1000u) << "without a spare it goes";
}

}  // namespace
}  // namespace claw
