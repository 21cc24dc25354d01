#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "tokenizer/tiktoken_file.h"
#include "tokenizer/utf8.h"

namespace kimi {

namespace {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error("cannot read " + path.string());
  return ss.str();
}

// HF writes special tokens either as a plain string or as a serialised AddedToken object.
std::string token_text(const nlohmann::json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  if (v.is_null()) return "";
  throw Error(where + " must be a string or an object with a \"content\" string");
}

}  // namespace

const std::map<int32_t, std::string>& kimi_k25_special_token_names() {
  static const std::map<int32_t, std::string> names = {
      {0, "[BOS]"},
      {1, "[EOS]"},
      {2, "<|im_end|>"},
      {3, "<|im_user|>"},
      {4, "<|im_assistant|>"},
      {6, "<|start_header_id|>"},
      {7, "<|end_header_id|>"},
      {9, "[EOT]"},
      {10, "<|im_system|>"},
      {11, "<|tool_calls_section_begin|>"},
      {12, "<|tool_calls_section_end|>"},
      {13, "<|tool_call_begin|>"},
      {14, "<|tool_call_argument_begin|>"},
      {15, "<|tool_call_end|>"},
      {17, "<|im_middle|>"},
      {18, "<|media_begin|>"},
      {19, "<|media_content|>"},
      {20, "<|media_end|>"},
      {21, "<|media_pad|>"},
      {22, "<think>"},
      {23, "</think>"},
      {254, "[UNK]"},
      {255, "[PAD]"},
  };
  return names;
}

nlohmann::json kimi_tokenizer_config(int32_t num_base_tokens) {
  nlohmann::json added = nlohmann::json::object();
  for (const auto& [offset, name] : kimi_k25_special_token_names())
    added[std::to_string(num_base_tokens + offset)] = {{"content", name},   {"lstrip", false},
                                                       {"normalized", false}, {"rstrip", false},
                                                       {"single_word", false}, {"special", true}};
  return {{"added_tokens_decoder", added},
          {"auto_map", {{"AutoTokenizer", {"tokenization_kimi.TikTokenTokenizer", nullptr}}}},
          {"bos_token", "[BOS]"},
          {"eos_token", "[EOS]"},
          {"unk_token", "[UNK]"},
          {"pad_token", "[PAD]"},
          {"clean_up_tokenization_spaces", false},
          {"tokenizer_class", "TikTokenTokenizer"}};
}

Tokenizer::Tokenizer(std::vector<std::string> base_tokens, const std::map<int32_t, std::string>& special_names,
                     const std::string& bos_token, const std::string& eos_token, std::string chat_template)
    : bpe_(base_tokens), chat_template_(std::move(chat_template)) {
  num_base_ = bpe_.size();
  special_text_.resize(kNumSpecialTokens);
  for (int32_t i = 0; i < kNumSpecialTokens; ++i)
    special_text_[size_t(i)] = "<|reserved_token_" + std::to_string(num_base_ + i) + "|>";
  for (const auto& [id, name] : special_names) {
    if (!is_special(id))
      throw Error("special token '" + name + "' has id " + std::to_string(id) + ", outside the special block [" +
                  std::to_string(num_base_) + ", " + std::to_string(vocab_size()) + ")");
    if (name.empty()) throw Error("special token " + std::to_string(id) + " has an empty name");
    special_text_[size_t(id - num_base_)] = name;
  }
  trie_.emplace_back();
  for (int32_t i = 0; i < kNumSpecialTokens; ++i) {
    const std::string& text = special_text_[size_t(i)];
    const int32_t id = num_base_ + i;
    if (!special_ids_.emplace(text, id).second)
      throw Error("special tokens " + std::to_string(special_ids_[text]) + " and " + std::to_string(id) +
                  " have the same name '" + text + "'");
    special_first_byte_[uint8_t(text[0])] = true;
    int32_t node = 0;
    for (const char c : text) {
      auto& kids = trie_[size_t(node)].kids;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(uint8_t(c), int32_t(-1)));
      if (it != kids.end() && it->first == uint8_t(c)) {
        node = it->second;
      } else {
        const auto child = int32_t(trie_.size());
        kids.insert(it, {uint8_t(c), child});
        trie_.emplace_back();  // invalidates `kids`; not used after this
        node = child;
      }
    }
    trie_[size_t(node)].id = id;
  }
  const auto named = [&](const std::string& name, const char* what) {
    if (name.empty()) return int32_t(-1);
    const auto id = token_id(name);
    if (!id) throw Error(std::string(what) + " '" + name + "' is not a special token");
    return *id;
  };
  bos_id_ = named(bos_token, "bos_token");
  eos_id_ = named(eos_token, "eos_token");
}

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  const auto model_file = model_dir / "tiktoken.model";
  if (!std::filesystem::exists(model_file))
    throw Error(model_file.string() + " not found (the tokenizer needs the tiktoken vocabulary)");
  std::vector<std::string> base = read_tiktoken_file(model_file);
  const auto num_base = int64_t(base.size());

  std::map<int32_t, std::string> names;
  std::string bos, eos, chat_template;
  const auto config_file = model_dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_file)) {
    const std::string where = config_file.string();
    nlohmann::json cfg;
    try {
      cfg = nlohmann::json::parse(read_text_file(config_file));
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": invalid JSON: " + e.what());
    }
    if (!cfg.is_object()) throw Error(where + ": expected a JSON object");
    if (cfg.contains("added_tokens_decoder")) {
      const auto& added = cfg["added_tokens_decoder"];
      if (!added.is_object()) throw Error(where + ": added_tokens_decoder must be an object");
      for (const auto& [key, value] : added.items()) {
        int64_t id = -1;
        try {
          size_t used = 0;
          id = std::stoll(key, &used);
          if (used != key.size()) id = -1;
        } catch (const std::exception&) {
        }
        if (id < num_base || id >= num_base + kNumSpecialTokens)
          throw Error(where + ": added_tokens_decoder key '" + key + "' is not an id of the special block [" +
                      std::to_string(num_base) + ", " + std::to_string(num_base + kNumSpecialTokens) +
                      ") that follows the " + std::to_string(num_base) + " tokens of tiktoken.model");
        const std::string text = token_text(value, where + ": added_tokens_decoder[" + key + "]");
        if (text.empty()) throw Error(where + ": added_tokens_decoder[" + key + "] has no content");
        names[int32_t(id)] = text;
      }
    }
    if (cfg.contains("bos_token")) bos = token_text(cfg["bos_token"], where + ": bos_token");
    if (cfg.contains("eos_token")) eos = token_text(cfg["eos_token"], where + ": eos_token");
    if (cfg.contains("chat_template")) {
      const auto& t = cfg["chat_template"];
      if (t.is_string()) {
        chat_template = t.get<std::string>();
      } else if (t.is_array()) {
        // HF's list form [{"name": ..., "template": ...}]: the one named "default", else the first.
        for (const auto& entry : t) {
          if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string())
            throw Error(where + ": chat_template list entries need a \"template\" string");
          const bool is_default = entry.contains("name") && entry["name"] == "default";
          if (chat_template.empty() || is_default) chat_template = entry["template"].get<std::string>();
          if (is_default) break;
        }
      } else if (!t.is_null()) {
        throw Error(where + ": chat_template must be a string or a list of named templates");
      }
    }
  }
  const auto jinja_file = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file)) chat_template = read_text_file(jinja_file);
  try {
    return Tokenizer(std::move(base), names, bos, eos, std::move(chat_template));
  } catch (const Error& e) {
    throw Error(model_dir.string() + ": " + e.what());
  }
}

std::optional<int32_t> Tokenizer::token_id(std::string_view special_token_text) const {
  const auto it = special_ids_.find(std::string(special_token_text));
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(vocab_size()) + ")");
  if (id >= num_base_) return special_text_[size_t(id - num_base_)];
  return bpe_.token(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (const int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    out.append(token_bytes(id));
  }
  return out;
}

std::vector<std::string_view> Tokenizer::encode_slices(std::string_view text) {
  std::vector<std::string_view> out;
  // A text of at most kMaxRunChars bytes has at most that many characters: one slice.
  if (text.size() <= kMaxRunChars) {
    out.push_back(text);
    return out;
  }
  // One pass over the characters. Python's loop, per 400,000-character chunk: a run counter
  // that restarts at 1 whenever the space/non-space kind flips, and a cut before the character
  // that would make the current run longer than 25,000 (the slice keeps what came before,
  // mixed kinds included).
  size_t i = 0;
  while (i < text.size()) {
    size_t slice_begin = i, chars = 0, run = 0;
    bool run_space = false;
    while (i < text.size() && chars < kMaxEncodeChars) {
      uint32_t len = 1;
      bool space;
      if (uint8_t(text[i]) < 0x80) {
        space = utf8::python_isspace(char32_t(text[i]));
      } else {
        const utf8::Decoded d = utf8::decode_one(text, i);
        // Each byte of an invalid sequence counts as one non-space character.
        if (d.status == utf8::Status::Ok) len = d.len;
        space = d.status == utf8::Status::Ok && utf8::python_isspace(d.cp);
      }
      if (chars == 0) run_space = space;
      if (space != run_space) {
        run = 1;
        run_space = space;
      } else if (++run > kMaxRunChars) {
        out.push_back(text.substr(slice_begin, i - slice_begin));
        slice_begin = i;
        run = 1;
      }
      i += len;
      ++chars;
    }
    out.push_back(text.substr(slice_begin, i - slice_begin));
  }
  return out;
}

int32_t Tokenizer::match_special(std::string_view text, size_t pos, size_t& len) const {
  int32_t node = 0, found = -1;
  for (size_t j = pos; j < text.size(); ++j) {
    const auto& kids = trie_[size_t(node)].kids;
    const auto b = uint8_t(text[j]);
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t(-1)));
    if (it == kids.end() || it->first != b) break;
    node = it->second;
    if (trie_[size_t(node)].id >= 0) {
      found = trie_[size_t(node)].id;
      len = j + 1 - pos;
    }
  }
  return found;
}

// Walks what encode() encodes, in order: on_piece(view) for each pre-tokeniser piece, and
// on_special(id, view) for each special token written in the text (when allowed). Text between
// special tokens is pre-tokenised on its own, as tiktoken does: a special token ends the regex's
// subject.
template <class OnPiece, class OnSpecial>
void Tokenizer::walk(std::string_view text, bool allow_special, OnPiece&& on_piece, OnSpecial&& on_special) const {
  const auto ordinary = [&](std::string_view part) {
    PreTokenizer::Cursor cursor = pretok_.pieces(part);
    for (std::string_view piece; cursor.next(piece);) on_piece(piece);
  };
  for (const std::string_view slice : encode_slices(text)) {
    if (!allow_special) {
      ordinary(slice);
      continue;
    }
    size_t begin = 0;
    for (size_t i = 0; i < slice.size(); ++i) {
      if (!special_first_byte_[uint8_t(slice[i])]) continue;
      size_t len = 0;
      const int32_t id = match_special(slice, i, len);
      if (id < 0) continue;
      if (i > begin) ordinary(slice.substr(begin, i - begin));
      on_special(id, slice.substr(i, len));
      begin = i + len;
      i = begin - 1;
    }
    if (begin < slice.size()) ordinary(slice.substr(begin));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  walk(
      text, allow_special, [&](std::string_view piece) { bpe_.encode_piece(piece, out); },
      [&](int32_t id, std::string_view) { out.push_back(id); });
  return out;
}

std::vector<std::string_view> Tokenizer::split(std::string_view text, bool allow_special) const {
  std::vector<std::string_view> out;
  walk(
      text, allow_special, [&](std::string_view piece) { out.push_back(piece); },
      [&](int32_t, std::string_view special) { out.push_back(special); });
  return out;
}

}  // namespace kimi
