#pragma once
// The pre-tokeniser: splits text into the pieces that BPE then encodes one by one, with the
// Kimi regular expression run by PCRE2 (JIT).
//
// Kimi's pattern (tokenization_kimi.py, run there by tiktoken's Rust regex engine) uses class
// intersections `[...&&[^\p{Han}]]`, which PCRE2 10.42 lacks, so kimi_pattern() is a rewrite
// that matches the same strings; the equivalences it relies on (each checked against tiktoken's
// own engine, see tests/tokenizer_parity):
//   [C&&[^\p{Han}]]  ->  (?:(?!\p{sc:Han})[C])      a one-character look-ahead, then the class
//   \p{Han}          ->  \p{sc:Han}                 Rust means the Script property; PCRE2's bare
//                                                   \p{Han} means Script_Extensions (which adds
//                                                   CJK punctuation such as U+3002)
//   \s / \S          ->  \p{White_Space} / \P{...}  Rust's \s is White_Space; PCRE2's UCP \s also
//                                                   takes U+180E
//
// Input that is not valid UTF-8: tiktoken never sees such input (Python hands it a str), so we
// define it. The text is cut into maximal valid UTF-8 stretches and runs of invalid bytes. Each
// valid stretch is matched as a subject of its own (what PCRE2_MATCH_INVALID_UTF does too: an
// invalid sequence is a barrier no match crosses, and a look-ahead there sees "end of text").
// Each run of invalid bytes becomes one piece, which byte-level BPE then encodes losslessly, so
// decode(encode(x)) == x for any bytes x.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

class PreTokenizer {
 public:
  // Kimi's pattern, with pieces of ASCII text decided by a hand-written matcher of the same
  // pattern (several times faster than a PCRE2 call per piece) and PCRE2 for the rest.
  PreTokenizer();
  // Any PCRE2 pattern (compiled with UTF and UCP), all matched by PCRE2; throws kimi::Error if
  // it does not compile.
  explicit PreTokenizer(const std::string& pattern);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Walks the pieces of one text. Owns the per-call match state, so any number of cursors may
  // run at once on one PreTokenizer (from several threads too). The text must outlive it.
  class Cursor {
   public:
    ~Cursor();
    Cursor(Cursor&&) noexcept;
    Cursor& operator=(Cursor&&) = delete;
    Cursor(const Cursor&) = delete;
    Cursor& operator=(const Cursor&) = delete;
    // The next piece (a view into the text), or false at the end. Pieces are non-empty and, in
    // order, concatenate to the text.
    bool next(std::string_view& piece);

   private:
    friend class PreTokenizer;
    struct State;
    explicit Cursor(const PreTokenizer& owner, std::string_view text);
    std::unique_ptr<State> s_;
  };

  Cursor pieces(std::string_view text) const { return Cursor(*this, text); }
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& pattern() const;
  bool jit() const;  // whether PCRE2 JIT compiled the pattern (else the interpreter runs)

  // Kimi's pattern in PCRE2 syntax (the rewrite above) and as published (Rust regex syntax).
  static const std::string& kimi_pattern();
  static const std::string& kimi_pattern_original();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kimi
