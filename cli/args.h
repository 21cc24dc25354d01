#pragma once
// A small command-line parser in the style users know from vLLM and llama.cpp:
// `--name value`, `--name=value`, boolean `--flag`, and positionals. Unknown flags are errors.
// Also what several subcommands read the same way: an input file or stdin.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kimi::cli {

class Args {
 public:
  // `value_flags` take a value, `bool_flags` don't; anything else starting with "--" is an error.
  Args(int argc, char** argv, int first, const std::set<std::string>& value_flags,
       const std::set<std::string>& bool_flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  std::string require(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

// The whole of a file given on the command line, or of stdin when the path is "-".
std::string read_input(const std::string& path);

int run_make_model(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_proxy(int argc, char** argv);
int run_chat(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_detokenize(int argc, char** argv);
int run_train_tokenizer(int argc, char** argv);
int run_render_template(int argc, char** argv);
int run_export_gguf(int argc, char** argv);
int run_perplexity(int argc, char** argv);

}  // namespace kimi::cli
