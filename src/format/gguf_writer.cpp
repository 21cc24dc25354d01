#include "format/gguf_writer.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <set>
#include <type_traits>

#include "common/error.h"

namespace kimi {

static_assert(std::endian::native == std::endian::little, "GGUF is written in host byte order");

size_t ggml_type_size(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: return 2;
    case GgmlType::BF16: return 2;
  }
  throw Error("unknown ggml type");
}

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "f32";
    case GgmlType::F16: return "f16";
    case GgmlType::BF16: return "bf16";
  }
  return "?";
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) throw Error("GGUF alignment must be a power of two");
  if (alignment != kGgufDefaultAlignment) add_u32("general.alignment", alignment);
}

void GgufWriter::add(const std::string& key, Value v) {
  for (const Kv& kv : kvs_)
    if (kv.key == key) throw Error("GGUF metadata key '" + key + "' added twice");
  kvs_.push_back({key, std::move(v)});
}

void GgufWriter::add_u32(const std::string& key, uint32_t v) { add(key, v); }
void GgufWriter::add_i32(const std::string& key, int32_t v) { add(key, v); }
void GgufWriter::add_u64(const std::string& key, uint64_t v) { add(key, v); }
void GgufWriter::add_f32(const std::string& key, float v) { add(key, v); }
void GgufWriter::add_bool(const std::string& key, bool v) { add(key, v); }
void GgufWriter::add_string(const std::string& key, const std::string& v) { add(key, v); }
void GgufWriter::add_string_array(const std::string& key, std::vector<std::string> v) { add(key, std::move(v)); }
void GgufWriter::add_i32_array(const std::string& key, std::vector<int32_t> v) { add(key, std::move(v)); }

void GgufWriter::add_tensor(GgufTensor t) {
  if (t.ne.empty() || t.ne.size() > 4) throw Error("GGUF tensor '" + t.name + "' must have 1 to 4 dims");
  for (int64_t d : t.ne)
    if (d <= 0) throw Error("GGUF tensor '" + t.name + "' has a non-positive dim");
  for (const GgufTensor& o : tensors_)
    if (o.name == t.name) throw Error("GGUF tensor '" + t.name + "' added twice");
  if (!t.produce) throw Error("GGUF tensor '" + t.name + "' has no data producer");
  tensors_.push_back(std::move(t));
}

namespace {

class FileOut {
 public:
  explicit FileOut(const std::filesystem::path& path) : path_(path), f_(path, std::ios::binary | std::ios::trunc) {
    if (!f_) throw Error(path.string() + ": cannot open for writing");
  }
  void bytes(const void* p, size_t n) {
    f_.write(static_cast<const char*>(p), std::streamsize(n));
    if (!f_) throw Error(path_.string() + ": write failed (disk full?)");
    pos_ += n;
  }
  template <class T>
    requires std::is_arithmetic_v<T>
  void scalar(T v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    scalar<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static constexpr char zeros[64] = {};
    while (pos_ % alignment != 0) bytes(zeros, size_t(std::min<uint64_t>(64, alignment - pos_ % alignment)));
  }
  void close() {
    f_.close();
    if (!f_) throw Error(path_.string() + ": close failed");
  }
  uint64_t pos() const { return pos_; }

 private:
  std::filesystem::path path_;
  std::ofstream f_;
  uint64_t pos_ = 0;
};

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

uint64_t GgufWriter::write(const std::filesystem::path& path) const {
  const std::filesystem::path tmp = path.string() + ".partial";
  try {
    FileOut out(tmp);
    out.bytes("GGUF", 4);
    out.scalar<uint32_t>(kGgufVersion);
    out.scalar<uint64_t>(tensors_.size());
    out.scalar<uint64_t>(kvs_.size());
    for (const Kv& kv : kvs_) {
      out.str(kv.key);
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, uint32_t>) {
              out.scalar<uint32_t>(uint32_t(GgufValueType::U32));
              out.scalar(v);
            } else if constexpr (std::is_same_v<T, int32_t>) {
              out.scalar<uint32_t>(uint32_t(GgufValueType::I32));
              out.scalar(v);
            } else if constexpr (std::is_same_v<T, uint64_t>) {
              out.scalar<uint32_t>(uint32_t(GgufValueType::U64));
              out.scalar(v);
            } else if constexpr (std::is_same_v<T, float>) {
              out.scalar<uint32_t>(uint32_t(GgufValueType::F32));
              out.scalar(v);
            } else if constexpr (std::is_same_v<T, bool>) {
              out.scalar<uint32_t>(uint32_t(GgufValueType::BOOL));
              out.scalar<uint8_t>(v ? 1 : 0);
            } else if constexpr (std::is_same_v<T, std::string>) {
              out.scalar<uint32_t>(uint32_t(GgufValueType::STRING));
              out.str(v);
            } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              out.scalar<uint32_t>(uint32_t(GgufValueType::ARRAY));
              out.scalar<uint32_t>(uint32_t(GgufValueType::STRING));
              out.scalar<uint64_t>(v.size());
              for (const std::string& s : v) out.str(s);
            } else {
              static_assert(std::is_same_v<T, std::vector<int32_t>>);
              out.scalar<uint32_t>(uint32_t(GgufValueType::ARRAY));
              out.scalar<uint32_t>(uint32_t(GgufValueType::I32));
              out.scalar<uint64_t>(v.size());
              out.bytes(v.data(), v.size() * sizeof(int32_t));
            }
          },
          kv.value);
    }
    uint64_t offset = 0;
    for (const GgufTensor& t : tensors_) {
      out.str(t.name);
      out.scalar<uint32_t>(uint32_t(t.ne.size()));
      for (int64_t d : t.ne) out.scalar<uint64_t>(uint64_t(d));
      out.scalar<uint32_t>(uint32_t(t.type));
      out.scalar<uint64_t>(offset);
      offset = align_up(offset + t.nbytes(), alignment_);
    }
    out.pad_to(alignment_);
    for (const GgufTensor& t : tensors_) {
      out.pad_to(alignment_);
      uint64_t written = 0;
      const uint64_t expected = t.nbytes();
      t.produce([&](std::span<const std::byte> piece) {
        if (written + piece.size() > expected)
          throw Error("GGUF tensor '" + t.name + "': producer wrote more than " + std::to_string(expected) + " bytes");
        out.bytes(piece.data(), piece.size());
        written += piece.size();
      });
      if (written != expected)
        throw Error("GGUF tensor '" + t.name + "': producer wrote " + std::to_string(written) + " of " +
                    std::to_string(expected) + " bytes");
    }
    out.close();
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(tmp, ec);
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path.string() + ": cannot rename the finished file into place: " + ec.message());
  return size;
}

}  // namespace kimi
