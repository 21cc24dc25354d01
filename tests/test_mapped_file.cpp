// The read-only file mapping checkpoints are read through (common/mapped_file.h): the bytes, the
// errors, and the huge-page advice that keeps decode's scattered expert reads off 4 KiB pages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mapped_file.h"

namespace kimi {
namespace {

std::filesystem::path write_file(const std::string& name, const std::vector<char>& bytes) {
  const auto path = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

// The VmFlags line of the /proc/self/smaps entry of the mapping holding `addr` ("" if none).
std::string vm_flags_of(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(addr);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    // A mapping's first line: "lo-hi perms offset dev inode path", addresses in hex.
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(MappedFile, MapsTheBytes) {
  std::vector<char> bytes(3 * 4096 + 17);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char(i * 7 + 3);
  const auto path = write_file("kimi-mapped", bytes);
  const MappedFile f(path);
  ASSERT_EQ(f.bytes().size(), bytes.size());
  EXPECT_EQ(0, std::memcmp(f.bytes().data(), bytes.data(), bytes.size()));
  std::filesystem::remove(path);
}

TEST(MappedFile, EmptyAndMissingFiles) {
  const auto path = write_file("kimi-mapped-empty", {});
  EXPECT_TRUE(MappedFile(path).bytes().empty());
  std::filesystem::remove(path);
  try {
    MappedFile missing(path);
    FAIL() << "mapped a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(MappedFile, AdvisesHugePages) {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage"))
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  const auto path = write_file("kimi-mapped-huge", std::vector<char>(size_t(4) << 20, 'w'));
  const MappedFile f(path);
  const std::string flags = vm_flags_of(f.bytes().data());
  ASSERT_FALSE(flags.empty()) << "no /proc/self/smaps entry for the mapping";
  // "hg": MADV_HUGEPAGE is set on the mapping.
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kimi
