// Checkpoint directories: sharded writing + reading back through the index, the single-file and
// directory-scan fallbacks, and the errors a broken model directory must produce.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "format/checkpoint.h"
#include "format/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using kimi::Checkpoint;
using kimi::DType;
using kimi::TensorSpec;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kimi_ckpt_XXXXXX").string();
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

using kimi::test::error_of;

std::string open_error(const fs::path& dir) {
  return error_of([&] { Checkpoint c(dir); });
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// Every byte of tensor `seed` is a function of the seed and position, so data mix-ups show.
std::function<void(std::span<std::byte>)> pattern_fill(int seed) {
  return [seed](std::span<std::byte> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte(uint8_t(i * 13 + size_t(seed) * 29 + 3));
  };
}

bool has_pattern(const kimi::TensorView& v, int seed) {
  std::vector<std::byte> want(v.data.size());
  pattern_fill(seed)(want);
  return want.empty() || std::memcmp(want.data(), v.data.data(), want.size()) == 0;
}

// n U8 tensors of the given byte sizes, named w0, w1, ...
std::vector<TensorSpec> u8_tensors(const std::vector<int64_t>& sizes) {
  std::vector<TensorSpec> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back({std::string("w").append(std::to_string(i)), DType::U8, {sizes[i]}, pattern_fill(int(i))});
  return out;
}

std::vector<std::string> dir_listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sharded writing

TEST(Checkpoint, ShardedWriteAndReadBack) {
  TempDir dir;
  std::vector<TensorSpec> specs = {
      {"model.embed_tokens.weight", DType::BF16, {10, 5}, pattern_fill(0)},          // 100 B
      {"model.layers.0.input_layernorm.weight", DType::F32, {5}, pattern_fill(1)},   // 20 B
      {"model.layers.0.mlp.gate.weight", DType::BF16, {8, 5}, pattern_fill(2)},      // 80 B
      {"model.layers.0.mlp.experts.0.weight_packed", DType::I32, {4, 2}, pattern_fill(3)},  // 32 B
      {"model.layers.0.mlp.experts.0.weight_shape", DType::I32, {2}, pattern_fill(4)},      // 8 B
      {"model.norm.weight", DType::F32, {}, pattern_fill(5)},                        // 4 B
      {"lm_head.weight", DType::BF16, {10, 5}, pattern_fill(6)},                     // 100 B
  };
  kimi::write_sharded_checkpoint(dir.path(), specs, 128);
  // Greedy in order: [100, 20] | [80, 32, 8, 4] | [100].
  EXPECT_EQ(dir_listing(dir.path()),
            (std::vector<std::string>{"model-00001-of-000003.safetensors", "model-00002-of-000003.safetensors",
                                      "model-00003-of-000003.safetensors", "model.safetensors.index.json"}));

  const nlohmann::json index = read_json(dir / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 344);
  const nlohmann::json expected_map = {
      {"model.embed_tokens.weight", "model-00001-of-000003.safetensors"},
      {"model.layers.0.input_layernorm.weight", "model-00001-of-000003.safetensors"},
      {"model.layers.0.mlp.gate.weight", "model-00002-of-000003.safetensors"},
      {"model.layers.0.mlp.experts.0.weight_packed", "model-00002-of-000003.safetensors"},
      {"model.layers.0.mlp.experts.0.weight_shape", "model-00002-of-000003.safetensors"},
      {"model.norm.weight", "model-00002-of-000003.safetensors"},
      {"lm_head.weight", "model-00003-of-000003.safetensors"},
  };
  EXPECT_EQ(index["weight_map"], expected_map);

  const Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.dir(), dir.path());
  EXPECT_EQ(ckpt.num_tensors(), specs.size());
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(ckpt.names(), names);
  for (size_t i = 0; i < specs.size(); ++i) {
    const kimi::TensorView& v = ckpt.get(specs[i].name, specs[i].shape);
    EXPECT_EQ(v.dtype, specs[i].dtype);
    EXPECT_EQ(v.file, dir.path() / expected_map[specs[i].name].get<std::string>());
    EXPECT_TRUE(has_pattern(v, int(i))) << specs[i].name;
    EXPECT_TRUE(ckpt.contains(specs[i].name));
  }
  EXPECT_FALSE(ckpt.contains("nope"));
  EXPECT_EQ(ckpt.find("nope"), nullptr);
}

TEST(Checkpoint, OversizedTensorGetsItsOwnShard) {
  TempDir dir;
  kimi::write_sharded_checkpoint(dir.path(), u8_tensors({50, 40, 400, 10, 60}), 100);
  // [50, 40] | [400] | [10, 60]
  const nlohmann::json wm = read_json(dir / "model.safetensors.index.json")["weight_map"];
  EXPECT_EQ(wm["w0"], "model-00001-of-000003.safetensors");
  EXPECT_EQ(wm["w1"], "model-00001-of-000003.safetensors");
  EXPECT_EQ(wm["w2"], "model-00002-of-000003.safetensors");
  EXPECT_EQ(wm["w3"], "model-00003-of-000003.safetensors");
  EXPECT_EQ(wm["w4"], "model-00003-of-000003.safetensors");
  const Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.get("w2").data.size(), 400u);
  EXPECT_TRUE(has_pattern(ckpt.get("w2"), 2));

  TempDir dir2;  // oversized first tensor, then exact fits
  kimi::write_sharded_checkpoint(dir2.path(), u8_tensors({150, 100, 0, 1}), 100);
  const nlohmann::json wm2 = read_json(dir2 / "model.safetensors.index.json")["weight_map"];
  EXPECT_EQ(wm2["w0"], "model-00001-of-000003.safetensors");
  EXPECT_EQ(wm2["w1"], "model-00002-of-000003.safetensors");
  EXPECT_EQ(wm2["w2"], "model-00002-of-000003.safetensors");  // zero bytes still fit
  EXPECT_EQ(wm2["w3"], "model-00003-of-000003.safetensors");
  EXPECT_EQ(Checkpoint(dir2.path()).num_tensors(), 4u);
}

TEST(Checkpoint, SingleShardWritesModelSafetensorsAndNoIndex) {
  TempDir dir;
  // A stale index from an earlier sharded write must not shadow the new single file.
  kimi::write_sharded_checkpoint(dir.path(), u8_tensors({60, 60}), 100);
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  kimi::write_sharded_checkpoint(dir.path(), u8_tensors({60, 60, 7}), 1000);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  const Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.num_tensors(), 3u);
  EXPECT_EQ(ckpt.get("w2").file, dir / "model.safetensors");

  TempDir fresh;  // creates the directory, and an empty tensor list is still one file
  kimi::write_sharded_checkpoint(fresh / "a" / "b", {}, 10);
  EXPECT_EQ(dir_listing(fresh / "a" / "b"), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(Checkpoint(fresh / "a" / "b").num_tensors(), 0u);
}

TEST(Checkpoint, ShardedWriterRejectsDuplicatesAcrossShards) {
  TempDir dir;
  std::vector<TensorSpec> specs = u8_tensors({80, 80});
  specs[1].name = specs[0].name;
  const std::string msg = error_of([&] { kimi::write_sharded_checkpoint(dir.path(), specs, 100); });
  EXPECT_NE(msg.find("'w0'"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Checkpoint, MovedCheckpointKeepsViews) {
  TempDir dir;
  kimi::write_sharded_checkpoint(dir.path(), u8_tensors({60, 60}), 100);
  Checkpoint a(dir.path());
  const kimi::TensorView* v = a.find("w1");
  Checkpoint b(std::move(a));
  EXPECT_EQ(b.find("w1"), v);
  EXPECT_TRUE(has_pattern(*v, 1));
}

// ---------------------------------------------------------------------------------------------
// Directory layouts without an index

TEST(Checkpoint, ScansAllSafetensorsWhenNoIndexOrModelFile) {
  TempDir dir;
  kimi::write_safetensors(dir / "b.safetensors", {{"from_b", DType::F32, {2}, pattern_fill(1)}});
  kimi::write_safetensors(dir / "a.safetensors", {{"from_a", DType::F32, {3}, pattern_fill(0)}});
  write_text(dir / "config.json", "{}");
  write_text(dir / "notes.txt", "not a tensor file");
  const Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"from_a", "from_b"}));
  EXPECT_EQ(ckpt.get("from_b").file, dir / "b.safetensors");
}

TEST(Checkpoint, PrefersModelSafetensorsOverOtherFiles) {
  TempDir dir;
  kimi::write_safetensors(dir / "model.safetensors", {{"x", DType::F32, {2}, pattern_fill(1)}});
  kimi::write_safetensors(dir / "other.safetensors", {{"x", DType::F32, {2}, pattern_fill(2)}});
  const Checkpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.num_tensors(), 1u);
  EXPECT_TRUE(has_pattern(ckpt.get("x"), 1));
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(CheckpointErrors, DirectoryMissingNotADirOrEmpty) {
  TempDir dir;
  std::string msg = open_error(dir / "missing");
  EXPECT_NE(msg.find((dir / "missing").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;

  write_text(dir / "file", "x");
  msg = open_error(dir / "file");
  EXPECT_NE(msg.find("not a directory"), std::string::npos) << msg;

  write_text(dir / "config.json", "{}");
  msg = open_error(dir.path());
  EXPECT_NE(msg.find(dir.path().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("no .safetensors"), std::string::npos) << msg;
}

TEST(CheckpointErrors, IndexNamesMissingShard) {
  TempDir dir;
  kimi::write_sharded_checkpoint(dir.path(), u8_tensors({60, 60, 60}), 100);
  fs::remove(dir / "model-00002-of-000003.safetensors");
  const std::string msg = open_error(dir.path());
  EXPECT_NE(msg.find((dir / "model-00002-of-000003.safetensors").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST(CheckpointErrors, ShardLacksTensorListedInIndex) {
  TempDir dir;
  kimi::write_sharded_checkpoint(dir.path(), u8_tensors({60, 60}), 100);
  nlohmann::json index = read_json(dir / "model.safetensors.index.json");
  index["weight_map"]["ghost.weight"] = "model-00002-of-000002.safetensors";
  write_text(dir / "model.safetensors.index.json", index.dump());
  const std::string msg = open_error(dir.path());
  EXPECT_NE(msg.find((dir / "model-00002-of-000002.safetensors").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ghost.weight'"), std::string::npos) << msg;
}

TEST(CheckpointErrors, TensorInTwoShards) {
  TempDir dir;
  kimi::write_safetensors(dir / "a.safetensors", {{"dup", DType::F32, {2}, pattern_fill(1)}});
  kimi::write_safetensors(dir / "b.safetensors", {{"dup", DType::F32, {2}, pattern_fill(2)}});
  std::string msg = open_error(dir.path());
  EXPECT_NE(msg.find("'dup'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b.safetensors"), std::string::npos) << msg;

  // Also when the index maps the name to one of them: the other copy is still ambiguous.
  write_text(dir / "model.safetensors.index.json",
             R"({"metadata":{"total_size":8},"weight_map":{"dup":"a.safetensors","z":"b.safetensors"}})");
  kimi::write_safetensors(dir / "b.safetensors", {{"dup", DType::F32, {2}, pattern_fill(2)}, {"z", DType::U8, {1}, pattern_fill(3)}});
  msg = open_error(dir.path());
  EXPECT_NE(msg.find("'dup'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("appears in both"), std::string::npos) << msg;
}

TEST(CheckpointErrors, MalformedIndex) {
  TempDir dir;
  kimi::write_safetensors(dir / "model.safetensors", {{"x", DType::F32, {2}, pattern_fill(1)}});
  const fs::path ip = dir / "model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{oops", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"metadata":{}})", "weight_map"},
      {R"({"weight_map":[]})", "weight_map"},
      {R"({"weight_map":{}})", "no tensors"},
      {R"({"weight_map":{"x":3}})", "'x'"},
      {R"({"weight_map":{"x":"../model.safetensors"}})", "invalid file"},
      {R"({"weight_map":{"x":"/etc/passwd"}})", "invalid file"},
  };
  for (const auto& [text, expect] : cases) {
    write_text(ip, text);
    const std::string msg = open_error(dir.path());
    EXPECT_NE(msg.find(ip.string()), std::string::npos) << text << " -> " << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << text << " -> " << msg;
  }
}

TEST(CheckpointErrors, CorruptShardNamesTheShard) {
  TempDir dir;
  kimi::write_sharded_checkpoint(dir.path(), u8_tensors({60, 60}), 100);
  const fs::path shard = dir / "model-00001-of-000002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  const std::string msg = open_error(dir.path());
  EXPECT_NE(msg.find(shard.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(CheckpointErrors, GetMissingAndShapeMismatch) {
  TempDir dir;
  kimi::write_sharded_checkpoint(dir.path(),
                                 {{"a.weight", DType::BF16, {2, 3}, pattern_fill(0)}, {"b.weight", DType::BF16, {576, 1}, pattern_fill(1)}},
                                 16);
  const Checkpoint ckpt(dir.path());
  std::string msg = error_of([&] { (void)ckpt.get("missing.weight"); });
  EXPECT_EQ(msg, dir.path().string() + ": tensor 'missing.weight' not found");
  msg = error_of([&] { (void)ckpt.get("missing.weight", {1}); });
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;

  msg = error_of([&] { (void)ckpt.get("b.weight", {576, 7168}); });
  EXPECT_EQ(msg, (dir / "model-00002-of-000002.safetensors").string() +
                     ": tensor 'b.weight' has shape [576, 1], expected [576, 7168] (from config.json)");
  msg = error_of([&] { (void)ckpt.get("a.weight", {}); });
  EXPECT_NE(msg.find("has shape [2, 3], expected []"), std::string::npos) << msg;
  EXPECT_EQ(ckpt.get("a.weight", {2, 3}).shape, (std::vector<int64_t>{2, 3}));
}
