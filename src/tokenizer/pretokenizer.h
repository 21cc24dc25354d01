#pragma once
// The pre-tokeniser: splits text into the pieces that BPE then encodes one by one, with the
// Kimi regular expression.
//
// Kimi's pattern (tokenization_kimi.py, run there by tiktoken's Rust regex engine) is rewritten
// for PCRE2 (kimi_pattern()), which matches the same strings:
//   - every Unicode class is written out as explicit code-point ranges from our own tables
//     (unicode_tables.h: Unicode 16.0.0, the version of Rust's regex-syntax tables that tiktoken
//     runs on), never as \p{...}: PCRE2's tables are its own version's (10.42: Unicode 14), so
//     characters assigned since (CJK Ext-H/I, Nag Mundari, Garay...) would split differently;
//   - [C&&[^\p{Han}]], an intersection PCRE2 10.42 lacks, is the set difference of the ranges;
//   - \p{Han} is the Script property (Rust's meaning; PCRE2's bare \p{Han} is Script_Extensions,
//     which adds CJK punctuation such as U+3002);
//   - \s is White_Space (Rust's meaning; PCRE2's UCP \s also takes U+180E);
//   - (?i:'s|...) is spelt out with each letter's simple case folding variants (Rust's (?i):
//     U+017F matches s).
// The default PreTokenizer decides pieces with hand-written matchers of the same pattern (one for
// ASCII, one over a lookup table of the same classes), falling back to PCRE2 where they cannot
// (tests check that they agree): PCRE2 scans a class of explicit ranges one range after another,
// which is slow for classes of a thousand ranges.
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
  // Kimi's pattern, with pieces decided by a hand-written matcher of the same pattern (a table
  // lookup per character instead of a PCRE2 call per piece) and PCRE2 where it cannot decide.
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
