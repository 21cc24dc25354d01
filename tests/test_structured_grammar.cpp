// The grammar compilers (JSON Schema, regex, choice, GBNF) and the recognizer: hand-written
// strings each feature must accept or reject, and the errors for unsupported features.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "structured/compile.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/tool_calls.h"

namespace kimi::structured {
namespace {

Recognizer schema(const std::string& s) { return Recognizer(compile_json_schema(std::string_view(s))); }

void expect(const Recognizer& r, const std::vector<std::string>& good, const std::vector<std::string>& bad) {
  for (const auto& g : good) EXPECT_TRUE(r.accepts(g)) << "should accept: " << g;
  for (const auto& b : bad) EXPECT_FALSE(r.accepts(b)) << "should reject: " << b;
}

std::string error_of(const std::string& schema_text) {
  try {
    compile_json_schema(std::string_view(schema_text));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(StructuredSchema, Primitives) {
  expect(schema(R"({"type":"boolean"})"), {"true", "false"}, {"True", "1", "", "true "});
  expect(schema(R"({"type":"null"})"), {"null"}, {"nul", "None"});
  expect(schema(R"({"type":"integer"})"), {"0", "-7", "123456"}, {"01", "1.5", "-", "1e3", "+1"});
  expect(schema(R"({"type":"number"})"), {"0", "-0.25", "3.5e10", "1E-2", "12"}, {".5", "1.", "1e", "--1", "1e100"});
  expect(schema(R"({"type":"string"})"), {R"("")", R"("a b")", R"("\"\\\n")", R"("\u00e9")", "\"\xc3\xa9\""},
         {R"("a)", R"("\x")", "\"\n\"", R"("\ud800")", "\"\xc3\""});
  expect(schema(R"({"type":["string","null"]})"), {"null", R"("x")"}, {"1"});
}

TEST(StructuredSchema, StringLengthPatternFormat) {
  expect(schema(R"({"type":"string","minLength":2,"maxLength":3})"), {R"("ab")", R"("abc")", "\"\xc3\xa9\xc3\xa9\"", R"("\n\t")"},
         {R"("a")", R"("abcd")"});
  expect(schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})"), {R"("AB-123")"}, {R"("ab-123")", R"("AB-12")", R"("AB-1234")"});
  expect(schema(R"({"type":"string","pattern":"a\"b"})"), {R"("a\"b")"}, {R"("a"b")"});
  expect(schema(R"({"type":"string","format":"date"})"), {R"("2024-02-28")", R"("1999-12-31")"}, {R"("2024-13-01")", R"("2024-02-30")", R"("24-01-01")"});
  expect(schema(R"({"type":"string","format":"date-time"})"), {R"("2024-01-02T03:04:05Z")", R"("2024-01-02T23:59:59.123+05:30")"},
         {R"("2024-01-02T24:00:00Z")", R"("2024-01-02 03:04:05")"});
  expect(schema(R"({"type":"string","format":"uuid"})"), {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"});
  expect(schema(R"({"type":"string","format":"ipv4"})"), {R"("192.168.0.1")", R"("255.255.255.255")"}, {R"("256.1.1.1")", R"("01.1.1.1")"});
  expect(schema(R"({"type":"string","format":"email"})"), {R"("a.b@example.com")"}, {R"("a@b")", R"("@x.com")"});
}

TEST(StructuredSchema, NumericRanges) {
  expect(schema(R"({"type":"integer","minimum":-5,"maximum":12})"), {"-5", "0", "9", "10", "12"}, {"-6", "13", "100", "-0"});
  expect(schema(R"({"type":"integer","minimum":100})"), {"100", "999", "1000", "123456789"}, {"99", "0", "-1"});
  expect(schema(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":1000})"), {"1", "999", "500"}, {"0", "1000"});
  expect(schema(R"({"type":"integer","maximum":-10})"), {"-10", "-11", "-12345"}, {"-9", "0", "5"});
  expect(schema(R"({"type":"number","minimum":0,"maximum":1})"), {"0", "1", "0.5", "0.999"}, {"1.5", "-0.1", "2", "1.0001"});
  expect(schema(R"({"type":"number","minimum":-2.5,"maximum":3.5})"), {"-2", "-1.75", "3", "2.9", "-0.5"}, {"-2.75", "-3", "3.75", "4"});
  expect(schema(R"({"type":"number","exclusiveMinimum":0})"), {"0.5", "7", "12.25"}, {"0", "-1", "-0.5"});
  EXPECT_NE(error_of(R"({"type":"integer","minimum":5,"maximum":4})").find("minimum"), std::string::npos);
}

TEST(StructuredSchema, Objects) {
  const auto r = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                             "required":["a","c"]})");
  expect(r, {R"({"a":1,"c":true})", R"({"a": 1, "b": "x", "c": false})", "{\n  \"a\": 1,\n  \"c\": true\n}"},
         {R"({"c":true})", R"({"a":1})", R"({"a":1,"c":true,"d":1})", R"({"c":true,"a":1})", R"({"a":"1","c":true})", R"({"a":1,,"c":true})"});
  expect(schema(R"({"type":"object","properties":{"x":{"type":"integer"}}})"), {"{}", R"({"x":3})"}, {R"({"y":3})", R"({"x":3,})"});
  const auto extra = schema(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
                                 "additionalProperties":{"type":"string"}})");
  expect(extra, {R"({"id":1})", R"({"id":1,"name":"n"})", R"({"id":1,"i":"n","idx":"m"})"},
         {R"({"id":1,"name":2})", R"({"id":1,"id":"dup"})", R"({"name":"n"})"});
  expect(schema(R"({"type":"object"})"), {"{}", R"({"k":[1,{"z":null}]})"}, {"[]", R"({"k"})"});
}

TEST(StructuredSchema, ArraysEnumConst) {
  expect(schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})"), {"[1]", "[1, 2,3]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"});
  expect(schema(R"({"type":"array","items":{"type":"string"}})"), {"[]", R"(["a","b"])"}, {"[1]"});
  expect(schema(R"({"enum":["red","green",3,null]})"), {R"("red")", "3", "null"}, {R"("blue")", "4"});
  expect(schema(R"({"const":{"k":[1,2]}})"), {R"({"k":[1,2]})"}, {R"({"k":[1]})"});
}

TEST(StructuredSchema, RefsAndUnions) {
  const auto r = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                              "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},
                              "$ref":"#/$defs/node"})");
  expect(r, {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":null}})"}, {R"({"v":1})", R"({"v":1,"next":{"v":2}})"});
  expect(schema(R"({"oneOf":[{"type":"integer"},{"type":"string","maxLength":2}]})"), {"5", R"("ab")"}, {R"("abc")", "true"});
  expect(schema(R"({"definitions":{"a":{"type":"boolean"}},"type":"array","items":{"$ref":"#/definitions/a"}})"), {"[true,false]"}, {"[1]"});
  expect(schema(R"({"allOf":[{"type":"integer"}]})"), {"1"}, {"\"1\""});
}

TEST(StructuredSchema, UnsupportedFeaturesAreNamed) {
  EXPECT_NE(error_of(R"({"type":"integer","multipleOf":3})").find("multipleOf"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","patternProperties":{"^a":{}}})").find("patternProperties"), std::string::npos);
  EXPECT_NE(error_of(R"({"if":{"type":"string"},"then":{}})").find("'if'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","uniqueItems":true})").find("uniqueItems"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","format":"hostname"})").find("hostname"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"http://x/y.json"})").find("another document"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"strin"})").find("strin"), std::string::npos);
  EXPECT_NE(error_of("{\"type\":").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","pattern":"(a)\\1"})").find("backreferences"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 200; ++i) deep += "}";
  EXPECT_NE(error_of(deep).find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","maxLength":99999999})").find("maxLength"), std::string::npos);
}

TEST(StructuredSchema, RecursionStaysBounded) {
  // A recursive schema with deep input: the recognizer's stack depth is capped, no crash.
  const auto r = schema(R"({"$defs":{"t":{"type":"array","items":{"$ref":"#/$defs/t"}}},"$ref":"#/$defs/t"})");
  EXPECT_TRUE(r.accepts("[[[]],[]]"));
  EXPECT_FALSE(r.accepts("[[]"));
  std::string deep(5000, '[');
  EXPECT_FALSE(r.accepts_prefix(deep));  // beyond kMaxStackDepth the parse is cut
}

TEST(StructuredRegex, Features) {
  auto re = [](const std::string& p) { return Recognizer(*compile({SpecKind::Regex, p})); };
  expect(re("ab|cd"), {"ab", "cd"}, {"abcd", "a"});
  expect(re("a{2,3}b?"), {"aa", "aaa", "aab"}, {"a", "aaaa"});
  expect(re("[a-c]+\\d*"), {"abc12", "c"}, {"d", "1"});
  expect(re("[^0-9]x"), {"ax", "\xc3\xa9x"}, {"5x"});
  expect(re("(?:ab)+(c|d)"), {"abc", "ababd"}, {"ac"});
  expect(re("\\w+@\\w+\\.com"), {"a_1@b.com"}, {"a@b.org"});
  expect(re("é."), {"\xc3\xa9z"}, {"e z"});
  expect(re("^\\$\\d+\\.\\d\\d$"), {"$12.50"}, {"12.50"});
  for (const char* bad : {"(a", "a)", "[a", "*a", "a{3,2}", "(?=a)", "\\b"}) EXPECT_THROW(compile({SpecKind::Regex, bad}), GrammarError) << bad;
}

TEST(StructuredChoice, Strings) {
  Recognizer r(*compile({SpecKind::Choice, R"(["yes","no","maybe so"])"}));
  expect(r, {"yes", "no", "maybe so"}, {"ye", "yesno", "Maybe so"});
  EXPECT_THROW(compile({SpecKind::Choice, "[1]"}), GrammarError);
  EXPECT_THROW(compile({SpecKind::Choice, "[]"}), GrammarError);
}

TEST(StructuredGbnf, Grammar) {
  Recognizer r(compile_gbnf(R"G(
    # arithmetic
    root ::= expr
    expr ::= term (("+" | "-") term)*
    term ::= num | "(" expr ")"
    num  ::= [0-9]{1,3}
  )G"));
  expect(r, {"1", "12+3", "(1+2)-30", "((7))"}, {"", "1+", "1234", "(1"});
  Recognizer u(compile_gbnf("root ::= [^a-z\\n]+ \"\\u00e9\" .?"));
  expect(u, {"AB\xc3\xa9", "1\xc3\xa9x", "1\xc3\xa9\xe2\x82\xac"}, {"a\xc3\xa9", "\xc3\xa9"});
  EXPECT_THROW(compile_gbnf("root ::= foo"), GrammarError);                  // undefined rule
  EXPECT_THROW(compile_gbnf("root ::= root \"a\" | \"b\""), GrammarError);     // left recursion
  EXPECT_THROW(compile_gbnf("root ::= (\"a\"?)*"), GrammarError);              // empty repetition
  EXPECT_THROW(compile_gbnf("start ::= \"a\""), GrammarError);                // no root
  EXPECT_THROW(compile_gbnf("root ::= \"a"), GrammarError);                   // unterminated
  EXPECT_THROW(compile_gbnf("root ::= \"a\"\nroot ::= \"b\""), GrammarError);  // defined twice
  expect(Recognizer(compile_gbnf("root ::= x (\",\" x)*\nx ::= \"a\" | y\ny ::= [0-9]")), {"a,1,a"}, {"a,"});  // forward refs
  try {
    compile_gbnf("root ::= x\nx ::= root");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("left-recursive"), std::string::npos);
  }
}

TEST(StructuredToolCalls, Section) {
  const std::string spec = R"({"tools":[{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}},
    {"name":"g"}],"min_calls":1,"max_calls":2,"first_index":3,
    "tokens":{"section_begin":1,"section_end":2,"call_begin":3,"argument_begin":4,"call_end":5}})";
  Recognizer r(compile_tool_calls(spec));
  auto tok = [](int id) { return special_token_bytes(id); };
  const std::string f3 = tok(3) + "functions.f:3" + tok(4) + R"({"a":1})" + tok(5);
  const std::string g4 = tok(3) + "functions.g:4" + tok(4) + R"({"x":[]})" + tok(5);
  const std::string g3 = tok(3) + "functions.g:3" + tok(4) + "{}" + tok(5);
  expect(r, {tok(1) + f3 + tok(2), tok(1) + g3 + tok(2), tok(1) + f3 + g4 + tok(2)},
         {tok(1) + tok(2), tok(1) + g4 + tok(2), tok(1) + f3 + g4 + g4 + tok(2), f3, tok(1) + f3,
          tok(1) + tok(3) + "functions.f:3" + tok(4) + R"({"b":1})" + tok(5) + tok(2),
          "<|tool_calls_section_begin|>" + f3 + tok(2)});
  EXPECT_THROW(compile_tool_calls(R"({"tools":[]})"), GrammarError);
  EXPECT_THROW(compile_tool_calls(R"({"tools":[{"name":"f","parameters":{"multipleOf":2}}],"min_calls":1,"max_calls":1,
    "first_index":0,"tokens":{"section_begin":1,"section_end":2,"call_begin":3,"argument_begin":4,"call_end":5}})"), GrammarError);
  // allow_text (auto with strict tools): text alone, or text then the section.
  Recognizer a(compile_tool_calls(R"({"tools":[{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}],
    "min_calls":1,"max_calls":1,"first_index":0,"allow_text":true,
    "tokens":{"section_begin":1,"section_end":2,"call_begin":3,"argument_begin":4,"call_end":5}})"));
  const std::string f0 = tok(3) + "functions.f:0" + tok(4) + R"({"a":1})" + tok(5);
  expect(a, {"", "hello\nthere", "hi " + tok(1) + f0 + tok(2), tok(1) + f0 + tok(2)},
         {"x" + tok(1) + tok(3) + "functions.f:0" + tok(4) + R"({"a":"s"})" + tok(5) + tok(2), "x" + tok(7), "x" + tok(1) + f0});
  // GBNF names a special token by id.
  Recognizer g(compile_gbnf("root ::= <[7]> \"x\""));
  expect(g, {tok(7) + "x"}, {"x", tok(8) + "x"});
}

TEST(StructuredJsonObject, AnyObject) {
  Recognizer r(json_object_grammar());
  expect(r, {"{}", R"({"a": [1, 2.5, "x", null, true, {"b": {}}]})", " {\"k\":-1e5}"}, {"[]", "1", R"({"a":})", R"({'a':1})"});
}

// Found by the grammar fuzzer: a regex of quantifiers stacked on quantifiers (`\x00++++++++`, 62
// wildcards, `+++++++++++++*`) reaches the same stacks along exponentially many paths; the input
// took 32 s in the fuzz build (a client's response_format could pin a server thread). A step's
// work is now bounded (kMaxExpansions): about a second there, well under that here; without the
// bound this test runs into ctest's time limit.
TEST(StructuredRegex, StackedQuantifiersStepInBoundedWork) {
  static const char kInput[] =
      "\x00\x01\x64\x04\x00\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e"
      "\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e"
      "\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e\x2e"
      "\x2e\x2e\x2e\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2a\x1b\x00\x00\x00\x18\x00\x00"
      "\x00\x0e\x00\x00\x00\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x2b\x64\x65\x66\x73\x22\x3a\x00\x00\x40\x00\x59"
      "\x00\x6e\x00\x00\x00\x68\x01\x00\x00\x7f\x00\x00\x00\xb5\x00\x00\x00\xa5\x00\x00\x00\x22\x6e\x22"
      "\x3a\x7b\x22\x61\x22\x6c\x49";
  const std::string text(kInput, sizeof kInput - 1);
  const auto rec = compile({SpecKind::Regex, text});
  ParseState a = rec->initial(), b;
  size_t fed = 0;
  for (char c : text) {
    if (!rec->advance(a, uint8_t(c), b)) break;
    std::swap(a, b);
    ++fed;
    ASSERT_LE(a.ends.size(), kMaxStacks);
  }
  EXPECT_EQ(rec->accepts(text.substr(0, fed)), a.complete);
}

}  // namespace
}  // namespace kimi::structured
