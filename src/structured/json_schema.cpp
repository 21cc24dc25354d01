#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <map>
#include <set>
#include <string>

#include "structured/charset.h"
#include "structured/regex.h"

namespace kimi::structured {

namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr int kMaxIntDigits = 16;
constexpr int kMaxFracDigits = 15;
constexpr int64_t kMaxBound = 999'999'999'999'999;  // 15 digits: bounds beyond are open ends

// Keywords that only annotate (ignored) and the validation keywords we do not enforce.
const std::set<std::string>& unsupported_keywords() {
  static const std::set<std::string> k = {
      "multipleOf", "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
      "dependentSchemas", "dependencies", "if", "then", "else", "not", "contains", "minContains", "maxContains",
      "prefixItems", "unevaluatedProperties", "unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef",
      "contentSchema"};
  return k;
}

std::string digits_of(int64_t v) { return std::to_string(v); }

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, const ojson& root) : root_(root), b_(b) { ws_ = build_ws(); }

  Sym schema() { return value(root_, 0); }
  Sym any_object_padded() { return b_.seq({ws_, object_any(), ws_}); }

 private:
  [[noreturn]] static void unsupported(const std::string& what) {
    throw GrammarError("unsupported JSON Schema feature: " + what);
  }

  Sym build_ws() {  // "" | " " | "\n" followed by up to 20 spaces: room for pretty-printing, bounded
    ByteClass sp;
    sp.set(' ');
    Seq nl;
    nl.push_back(b_.byte('\n'));
    nl.push_back(b_.repeat(b_.cls(sp), 0, 20));
    return b_.alts({{}, {b_.byte(' ')}, nl}, "ws");
  }

  Sym lit(std::string_view s) { return b_.literal(s); }

  // ---- any JSON value (json_object, `true` schemas, schemas without a type) ----
  Sym any_value() {
    if (any_value_ != UINT32_MAX) return b_.ref(any_value_);
    any_value_ = b_.new_rule("value");
    const uint32_t obj = b_.new_rule("object"), arr = b_.new_rule("array");
    any_object_ = obj;
    b_.add_alt(any_value_, {b_.ref(obj)});
    b_.add_alt(any_value_, {b_.ref(arr)});
    b_.add_alt(any_value_, {string_any()});
    b_.add_alt(any_value_, {number_plain(false)});
    b_.add_alt(any_value_, {lit("true")});
    b_.add_alt(any_value_, {lit("false")});
    b_.add_alt(any_value_, {lit("null")});
    const Sym v = b_.ref(any_value_);
    const Sym kv = b_.seq({string_any(), ws_, b_.byte(':'), ws_, v});
    const Sym more_kv = b_.repeat(b_.seq({ws_, b_.byte(','), ws_, kv}), 0, -1);
    b_.add_alt(obj, {b_.byte('{'), ws_, b_.byte('}')});
    b_.add_alt(obj, {b_.byte('{'), ws_, kv, more_kv, ws_, b_.byte('}')});
    const Sym more_v = b_.repeat(b_.seq({ws_, b_.byte(','), ws_, v}), 0, -1);
    b_.add_alt(arr, {b_.byte('['), ws_, b_.byte(']')});
    b_.add_alt(arr, {b_.byte('['), ws_, v, more_v, ws_, b_.byte(']')});
    return v;
  }
  Sym object_any() {
    any_value();
    return b_.ref(any_object_);
  }

  // ---- strings ----
  Sym string_char() {
    if (string_char_ != UINT32_MAX) return b_.ref(string_char_);
    string_char_ = b_.new_rule("char");
    ByteClass ascii;
    ascii.set_range(0x20, 0x7F);
    ascii.bits['"' >> 6] &= ~(uint64_t(1) << ('"' & 63));
    ascii.bits['\\' >> 6] &= ~(uint64_t(1) << ('\\' & 63));
    b_.add_alt(string_char_, {b_.utf8_char(ascii)});
    ByteClass esc, hex, hex_no_d, lo8;
    for (char c : std::string("\"\\/bfnrt")) esc.set(uint8_t(c));
    hex.set_range('0', '9'); hex.set_range('a', 'f'); hex.set_range('A', 'F');
    hex_no_d = hex;
    hex_no_d.bits['d' >> 6] &= ~(uint64_t(1) << ('d' & 63));
    hex_no_d.bits['D' >> 6] &= ~(uint64_t(1) << ('D' & 63));
    lo8.set_range('0', '7');
    b_.add_alt(string_char_, {b_.byte('\\'), b_.cls(esc)});
    // \uXXXX without lone surrogates (D800-DFFF), so that every decoder takes the text.
    b_.add_alt(string_char_, {b_.byte('\\'), b_.byte('u'), b_.cls(hex_no_d), b_.cls(hex), b_.cls(hex), b_.cls(hex)});
    ByteClass dD;
    dD.set('d');
    dD.set('D');
    b_.add_alt(string_char_, {b_.byte('\\'), b_.byte('u'), b_.cls(dD), b_.cls(lo8), b_.cls(hex), b_.cls(hex)});
    return b_.ref(string_char_);
  }
  Sym string_any() {
    if (string_any_ != UINT32_MAX) return b_.ref(string_any_);
    string_any_ = b_.new_rule("string");
    b_.add_alt(string_any_, {b_.byte('"'), b_.repeat(string_char(), 0, -1), b_.byte('"')});
    return b_.ref(string_any_);
  }

  Sym quoted_regex(const std::string& re) { return b_.seq({b_.byte('"'), compile_regex(b_, re, true), b_.byte('"')}); }

  Sym format(const std::string& f) {
    static const std::string date = "\\d{4}-((0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)";
    static const std::string time = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
    static const std::string label = "[a-z0-9]{1,16}";
    static const std::string octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    if (f == "date") return quoted_regex(date);
    if (f == "time") return quoted_regex(time);
    if (f == "date-time") return quoted_regex(date + "T" + time);
    if (f == "uuid") return quoted_regex("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
    if (f == "email") return quoted_regex(label + "(\\." + label + "){0,2}@" + label + "(\\." + label + "){1,3}");
    if (f == "ipv4") return quoted_regex(octet + "\\." + octet + "\\." + octet + "\\." + octet);
    if (f == "uri") return quoted_regex("https?://" + label + "(\\." + label + "){0,3}(/[a-zA-Z0-9_-]{1,16}){0,4}");
    unsupported("string format '" + f + "'");
  }

  Sym string_schema(const ojson& s) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format") && s["format"].is_string()) {
      if (has_len || s.contains("pattern")) unsupported("format together with pattern or minLength/maxLength");
      return format(s["format"].get<std::string>());
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) throw GrammarError("'pattern' must be a string");
      if (has_len) unsupported("pattern together with minLength/maxLength");
      return quoted_regex(s["pattern"].get<std::string>());
    }
    if (!has_len) return string_any();
    const int64_t lo = count(s, "minLength", 0), hi = count(s, "maxLength", -1);
    if (hi >= 0 && hi < lo) throw GrammarError("maxLength is below minLength");
    return b_.seq({b_.byte('"'), b_.repeat(string_char(), lo, hi), b_.byte('"')});
  }

  static int64_t count(const ojson& s, const char* key, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const ojson& v = s[key];
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
      throw GrammarError(std::string("'") + key + "' must be a non-negative integer");
    const double d = v.get<double>();
    if (d < 0) throw GrammarError(std::string("'") + key + "' must be a non-negative integer");
    if (d > 100000) unsupported(std::string("'") + key + "' above 100000");
    return int64_t(d);
  }

  // ---- numbers ----
  Sym digit() { ByteClass c; c.set_range('0', '9'); return b_.cls(c); }
  Sym digit19() { ByteClass c; c.set_range('1', '9'); return b_.cls(c); }
  Sym range_cls(char a, char z) { ByteClass c; c.set_range(uint8_t(a), uint8_t(z)); return b_.cls(c); }

  Sym uint_any() {  // 0 | [1-9][0-9]{0,15}
    return b_.alts({{b_.byte('0')}, {digit19(), b_.repeat(digit(), 0, kMaxIntDigits - 1)}}, "uint");
  }
  Sym frac() { return b_.seq({b_.byte('.'), b_.repeat(digit(), 1, kMaxFracDigits)}); }
  // A fraction that is not zero (so that k.frac lies strictly between k and k + 1).
  Sym frac_nonzero() { return b_.seq({b_.byte('.'), b_.repeat(digit(), 0, kMaxFracDigits - 1), digit19()}); }

  Sym number_plain(bool integer) {
    ByteClass e, sign;
    e.set('e'); e.set('E'); sign.set('+'); sign.set('-');
    Seq s = {b_.repeat(b_.byte('-'), 0, 1), uint_any()};
    if (!integer) {
      s.push_back(b_.repeat(frac(), 0, 1));
      // Exponents of at most two digits: every value stays finite.
      s.push_back(b_.repeat(b_.seq({b_.cls(e), b_.repeat(b_.cls(sign), 0, 1), b_.repeat(digit(), 1, 2)}), 0, 1));
    }
    return b_.seq(std::move(s));
  }

  // Decimal strings of the same length between a and b (inclusive).
  void same_len(const std::string& a, const std::string& z, size_t i, Seq prefix, std::vector<Seq>& out) {
    const size_t n = a.size();
    if (i == n) { out.push_back(std::move(prefix)); return; }
    if (a[i] == z[i]) {
      prefix.push_back(b_.byte(uint8_t(a[i])));
      same_len(a, z, i + 1, std::move(prefix), out);
      return;
    }
    const std::string zeros(n - i - 1, '0'), nines(n - i - 1, '9');
    char lo = a[i], hi = z[i];
    if (a.substr(i + 1) != zeros) {
      Seq p = prefix;
      p.push_back(b_.byte(uint8_t(a[i])));
      same_len(a, a.substr(0, i + 1) + nines, i + 1, std::move(p), out);
      ++lo;
    }
    const bool hi_partial = z.substr(i + 1) != nines;
    if (hi_partial) --hi;
    if (lo <= hi) {
      Seq p = prefix;
      p.push_back(range_cls(lo, hi));
      for (size_t k = i + 1; k < n; ++k) p.push_back(digit());
      out.push_back(std::move(p));
    }
    if (hi_partial) {
      Seq p = prefix;
      p.push_back(b_.byte(uint8_t(z[i])));
      same_len(z.substr(0, i + 1) + zeros, z, i + 1, std::move(p), out);
    }
  }

  // Non-negative integers in [lo, hi] (hi < 0: unbounded above, up to kMaxIntDigits digits),
  // without leading zeros. Empty alternatives list when the range is empty.
  void uint_range(int64_t lo, int64_t hi, std::vector<Seq>& out) {
    if (hi >= 0 && lo > hi) return;
    const int dlo = int(digits_of(lo).size());
    const int dhi = hi < 0 ? kMaxIntDigits : int(digits_of(hi).size());
    for (int d = dlo; d <= dhi; ++d) {
      const int64_t first = d == 1 ? 0 : int64_t(std::pow(10.0, d - 1));
      const int64_t last = int64_t(std::pow(10.0, d)) - 1;
      const int64_t a = std::max(lo, first), z = hi < 0 ? last : std::min(hi, last);
      if (a > z) continue;
      if (hi < 0 && a == first && d > 1) {  // every d-digit number and more: one rule
        out.push_back({digit19(), b_.repeat(digit(), d - 1, kMaxIntDigits - 1)});
        return;
      }
      same_len(digits_of(a), digits_of(z), 0, {}, out);
    }
  }

  // Integers in [lo, hi]; nullopt bounds are open (limited by the digit count).
  void int_range(std::optional<int64_t> lo, std::optional<int64_t> hi, std::vector<Seq>& out) {
    if (lo && hi && *lo > *hi) return;
    // Non-negative part.
    if (!hi || *hi >= 0) uint_range(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : -1, out);
    // Negative part: -m with m in [max(1, -hi), -lo].
    if (!lo || *lo < 0) {
      std::vector<Seq> neg;
      uint_range(hi ? std::max<int64_t>(1, -*hi) : 1, lo ? -*lo : -1, neg);
      for (Seq& s : neg) {
        s.insert(s.begin(), b_.byte('-'));
        out.push_back(std::move(s));
      }
    }
  }

  static std::optional<double> bound(const ojson& s, const char* key) {
    if (!s.contains(key)) return std::nullopt;
    if (!s[key].is_number()) throw GrammarError(std::string("'") + key + "' must be a number");
    return s[key].get<double>();
  }

  Sym number_schema(const ojson& s, bool integer) {
    std::optional<double> lo = bound(s, "minimum"), hi = bound(s, "maximum");
    const std::optional<double> xlo = bound(s, "exclusiveMinimum"), xhi = bound(s, "exclusiveMaximum");
    bool lo_x = false, hi_x = false;
    if (xlo && (!lo || *xlo >= *lo)) { lo = xlo; lo_x = true; }
    if (xhi && (!hi || *xhi <= *hi)) { hi = xhi; hi_x = true; }
    if (lo && std::fabs(*lo) > double(kMaxBound)) lo.reset();
    if (hi && std::fabs(*hi) > double(kMaxBound)) hi.reset();
    if (!lo && !hi) return number_plain(integer);
    const bool has_lo = lo.has_value(), has_hi = hi.has_value();
    const double lov = lo.value_or(0.0), hiv = hi.value_or(0.0);
    // Whole numbers in range.
    std::optional<int64_t> ilo, ihi;
    if (has_lo) ilo = int64_t(lo_x ? std::floor(lov) + 1 : std::ceil(lov));
    if (has_hi) ihi = int64_t(hi_x ? std::ceil(hiv) - 1 : std::floor(hiv));
    std::vector<Seq> alts;
    int_range(ilo, ihi, alts);
    if (!integer) {
      // k.f with a non-zero fraction lies in (k, k + 1) for k >= 0 and in (-(m + 1), -m) for
      // -m.f: allowed when that open interval is inside the range.
      std::optional<int64_t> klo, khi;
      if (has_lo) klo = int64_t(std::ceil(lov));
      if (has_hi) khi = int64_t(std::floor(hiv)) - 1;
      std::vector<Seq> pos;
      if (!khi || *khi >= 0) uint_range(klo ? std::max<int64_t>(*klo, 0) : 0, khi ? *khi : -1, pos);
      for (Seq& p : pos) {
        p.push_back(frac_nonzero());
        alts.push_back(std::move(p));
      }
      // -m.f: need -(m + 1) >= lo, i.e. m <= -lo - 1 (m <= floor(-lo) - 1), and -m <= hi, i.e. m >= ceil(-hi).
      std::optional<int64_t> mlo, mhi;
      mlo = has_hi ? std::max<int64_t>(0, int64_t(std::ceil(-hiv))) : 0;
      if (has_lo) mhi = int64_t(std::floor(-lov)) - 1;
      if (!mhi || *mhi >= *mlo) {
        std::vector<Seq> neg;
        uint_range(*mlo, mhi ? *mhi : -1, neg);
        for (Seq& p : neg) {
          p.insert(p.begin(), b_.byte('-'));
          p.push_back(frac_nonzero());
          alts.push_back(std::move(p));
        }
      }
    }
    if (alts.empty()) throw GrammarError("no number satisfies the schema's minimum/maximum");
    return b_.alts(std::move(alts), integer ? "int_range" : "num_range");
  }

  // ---- arrays ----
  Sym array_schema(const ojson& s, int depth) {
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) unsupported("uniqueItems");
    Sym item;
    if (!s.contains("items") || s["items"] == true) item = any_value();
    else if (s["items"] == false) item = b_.empty();  // no items: only []
    else if (s["items"].is_array()) unsupported("items as an array (tuple validation)");
    else item = value(s["items"], depth + 1);
    int64_t lo = count(s, "minItems", 0), hi = count(s, "maxItems", -1);
    if (s.contains("items") && s["items"] == false) hi = 0;
    if (hi >= 0 && hi < lo) throw GrammarError("maxItems is below minItems");
    const Sym open = b_.byte('['), close = b_.byte(']');
    std::vector<Seq> alts;
    if (lo == 0) alts.push_back({open, ws_, close});
    if (hi != 0) {
      const Sym more = b_.seq({ws_, b_.byte(','), ws_, item});
      alts.push_back({open, ws_, item, b_.repeat(more, std::max<int64_t>(lo, 1) - 1, hi < 0 ? -1 : hi - 1), ws_, close});
    }
    return b_.alts(std::move(alts), "array");
  }

  // ---- objects ----
  // A JSON string key that is none of `names` (as decoded strings).
  Sym key_except(const std::vector<std::string>& names) {
    struct Node {
      std::map<uint32_t, size_t> kids;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      size_t at = 0;
      for (size_t i = 0; i < n.size();) {
        const uint32_t cp = utf8_decode(n, i);
        auto it = trie[at].kids.find(cp);
        if (it == trie[at].kids.end()) {
          trie.emplace_back();
          it = trie[at].kids.emplace(cp, trie.size() - 1).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    CharSet all;
    all.add(0, kMaxCodePoint);
    // Free tail: any characters (no \u escapes, which could spell a listed name), then the quote.
    const Sym free_tail = b_.seq({b_.repeat(all.compile(b_, true), 0, -1), b_.byte('"')});
    std::vector<uint32_t> rules(trie.size());
    for (size_t k = 0; k < trie.size(); ++k) rules[k] = b_.new_rule("key");
    for (size_t k = 0; k < trie.size(); ++k) {
      const Node& nd = trie[k];
      if (!nd.terminal) b_.add_alt(rules[k], {b_.byte('"')});
      CharSet kids;
      for (const auto& [cp, child] : nd.kids) {
        CharSet one;
        one.add(cp);
        kids.add(cp);
        b_.add_alt(rules[k], {one.compile(b_, true), b_.ref(rules[child])});
      }
      const CharSet other = all.minus(kids);
      if (!other.empty()) b_.add_alt(rules[k], {other.compile(b_, true), free_tail});
    }
    return b_.seq({b_.byte('"'), b_.ref(rules[0])});
  }

  Sym object_schema(const ojson& s, int depth) {
    const bool has_props = s.contains("properties");
    if (has_props && !s["properties"].is_object()) throw GrammarError("'properties' must be an object");
    std::optional<Sym> extra_value;
    if (s.contains("additionalProperties")) {
      const ojson& ap = s["additionalProperties"];
      if (ap == true) extra_value = any_value();
      else if (ap.is_object()) extra_value = value(ap, depth + 1);
      else if (ap != false) throw GrammarError("'additionalProperties' must be a boolean or a schema");
    } else if (!has_props) {
      extra_value = any_value();
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) throw GrammarError("'required' must be an array");
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) throw GrammarError("'required' must list strings");
        required.insert(r.get<std::string>());
      }
    }
    std::vector<std::pair<std::string, Sym>> props;  // name, "key": value
    std::vector<std::string> names;
    if (has_props)
      for (const auto& [name, sub] : s["properties"].items()) {
        names.push_back(name);
        props.push_back({name, b_.seq({lit(ojson(name).dump()), ws_, b_.byte(':'), ws_, value(sub, depth + 1)})});
      }
    for (const std::string& r : required)
      if (std::find(names.begin(), names.end(), r) == names.end()) {
        if (!extra_value) throw GrammarError("required property '" + r + "' is not in 'properties' and additionalProperties is false");
        // A required property beyond `properties`: listed with the extra properties' schema.
        names.push_back(r);
        props.push_back({r, b_.seq({lit(ojson(r).dump()), ws_, b_.byte(':'), ws_, *extra_value})});
      }
    const Sym comma = b_.seq({ws_, b_.byte(','), ws_});
    // after(i): properties i.. when one was already written; first(i): when none was.
    std::optional<Sym> extras_after, extras_first;
    if (extra_value) {
      const Sym kv = b_.seq({key_except(names), ws_, b_.byte(':'), ws_, *extra_value});
      extras_after = b_.repeat(b_.seq({comma, kv}), 0, -1);
      extras_first = b_.alts({{}, {kv, *extras_after}}, "extras");
    }
    const size_t n = props.size();
    std::vector<Sym> after(n + 1), first(n + 1);
    after[n] = extras_after ? *extras_after : b_.empty();
    first[n] = extras_first ? *extras_first : b_.empty();
    for (size_t i = n; i-- > 0;) {
      const bool req = required.count(props[i].first) > 0;
      std::vector<Seq> a, f;
      a.push_back({comma, props[i].second, after[i + 1]});
      f.push_back({props[i].second, after[i + 1]});
      if (!req) {
        a.push_back({after[i + 1]});
        f.push_back({first[i + 1]});
      }
      after[i] = b_.alts(std::move(a), "props");
      first[i] = b_.alts(std::move(f), "props");
    }
    return b_.seq({b_.byte('{'), ws_, first[0], ws_, b_.byte('}')});
  }

  // ---- dispatch ----
  const ojson& resolve(const std::string& ref) {
    if (ref.empty() || ref[0] != '#') unsupported("$ref to another document ('" + ref + "')");
    const ojson* at = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') unsupported("$ref to an anchor ('" + ref + "')");
    while (i < ref.size()) {
      const size_t next = ref.find('/', i + 1);
      std::string part = ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
      std::string unescaped;  // JSON pointer escapes: ~1 is '/', ~0 is '~'
      for (size_t k = 0; k < part.size(); ++k) {
        if (part[k] == '~' && k + 1 < part.size() && (part[k + 1] == '0' || part[k + 1] == '1')) {
          unescaped += part[k + 1] == '1' ? '/' : '~';
          ++k;
        } else {
          unescaped += part[k];
        }
      }
      part = std::move(unescaped);
      if (at->is_object() && at->contains(part)) at = &(*at)[part];
      else if (at->is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) &&
               std::stoull(part.substr(0, 9)) < at->size())
        at = &(*at)[std::stoull(part.substr(0, 9))];
      else throw GrammarError("$ref '" + ref + "' does not resolve");
      i = next == std::string::npos ? ref.size() : next;
    }
    return *at;
  }

  Sym ref_rule(const std::string& ref, int depth) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return b_.ref(it->second);
    const ojson& target = resolve(ref);
    const uint32_t r = b_.new_rule("ref");
    refs_[ref] = r;
    b_.add_alt(r, {value(target, depth + 1)});
    return b_.ref(r);
  }

  Sym value(const ojson& s, int depth) {
    if (depth > kMaxDepth) throw GrammarError("the schema is nested too deeply (more than " + std::to_string(kMaxDepth) + " levels)");
    if (s.is_boolean()) {
      if (!s.get<bool>()) unsupported("the schema 'false' (nothing is valid)");
      return any_value();
    }
    if (!s.is_object()) throw GrammarError("a schema must be an object or a boolean, got " + std::string(s.type_name()));
    for (const auto& [k, v] : s.items())
      if (unsupported_keywords().count(k)) unsupported("'" + k + "'");
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) throw GrammarError("'$ref' must be a string");
      return ref_rule(s["$ref"].get<std::string>(), depth);
    }
    if (s.contains("const")) return lit(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) throw GrammarError("'enum' must be a non-empty array");
      std::vector<Seq> alts;
      for (const ojson& e : s["enum"]) alts.push_back({lit(e.dump())});
      return b_.alts(std::move(alts), "enum");
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (s.contains(key)) {
        if (!s[key].is_array() || s[key].empty()) throw GrammarError(std::string("'") + key + "' must be a non-empty array");
        std::vector<Seq> alts;
        for (const ojson& sub : s[key]) {
          // Keywords beside anyOf (a shared "type", say) apply to every branch.
          ojson merged = sub;
          if (merged.is_object())
            for (const auto& [k, v] : s.items())
              if (k != key && !merged.contains(k)) merged[k] = v;
          alts.push_back({value(merged, depth + 1)});
        }
        return b_.alts(std::move(alts), key);
      }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1) unsupported("allOf with more than one schema");
      ojson merged = s["allOf"][0];
      if (merged.is_object())
        for (const auto& [k, v] : s.items())
          if (k != "allOf" && !merged.contains(k)) merged[k] = v;
      return value(merged, depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
      else if (s["type"].is_array())
        for (const ojson& t : s["type"]) {
          if (!t.is_string()) throw GrammarError("'type' must list strings");
          types.push_back(t.get<std::string>());
        }
      else throw GrammarError("'type' must be a string or an array of strings");
      if (types.empty()) throw GrammarError("'type' is an empty list");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return any_value();
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) {
      if (t == "string") alts.push_back({string_schema(s)});
      else if (t == "integer") alts.push_back({number_schema(s, true)});
      else if (t == "number") alts.push_back({number_schema(s, false)});
      else if (t == "boolean") { alts.push_back({lit("true")}); alts.push_back({lit("false")}); }
      else if (t == "null") alts.push_back({lit("null")});
      else if (t == "array") alts.push_back({array_schema(s, depth)});
      else if (t == "object") alts.push_back({object_schema(s, depth)});
      else throw GrammarError("unknown type '" + t + "'");
    }
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    return b_.alts(std::move(alts), "types");
  }

  const ojson& root_;
  GrammarBuilder& b_;
  Sym ws_;
  uint32_t any_value_ = UINT32_MAX, any_object_ = UINT32_MAX, string_char_ = UINT32_MAX, string_any_ = UINT32_MAX;
  std::map<std::string, uint32_t> refs_;
};

}  // namespace

Sym add_json_schema(GrammarBuilder& b, const nlohmann::ordered_json& schema) { return SchemaCompiler(b, schema).schema(); }

Grammar compile_json_schema(const nlohmann::ordered_json& schema) {
  GrammarBuilder b;
  const uint32_t root = b.new_rule("root");
  b.add_alt(root, {add_json_schema(b, schema)});
  return b.build(root);
}

nlohmann::ordered_json parse_schema_text(std::string_view text) {
  // The parser nests without bound (and destroys recursively): check the depth first.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > 2 * kMaxDepth) throw GrammarError("the schema is nested too deeply");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  ojson schema;
  try {
    schema = ojson::parse(text);
  } catch (const std::exception& e) {
    throw GrammarError(std::string("the JSON schema is not valid JSON: ") + e.what());
  }
  return schema;
}

Grammar compile_json_schema(std::string_view text) { return compile_json_schema(parse_schema_text(text)); }

Grammar json_object_grammar() {
  const ojson empty = ojson::object();
  GrammarBuilder b;
  const uint32_t root = b.new_rule("root");
  b.add_alt(root, {SchemaCompiler(b, empty).any_object_padded()});
  return b.build(root);
}

}  // namespace kimi::structured
