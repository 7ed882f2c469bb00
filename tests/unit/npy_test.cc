// .npy files (src/tensors/npy.h): files numpy wrote, read here; files
// written here, read by numpy; and every lie a header can tell.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tensors/npy.h"
#include "tensors/npz.h"
#include "tests/requirements.h"

namespace claw {
namespace {

using namespace claw::tensors;

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs Python with numpy in `dir`; its standard output.
std::string Numpy(const std::filesystem::path& dir, const std::string& code) {
  std::string cmd = "cd '" + dir.string() + "' && /usr/bin/python3 -c \"import numpy as np\n" + code + "\" 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = p ? pclose(p) : -1;
  EXPECT_EQ(rc, 0) << out;
  return out;
}

class NpyFromNumpy : public ::testing::Test {
 protected:
  void SetUp() override {
    Status need = testing::NeedProgram("/usr/bin/python3", "python3-numpy");
    if (need.ok() && std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
      need = FailedPrecondition("numpy is missing: apt-get install python3-numpy "
                                "(scripts/setup.sh installs it)");
    }
    if (!need.ok()) {
      if (testing::MaySkip()) GTEST_SKIP() << need.message();
      FAIL() << need.message();
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("claw-npy-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(NpyFromNumpy, ReadsEveryDtypeAndShapeNumpyWrites) {
  Numpy(dir_, R"(
for code in ['f8', 'f4', 'f2', 'i8', 'i4', 'i2', 'i1', 'u4', 'u2', 'u1']:
    np.save(code + '.npy', (np.arange(24) - 5).astype(code).reshape(2, 3, 4))
np.save('b1.npy', np.array([True, False, True]))
np.save('scalar.npy', np.float32(2.5))
np.save('empty.npy', np.zeros((0, 7), dtype='f4'))
np.save('one.npy', np.arange(5, dtype='i8'))
np.lib.format.write_array(open('v2.npy', 'wb'), np.arange(6, dtype='f4').reshape(3, 2), version=(2, 0))
)");
  struct Case {
    std::string file;
    DType dtype;
    std::vector<int64_t> shape;
  };
  for (const Case& c : std::vector<Case>{{"f8", DType::kF64, {2, 3, 4}},
                                         {"f4", DType::kF32, {2, 3, 4}},
                                         {"f2", DType::kF16, {2, 3, 4}},
                                         {"i8", DType::kI64, {2, 3, 4}},
                                         {"i4", DType::kI32, {2, 3, 4}},
                                         {"i2", DType::kI16, {2, 3, 4}},
                                         {"i1", DType::kI8, {2, 3, 4}},
                                         {"u4", DType::kU32, {2, 3, 4}},
                                         {"u2", DType::kU16, {2, 3, 4}},
                                         {"u1", DType::kU8, {2, 3, 4}},
                                         {"b1", DType::kBool, {3}},
                                         {"scalar", DType::kF32, {}},
                                         {"empty", DType::kF32, {0, 7}},
                                         {"one", DType::kI64, {5}},
                                         {"v2", DType::kF32, {3, 2}}}) {
    SCOPED_TRACE(c.file);
    auto t = ParseNpy(ReadAll(dir_ / (c.file + ".npy")));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->dtype, c.dtype);
    EXPECT_EQ(t->shape, c.shape);
    EXPECT_EQ(t->data.size(), static_cast<size_t>(t->elements()) * DTypeSize(c.dtype));
  }
  // The values themselves: arange(24) - 5 as int32, element 23 = 18.
  auto i4 = ParseNpy(ReadAll(dir_ / "i4.npy"));
  int32_t last;
  std::memcpy(&last, i4->data.data() + 23 * 4, 4);
  EXPECT_EQ(last, 18);
  auto f4 = ParseNpy(ReadAll(dir_ / "scalar.npy"));
  float v;
  std::memcpy(&v, f4->data.data(), 4);
  EXPECT_EQ(v, 2.5f);
}

TEST_F(NpyFromNumpy, NumpyReadsWhatItWrites) {
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"a", {2, 3}}, {"b", {5}}, {"c", {}}}) {
    Tensor t;
    t.dtype = DType::kI16;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) {
      int16_t x = static_cast<int16_t>(i * 7 - 3);
      t.data.append(reinterpret_cast<const char*>(&x), 2);
    }
    auto bytes = WriteNpy(t);
    ASSERT_TRUE(bytes.ok());
    std::ofstream(dir_ / (name + ".npy"), std::ios::binary) << *bytes;
    auto again = ParseNpy(*bytes);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->shape, shape);
    EXPECT_EQ(again->data, t.data);
  }
  std::string out = Numpy(dir_, R"(
for n in 'abc':
    a = np.load(n + '.npy')
    print(n, a.dtype, a.shape, int(a.sum()))
)");
  EXPECT_EQ(out, "a int16 (2, 3) 87\nb int16 (5,) 55\nc int16 () -3\n");
}

TEST_F(NpyFromNumpy, RefusesWhatItCannotReadNamingWhy) {
  Numpy(dir_, R"(
np.save('big.npy', np.arange(4, dtype='>f4'))
np.save('fortran.npy', np.asfortranarray(np.arange(6, dtype='f4').reshape(2, 3)))
np.save('object.npy', np.array([{'a': 1}], dtype=object), allow_pickle=True)
np.save('struct.npy', np.zeros(2, dtype=[('x', 'f4'), ('y', 'i4')]))
np.save('complex.npy', np.zeros(2, dtype='c8'))
np.save('text.npy', np.array(['ab', 'cd']))
)");
  for (const auto& [file, error] : std::vector<std::pair<std::string, std::string>>{
           {"big", "is big-endian; save it little-endian (a.astype('<f4'))"},
           {"fortran", "Fortran order"},
           {"object", "holds Python objects (a pickle), which are never loaded"},
           {"struct", "not a simple dtype"},
           {"complex", "dtype \"<c8\" is not supported"},
           {"text", "dtype \"<U2\" is not supported"}}) {
    SCOPED_TRACE(file);
    auto t = ParseNpy(ReadAll(dir_ / (file + ".npy")));
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(error), std::string::npos) << t.status().message();
  }
}

// A version 1.0 file with `header` (padded to end in '\n') and `data`.
std::string File(std::string header, const std::string& data, uint8_t major = 1) {
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

TEST(Npy, RefusesEveryLieNamingWhatIsWrong) {
  const std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string six(24, '\0');
  ASSERT_TRUE(ParseNpy(File(h, six)).ok());
  struct Case {
    std::string bytes, error;
  };
  std::vector<Case> cases = {
      {"", "not a .npy file"},
      {"PK\x03\x04 a zip", "not a .npy file"},
      {File(h, six, 9), "format version 9 is not 1, 2 or 3"},
      {File(h, six).substr(0, 30), "truncated in its header"},
      {File(h, six.substr(4)), "the header says 24 bytes of data (6 elements of F32), the file holds 20"},
      {File(h, six + "x"), "the file holds 25"},
      {File("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", six),
       "shape: more than"},
      {File("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", ""),
       "shape has 9 dimensions (at most 8)"},
      {File("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", six), "not a string, True, False"},
      {File("{'descr': '<f4', 'fortran_order': False}", six), "lacks shape"},
      {File("{'descr': '<f4', 'shape': (2, 3)}", six), "lacks fortran_order"},
      {File("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", six),
       "the value of 'extra' is not"},
      {File("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'evil': 'x'}", six),
       "unknown header key \"evil\""},
      {File("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", six), "no ',' after the value of 'descr'"},
      {File("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} trailing", six), "text after the closing }"},
      {File("['descr']", six), "it does not start with {"},
      // Found by the fuzzer: shapes given twice once read as their concatenation.
      {File("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (6,)}", six),
       "names shape twice"},
      {File("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", six),
       "names descr twice"},
      {File("{'descr': '<f4', 'fortran_order': 1, 'shape': (2, 3)}", six), "'fortran_order' is not"},
      {File("{'descr': '<g16', 'fortran_order': False, 'shape': (2, 3)}", six), "dtype \"<g16\" is not supported"},
      {std::string("\x93NUMPY\x01\x00\xff\xff", 10) + std::string(70000, ' '), "it does not end with a newline"},
  };
  for (const Case& c : cases) {
    auto t = ParseNpy(c.bytes);
    ASSERT_FALSE(t.ok()) << "accepted: " << c.error;
    EXPECT_NE(t.status().message().find(c.error), std::string::npos)
        << "wanted \"" << c.error << "\", got \"" << t.status().message() << "\"";
  }
  // A header longer than the limit (numpy's own default is 10,000 bytes).
  NpyLimits small;
  small.max_header_bytes = 32;
  auto t = ParseNpy(File(h, six), small);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("(at most 32)"), std::string::npos) << t.status().message();
}

TEST(Npy, ReadsTheHeaderAloneFromAFilesFirstBytes) {
  std::string six(24, '\0');
  std::string file = File("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", six);
  // What a reader that maps a large file does: the header from its first
  // bytes, the data left where it is.
  auto h = ParseNpyHeader(std::string_view(file).substr(0, file.size() - 24), file.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->data_offset, file.size() - 24);
  EXPECT_EQ(h->bytes, 24u);
  EXPECT_EQ(h->elements(), 6);
}

TEST(Npy, Bf16HasNoNumpyDtype) {
  Tensor t{"", DType::kBF16, {1}, std::string(2, '\0')};
  auto bytes = WriteNpy(t);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("BF16 has no numpy dtype"), std::string::npos);
}

}  // namespace
}  // namespace claw

// ---- .npz archives (src/tensors/npz.h) -----------------------------------------

namespace claw {
namespace {

// What numpy.savez and numpy.savez_compressed write reads back as the very
// .npy files numpy.save writes, member by member.
TEST_F(NpyFromNumpy, NpzArchivesReadAsTheNpyFilesTheyHold) {
  Numpy(dir_, R"(
a = np.arange(12, dtype=np.uint8).reshape(3, 4)
b = np.linspace(0, 1, 1000, dtype=np.float32).reshape(10, 100)
np.savez('s.npz', train_inputs=a, train_targets=b)
np.savez_compressed('c.npz', train_inputs=a, train_targets=b)
np.save('a.npy', a)
np.save('b.npy', b)
)");
  for (const char* archive : {"s.npz", "c.npz"}) {
    auto m = ReadNpz(ReadAll(dir_ / archive));
    ASSERT_TRUE(m.ok()) << archive << ": " << m.status().ToString();
    ASSERT_EQ(m->size(), 2u) << archive;
    EXPECT_EQ((*m)[0].name, "train_inputs");
    EXPECT_EQ((*m)[1].name, "train_targets");
    EXPECT_EQ((*m)[0].bytes, ReadAll(dir_ / "a.npy")) << archive;
    EXPECT_EQ((*m)[1].bytes, ReadAll(dir_ / "b.npy")) << archive;
  }
}

TEST_F(NpyFromNumpy, NpzArchivesThatLieAreRefusedNamingWhy) {
  // Archives Python's zipfile writes on purpose wrong, and bytes changed.
  Numpy(dir_, R"(
import zipfile, io
np.save('x.npy', np.zeros(1000, dtype=np.float32))
raw = open('x.npy', 'rb').read()
def zipped(name, members, method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(name, 'w', method) as z:
        for n, d in members:
            z.writestr(n, d)
zipped('path.npz', [('../evil.npy', raw)])
zipped('dir.npz', [('sub/x.npy', raw)])
zipped('notnpy.npz', [('x.txt', raw)])
zipped('bz.npz', [('x.npy', raw)], zipfile.ZIP_BZIP2)
zipped('twice.npz', [('x.npy', raw), ('x.npy', raw)])
zipped('deflated.npz', [('x.npy', raw)], zipfile.ZIP_DEFLATED)
)");
  const std::string deflated = ReadAll(dir_ / "deflated.npz");
  ASSERT_TRUE(ReadNpz(deflated).ok());
  // The central directory's CRC, then its uncompressed size, falsified:
  // a deflated member that inflates beyond what it declares is a bomb.
  const size_t central = deflated.find("PK\x01\x02");
  ASSERT_NE(central, std::string::npos);
  std::string crc = deflated, small = deflated;
  crc[central + 16] ^= 1;
  small[central + 24] = 10;
  small[central + 25] = small[central + 26] = small[central + 27] = 0;
  std::string encrypted = deflated;
  encrypted[central + 8] |= 1;
  struct Case {
    std::string bytes, error;
  };
  std::vector<Case> cases = {
      {"", "not a ZIP archive"},
      {ReadAll(dir_ / "x.npy"), "no end of central directory"},
      {ReadAll(dir_ / "path.npz"), "member ../evil.npy: not a plain name"},
      {ReadAll(dir_ / "dir.npz"), "member sub/x.npy: not a plain name"},
      {ReadAll(dir_ / "notnpy.npz"), "member x.txt: not a plain name ending in .npy"},
      {ReadAll(dir_ / "bz.npz"), "compression method 12"},
      {ReadAll(dir_ / "twice.npz"), "member x.npy: in the archive twice"},
      {crc, "CRC-32 does not match"},
      {small, "does not inflate to its declared 10 bytes"},
      {encrypted, "encrypted"},
      {"X" + deflated.substr(1), "member x.npy: no local header where the directory says"},
  };
  for (const Case& c : cases) {
    auto m = ReadNpz(c.bytes);
    ASSERT_FALSE(m.ok()) << "accepted: " << c.error;
    EXPECT_NE(m.status().message().find(c.error), std::string::npos)
        << "wanted \"" << c.error << "\", got \"" << m.status().message() << "\"";
  }
  NpzLimits tight;
  tight.max_member_bytes = 100;
  auto over = ReadNpz(deflated, tight);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("over the limit"), std::string::npos) << over.status().message();
}

}  // namespace
}  // namespace claw
