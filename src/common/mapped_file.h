#pragma once
// A read-only memory mapping of a whole file (RAII). Checkpoint tensors point into it, so the
// weights are paged in by the OS on first touch (as huge pages where the kernel can) and never
// copied.
#include <cstddef>
#include <filesystem>
#include <span>

namespace kimi {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // throws kimi::Error naming the file
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kimi
