// The tokenizer: tiktoken.model files, the Kimi pre-tokeniser, BPE, the Kimi encode rules
// (special tokens, chunking), decoding, streaming decoding and vocabulary training.
// Token-for-token parity with tiktoken itself is tests/tokenizer_parity (ctest tokenizer_parity).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "common/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tiktoken_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace kimi {
namespace {

using Strings = std::vector<std::string>;

void write_file(const std::filesystem::path& p, std::string_view s) {
  std::ofstream f(p, std::ios::binary);
  f.write(s.data(), std::streamsize(s.size()));
}

using test::error_of;

// A real vocabulary, trained once for the whole file: the common licenses plus some text in the
// scripts the tests use, 2048 ranks.
const Strings& trained_vocab() {
  static const Strings v = [] {
    std::string extra =
        "你好世界。中文English混合。今日は良い天気ですね。한국어 텍스트. Привет, мир! 😀😃 👍🏽 "
        "int main() { return 0; } def f(x): return x  # comment\n\t\r\n";
    std::vector<std::string> texts(20, extra);
    std::vector<std::string_view> views(texts.begin(), texts.end());
    std::string licenses;
    if (std::filesystem::exists(kDefaultTrainingCorpus)) {
      for (const auto& e : std::filesystem::directory_iterator(kDefaultTrainingCorpus)) {
        if (e.is_symlink() || !e.is_regular_file()) continue;
        std::ifstream f(e.path(), std::ios::binary);
        licenses.append(std::istreambuf_iterator<char>(f), {});
      }
    }
    views.push_back(licenses);
    return train_bpe(views, 2048, PreTokenizer());
  }();
  return v;
}

std::map<int32_t, std::string> k25_names(int32_t num_base) {
  std::map<int32_t, std::string> m;
  for (const auto& [offset, name] : kimi_k25_special_token_names()) m[num_base + offset] = name;
  return m;
}

const Tokenizer& trained_tokenizer() {
  static const Tokenizer t(trained_vocab(), k25_names(int32_t(trained_vocab().size())), "[BOS]", "[EOS]");
  return t;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xFF);
  return s;
}

// Texts of every kind the pattern distinguishes, valid UTF-8.
std::string random_text(std::mt19937& rng, size_t atoms) {
  static const char* kAtoms[] = {
      "a", "Hello", "WORLD", "0", "123", " ", "  ", "\t", "\n", "\r\n", ".", "!", "'", "'s", "'S", "'ll",
      "é", "ß", "ǅ", "ʰ", "\u0301", "Ω", "ж", "中", "你好", "々", "〆", "。", "「", "ー", "あ", "한", "ก",
      "\u0e31", "١", "²", "\u00a0", "\u3000", "\u2028", "\u0085", "\u001c", "\u180e", "\ufeff", "😀", "👍🏽",
      "<|im_end|>", "[BOS]", "<think>", "<|", "|>", "<|im_", "€"};
  std::string s;
  for (size_t i = 0; i < atoms; ++i) s += kAtoms[rng() % std::size(kAtoms)];
  return s;
}

// ---------------------------------------------------------------------------------------------
// tiktoken.model

TEST(TiktokenFile, WriteThenReadRoundTrips) {
  test::TempDir d;
  const Strings tokens = {"a", "b", std::string("\0\xff", 2), "ab", " the", "\xe4\xb8\xad"};
  write_tiktoken_file(d.path() / "t.model", tokens);
  EXPECT_EQ(read_tiktoken_file(d.path() / "t.model"), tokens);
  EXPECT_EQ(base64_encode("ab"), "YWI=");
  EXPECT_EQ(base64_encode(" the"), "IHRoZQ==");
  EXPECT_EQ(base64_encode("abc"), "YWJj");
}

TEST(TiktokenFile, AcceptsAnyRankOrderAndCrlf) {
  EXPECT_EQ(parse_tiktoken("Yg== 1\r\nYQ== 0\r\n\r\n", "f"), (Strings{"a", "b"}));
}

TEST(TiktokenFile, ErrorsNameFileAndLine) {
  const auto err = [](const std::string& text) { return error_of([&] { parse_tiktoken(text, "tiktoken.model"); }); };
  EXPECT_NE(err("YQ== 0\nY*== 1\n").find("tiktoken.model:2: invalid base64"), std::string::npos) << err("YQ== 0\nY*== 1\n");
  EXPECT_NE(err("YQ== 0\nYg= 1\n").find("tiktoken.model:2: invalid base64"), std::string::npos);
  EXPECT_NE(err("YQ== 0\nYh== 1\n").find("tiktoken.model:2: invalid base64"), std::string::npos);  // stray bits
  EXPECT_NE(err("YQ== zero\n").find("tiktoken.model:1: invalid rank"), std::string::npos);
  EXPECT_NE(err("YQ== -1\n").find("tiktoken.model:1: invalid rank"), std::string::npos);
  EXPECT_NE(err("YQ==\n").find("tiktoken.model:1: expected"), std::string::npos);
  EXPECT_NE(err("YQ== 0\nYg== 0\n").find("tiktoken.model:2: rank 0 already given on line 1"), std::string::npos);
  EXPECT_NE(err("YQ== 0\nYQ== 1\n").find("tiktoken.model:2: token 'a' already given on line 1"), std::string::npos);
  EXPECT_NE(err("YQ== 0\nYg== 2\n").find("tiktoken.model:2: rank 2 is out of range"), std::string::npos);
  EXPECT_NE(err("\n\n").find("no tokens"), std::string::npos);
  EXPECT_NE(error_of([] { read_tiktoken_file("/nonexistent/tiktoken.model"); }).find("/nonexistent/tiktoken.model"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The pre-tokeniser

// Expected pieces as tiktoken's own (Rust) regex engine splits them with the published pattern.
TEST(PreTokenizer, SplitsLikeTiktokensRegexEngine) {
  const PreTokenizer pt;
  EXPECT_TRUE(pt.jit());
  const std::vector<std::pair<std::string, Strings>> cases = {
      {"Hello world", {"Hello", " world"}},
      {"中文English混合", {"中文", "English", "混合"}},
      // \p{Han} is the Script property: CJK punctuation is not Han.
      {"你好。世界、「引用」", {"你好", "。", "世界", "、「", "引用", "」"}},
      {"ーカタカナ々〆〇", {"ーカタカナ", "々", "〆", "〇"}},
      // \s is White_Space: U+0085 is, U+180E, U+FEFF and U+001C are not.
      {"x\u0085!", {"x", "\u0085", "!"}},
      {"x\u180e!", {"x", "\u180e!"}},
      {"x\ufeff!", {"x", "\ufeff!"}},
      {"x\u001c!", {"x", "\u001c!"}},
      {"it's IT'S it'\u017f", {"it's", " IT'S", " it'\u017f"}},  // U+017F case-folds to s
      {"it'K", {"it", "'K"}},
      {"1234567890", {"123", "456", "789", "0"}},
      {"  \n\n  x  ", {"  \n\n", " ", " x", "  "}},
      {"", {}},
  };
  for (const auto& [text, want] : cases) {
    const auto got = pt.split(text);
    EXPECT_EQ(Strings(got.begin(), got.end()), want) << text;
  }
}

// Characters assigned after Unicode 14 (PCRE2 10.42's tables) up to 16.0 (the tables of Rust's
// regex-syntax, which tiktoken runs on) split as tiktoken splits them; those of Unicode 17 are
// still unassigned to tiktoken, so they must be to us too.
TEST(PreTokenizer, CharacterClassesAreThoseOfTiktokensUnicodeVersion) {
  const PreTokenizer pt;
  const std::vector<std::pair<std::string, Strings>> cases = {
      {"中\U00031350文", {"中\U00031350文"}},              // CJK Ext-H (15.0): Han
      {"中\U0002EBF0文", {"中\U0002EBF0文"}},              // CJK Ext-I (15.1): Han
      {"ab\U0001E4D0cd", {"ab\U0001E4D0cd"}},              // Nag Mundari letter (15.0): Lo
      {"a\U0001E4EC", {"a\U0001E4EC"}},                    // Nag Mundari sign (15.0): Mn
      {"\U0001E4F0\U0001E4F1\U0001E4F2\U0001E4F3", {"\U0001E4F0\U0001E4F1\U0001E4F2", "\U0001E4F3"}},  // Nd
      {"\U00010D50\U00010D70ab", {"\U00010D50\U00010D70ab"}},  // Garay capital + small (16.0)
      {"\U00010D40\U00010D41\U00010D42\U00010D43", {"\U00010D40\U00010D41\U00010D42", "\U00010D43"}},
      {"x\U000105C0\U00011380y", {"x\U000105C0\U00011380y"}},  // Todhri, Tulu-Tigalari (16.0): Lo
      {"ab\U00010940cd", {"ab", "\U00010940cd"}},          // Sidetic (17.0): not yet a letter
      {"中\U000323B0文", {"中", "\U000323B0", "文"}},      // CJK Ext-J (17.0): not yet Han
  };
  for (const auto& [text, want] : cases) {
    const auto got = pt.split(text);
    EXPECT_EQ(Strings(got.begin(), got.end()), want) << text;
  }
}

// The pattern names no property PCRE2 would look up in its own tables: every class is spelt out.
TEST(PreTokenizer, KimiPatternUsesNoPcre2UnicodeData) {
  const std::string& p = PreTokenizer::kimi_pattern();
  for (const char* construct : {"\\p", "\\P", "\\s", "\\S", "\\w", "\\d", "(?i", "[:"})
    EXPECT_EQ(p.find(construct), std::string::npos) << construct;
  EXPECT_LT(p.size(), 200000u);  // ~100 KB: compiles in milliseconds, under PCRE2's 64 KiB code limit
}

// Samples of the generated tables against the Unicode 16.0.0 data (UnicodeData.txt, Scripts.txt,
// PropList.txt, CaseFolding.txt), and their shape.
TEST(UnicodeTables, MatchTheUnicodeDataOnSamples) {
  using unicode::Property;
  const auto has = [](Property p, char32_t cp) {
    for (const auto& r : unicode::ranges(p))
      if (cp >= r.first && cp <= r.last) return true;
    return false;
  };
  EXPECT_STREQ(unicode::version(), "16.0.0");
  const std::vector<std::pair<char32_t, std::vector<Property>>> samples = {
      {U'A', {Property::Lu}}, {U'z', {Property::Ll}}, {0x01C5, {Property::Lt}}, {0x02B0, {Property::Lm}},
      {0x4E2D, {Property::Lo, Property::Han}}, {0x0301, {Property::M}}, {0x0903, {Property::M}},
      {0x20DD, {Property::M}}, {U'7', {Property::N}}, {0x2167, {Property::N}}, {0x00BD, {Property::N}},
      {0x3002, {}}, {0x3005, {Property::Lm, Property::Han}}, {0x3007, {Property::N, Property::Han}},
      {0x16FF0, {Property::M, Property::Han}},
      {0x31350, {Property::Lo, Property::Han}},   // CJK Ext-H, Unicode 15.0
      {0x2EBF0, {Property::Lo, Property::Han}},   // CJK Ext-I, 15.1
      {0x1E4D0, {Property::Lo}}, {0x1E4EB, {Property::Lm}}, {0x1E4EC, {Property::M}}, {0x1E4F0, {Property::N}},
      {0x10D50, {Property::Lu}}, {0x10D70, {Property::Ll}}, {0x10D40, {Property::N}},  // Garay, 16.0
      {0x10940, {}}, {0x323B0, {}},  // Sidetic and CJK Ext-J: Unicode 17, unassigned in 16
      {U' ', {Property::WhiteSpace}}, {0x0085, {Property::WhiteSpace}}, {0x3000, {Property::WhiteSpace}},
      {0x180E, {}}, {0xFEFF, {}}, {0x001C, {}}, {0x200B, {}},
  };
  const Property all[] = {Property::Lu, Property::Ll, Property::Lt, Property::Lm, Property::Lo,
                          Property::M, Property::N, Property::Han, Property::WhiteSpace};
  for (const auto& [cp, want] : samples)
    for (const Property p : all)
      EXPECT_EQ(has(p, cp), std::find(want.begin(), want.end(), p) != want.end())
          << std::hex << "U+" << uint32_t(cp) << " property " << int(p);
  for (const Property p : all) {
    const auto rs = unicode::ranges(p);
    ASSERT_FALSE(rs.empty());
    for (size_t i = 0; i < rs.size(); ++i) {
      EXPECT_LE(rs[i].first, rs[i].last);
      if (i > 0) {
        EXPECT_GT(rs[i].first, rs[i - 1].last + 1);  // sorted, disjoint, not adjacent
      }
    }
  }
  EXPECT_EQ(unicode::case_variants('s'), (std::u32string{U'S', U's', 0x017F}));
  EXPECT_EQ(unicode::case_variants('k'), (std::u32string{U'K', U'k', 0x212A}));
  EXPECT_EQ(unicode::case_variants('e'), (std::u32string{U'E', U'e'}));
}

TEST(PreTokenizer, InvalidUtf8RunsBecomeTheirOwnPieces) {
  const PreTokenizer pt;
  const auto split = [&](std::string_view s) {
    const auto v = pt.split(s);
    return Strings(v.begin(), v.end());
  };
  EXPECT_EQ(split("ab\xff" "cd"), (Strings{"ab", "\xff", "cd"}));
  // A valid stretch is matched on its own: the space before the invalid run is "end of text".
  EXPECT_EQ(split("x  \xe4\xb8 y"), (Strings{"x", "  ", "\xe4\xb8", " y"}));
  EXPECT_EQ(split("\xed\xa0\x80\xc0\xaf"), (Strings{"\xed\xa0\x80\xc0\xaf"}));
  EXPECT_EQ(split("\xf0\x9f\x98"), (Strings{"\xf0\x9f\x98"}));
}

TEST(PreTokenizer, PiecesCoverAnyBytesExactly) {
  const PreTokenizer pt;
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; ++i) {
    const std::string s = i % 2 ? random_bytes(rng, rng() % 64) : random_text(rng, rng() % 24);
    std::string joined;
    for (const auto p : pt.split(s)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, s);
  }
}

// The hand-written matcher of the default pre-tokeniser against PCRE2 alone on the same pattern,
// on random text of every class the pattern distinguishes: ASCII, letters that are both of its
// "upper" and "lower" classes (Lm, Lo, M), Han letters, marks and numbers, and characters of
// Unicode 15-17.
TEST(PreTokenizer, MatcherAgreesWithPcre2) {
  const PreTokenizer fast, pcre(PreTokenizer::kimi_pattern());
  static const char* kAtoms[] = {"a", "b", "Z", "Q", "x", "ab", "CD", "0", "1", "9", " ", " ", "\t", "\n", "\r",
                                 "\v", "\f", "'", "'", "s", "S", "t", "re", "RE", "rE", "ve", "m", "ll", "L", "d",
                                 ".", "!", "(", "#", "\x01", "\x1c", "\x7f", "é", "ſ", "١", "\u00a0", "\u3000",
                                 "\u0085", "中", "😀", "\u0301", "\xff", "K", "\u212a", "\u01c5", "\u02b0", "\u0e01",
                                 "\u0e31", "\u0903", "\u20dd", "\u2167", "\u00bd", "\u3002", "\u3005", "\u3007",
                                 "\U00016FF0", "\u180e", "\ufeff", "\u200b", "\u2028", "Ж", "ж", "\U0010FFFF",
                                 "\ue000", "\U00031350", "\U0002EBF0", "\U0001E4D0", "\U0001E4EB", "\U0001E4EC",
                                 "\U0001E4F0", "\U00010D50", "\U00010D70", "\U00010D40", "\U00010940", "\U000323B0"};
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    const size_t n = rng() % 12 + 1;
    for (size_t k = 0; k < n; ++k) s += kAtoms[rng() % (i % 2 ? std::size(kAtoms) : 37)];  // half pure ASCII
    ASSERT_EQ(fast.split(s), pcre.split(s)) << s;
  }
}

TEST(PreTokenizer, LongRunsDoNotOverflowTheMatchStack) {
  const PreTokenizer matcher, pcre(PreTokenizer::kimi_pattern());  // the default, and PCRE2 alone
  for (const PreTokenizer* pt : {&matcher, &pcre}) {
    for (const std::string unit : {"a", "A", "\u00e9", "\u0e01", "\u0e01\u0e31", " ", "\u4e2d", "1", "."}) {
      std::string s;
      for (int i = 0; i < 100000; ++i) s += unit;
      size_t total = 0;
      for (const auto p : pt->split(s)) total += p.size();
      EXPECT_EQ(total, s.size()) << unit;
    }
  }
}

TEST(PreTokenizer, BadCustomPatternIsAnError) {
  EXPECT_NE(error_of([] { PreTokenizer("(unclosed"); }).find("does not compile"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// BPE

// tiktoken's rule, written the obvious way: merge the lowest-ranked adjacent pair (leftmost on
// ties) until none is a token.
std::vector<int32_t> reference_bpe(std::string_view piece, const std::map<std::string, int32_t>& ranks) {
  std::vector<std::string> parts;
  for (const char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT32_MAX) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + long(at) + 1);
  }
  std::vector<int32_t> out;
  for (const auto& p : parts) out.push_back(ranks.at(p));
  return out;
}

TEST(Bpe, MatchesTheReferenceRuleOnShortAndLongPieces) {
  const Strings& vocab = trained_vocab();
  const BytePairEncoder bpe(vocab);
  std::map<std::string, int32_t> ranks;
  for (size_t r = 0; r < vocab.size(); ++r) ranks[vocab[r]] = int32_t(r);
  std::mt19937 rng(2);
  const std::string words[] = {"the", " the", "license", "ing", "ab", "aaa", "中", "你好", "😀", " ", "\n", "e", "s"};
  for (int i = 0; i < 400; ++i) {
    std::string piece;
    const size_t n = i < 300 ? rng() % 16 + 1 : rng() % 100 + 50;  // the last 100 past the small-path limit
    for (size_t k = 0; k < n; ++k) piece += words[rng() % std::size(words)];
    if (i % 7 == 0) piece += random_bytes(rng, rng() % 8);
    std::vector<int32_t> got;
    bpe.encode_piece(piece, got);
    ASSERT_EQ(got, reference_bpe(piece, ranks)) << piece.size() << " bytes";
  }
}

TEST(Bpe, TiesGoLeftmostAndRepeatsMergeInPairs) {
  // "aa" (rank 256) ties with itself across "aaa": the left pair merges first.
  Strings v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, char(b));
  v.push_back("aa");
  v.push_back("aaaa");
  const BytePairEncoder bpe(v);
  std::vector<int32_t> out;
  bpe.encode_piece("aaa", out);
  EXPECT_EQ(out, (std::vector<int32_t>{256, 'a'}));
  out.clear();
  std::string long_a(301, 'a');
  bpe.encode_piece(long_a, out);  // the heap path: 75 x "aaaa" then "a"
  ASSERT_EQ(out.size(), 76u);
  EXPECT_EQ(out.front(), 257);
  EXPECT_EQ(out.back(), 'a');
}

TEST(Bpe, VocabularyMustHoldEveryByte) {
  Strings v = {"a", "b"};
  EXPECT_NE(error_of([&] { BytePairEncoder b(v); }).find("lacks the single byte 0x00"), std::string::npos);
  Strings dup;
  for (int b = 0; b < 256; ++b) dup.emplace_back(1, char(b));
  dup.push_back("a");
  EXPECT_NE(error_of([&] { BytePairEncoder b(dup); }).find("repeats"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

TEST(Tokenizer, RoundTripsAnyBytes) {
  const Tokenizer& tok = trained_tokenizer();
  std::mt19937 rng(3);
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    switch (i % 3) {
      case 0: s = random_text(rng, rng() % 40); break;
      case 1: s = random_bytes(rng, rng() % 80); break;
      default: s = random_text(rng, 5) + random_bytes(rng, 3) + random_text(rng, 5); break;
    }
    for (const bool special : {true, false}) {
      const auto ids = tok.encode(s, special);
      ASSERT_EQ(tok.decode(ids), s);
      for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    }
  }
}

TEST(Tokenizer, TrainedVocabularyGivesShortEncodings) {
  const Tokenizer& tok = trained_tokenizer();
  const std::string text = "This License applies to any program or other work which contains a notice";
  EXPECT_LT(tok.encode(text).size(), text.size() / 3);
  const auto ids = tok.encode("Hello world");
  EXPECT_EQ(tok.decode(ids), "Hello world");
}

TEST(Tokenizer, SpecialTokensInTextAreRecognisedWhenAllowed) {
  const Tokenizer& tok = trained_tokenizer();
  const int32_t n = tok.num_base_tokens();
  EXPECT_EQ(tok.vocab_size(), n + 256);
  const int32_t im_end = *tok.token_id("<|im_end|>");
  EXPECT_EQ(im_end, n + 2);
  EXPECT_EQ(tok.bos_id(), n);
  EXPECT_EQ(tok.eos_id(), n + 1);
  EXPECT_EQ(*tok.token_id("<|reserved_token_" + std::to_string(n + 5) + "|>"), n + 5);
  EXPECT_EQ(*tok.token_id("<think>"), n + 22);
  EXPECT_FALSE(tok.token_id("hello"));
  EXPECT_TRUE(tok.is_special(im_end));
  EXPECT_FALSE(tok.is_special(n - 1));
  EXPECT_EQ(tok.token_bytes(im_end), "<|im_end|>");

  const auto ids = tok.encode("hi<|im_end|>[BOS]<|im_end");
  const auto hi = tok.encode("hi"), tail = tok.encode("<|im_end", false);
  std::vector<int32_t> want = hi;
  want.push_back(im_end);
  want.push_back(n);
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(ids, want);
  EXPECT_EQ(tok.decode(ids), "hi<|im_end|>[BOS]<|im_end");
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "hi<|im_end");

  const auto plain = tok.encode("hi<|im_end|>", false);
  EXPECT_TRUE(std::none_of(plain.begin(), plain.end(), [&](int32_t id) { return tok.is_special(id); }));
  EXPECT_EQ(tok.decode(plain), "hi<|im_end|>");
  // Text on either side of a special token is pre-tokenised on its own.
  const auto split = tok.split("a <|im_end|> b");
  EXPECT_EQ(Strings(split.begin(), split.end()), (Strings{"a", " ", "<|im_end|>", " b"}));
}

TEST(Tokenizer, DecodeRejectsOutOfRangeIds) {
  const Tokenizer& tok = trained_tokenizer();
  const std::vector<int32_t> bad = {1, tok.vocab_size()};
  EXPECT_NE(error_of([&] { tok.decode(bad); }).find("out of range"), std::string::npos);
  const std::vector<int32_t> neg = {-1};
  EXPECT_THROW(tok.decode(neg), Error);
  EXPECT_THROW(tok.token_bytes(-5), Error);
}

// tokenization_kimi.py's slicing, written from its description over code points.
std::vector<size_t> reference_slice_lengths(std::string_view text) {
  std::vector<std::pair<size_t, bool>> chars;  // (byte length, python isspace)
  for (size_t i = 0; i < text.size();) {
    const auto d = utf8::decode_one(text, i);
    const size_t len = d.status == utf8::Status::Ok ? d.len : 1;
    chars.emplace_back(len, d.status == utf8::Status::Ok && utf8::python_isspace(d.cp));
    i += len;
  }
  std::vector<size_t> out;  // slice lengths in bytes
  if (chars.empty()) return {0};
  for (size_t c0 = 0; c0 < chars.size(); c0 += 400000) {
    const size_t c1 = std::min(chars.size(), c0 + 400000);
    size_t run = 0, start = c0;
    bool space = chars[c0].second;
    for (size_t i = c0; i < c1; ++i) {
      if (chars[i].second != space) {
        run = 1;
        space = chars[i].second;
      } else if (++run > 25000) {
        size_t bytes = 0;
        for (size_t k = start; k < i; ++k) bytes += chars[k].first;
        out.push_back(bytes);
        start = i;
        run = 1;
      }
    }
    size_t bytes = 0;
    for (size_t k = start; k < c1; ++k) bytes += chars[k].first;
    out.push_back(bytes);
  }
  return out;
}

TEST(Tokenizer, LongInputsAreSlicedAsTokenizationKimiDoes) {
  const auto rep = [](std::string_view s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::vector<std::string> texts = {
      rep("a", 25000), rep("a", 25001), rep("a", 60000), rep(" ", 60000),
      rep("a", 30000) + rep(" ", 30000) + rep("b", 10),
      rep("\u4e2d", 30000),                        // multi-byte: characters, not bytes, count
      rep("\u001c", 26000) + "x",                  // Python space, not regex White_Space
      rep("ab ", 150000),                          // 450,000 characters: two chunks
      rep("\u4e2d ", 250000),                      // 500,000 characters of 4 bytes per pair
      rep("x", 24999) + rep("\xff", 3) + "x",      // invalid bytes count one character each
      rep("\xff", 25001),
  };
  const Tokenizer& tok = trained_tokenizer();
  for (const std::string& t : texts) {
    const auto slices = Tokenizer::encode_slices(t);
    std::vector<size_t> lens;
    std::string joined;
    for (const auto s : slices) lens.push_back(s.size()), joined += s;
    ASSERT_EQ(joined, t);
    EXPECT_EQ(lens, reference_slice_lengths(t)) << t.size() << " bytes starting " << t.substr(0, 8);
    // encode() is the concatenation of each slice encoded on its own.
    std::vector<int32_t> want;
    for (const auto s : slices) {
      const auto ids = tok.encode(std::string(s));
      want.insert(want.end(), ids.begin(), ids.end());
    }
    const auto got = tok.encode(t);
    EXPECT_EQ(got, want);
    EXPECT_EQ(tok.decode(got), t);
  }
  EXPECT_EQ(Tokenizer::encode_slices(rep("ab ", 150000)).size(), 2u);
  EXPECT_EQ(Tokenizer::encode_slices(rep("ab ", 150000))[0].size(), 400000u);
  EXPECT_EQ(Tokenizer::encode_slices(rep("a", 60000)).size(), 3u);
}

TEST(Tokenizer, LoadsTheModelDirectory) {
  test::TempDir d;
  const Strings& vocab = trained_vocab();
  write_tiktoken_file(d.path() / "tiktoken.model", vocab);
  const auto n = int32_t(vocab.size());
  nlohmann::json cfg = kimi_tokenizer_config(n);
  cfg["chat_template"] = "{{ messages }}";
  write_file(d.path() / "tokenizer_config.json", cfg.dump());
  Tokenizer tok = Tokenizer::load(d.path());
  EXPECT_EQ(tok.vocab_size(), n + 256);
  EXPECT_EQ(tok.bos_id(), n);
  EXPECT_EQ(tok.eos_id(), n + 1);
  EXPECT_EQ(*tok.token_id("<|im_user|>"), n + 3);
  EXPECT_EQ(*tok.token_id("[PAD]"), n + 255);
  EXPECT_EQ(tok.token_bytes(n + 5), "<|reserved_token_" + std::to_string(n + 5) + "|>");
  EXPECT_EQ(tok.chat_template(), "{{ messages }}");
  EXPECT_EQ(tok.encode("Hello <|im_end|>"), trained_tokenizer().encode("Hello <|im_end|>"));

  write_file(d.path() / "chat_template.jinja", "from the file");
  EXPECT_EQ(Tokenizer::load(d.path()).chat_template(), "from the file");

  // The AddedToken object form of bos/eos, and the list form of chat_template.
  std::filesystem::remove(d.path() / "chat_template.jinja");
  cfg["bos_token"] = {{"__type", "AddedToken"}, {"content", "[EOT]"}};
  cfg["chat_template"] = nlohmann::json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                {{"name", "default"}, {"template", "D"}}});
  write_file(d.path() / "tokenizer_config.json", cfg.dump());
  tok = Tokenizer::load(d.path());
  EXPECT_EQ(tok.bos_id(), n + 9);
  EXPECT_EQ(tok.chat_template(), "D");

  // Without tokenizer_config.json every special is reserved and there is no bos/eos.
  std::filesystem::remove(d.path() / "tokenizer_config.json");
  tok = Tokenizer::load(d.path());
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_FALSE(tok.token_id("<|im_end|>"));
  EXPECT_EQ(*tok.token_id("<|reserved_token_" + std::to_string(n + 2) + "|>"), n + 2);
}

TEST(Tokenizer, BadModelDirectoriesGiveClearErrors) {
  test::TempDir d;
  EXPECT_NE(error_of([&] { Tokenizer::load(d.path()); }).find("tiktoken.model not found"), std::string::npos);
  Strings bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  write_tiktoken_file(d.path() / "tiktoken.model", bytes);
  const auto with_config = [&](const std::string& json) {
    write_file(d.path() / "tokenizer_config.json", json);
    return error_of([&] { Tokenizer::load(d.path()); });
  };
  EXPECT_NE(with_config("{").find("tokenizer_config.json: invalid JSON"), std::string::npos);
  EXPECT_NE(with_config(R"({"added_tokens_decoder": {"5": {"content": "x"}}})").find("not an id of the special block [256, 512)"),
            std::string::npos);
  EXPECT_NE(with_config(R"({"added_tokens_decoder": {"600": {"content": "x"}}})").find("special block"), std::string::npos);
  EXPECT_NE(with_config(R"({"added_tokens_decoder": {"256": {"content": "A"}, "257": {"content": "A"}}})").find("same name"),
            std::string::npos);
  EXPECT_NE(with_config(R"({"bos_token": "<nope>"})").find("bos_token '<nope>' is not a special token"), std::string::npos);
  EXPECT_NE(with_config(R"({"chat_template": 5})").find("chat_template"), std::string::npos);
  write_file(d.path() / "tiktoken.model", "YQ== 0\n!!!! 1\n");
  EXPECT_NE(error_of([&] { Tokenizer::load(d.path()); }).find("tiktoken.model:2: invalid base64"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// UTF-8 and the streaming decoder

TEST(Utf8, ReplacesMaximalSubpartsAsPythonDoes) {
  // Expected values from Python's bytes.decode("utf-8", "replace").
  const std::string R = "\xEF\xBF\xBD";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xed\xa0\x80", R + R + R}, {"\xf0\x9f\x98" "A", R + "A"}, {"\xe4\xb8", R},
      {"\xc0\xaf", R + R},         {"\xf4\x90\x80\x80", R + R + R + R}, {"\xff", R},
      {"a\x80" "b", "a" + R + "b"}, {"\xe0\x80\x80", R + R + R}, {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
      {"\xe4\xb8\xad\xe4", "\xe4\xb8\xad" + R},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(utf8::replace_invalid(in), want);
}

TEST(IncrementalDecoder, StreamsWholeCharactersOnly) {
  const Tokenizer& tok = trained_tokenizer();
  const std::string text = "Hello 你好 😀 👍🏽 Привет<|im_end|> done";
  const auto ids = tok.encode(text);
  IncrementalDecoder dec(tok);
  std::string out;
  for (const int32_t id : ids) {
    const std::string part = dec.push(id);
    EXPECT_TRUE(utf8::is_valid(part));
    out += part;
  }
  out += dec.flush();
  EXPECT_EQ(out, text);

  // A character split across tokens comes out once complete.
  Strings v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, char(b));
  const Tokenizer bytes_only(v, {});
  IncrementalDecoder d2(bytes_only);
  EXPECT_EQ(d2.push(0xe4), "");
  EXPECT_EQ(d2.push(0xb8), "");
  EXPECT_EQ(d2.pending(), 2u);
  EXPECT_EQ(d2.push(0xad), "\xe4\xb8\xad");
  EXPECT_EQ(d2.push(0xff), "\xEF\xBF\xBD");  // can never complete: replaced at once
  EXPECT_EQ(d2.push(0xf0), "");
  EXPECT_EQ(d2.flush(), "\xEF\xBF\xBD");      // cut off at the end
  EXPECT_THROW(d2.push(bytes_only.vocab_size()), Error);
}

TEST(IncrementalDecoder, ConcatenationEqualsDecodeForRandomByteSoup) {
  const Tokenizer& tok = trained_tokenizer();
  std::mt19937 rng(4);
  for (int i = 0; i < 3000; ++i) {
    std::vector<int32_t> ids;
    const size_t n = rng() % 30;
    for (size_t k = 0; k < n; ++k) {
      // Mostly byte tokens and multi-byte merges, some specials.
      const uint32_t pick = rng() % 10;
      ids.push_back(pick < 5 ? int32_t(rng() % 256) : pick < 9 ? int32_t(rng() % uint32_t(tok.num_base_tokens()))
                                                              : tok.num_base_tokens() + int32_t(rng() % 256));
    }
    const bool skip = i % 2;
    IncrementalDecoder dec(tok, skip);
    std::string out;
    for (const int32_t id : ids) {
      const std::string part = dec.push(id);
      ASSERT_TRUE(utf8::is_valid(part));
      ASSERT_LE(dec.pending(), 3u);
      out += part;
    }
    out += dec.flush();
    const std::string whole = tok.decode(ids, skip);
    ASSERT_EQ(out, utf8::replace_invalid(whole));
    if (utf8::is_valid(whole)) {
      ASSERT_EQ(out, whole);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Training

TEST(BpeTrainer, IsDeterministicAndMakesAUsableVocabulary) {
  const std::vector<std::string_view> texts = {"the cat sat on the mat. the cat ate the rat.", "then the end"};
  const PreTokenizer pt;
  const Strings a = train_bpe(texts, 300, pt);
  EXPECT_EQ(a, train_bpe(texts, 300, pt));
  ASSERT_GE(a.size(), 260u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(a[size_t(b)], std::string(1, char(b)));
  EXPECT_NE(std::find(a.begin(), a.end(), " the"), a.end());
  EXPECT_NO_THROW(BytePairEncoder{a});  // distinct, every byte present
  EXPECT_THROW(train_bpe(texts, 100, pt), Error);
}

TEST(BpeTrainer, TrainsOnTheSystemLicensesQuickly) {
  if (!std::filesystem::exists(kDefaultTrainingCorpus)) GTEST_SKIP() << kDefaultTrainingCorpus << " missing";
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::filesystem::path> corpus = {kDefaultTrainingCorpus};
  const Strings v = train_bpe_files(corpus, 1024, PreTokenizer());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(v.size(), 1024u);
  EXPECT_LT(s, 20.0);  // ~0.05 s in a Release build; generous for sanitizers
  EXPECT_NE(std::find(v.begin(), v.end(), " License"), v.end());
  EXPECT_NE(error_of([] {
              const std::vector<std::filesystem::path> none = {"/nonexistent-corpus"};
              train_bpe_files(none, 300, PreTokenizer());
            }).find("/nonexistent-corpus"),
            std::string::npos);
}

}  // namespace
}  // namespace kimi

namespace kimi {
namespace {

// ---------------------------------------------------------------------------------------------
// Thread safety and the command line

TEST(Tokenizer, EncodesFromManyThreadsAtOnce) {
  const Tokenizer& tok = trained_tokenizer();
  std::mt19937 rng(6);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(random_text(rng, 200));
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int r = 0; r < 5; ++r)
        for (size_t i = 0; i < texts.size(); ++i)
          if (tok.encode(texts[i]) != want[i]) ++bad;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(TokenizerCli, TrainTokenizeDetokenize) {
  test::TempDir d;
  const auto corpus = d.path() / "corpus.txt";
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the quick brown fox jumps over the lazy dog. 你好世界！\n";
  write_file(corpus, text);
  const std::string model = (d.path() / "m").string();
  test::CmdResult r = test::run_kimi("train-tokenizer " + model + " " + corpus.string() + " --ranks 300");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("300 ranks + 256 special tokens"), std::string::npos) << r.out;

  r = test::run_kimi("tokenize --model " + model + " --text 'the fox<|im_end|>'");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string ids = r.out.substr(0, r.out.find('\n'));
  EXPECT_NE(ids.find(",302"), std::string::npos) << ids;  // <|im_end|>: 300 base tokens + 2
  r = test::run_kimi("detokenize --model " + model + " --ids " + ids);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "the fox<|im_end|>");
  r = test::run_kimi("detokenize --model " + model + " --ids " + ids + " --skip-special");
  EXPECT_EQ(r.out, "the fox");

  r = test::run_kimi("tokenize --model " + model + " --text 'a<|im_end|>' --no-special --json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.front(), '[');
  EXPECT_EQ(r.out.find("302"), std::string::npos) << r.out;
  r = test::run_kimi("tokenize --model " + model + " --text 'Hello world' --pieces");
  EXPECT_EQ(r.out, "[\"Hello\",\" world\"]\n");

  write_file(d.path() / "in.jsonl", "\"the fox\"\n\"<|im_end|>\"\n");
  r = test::run_kimi("tokenize --model " + model + " --file " + (d.path() / "in.jsonl").string() + " --jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\n[302]\n"), std::string::npos) << r.out;
  write_file(d.path() / "ids.jsonl", r.out);
  r = test::run_kimi("detokenize --model " + model + " --ids-file " + (d.path() / "ids.jsonl").string() + " --jsonl");
  EXPECT_EQ(r.out, "\"the fox\"\n\"<|im_end|>\"\n");
}

TEST(TokenizerCli, ErrorsAreClear) {
  test::TempDir d;
  test::CmdResult r = test::run_kimi("tokenize --model " + (d.path() / "none").string() + " --text x");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("tiktoken.model not found"), std::string::npos) << r.out;
  r = test::run_kimi("tokenize --model x");
  EXPECT_NE(r.out.find("exactly one of --text and --file"), std::string::npos) << r.out;
  Strings bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  write_tiktoken_file(d.path() / "tiktoken.model", bytes);
  r = test::run_kimi("detokenize --model " + d.path().string() + " --ids 1,999");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("token id 999 is out of range [0, 512)"), std::string::npos) << r.out;
  r = test::run_kimi("detokenize --model " + d.path().string() + " --ids 1,x");
  EXPECT_NE(r.out.find("integer token ids"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kimi
