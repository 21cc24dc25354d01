#include "args.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "common/error.h"

namespace kimi::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& value_flags,
           const std::set<std::string>& bool_flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    // vLLM's short spellings of the parallel sizes.
    if (a == "-tp" || a.rfind("-tp=", 0) == 0) a = "--tensor-parallel-size" + a.substr(3);
    if (a == "-dp" || a.rfind("-dp=", 0) == 0) a = "--data-parallel-size" + a.substr(3);
    if (a.rfind("--", 0) != 0 || a == "--") {
      positionals_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name)) {
      if (inline_value) throw Error("--" + name + " takes no value");
      values_[name].assign(1, '1');  // not = "1": GCC 12 warns falsely (-Wrestrict)
    } else if (value_flags.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw Error("--" + name + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw Error("unknown option --" + name);
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::require(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw Error("missing required option --" + name);
  return it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name, "");
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') throw Error("--" + name + " expects an integer, got '" + v + "'");
  return x;
}

double Args::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string v = get(name, "");
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') throw Error("--" + name + " expects a number, got '" + v + "'");
  return x;
}

std::string read_input(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kimi::cli
