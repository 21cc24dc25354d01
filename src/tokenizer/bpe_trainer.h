#pragma once
// Trains a byte-level BPE vocabulary in tiktoken's form (token bytes by rank), so that generated
// model directories can ship a real, small tiktoken.model. Ranks 0..255 are the single bytes
// (rank = byte value); each further rank is the most frequent adjacent pair of tokens over the
// pre-tokenised pieces of the corpus, merged (ties: the pair of lower ranks, left first), the
// classic BPE training loop. A merge whose bytes already form a token (the same string reached
// by another split) is applied without a new rank, as a tiktoken vocabulary holds each string
// once. Deterministic: same corpus, same vocabulary.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

class PreTokenizer;

// Up to num_ranks tokens (fewer when the corpus runs out of pairs); num_ranks >= 256.
std::vector<std::string> train_bpe(std::span<const std::string_view> texts, int32_t num_ranks,
                                   const PreTokenizer& pre_tokenizer);
// The same over files; a directory stands for the regular files under it, in path order.
std::vector<std::string> train_bpe_files(std::span<const std::filesystem::path> paths, int32_t num_ranks,
                                         const PreTokenizer& pre_tokenizer);

// Where every Debian system has a few hundred KB of varied English text (package base-files).
inline constexpr const char* kDefaultTrainingCorpus = "/usr/share/common-licenses";

}  // namespace kimi
