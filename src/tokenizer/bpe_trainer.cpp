#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "tokenizer/pretokenizer.h"

namespace kimi {

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

struct Candidate {
  int64_t count;
  int32_t a, b;
  // Max-heap order: higher count first, then lower (a, b).
  bool operator<(const Candidate& o) const {
    if (count != o.count) return count < o.count;
    if (a != o.a) return a > o.a;
    return b > o.b;
  }
};

struct Word {
  std::vector<int32_t> syms;
  int64_t count;
};

}  // namespace

std::vector<std::string> train_bpe(std::span<const std::string_view> texts, int32_t num_ranks,
                                   const PreTokenizer& pre_tokenizer) {
  if (num_ranks < 256) throw Error("BPE training needs at least 256 ranks (the single bytes), got " + std::to_string(num_ranks));

  // Distinct pieces with their counts; training works on these, never on the raw text again.
  std::unordered_map<std::string_view, int64_t> piece_counts;
  for (const std::string_view text : texts) {
    PreTokenizer::Cursor c = pre_tokenizer.pieces(text);
    for (std::string_view p; c.next(p);) ++piece_counts[p];
  }
  std::vector<std::pair<std::string_view, int64_t>> pieces(piece_counts.begin(), piece_counts.end());
  std::sort(pieces.begin(), pieces.end());  // a fixed word order, whatever the hash map's
  std::vector<Word> words;
  words.reserve(pieces.size());
  for (const auto& [p, n] : pieces) {
    if (p.size() < 2) continue;  // no pairs
    Word w{{}, n};
    w.syms.reserve(p.size());
    for (const char c : p) w.syms.push_back(int32_t(uint8_t(c)));
    words.push_back(std::move(w));
  }

  std::vector<std::string> tokens;
  tokens.reserve(size_t(num_ranks));
  std::unordered_map<std::string, int32_t> token_ids;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, char(b));
    token_ids.emplace(tokens.back(), b);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;  // may list a word twice
  for (uint32_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].syms;
    for (size_t j = 0; j + 1 < s.size(); ++j) {
      const uint64_t k = pair_key(s[j], s[j + 1]);
      pair_count[k] += words[w].count;
      pair_words[k].push_back(w);
    }
  }
  // Lazy max-heap: entries go stale as counts change and are checked against pair_count when
  // popped. Every increase of a count pushes a fresh entry, so the true maximum is never missed.
  std::priority_queue<Candidate> heap;
  for (const auto& [k, n] : pair_count) heap.push({n, int32_t(k >> 32), int32_t(k & 0xFFFFFFFF)});

  std::vector<uint32_t> seen(words.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> merged;
  std::unordered_set<uint64_t> grown;
  while (int32_t(tokens.size()) < num_ranks && !heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const uint64_t key = pair_key(top.a, top.b);
    const auto cit = pair_count.find(key);
    const int64_t now = cit == pair_count.end() ? 0 : cit->second;
    if (now != top.count) {
      if (now > 0) heap.push({now, top.a, top.b});
      continue;
    }
    std::string bytes = tokens[size_t(top.a)] + tokens[size_t(top.b)];
    int32_t id;
    if (const auto it = token_ids.find(bytes); it != token_ids.end()) {
      id = it->second;  // already a token: merge without a new rank
    } else {
      id = int32_t(tokens.size());
      token_ids.emplace(bytes, id);
      tokens.push_back(std::move(bytes));
    }
    ++stamp;
    grown.clear();
    const std::vector<uint32_t> where = std::move(pair_words[key]);
    pair_words.erase(key);
    for (const uint32_t w : where) {
      if (seen[w] == stamp) continue;
      seen[w] = stamp;
      Word& word = words[w];
      auto& s = word.syms;
      for (size_t j = 0; j + 1 < s.size(); ++j) pair_count[pair_key(s[j], s[j + 1])] -= word.count;
      merged.clear();
      for (size_t j = 0; j < s.size(); ++j) {
        if (j + 1 < s.size() && s[j] == top.a && s[j + 1] == top.b) {
          merged.push_back(id);
          ++j;
        } else {
          merged.push_back(s[j]);
        }
      }
      s.swap(merged);
      for (size_t j = 0; j + 1 < s.size(); ++j) {
        const uint64_t k = pair_key(s[j], s[j + 1]);
        pair_count[k] += word.count;
        if (s[j] == id || s[j + 1] == id) {
          pair_words[k].push_back(w);
          grown.insert(k);
        }
      }
    }
    pair_count.erase(key);
    for (const uint64_t k : grown) {
      const int64_t n = pair_count[k];
      if (n > 0) heap.push({n, int32_t(k >> 32), int32_t(k & 0xFFFFFFFF)});
    }
  }
  return tokens;
}

std::vector<std::string> train_bpe_files(std::span<const std::filesystem::path> paths, int32_t num_ranks,
                                         const PreTokenizer& pre_tokenizer) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const fs::path& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (const auto& e : fs::recursive_directory_iterator(p, ec)) {
        // Links are skipped: in common-licenses they only repeat files (GPL -> GPL-3).
        if (!e.is_symlink() && e.is_regular_file()) found.push_back(e.path());
      }
      if (ec) throw Error("cannot list " + p.string() + ": " + ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      throw Error("training corpus " + p.string() + " is not a file or directory");
    }
  }
  if (files.empty()) throw Error("training corpus has no files");
  std::vector<std::string> contents;
  contents.reserve(files.size());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw Error("cannot open " + f.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    contents.push_back(ss.str());
  }
  std::vector<std::string_view> views(contents.begin(), contents.end());
  return train_bpe(views, num_ranks, pre_tokenizer);
}

}  // namespace kimi
