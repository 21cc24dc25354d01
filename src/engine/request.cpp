#include "engine/request.h"

namespace kimi {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::None: break;
  }
  return "";
}

}  // namespace kimi
