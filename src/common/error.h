#pragma once
// One exception type for everything a user can cause (bad checkpoint, bad flag, bad request).
// Messages name the file/tensor/field at fault so that the error is actionable without a debugger.
#include <stdexcept>
#include <string>

namespace kimi {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kimi
