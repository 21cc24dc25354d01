#pragma once
// The prompts `kimi bench serve` sends, as `vllm bench serve` builds them:
//  - random: lengths drawn uniformly from [floor(L*(1-r)), ceil(L*(1+r))] (output at least 1),
//    a shared random prefix of --random-prefix-len tokens, then the run of token ids
//    (offset + i + 0..len-1) mod V; the ids are decoded to text and re-encoded, and the ids
//    adjusted (padded with random ids or cut) until the text re-encodes to the intended length
//    (at most 10 rounds). V counts the ordinary tokens only (special tokens are never drawn).
//  - sharegpt: a JSON list of {"conversations": [{"value": prompt}, {"value": reply}, ...]};
//    shuffled by the seed; the reply's token count is the output length unless one is given;
//    pairs under 4 tokens, prompts over 1024 or pairs over 2048 tokens are skipped.
//  - custom: JSONL, one {"prompt": ..., optional "output_tokens": N} per line.
// Both file formats are cycled when they hold fewer usable prompts than asked for.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/serve_client.h"
#include "common/rng.h"
#include "tokenizer/tokenizer.h"

namespace kimi {

// Text <-> token ids, from a local tokenizer or from the server under test.
class TokenCodec {
 public:
  virtual ~TokenCodec() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Always valid UTF-8 (bytes that do not form characters become U+FFFD, as Python decodes).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // Ordinary tokens are the ids [0, ordinary_vocab_size()).
  virtual int32_t ordinary_vocab_size() const = 0;
  virtual std::string name() const = 0;
};

// The model directory's tiktoken.model (as `kimi serve` tokenizes).
std::unique_ptr<TokenCodec> make_local_codec(const std::filesystem::path& model_dir);
// The server's /tokenize and /detokenize (vLLM's and kimi's shapes, and llama.cpp's "content").
// The vocabulary size is vocab_size when > 0, else found by probing /detokenize with ids.
std::unique_ptr<TokenCodec> make_server_codec(const ServeClientConfig& config, int32_t vocab_size);

struct RandomDatasetOptions {
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0.0;
  int64_t prefix_len = 0;
  uint64_t seed = 0;
};

struct RandomLengths {
  std::vector<int64_t> input, output, offsets;
  int64_t input_low = 0, input_high = 0, output_low = 0, output_high = 0;
};
RandomLengths sample_random_lengths(size_t n, const RandomDatasetOptions& options, int32_t vocab, Rng& rng);

std::vector<ServeRequest> make_random_dataset(const TokenCodec& codec, size_t n, const RandomDatasetOptions& options);

struct FileDatasetOptions {
  std::string format;      // "sharegpt" or "custom"
  int64_t output_len = 0;  // > 0: every request's max_tokens; else from the file (custom: 256)
  uint64_t seed = 0;
};
// codec may be null for "custom" (prompt lengths then come from the server's usage).
std::vector<ServeRequest> load_file_dataset(const std::filesystem::path& path, size_t n, const FileDatasetOptions& options,
                                            const TokenCodec* codec);

}  // namespace kimi
