// `kimi tokenize`, `kimi detokenize` and `kimi train-tokenizer`: the tokenizer from the shell.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "common/error.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tiktoken_file.h"
#include "tokenizer/tokenizer.h"

namespace kimi::cli {

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

void write_out(std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout); }

std::string ids_text(const std::vector<int32_t>& ids, bool json) {
  std::string out = json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  if (json) out += ']';
  return out;
}

// Ids separated by commas and/or whitespace, optionally inside [ ] (so a JSON array works too).
std::vector<int32_t> parse_ids(const std::string& s, const std::string& what) {
  std::vector<int32_t> ids;
  std::string item;
  const auto flush = [&] {
    if (item.empty()) return;
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < INT32_MIN || v > INT32_MAX) throw Error("");
      ids.push_back(int32_t(v));
    } catch (const std::exception&) {
      throw Error(what + " expects integer token ids, got '" + item + "'");
    }
    item.clear();
  };
  for (const char c : s) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']')
      flush();
    else
      item += c;
  }
  flush();
  return ids;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  const Args a(argc, argv, 2, {"model", "text", "file"}, {"help", "json", "jsonl", "no-special", "stats", "pieces"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi tokenize --model DIR (--text T | --file F) [--json] [--no-special] [--stats]\n"
        "       kimi tokenize --model DIR --file F --jsonl\n\n"
        "Prints the token ids of the text (comma-separated, or a JSON array with --json). Special\n"
        "tokens written in the text (<|im_end|>, ...) are recognised unless --no-special. --file -\n"
        "reads standard input. --jsonl: F holds one JSON string per line; prints one JSON array of\n"
        "ids per line. --pieces: print the pieces the text is split into before BPE (pre-tokeniser\n"
        "pieces and special tokens) as JSON strings instead of ids. --stats: encoding time and speed\n"
        "on standard error.\n");
    return 0;
  }
  if (a.has("text") == a.has("file")) throw Error("give exactly one of --text and --file");
  const Tokenizer tok = Tokenizer::load(a.require("model"));
  const bool allow_special = !a.has("no-special");
  const bool pieces = a.has("pieces");
  // One line of output for a text: ids, or the pieces as a JSON array of strings.
  const auto render = [&](const std::string& text, bool json) {
    if (!pieces) return ids_text(tok.encode(text, allow_special), json);
    nlohmann::json arr = nlohmann::json::array();
    for (const std::string_view p : tok.split(text, allow_special)) arr.push_back(std::string(p));
    return arr.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (a.has("jsonl")) {
    if (!a.has("file")) throw Error("--jsonl needs --file");
    std::string out;
    size_t n = 0;
    for (const std::string& line : lines_of(read_input(a.require("file")))) {
      ++n;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error("--jsonl line " + std::to_string(n) + ": " + e.what());
      }
      if (!j.is_string()) throw Error("--jsonl line " + std::to_string(n) + " is not a JSON string");
      out += render(j.get<std::string>(), true);
      out += '\n';
    }
    write_out(out);
    return 0;
  }
  const std::string text = a.has("text") ? a.require("text") : read_input(a.require("file"));
  if (pieces) {
    write_out(render(text, true) + "\n");
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_seconds();
  const std::vector<int32_t> ids = tok.encode(text, allow_special);
  const double cpu = thread_cpu_seconds() - c0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_out(ids_text(ids, a.has("json")) + "\n");
  // CPU time too: on a busy machine it, not the wall clock, says what the encoder costs.
  if (a.has("stats"))
    std::fprintf(stderr, "encoded %zu bytes into %zu tokens in %.3f s (%.3f s of CPU): %.2f MB/s, %.2f MB per CPU second\n",
                 text.size(), ids.size(), wall, cpu, wall > 0 ? double(text.size()) / wall / 1e6 : 0.0,
                 cpu > 0 ? double(text.size()) / cpu / 1e6 : 0.0);
  return 0;
}

int run_detokenize(int argc, char** argv) {
  const Args a(argc, argv, 2, {"model", "ids", "ids-file"}, {"help", "skip-special", "jsonl"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi detokenize --model DIR (--ids 1,2,3 | --ids-file F) [--skip-special]\n"
        "       kimi detokenize --model DIR --ids-file F --jsonl\n\n"
        "Writes the bytes the ids stand for to standard output, as they are (no newline added).\n"
        "--ids-file: ids separated by commas or whitespace (a JSON array works too). --jsonl: F\n"
        "holds one JSON array of ids per line; prints one JSON string per line (bytes that are not\n"
        "UTF-8 become U+FFFD).\n");
    return 0;
  }
  if (a.has("ids") == a.has("ids-file")) throw Error("give exactly one of --ids and --ids-file");
  const Tokenizer tok = Tokenizer::load(a.require("model"));
  const bool skip = a.has("skip-special");
  if (a.has("jsonl")) {
    if (!a.has("ids-file")) throw Error("--jsonl needs --ids-file");
    std::string out;
    for (const std::string& line : lines_of(read_input(a.require("ids-file")))) {
      out += nlohmann::json(tok.decode(parse_ids(line, "--ids-file"), skip))
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out += '\n';
    }
    write_out(out);
    return 0;
  }
  const std::vector<int32_t> ids =
      a.has("ids") ? parse_ids(a.require("ids"), "--ids") : parse_ids(read_input(a.require("ids-file")), "--ids-file");
  write_out(tok.decode(ids, skip));
  return 0;
}

int run_train_tokenizer(int argc, char** argv) {
  const Args a(argc, argv, 2, {"ranks"}, {"help"});
  if (a.has("help") || a.positionals().empty()) {
    std::printf(
        "usage: kimi train-tokenizer OUT_DIR [CORPUS...] [--ranks N]\n\n"
        "Trains a byte-level BPE vocabulary of N ranks (default 4096) on the corpus files or\n"
        "directories (default %s) with the Kimi pre-tokeniser, and writes OUT_DIR/tiktoken.model\n"
        "and OUT_DIR/tokenizer_config.json with the Kimi-K2.5 special-token block after it (keys\n"
        "already in an existing tokenizer_config.json, such as chat_template, are kept).\n",
        kDefaultTrainingCorpus);
    return a.has("help") ? 0 : 1;
  }
  const std::filesystem::path out = a.positionals()[0];
  std::vector<std::filesystem::path> corpus(a.positionals().begin() + 1, a.positionals().end());
  if (corpus.empty()) corpus.emplace_back(kDefaultTrainingCorpus);
  const int64_t ranks = a.get_int("ranks", 4096);
  if (ranks < 256 || ranks > 1'000'000) throw Error("--ranks must be in [256, 1000000]");

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> tokens = train_bpe_files(corpus, int32_t(ranks), PreTokenizer());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::create_directories(out);
  write_tiktoken_file(out / "tiktoken.model", tokens);
  const auto config_path = out / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (std::filesystem::exists(config_path)) {
    try {
      config = nlohmann::json::parse(read_input(config_path.string()));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config_path.string() + ": invalid JSON: " + e.what());
    }
  }
  if (!config.is_object()) throw Error(config_path.string() + ": expected a JSON object");
  config.update(kimi_tokenizer_config(int32_t(tokens.size())));
  std::ofstream f(config_path, std::ios::trunc);
  f << config.dump(2) << "\n";
  f.close();
  if (!f) throw Error("cannot write " + config_path.string());
  Tokenizer::load(out);  // what we wrote must load
  std::printf("wrote %s: %zu ranks + %d special tokens (trained in %.2f s)\n", out.string().c_str(), tokens.size(),
              Tokenizer::kNumSpecialTokens, s);
  return 0;
}

}  // namespace kimi::cli
