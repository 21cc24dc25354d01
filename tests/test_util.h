#pragma once
// Helpers shared by the test files: scratch directories and the tiny model they all use.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "common/error.h"
#include "model/model.h"
#include "modelgen/make_model.h"

namespace kimi::test {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("kimi-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Writes the tiny preset (as `kimi make-model DIR --preset tiny`) into dir/name and returns it.
inline std::filesystem::path make_tiny_model(const TempDir& dir, const std::string& name = "tiny",
                                             MakeModelOptions options = {}) {
  const auto out = dir.path() / name;
  make_model(out, options);
  return out;
}

// A suite whose tests share one tiny model, made and loaded once for the suite.
class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    model_ = std::make_unique<Model>(make_tiny_model(*dir_), ModelOptions{.num_threads = 2});
  }
  static void TearDownTestSuite() {
    model_.reset();
    dir_.reset();
  }
  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<Model> model_;
};

// The message of the kimi::Error that f throws; a test failure if it throws nothing or another type.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kimi::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected kimi::Error, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected kimi::Error, nothing was thrown";
  return {};
}

}  // namespace kimi::test
