#include "engine/request.h"

#include "tokenizer/incremental_decoder.h"

namespace kimi {

Request::Request() = default;
Request::~Request() = default;

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
