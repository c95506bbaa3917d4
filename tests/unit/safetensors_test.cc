// safetensors (runtime/safetensors.h) against its spec: a round trip in F32 and BF16 with
// metadata and the 8-byte data alignment; a file written by hand from the spec's example; and
// every malformed file refused naming what is wrong (truncated, header past the file, overlapping
// offsets, holes, unknown dtypes, shapes that do not match their offsets, names given twice), and
// a refused write leaving no file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "runtime/safetensors.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fp8rt_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A file of the 8-byte length, `header` and `data` (bytes as given).
  std::string Raw(const std::string& header, const std::string& data, const char* name = "x.st") {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes += header + data;
    std::ofstream(Path(name), std::ios::binary) << bytes;
    return Path(name);
  }
  // Expects Read to refuse the file with a message containing `what`.
  static void ExpectRefused(const std::string& path, const std::string& what) {
    auto f = SafetensorsFile::Read(path);
    ASSERT_FALSE(f.ok()) << "accepted; wanted: " << what;
    EXPECT_NE(f.status().message().find(what), std::string::npos) << f.status().message();
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripInF32AndBf16WithMetadata) {
  const std::vector<SafetensorsOut> ts = {
      {"a.weight", {2, 3}, {1.0f, -2.5f, 3.25f, 1e-3f, 65504.0f, -0.0f}},
      {"b", {4}, {0.1f, 0.2f, 0.3f, 1.0f / 3.0f}},
      {"empty", {0, 5}, {}}};
  for (const std::string dtype : {"F32", "BF16"}) {
    const std::string p = Path("m_" + dtype + ".safetensors");
    ASSERT_TRUE(WriteSafetensors(p, ts, dtype, {{"format", "pt"}}).ok());
    std::ifstream in(p, std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    EXPECT_EQ((8 + n) % 8, 0u) << "the data starts 8-byte aligned";
    auto f = SafetensorsFile::Read(p);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->metadata().at("format"), "pt");
    ASSERT_EQ(f->tensors().size(), 3u);
    for (const auto& t : ts) {
      const SafetensorsTensor* info = f->Find(t.name);
      ASSERT_NE(info, nullptr) << t.name;
      EXPECT_EQ(info->dtype, dtype);
      EXPECT_EQ(info->shape, t.shape);
      auto v = f->Floats(t.name);
      ASSERT_TRUE(v.ok());
      ASSERT_EQ(v->size(), t.values.size());
      for (size_t i = 0; i < v->size(); ++i) {
        const float want = dtype == "F32" ? t.values[i] : ToFloat(bf16(t.values[i]));
        EXPECT_EQ(std::memcmp(&(*v)[i], &want, 4), 0) << t.name << "[" << i << "] " << (*v)[i];
      }
    }
  }
}

TEST_F(SafetensorsTest, ReadsAFileWrittenFromTheSpec) {
  // Little-endian F16 1.0, -2.0 and an I32 tensor, with the spec's optional space padding.
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("i":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"__metadata__":{"k":"v"}}   )";
  const std::string data = std::string("\x00\x3c\x00\xc0", 4) + std::string("\x07\x00\x00\x00", 4);
  auto f = SafetensorsFile::Read(Raw(header, data));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->Floats("h"), (std::vector<float>{1.0f, -2.0f}));
  auto i = f->Floats("i");
  ASSERT_FALSE(i.ok());
  EXPECT_NE(i.status().message().find("tensor 'i' is I32"), std::string::npos);
  EXPECT_EQ(f->Floats("nope").status().code(), StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, MalformedFilesAreRefusedNamingWhatIsWrong) {
  const std::string eight(8, '\x01');
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_TRUE(SafetensorsFile::Read(Raw(good, eight)).ok());
  // Truncated: the data, the header, the length itself.
  ExpectRefused(Raw(good, eight.substr(0, 7)), "outside the 7 data bytes");
  {
    std::ofstream(Path("short"), std::ios::binary) << std::string("\x05\x00\x00", 3);
    ExpectRefused(Path("short"), "shorter than the 8-byte header length");
    std::string bytes = Raw(good, eight, "cut");
    fs::resize_file(bytes, 20);
    ExpectRefused(bytes, "the header says");
  }
  ExpectRefused(Raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    eight),
                "overlaps");
  ExpectRefused(Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
                "belong to no tensor");
  ExpectRefused(Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
                "the tensors cover 4");
  ExpectRefused(Raw(R"({"a":{"dtype":"X9","shape":[2],"data_offsets":[0,8]}})", eight),
                "unknown dtype 'X9'");
  ExpectRefused(Raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
                "is 12 bytes but data_offsets span 8");
  ExpectRefused(Raw(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
                "non-negative integer");
  ExpectRefused(Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    eight),
                "tensor 'a' is named twice");
  ExpectRefused(Raw(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "needs dtype, shape");
  ExpectRefused(Raw(R"([1, 2])", eight), "not a JSON object");
  ExpectRefused(Raw(R"({"a": )", eight), "not valid JSON");
  EXPECT_EQ(SafetensorsFile::Read(Path("missing")).status().code(), StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, ARefusedWriteLeavesNoFile) {
  const std::string p = Path("out.safetensors");
  const Status s = WriteSafetensors(p, {{"w", {2, 2}, {1.0f, 2.0f, 3.0f}}}, "F32");
  EXPECT_NE(s.message().find("has 3 values for 4 elements"), std::string::npos) << s.message();
  EXPECT_NE(WriteSafetensors(p, {{"w", {1}, {1.0f}}, {"w", {1}, {2.0f}}}, "F32").message().find(
                "given twice"),
            std::string::npos);
  EXPECT_NE(WriteSafetensors(p, {{"w", {1}, {1.0f}}}, "F16").message().find("F32 or BF16"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

}  // namespace
}  // namespace fp8rt
