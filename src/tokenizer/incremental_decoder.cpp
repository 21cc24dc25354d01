#include "tokenizer/incremental_decoder.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace kimi {

std::string IncrementalDecoder::push(int32_t id) {
  const std::string_view bytes = tok_->token_bytes(id);  // throws on a bad id, before any change
  if (skip_special_ && tok_->is_special(id) && std::find(kept_.begin(), kept_.end(), id) == kept_.end()) return {};
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const utf8::Decoded d = utf8::decode_one(pending_, i);
    if (d.status == utf8::Status::Incomplete) break;  // may still complete: hold it
    if (d.status == utf8::Status::Ok)
      out.append(pending_, i, d.len);
    else
      out.append(utf8::kReplacement);
    i += d.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = utf8::replace_invalid(pending_);
  pending_.clear();
  return out;
}

}  // namespace kimi
