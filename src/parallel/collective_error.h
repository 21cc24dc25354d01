#pragma once
// The error a collective raises when its group is broken (a peer died, or did not answer within
// the timeout). Unlike a bad request, nothing can continue after it: the group's ranks no longer
// step together, so the process that sees it ends (engine/tp_executor.cpp).
#include "common/error.h"

namespace kimi {

class CollectiveError : public Error {
 public:
  using Error::Error;
};

}  // namespace kimi
