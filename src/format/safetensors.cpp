#include "format/safetensors.h"
#include "format/quote.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "common/error.h"

namespace kimi {

namespace {

// A header this large cannot be a real checkpoint (Kimi-K2.5's biggest shard header is well under
// 1 MB); refusing it early turns a corrupt length field into a clear error instead of a huge parse.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

// Byte count of a tensor, or false when numel x element size does not fit in 64 bits.
bool tensor_bytes(const std::vector<int64_t>& shape, DType dtype, uint64_t& out) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return false;
  }
  out = n;
  return true;
}

// Reads a JSON integer that must be >= 0 and fit in int64 (shape dims and offsets both use it).
bool json_nonneg_int(const nlohmann::json& j, uint64_t& out) {
  if (!j.is_number_unsigned()) return false;  // nlohmann parses negative literals as signed
  out = j.get<uint64_t>();
  return out <= uint64_t(std::numeric_limits<int64_t>::max());
}

// --- writing -------------------------------------------------------------------------------------

// Owns a file descriptor; the write helpers turn every short write into an Error naming the file.
class OutFile {
 public:
  explicit OutFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path.string() + ": cannot create: " + std::strerror(errno));
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(path_.string() + ": write failed: " + std::strerror(n < 0 ? errno : EIO));
      bytes = bytes.subspan(size_t(n));
    }
  }
  void write(std::string_view s) { write(std::as_bytes(std::span(s.data(), s.size()))); }

  // fsync + close, so that the rename that follows publishes complete data even after a power loss.
  void commit() {
    if (::fsync(fd_) != 0) throw Error(path_.string() + ": fsync failed: " + std::strerror(errno));
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw Error(path_.string() + ": close failed: " + std::strerror(errno));
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Removes the temporary file unless the write completed, so a failed fill() or a full disk leaves
// nothing behind. (A killed process leaves only a *.tmp-PID file, which no reader picks up.)
class TempFileGuard {
 public:
  explicit TempFileGuard(std::filesystem::path p) : path_(std::move(p)) {}
  ~TempFileGuard() {
    if (!done_) {
      std::error_code ec;
      std::filesystem::remove(path_, ec);
    }
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void release() { done_ = true; }

 private:
  std::filesystem::path path_;
  bool done_ = false;
};

// The temp name must not end in ".safetensors": Checkpoint's directory scan would pick it up.
std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  std::filesystem::path tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid());
  return tmp;
}

// Writes `produce(OutFile&)` to a temp file, then renames it over `path` (atomic on POSIX).
template <typename Produce>
void write_atomically(const std::filesystem::path& path, Produce&& produce) {
  const std::filesystem::path tmp = temp_path_for(path);
  TempFileGuard guard(tmp);
  {
    OutFile out(tmp);
    produce(out);
    out.commit();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path.string() + ": cannot rename temporary file into place: " + ec.message());
  guard.release();
}

uint64_t checked_spec_bytes(const TensorSpec& t) {
  uint64_t n = 0;
  if (!tensor_bytes(t.shape, t.dtype, n))
    throw Error("tensor " + quote(t.name) + ": invalid shape " + shape_string(t.shape));
  return n;
}

void write_file(const std::filesystem::path& path, std::span<const TensorSpec* const> tensors,
                const nlohmann::json& metadata);

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// --- TensorView ----------------------------------------------------------------------------------

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated against the byte size when the view was made
  return n;
}

std::string TensorView::shape_string() const { return kimi::shape_string(shape); }

// --- SafetensorsFile -----------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : file_(path), metadata_(nlohmann::json::object()) {
  const std::string fname = path.string();
  const std::span<const std::byte> bytes = file_.bytes();
  auto fail = [&](const std::string& msg) -> Error { return Error(fname + ": " + msg); };
  auto fail_t = [&](std::string_view tensor, const std::string& msg) -> Error {
    return Error(fname + ": tensor " + quote(tensor) + ": " + msg);
  };

  if (bytes.size() < 8)
    throw fail("not a safetensors file: " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint64_t(bytes[size_t(i)]);  // little-endian
  if (header_len > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(header_len) + " is absurd (limit " + std::to_string(kMaxHeaderBytes) +
               " bytes): corrupt or not a safetensors file");
  if (header_len > bytes.size() - 8)
    throw fail("header length " + std::to_string(header_len) + " exceeds the file size " + std::to_string(bytes.size()) +
               ": file is truncated or corrupt");

  const char* hbegin = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hbegin, hbegin + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw fail("header is not a JSON object");

  const std::span<const std::byte> data = bytes.subspan(8 + size_t(header_len));

  struct Extent {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Extent> extents;
  extents.reserve(header.size());

  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not a JSON object");
      for (auto& [k, v] : entry.items())
        if (!v.is_string()) throw fail("__metadata__ value for key " + quote(k) + " is not a string");
      metadata_ = std::move(entry);
      continue;
    }
    if (!entry.is_object()) throw fail_t(name, "entry is not a JSON object");

    const auto dt = entry.find("dtype");
    if (dt == entry.end()) throw fail_t(name, "missing 'dtype'");
    if (!dt->is_string()) throw fail_t(name, "'dtype' is not a string");
    DType dtype{};
    try {
      dtype = parse_dtype(dt->get_ref<const std::string&>());
    } catch (const Error& e) {
      throw fail_t(name, e.what());
    }

    const auto sh = entry.find("shape");
    if (sh == entry.end()) throw fail_t(name, "missing 'shape'");
    if (!sh->is_array()) throw fail_t(name, "'shape' is not an array");
    std::vector<int64_t> shape;
    shape.reserve(sh->size());
    for (const auto& d : *sh) {
      uint64_t v = 0;
      if (d.is_number_integer() && !d.is_number_unsigned()) throw fail_t(name, "negative dimension in shape " + sh->dump());
      if (!json_nonneg_int(d, v)) throw fail_t(name, "shape " + sh->dump() + " has an entry that is not a valid dimension");
      shape.push_back(int64_t(v));
    }

    const auto off = entry.find("data_offsets");
    if (off == entry.end()) throw fail_t(name, "missing 'data_offsets'");
    uint64_t begin = 0, end = 0;
    if (!off->is_array() || off->size() != 2 || !json_nonneg_int((*off)[0], begin) || !json_nonneg_int((*off)[1], end))
      throw fail_t(name, "'data_offsets' " + off->dump() + " is not [begin, end] with non-negative integers");
    if (begin > end) throw fail_t(name, "'data_offsets' " + off->dump() + " has begin > end");
    if (end > data.size())
      throw fail_t(name, "'data_offsets' " + off->dump() + " end beyond the data section (" + std::to_string(data.size()) +
                             " bytes): file is truncated");

    uint64_t nbytes = 0;
    const bool fits = tensor_bytes(shape, dtype, nbytes);
    if (!fits || nbytes != end - begin)
      throw fail_t(name, "'data_offsets' " + off->dump() + " span " + std::to_string(end - begin) + " bytes but " +
                             std::string(dtype_name(dtype)) + " " + shape_string(shape) + " needs " +
                             (fits ? std::to_string(nbytes) : std::string("more than 2^64")) + " bytes");

    TensorView view;
    view.name = name;
    view.dtype = dtype;
    view.shape = std::move(shape);
    view.data = data.subspan(size_t(begin), size_t(end - begin));
    view.file = path;
    // Keys of a parsed JSON object are unique, so emplace always inserts.
    const auto it = tensors_.emplace(name, std::move(view)).first;
    if (end > begin) extents.push_back({begin, end, &it->first});
  }

  // Gaps are tolerated (other writers align tensors), but two tensors sharing bytes is corruption.
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].begin < extents[i - 1].end)
      throw fail_t(*extents[i].name, "data overlaps tensor " + quote(*extents[i - 1].name));
  }
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// --- writer --------------------------------------------------------------------------------------

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& tensors,
                       const nlohmann::json& metadata) {
  std::vector<const TensorSpec*> ptrs;
  ptrs.reserve(tensors.size());
  for (const TensorSpec& t : tensors) ptrs.push_back(&t);
  write_file(path, ptrs, metadata);
}

namespace {

// Takes pointers so that the sharded writer can pass subsets without copying the fill closures.
void write_file(const std::filesystem::path& path, std::span<const TensorSpec* const> tensors,
                const nlohmann::json& metadata) {
  const std::string fname = path.string();
  // ordered_json keeps "__metadata__" first and the entries in data order, so the layout is the
  // order the caller gave (and byte-for-byte reproducible).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["format"] = "pt";
  if (!metadata.is_object()) throw Error(fname + ": metadata must be a JSON object");
  for (auto& [k, v] : metadata.items()) {
    if (!v.is_string()) throw Error(fname + ": metadata value for key " + quote(k) + " is not a string");
    meta[k] = v.get<std::string>();
  }
  header["__metadata__"] = std::move(meta);

  // Validate everything before creating the file, so a bad spec costs no I/O.
  std::set<std::string_view> seen;
  uint64_t offset = 0, max_bytes = 0;
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  for (const TensorSpec* tp : tensors) {
    const TensorSpec& t = *tp;
    if (t.name == "__metadata__") throw Error(fname + ": '__metadata__' is reserved and cannot be a tensor name");
    if (!seen.insert(t.name).second) throw Error(fname + ": duplicate tensor name " + quote(t.name));
    uint64_t n = 0;
    try {
      n = checked_spec_bytes(t);
    } catch (const Error& e) {
      throw Error(fname + ": " + e.what());
    }
    if (n > 0 && !t.fill) throw Error(fname + ": tensor " + quote(t.name) + " has no fill function");
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = dtype_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + n};
    header[t.name] = std::move(entry);
    offset += n;
    max_bytes = std::max(max_bytes, n);
    sizes.push_back(n);
  }

  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  write_atomically(path, [&](OutFile& out) {
    std::byte len_bytes[8];
    for (int i = 0; i < 8; ++i) len_bytes[i] = std::byte((uint64_t(header_text.size()) >> (8 * i)) & 0xff);
    out.write(std::span<const std::byte>(len_bytes));
    out.write(header_text);
    // One buffer sized for the largest tensor, reused: memory is bounded by one tensor, not the file.
    // fill() gets a span of exactly the tensor's size, so it cannot return too few or too many bytes.
    std::vector<std::byte> buf;
    buf.reserve(size_t(max_bytes));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (sizes[i] == 0) continue;
      buf.assign(size_t(sizes[i]), std::byte{0});
      tensors[i]->fill(std::span<std::byte>(buf));
      out.write(std::span<const std::byte>(buf));
    }
  });
}

}  // namespace

void write_sharded_checkpoint(const std::filesystem::path& dir, const std::vector<TensorSpec>& tensors,
                              size_t max_shard_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create directory: " + ec.message());

  // Greedy packing in the given order; a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<const TensorSpec*>> shards;
  std::set<std::string_view> seen;
  uint64_t current = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Per-file checks cannot see a name repeated in two different shards.
    if (!seen.insert(tensors[i].name).second)
      throw Error(dir.string() + ": duplicate tensor name " + quote(tensors[i].name));
    uint64_t n = 0;
    try {
      n = checked_spec_bytes(tensors[i]);
    } catch (const Error& e) {
      throw Error(dir.string() + ": " + e.what());
    }
    if (shards.empty() || (!shards.back().empty() && (current > max_shard_bytes || n > max_shard_bytes - current))) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&tensors[i]);
    current += n;
    total += n;
  }

  const std::filesystem::path index_path = dir / "model.safetensors.index.json";
  if (shards.size() <= 1) {
    write_safetensors(dir / "model.safetensors", tensors);
    // A stale index from an earlier sharded write would take precedence over the new file.
    std::filesystem::remove(index_path, ec);
    return;
  }

  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%06zu.safetensors", s + 1, shards.size());
    for (const TensorSpec* t : shards[s]) weight_map[t->name] = name;
    write_file(dir / name, shards[s], nlohmann::json::object());
  }
  // The index goes last: until it exists the directory is not a complete sharded checkpoint.
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
  const std::string text = index.dump(2) + "\n";
  write_atomically(index_path, [&](OutFile& out) { out.write(text); });
}

}  // namespace kimi
