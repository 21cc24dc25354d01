#pragma once
// Template errors. Every error a template or its input can cause is a kimi::Error whose message
// starts with "NAME:LINE:COLUMN:". Builtins (filters, tests, methods, operators) don't know where
// they were called from, so they throw BuiltinError and the interpreter re-throws it with the
// position of the expression that called them.
#include <string>

#include "common/error.h"

namespace kimi::jinja {

class BuiltinError : public kimi::Error {
 public:
  using kimi::Error::Error;
};

struct SourcePos {
  int line = 1;
  int column = 1;
};

}  // namespace kimi::jinja
