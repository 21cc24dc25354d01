// The structured-output compilers (JSON Schema, regex, choice, GBNF, forced tool calls) on fuzzer text: each must
// give a grammar or a GrammarError, nothing else (no crash, hang, other exception or unbounded
// memory); a grammar is then run over fuzzer bytes, where the recognizer's state must stay
// within its bounds and agree with accepts().
//
// Input: byte 0 = the spec kind (mod 6), byte 1 = how many bytes of the rest are the spec text
// (x 16, 0: all of it); what follows the text is fed to the recognizer.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "structured/compile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kimi::structured;
  kimi::fuzz::Input in(data, size);
  static constexpr SpecKind kinds[] = {SpecKind::JsonSchema, SpecKind::Regex, SpecKind::Choice, SpecKind::Grammar,
                                       SpecKind::JsonObject, SpecKind::ToolCalls};
  const SpecKind kind = kinds[in.byte() % 6];
  const size_t len = size_t(in.byte()) * 16;
  const std::string text(len ? in.take(len) : in.rest());
  const std::string feed(in.rest());
  std::shared_ptr<const Recognizer> rec;
  try {
    rec = compile({kind, text});
  } catch (const GrammarError&) {
    return 0;
  } catch (const std::exception& e) {
    kimi::fuzz::fail("an exception other than GrammarError", e.what());
  }
  ParseState a = rec->initial(), b;
  size_t fed = 0;
  for (char c : feed) {
    if (!rec->advance(a, uint8_t(c), b)) break;
    std::swap(a, b);
    ++fed;
    KIMI_FUZZ_CHECK(a.ends.size() <= kMaxStacks, "too many stacks");
  }
  const std::string prefix = feed.substr(0, fed);
  KIMI_FUZZ_CHECK(rec->accepts(prefix) == a.complete, "accepts() disagrees with the stepped state");
  return 0;
}
