#include "format/checkpoint.h"
#include "format/quote.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"

namespace kimi {

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path.string() + ": read failed");
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": not valid JSON: " + e.what());
  }
}

// Index entries are file names relative to the model directory; refusing absolute paths and ".."
// keeps a malformed (or hostile) index from mapping files outside the checkpoint.
bool is_safe_relative(const std::filesystem::path& p) {
  if (p.empty() || p.is_absolute()) return false;
  return std::none_of(p.begin(), p.end(), [](const std::filesystem::path& part) { return part == ".."; });
}

}  // namespace

Checkpoint::Checkpoint(const std::filesystem::path& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  const std::string dname = dir.string();
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw Error(dname + ": checkpoint directory does not exist");
  if (!fs::is_directory(dir, ec)) throw Error(dname + ": checkpoint path is not a directory");

  const fs::path index_path = dir / kIndexName;
  if (fs::exists(index_path, ec)) {
    const std::string iname = index_path.string();
    const nlohmann::json index = read_json_file(index_path);
    if (!index.is_object()) throw Error(iname + ": not a JSON object");
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) throw Error(iname + ": missing or invalid 'weight_map' object");
    if (wm->empty()) throw Error(iname + ": 'weight_map' lists no tensors");

    // Open each shard once, in file-name order (deterministic error reporting).
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string()) throw Error(iname + ": weight_map entry for tensor " + quote(tensor) + " is not a string");
      const std::string& f = file.get_ref<const std::string&>();
      if (!is_safe_relative(f))
        throw Error(iname + ": weight_map entry for tensor " + quote(tensor) + " names an invalid file " + quote(f));
      by_file.emplace(f, nullptr);
    }
    for (auto& [file, shard] : by_file) {
      const fs::path p = dir / file;
      if (!fs::exists(p, ec)) throw Error(iname + ": shard file " + p.string() + " listed in the index does not exist");
      shards_.push_back(std::make_unique<SafetensorsFile>(p));
      shard = shards_.back().get();
    }
    for (const auto& [tensor, file] : wm->items()) {
      const SafetensorsFile* shard = by_file.at(file.get_ref<const std::string&>());
      if (!shard->find(tensor))
        throw Error(shard->path().string() + ": tensor " + quote(tensor) + " listed in " + kIndexName +
                    " is missing from this shard");
    }
  } else if (fs::exists(dir / kSingleName, ec)) {
    shards_.push_back(std::make_unique<SafetensorsFile>(dir / kSingleName));
  } else {
    // No index and no model.safetensors: take every shard in the directory, sorted for determinism.
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors" && e.is_regular_file()) files.push_back(e.path());
    }
    if (ec) throw Error(dname + ": cannot list directory: " + ec.message());
    if (files.empty()) throw Error(dname + ": no .safetensors files (and no " + kIndexName + ") in the directory");
    std::sort(files.begin(), files.end());
    for (const auto& p : files) shards_.push_back(std::make_unique<SafetensorsFile>(p));
  }

  // A tensor in two files is ambiguous even when the index names one of them: refuse it.
  for (const auto& shard : shards_) {
    for (const auto& [name, view] : shard->tensors()) {
      const auto [it, inserted] = index_.emplace(name, &view);
      if (!inserted)
        throw Error(dname + ": tensor " + quote(name) + " appears in both " + it->second->file.string() + " and " +
                    shard->path().string());
    }
  }
}

const TensorView* Checkpoint::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (!t) throw Error(dir_.string() + ": tensor " + quote(name) + " not found");
  return *t;
}

const TensorView& Checkpoint::get(std::string_view name, const std::vector<int64_t>& expected_shape) const {
  const TensorView& t = get(name);
  if (t.shape != expected_shape) {
    throw Error(t.file.string() + ": tensor " + quote(name) + " has shape " + t.shape_string() + ", expected " +
                shape_string(expected_shape) + " (from config.json)");
  }
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, view] : index_) out.push_back(name);
  return out;  // std::map keeps them sorted
}

size_t Checkpoint::num_tensors() const { return index_.size(); }

}  // namespace kimi
