#pragma once
// Streaming detokenisation: feed ids one at a time as they are generated, get text that is
// always whole UTF-8 characters. Bytes of a character split across tokens are held until it
// completes; bytes that can never form a character are replaced by U+FFFD (one per maximal
// invalid subpart, as Python's errors="replace" that HF's decode uses), as soon as that is
// certain. So the concatenation of every push() and the final flush() equals
// utf8::replace_invalid(tokenizer.decode(ids)), which is decode(ids) itself when that is valid.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kimi {

class IncrementalDecoder {
 public:
  // The tokenizer must outlive the decoder. With skip_special_tokens, the specials in
  // `kept_specials` are still written (output parsers' markers).
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false,
                              std::vector<int32_t> kept_specials = {})
      : tok_(&tokenizer), skip_special_(skip_special_tokens), kept_(std::move(kept_specials)) {}

  // Newly completed text after this id (possibly empty). Bad ids throw kimi::Error.
  std::string push(int32_t id);
  // The rest at the end of the stream: held bytes of an unfinished character become U+FFFD.
  std::string flush();
  // Bytes held back, waiting for the rest of a character (at most 3).
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> kept_;
  std::string pending_;
};

}  // namespace kimi
