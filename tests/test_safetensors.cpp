// Safetensors reader/writer: round trips, the exact on-disk layout, and every way a file can be
// malformed (each error must name the file and, where it applies, the tensor).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "format/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using kimi::DType;
using kimi::TensorSpec;

namespace {

// A fresh directory under /tmp per test, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kimi_st_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A file with the given header text (not padded, so tests control every byte) and data section.
std::string raw_file(const std::string& header, const std::string& data = "") { return le64(header.size()) + header + data; }

// Runs f, which must throw kimi::Error, and returns the message (empty + a test failure otherwise).
using kimi::test::error_of;

std::string open_error(const fs::path& p) {
  return error_of([&] { kimi::SafetensorsFile f(p); });
}

// Deterministic, distinct content per tensor so that mix-ups between tensors are caught.
std::function<void(std::span<std::byte>)> pattern_fill(int seed) {
  return [seed](std::span<std::byte> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte(uint8_t(i * 31 + size_t(seed) * 7 + 1));
  };
}

std::vector<std::byte> pattern_bytes(int seed, size_t n) {
  std::vector<std::byte> v(n);
  pattern_fill(seed)(v);
  return v;
}

size_t spec_bytes(const TensorSpec& t) {
  size_t n = kimi::dtype_size(t.dtype);
  for (int64_t d : t.shape) n *= size_t(d);
  return n;
}

bool same_bytes(std::span<const std::byte> a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Round trip

TEST(Safetensors, RoundTripAllDtypesAndShapes) {
  TempDir dir;
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::I8,   DType::U8,
                       DType::I16, DType::I32, DType::I64,  DType::BOOL, DType::F64};
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3}, {2, 3}, {3, 0, 2}, {1, 1, 1, 5}};
  std::vector<TensorSpec> specs;
  int seed = 0;
  for (DType t : all) {
    for (const auto& shape : shapes) {
      std::string name = "t";  // appended, not `"t" + ...`: avoids a GCC 12 -Wrestrict false positive
      name.append(std::to_string(seed)).append(".").append(kimi::dtype_name(t));
      specs.push_back({name, t, shape, pattern_fill(seed)});
      ++seed;
    }
  }
  const fs::path p = dir / "rt.safetensors";
  kimi::write_safetensors(p, specs, {{"source", "unit-test"}, {"step", "42"}});

  const kimi::SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const kimi::TensorView* v = f.find(s.name);
    ASSERT_NE(v, nullptr) << s.name;
    EXPECT_EQ(v->name, s.name);
    EXPECT_EQ(v->dtype, s.dtype) << s.name;
    EXPECT_EQ(v->shape, s.shape) << s.name;
    EXPECT_EQ(v->file, p);
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    EXPECT_EQ(v->numel(), numel) << s.name;
    EXPECT_TRUE(same_bytes(v->data, pattern_bytes(int(i), spec_bytes(s)))) << s.name;
  }
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.metadata(), (nlohmann::json{{"format", "pt"}, {"source", "unit-test"}, {"step", "42"}}));
  EXPECT_EQ(f.find("t0.F32")->shape_string(), "[]");
  EXPECT_EQ(f.find("t3.F32")->shape_string(), "[2, 3]");
}

TEST(Safetensors, EmptyFileRoundTrip) {
  TempDir dir;
  const fs::path p = dir / "empty.safetensors";
  kimi::write_safetensors(p, {});
  const kimi::SafetensorsFile f(p);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.metadata(), (nlohmann::json{{"format", "pt"}}));
}

TEST(Safetensors, WriterDataIsAlignedAndFillGetsExactSpan) {
  TempDir dir;
  // Names of every length mod 8 exercise every amount of padding.
  for (int len = 1; len <= 9; ++len) {
    std::vector<size_t> asked;
    std::vector<TensorSpec> specs = {
        {std::string(size_t(len), 'x'), DType::F32, {3}, [&](std::span<std::byte> s) { asked.push_back(s.size()); }},
        {"y", DType::I64, {2, 2}, [&](std::span<std::byte> s) { asked.push_back(s.size()); }},
        {"z", DType::BF16, {0}, nullptr},  // zero-size: fill is never needed
    };
    const fs::path p = dir / ("pad" + std::to_string(len) + ".safetensors");
    kimi::write_safetensors(p, specs);
    EXPECT_EQ(asked, (std::vector<size_t>{12, 32}));
    const std::string bytes = read_bytes(p);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(bytes[size_t(i)]);
    EXPECT_EQ(header_len % 8, 0u) << len;
    EXPECT_EQ(bytes.size(), 8 + header_len + 12 + 32) << len;
    EXPECT_EQ(bytes[8 + header_len - 1] == ' ' || bytes[8 + header_len - 1] == '}', true);
    const kimi::SafetensorsFile f(p);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.find("y")->data.data()) % 4, 0u);  // 8 + header is 8-aligned
  }
}

// ---------------------------------------------------------------------------------------------
// Exact layout

TEST(Safetensors, WriterMatchesSpecByteForByte) {
  TempDir dir;
  const fs::path p = dir / "exact.safetensors";
  const float a[2] = {1.0f, 2.0f};
  const uint16_t b = 0x3f80;  // bf16 1.0
  kimi::write_safetensors(p, {
                                 {"a", DType::F32, {2}, [&](std::span<std::byte> s) { std::memcpy(s.data(), a, 8); }},
                                 {"b", DType::BF16, {}, [&](std::span<std::byte> s) { std::memcpy(s.data(), &b, 2); }},
                             });
  // Layout by hand: u64 LE header length (139 bytes of JSON + 5 spaces = 144 = 0x90), the JSON
  // (metadata first, tensors in write order, keys dtype/shape/data_offsets), padding, then data.
  std::string expected("\x90\0\0\0\0\0\0\0", 8);
  expected +=
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[],"data_offsets":[8,10]}})";
  expected += "     ";
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  expected += std::string("\x80\x3f", 2);                          // bf16 1.0
  EXPECT_EQ(read_bytes(p), expected);
}

TEST(Safetensors, ReadsForeignLayoutWithGapsAnyOrderNoMetadataUnpadded) {
  TempDir dir;
  const fs::path p = dir / "foreign.safetensors";
  // "b" comes first in the data, "a" after a 3-byte gap; the header is not padded (odd length).
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[5,7]},"b":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}})";
  write_bytes(p, raw_file(header, std::string("\x01\x02GAP\x0a\x0b", 7)));
  const kimi::SafetensorsFile f(p);
  EXPECT_TRUE(f.metadata().is_object());
  EXPECT_TRUE(f.metadata().empty());
  ASSERT_NE(f.find("a"), nullptr);
  EXPECT_TRUE(same_bytes(f.find("a")->data, {std::byte{0x0a}, std::byte{0x0b}}));
  EXPECT_TRUE(same_bytes(f.find("b")->data, {std::byte{0x01}, std::byte{0x02}}));
}

TEST(Safetensors, ZeroSizeTensorsMayShareOffsets) {
  TempDir dir;
  const fs::path p = dir / "zeros.safetensors";
  const std::string header =
      R"({"e1":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"e2":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
      R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})";
  write_bytes(p, raw_file(header, std::string(4, '\0')));
  const kimi::SafetensorsFile f(p);
  EXPECT_EQ(f.find("e1")->numel(), 0);
  EXPECT_EQ(f.find("s")->numel(), 1);
}

// ---------------------------------------------------------------------------------------------
// Reader errors

TEST(SafetensorsErrors, MissingFile) {
  TempDir dir;
  const fs::path p = dir / "nope.safetensors";
  EXPECT_NE(open_error(p).find(p.string()), std::string::npos);
}

TEST(SafetensorsErrors, ShorterThanEightBytes) {
  TempDir dir;
  for (size_t n : {0, 1, 7}) {
    const fs::path p = dir / ("short" + std::to_string(n) + ".safetensors");
    write_bytes(p, std::string(n, '\0'));
    const std::string msg = open_error(p);
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("8-byte"), std::string::npos) << msg;
  }
}

TEST(SafetensorsErrors, HeaderLengthBeyondFileOrAbsurd) {
  TempDir dir;
  const fs::path good = dir / "good.safetensors";
  kimi::write_safetensors(good, {{"w", DType::F32, {4}, pattern_fill(1)}});
  const std::string bytes = read_bytes(good);

  const fs::path p = dir / "bad.safetensors";
  write_bytes(p, le64(bytes.size()) + bytes.substr(8));  // one byte more than the file can hold
  std::string msg = open_error(p);
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  for (uint64_t absurd : {uint64_t(100'000'001), uint64_t(1) << 40, ~uint64_t(0)}) {
    write_bytes(p, le64(absurd) + bytes.substr(8));
    msg = open_error(p);
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("absurd"), std::string::npos) << msg;
  }

  // A file cut inside its header reports the header length problem.
  write_bytes(p, bytes.substr(0, 20));
  msg = open_error(p);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, HeaderNotJsonOrNotObject) {
  TempDir dir;
  const fs::path p = dir / "h.safetensors";
  for (const std::string header : {"{not json", "", "{\"a\":", "[1,2]", "\"str\"", "42", "{} trailing", "\xff\xfe{}"}) {
    write_bytes(p, raw_file(header));
    const std::string msg = open_error(p);
    EXPECT_NE(msg.find(p.string()), std::string::npos) << header << " -> " << msg;
    EXPECT_TRUE(msg.find("JSON") != std::string::npos) << header << " -> " << msg;
  }
}

TEST(SafetensorsErrors, BadMetadata) {
  TempDir dir;
  const fs::path p = dir / "m.safetensors";
  write_bytes(p, raw_file(R"({"__metadata__":["pt"]})"));
  EXPECT_NE(open_error(p).find("__metadata__"), std::string::npos);
  write_bytes(p, raw_file(R"({"__metadata__":{"format":"pt","n":3}})"));
  const std::string msg = open_error(p);
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'n'"), std::string::npos) << msg;
}

// Each bad entry for tensor "bad.weight", next to a valid tensor; the message must name both the
// file and the tensor, plus a fragment that says what is wrong.
TEST(SafetensorsErrors, BadTensorEntries) {
  TempDir dir;
  const fs::path p = dir / "e.safetensors";
  struct Case {
    std::string entry;
    std::string data;
    std::string expect;
  };
  const std::string d8(8, '\0');
  const std::vector<Case> cases = {
      {R"("x")", d8, "not a JSON object"},
      {R"({"shape":[2],"data_offsets":[0,8]})", d8, "missing 'dtype'"},
      {R"({"dtype":"F32","data_offsets":[0,8]})", d8, "missing 'shape'"},
      {R"({"dtype":"F32","shape":[2]})", d8, "missing 'data_offsets'"},
      {R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})", d8, "'dtype' is not a string"},
      {R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})", d8, "'shape' is not an array"},
      {R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})", d8, "not a valid dimension"},
      {R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})", d8, "not a valid dimension"},
      {R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", d8, "negative dimension"},
      {R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]})", d8, "negative dimension"},
      {R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]})", d8, "not a valid dimension"},
      {R"({"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]})", d8, "F8_E4M3"},
      {R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})", d8, "'f32'"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":"0,8"})", d8, "not [begin, end]"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", d8, "not [begin, end]"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})", d8, "not [begin, end]"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})", d8, "not [begin, end]"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0.0,8]})", d8, "not [begin, end]"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", d8, "begin > end"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})", d8, "truncated"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]})", d8, "not [begin, end]"},
      {R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", d8, "needs 12 bytes"},
      {R"({"dtype":"BF16","shape":[2],"data_offsets":[0,8]})", d8, "needs 4 bytes"},
      {R"({"dtype":"F32","shape":[0],"data_offsets":[0,4]})", d8, "needs 0 bytes"},
      {R"({"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]})", d8, "more than 2^64"},
  };
  for (const Case& c : cases) {
    const std::string header = R"({"ok":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"bad.weight":)" + c.entry + "}";
    write_bytes(p, raw_file(header, c.data));
    const std::string msg = open_error(p);
    EXPECT_NE(msg.find(p.string()), std::string::npos) << c.entry << " -> " << msg;
    EXPECT_NE(msg.find("'bad.weight'"), std::string::npos) << c.entry << " -> " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.entry << " -> " << msg;
  }
}

TEST(SafetensorsErrors, TruncatedFile) {
  TempDir dir;
  const fs::path good = dir / "good.safetensors";
  kimi::write_safetensors(good, {{"first", DType::F32, {4}, pattern_fill(1)}, {"last", DType::F32, {4}, pattern_fill(2)}});
  const std::string bytes = read_bytes(good);
  const fs::path p = dir / "cut.safetensors";
  write_bytes(p, bytes.substr(0, bytes.size() - 1));  // lose the final byte of "last"
  const std::string msg = open_error(p);
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'last'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  write_bytes(p, bytes.substr(0, bytes.size() - 16));  // header intact, data section empty
  EXPECT_NE(open_error(p).find("truncated"), std::string::npos);
}

TEST(SafetensorsErrors, OverlappingTensors) {
  TempDir dir;
  const fs::path p = dir / "o.safetensors";
  write_bytes(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          std::string(8, '\0')));
  const std::string msg = open_error(p);
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlaps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------
// Writer errors

TEST(SafetensorsWriter, RejectsBadSpecsWithoutCreatingAFile) {
  TempDir dir;
  const fs::path p = dir / "w.safetensors";
  const auto fill = pattern_fill(0);
  const std::vector<std::pair<std::vector<TensorSpec>, std::string>> cases = {
      {{{"a", DType::F32, {1}, fill}, {"a", DType::F32, {1}, fill}}, "duplicate"},
      {{{"__metadata__", DType::F32, {1}, fill}}, "reserved"},
      {{{"neg", DType::F32, {2, -1}, fill}}, "'neg'"},
      {{{"nofill", DType::F32, {2}, nullptr}}, "'nofill'"},
  };
  for (const auto& [specs, expect] : cases) {
    const std::string msg = error_of([&] { kimi::write_safetensors(p, specs); });
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] { kimi::write_safetensors(p, {}, {{"n", 1}}); }).find("'n'"), std::string::npos);
  EXPECT_NE(error_of([&] { kimi::write_safetensors(p, {}, nlohmann::json::array()); }).find("metadata"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(SafetensorsWriter, FailedFillLeavesNoFileAndKeepsTheOldOne) {
  TempDir dir;
  const fs::path p = dir / "w.safetensors";
  auto throwing = [](std::span<std::byte>) { throw std::runtime_error("generator failed"); };
  EXPECT_THROW(kimi::write_safetensors(p, {{"a", DType::F32, {2}, pattern_fill(0)}, {"b", DType::F32, {2}, throwing}}),
               std::runtime_error);
  EXPECT_TRUE(fs::is_empty(dir.path()));  // neither the target nor a temp file

  kimi::write_safetensors(p, {{"old", DType::U8, {3}, pattern_fill(5)}});
  const std::string before = read_bytes(p);
  EXPECT_THROW(kimi::write_safetensors(p, {{"b", DType::F32, {2}, throwing}}), std::runtime_error);
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(SafetensorsWriter, MissingDirectoryNamesThePath) {
  TempDir dir;
  const fs::path p = dir / "no_such_dir" / "w.safetensors";
  const std::string msg = error_of([&] { kimi::write_safetensors(p, {}); });
  EXPECT_NE(msg.find((dir / "no_such_dir").string()), std::string::npos) << msg;
}

TEST(SafetensorsWriter, OverwritesExistingFile) {
  TempDir dir;
  const fs::path p = dir / "w.safetensors";
  kimi::write_safetensors(p, {{"a", DType::F32, {100}, pattern_fill(0)}});
  kimi::write_safetensors(p, {{"b", DType::U8, {1}, pattern_fill(1)}});
  const kimi::SafetensorsFile f(p);
  EXPECT_EQ(f.tensors().size(), 1u);
  EXPECT_NE(f.find("b"), nullptr);
}

TEST(Safetensors, FileIsMovable) {
  TempDir dir;
  const fs::path p = dir / "mv.safetensors";
  kimi::write_safetensors(p, {{"a", DType::I32, {5}, pattern_fill(3)}});
  kimi::SafetensorsFile f(p);
  const std::byte* data = f.find("a")->data.data();
  kimi::SafetensorsFile g(std::move(f));
  EXPECT_EQ(g.find("a")->data.data(), data);  // views still point into the same mapping
  EXPECT_TRUE(same_bytes(g.find("a")->data, pattern_bytes(3, 20)));
}
