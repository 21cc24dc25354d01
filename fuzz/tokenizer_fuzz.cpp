// The tokenizer on fuzzer text, with a real byte-level BPE vocabulary trained in-process (the
// BPE trainer over a fixed multilingual corpus, 1024 ranks) and Kimi-K2.5's special tokens:
//  - encode then decode gives the text back, byte for byte (with and without special tokens
//    recognised; byte-level BPE covers any bytes, so this holds for invalid UTF-8 too);
//  - without special tokens allowed, no special id comes out; every id is in the vocabulary;
//  - the pieces split() reports cover the text exactly, in order;
//  - the incremental decoder, fed the ids one by one, gives replace_invalid(decode(ids)).
// Input: byte 0 = flags (bit 0: skip special tokens in the incremental decoder), then the text.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const kimi::Tokenizer& tokenizer() {
  static const kimi::Tokenizer t = [] {
    const std::string corpus =
        "The quick brown fox jumps over the lazy dog. 你好世界。中文English混合。今日は良い天気ですね。"
        "한국어 텍스트. Привет, мир! Ελληνικά. العربية. 😀😃 👍🏽 int main() { return 0; }\n"
        "def f(x):\n    return x  # comment\n\t\r\n 12345 67890 don't we'll they're I'M   spaces\n";
    std::vector<std::string_view> texts(50, corpus);
    std::vector<std::string> vocab = kimi::train_bpe(texts, 1024, kimi::PreTokenizer());
    const auto num_base = int32_t(vocab.size());
    std::map<int32_t, std::string> names;
    for (const auto& [offset, name] : kimi::kimi_k25_special_token_names()) names[num_base + offset] = name;
    return kimi::Tokenizer(std::move(vocab), names, "[BOS]", "[EOS]");
  }();
  return t;
}

std::string decode(const std::vector<int32_t>& ids) { return tokenizer().decode(ids); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kimi::fuzz::Input in(data, size);
  const bool skip_special = in.byte() & 1;
  const std::string_view text = in.rest();
  const kimi::Tokenizer& tok = tokenizer();

  const std::vector<int32_t> ids = tok.encode(text, true);
  KIMI_FUZZ_CHECK(decode(ids) == text, "decode(encode(text)) != text");
  for (int32_t id : ids) KIMI_FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), std::to_string(id));

  const std::vector<int32_t> plain = tok.encode(text, false);
  KIMI_FUZZ_CHECK(decode(plain) == text, "decode(encode(text, no specials)) != text");
  for (int32_t id : plain) KIMI_FUZZ_CHECK(!tok.is_special(id), "a special id without specials allowed");

  for (const bool allow : {true, false}) {
    std::string joined;
    const char* expected_at = text.data();
    for (std::string_view piece : tok.split(text, allow)) {
      KIMI_FUZZ_CHECK(piece.data() == expected_at, "split() pieces are not contiguous views");
      expected_at += piece.size();
      joined += piece;
    }
    KIMI_FUZZ_CHECK(joined == text, "split() pieces do not cover the text");
  }

  kimi::IncrementalDecoder dec(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += dec.push(id);
  streamed += dec.flush();
  KIMI_FUZZ_CHECK(dec.pending() == 0, "bytes pending after flush");
  const std::string whole = tok.decode(ids, skip_special);
  KIMI_FUZZ_CHECK(streamed == kimi::utf8::replace_invalid(whole), "incremental decode differs:\n" + streamed);
  KIMI_FUZZ_CHECK(kimi::utf8::is_valid(streamed), "incremental decode is not valid UTF-8");
  return 0;
}
