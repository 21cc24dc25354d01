// Stop strings over streamed text: whatever the token boundaries, the streamed result equals
// the whole-text one.
#include <gtest/gtest.h>

#include "common/rng.h"
#include "engine/stop_strings.h"

namespace kimi {
namespace {

struct Streamed {
  std::string text;
  bool stopped = false;
  std::string matched;
};

Streamed stream(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  Streamed s;
  for (const std::string& p : pieces) {
    const auto r = m.push(p);
    s.text += r.emit;
    if (r.stopped) {
      s.stopped = true;
      s.matched = r.matched;
      break;
    }
  }
  if (!s.stopped) s.text += m.flush();
  return s;
}

TEST(StopStrings, StopsAtTheFirstMatchAndDropsTheRest) {
  StopStringMatcher m({"."}, false);
  const auto r = m.push("Hello world. Bye.");
  EXPECT_EQ(r.emit, "Hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, ".");
  EXPECT_TRUE(m.push("more").stopped);
  EXPECT_EQ(m.push("more").emit, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, IncludeStopString) {
  StopStringMatcher m({"END"}, true);
  EXPECT_EQ(m.push("abcE").emit, "abc");
  const auto r = m.push("NDxyz");
  EXPECT_EQ(r.emit, "END");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStrings, HoldsBackAPossibleStartThenReleasesIt) {
  StopStringMatcher m({"</s>"}, false);
  auto r = m.push("ab<");
  EXPECT_EQ(r.emit, "ab");
  r = m.push("/");
  EXPECT_EQ(r.emit, "");
  r = m.push("x");  // "</x" can no longer become "</s>"
  EXPECT_EQ(r.emit, "</x");
  r = m.push("</");
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(m.flush(), "</");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, SplitAcrossManyPushes) {
  StopStringMatcher m({"STOP"}, false);
  const auto s = stream(m, {"go S", "T", "O", "P now"});
  EXPECT_EQ(s.text, "go ");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.matched, "STOP");
}

TEST(StopStrings, FirstCompletedWinsAmongSeveral) {
  // "bc" completes before "abcd" could: the stream cannot wait to see the 'd'.
  StopStringMatcher m({"abcd", "bc"}, false);
  const auto s = stream(m, {"xab", "cd"});
  EXPECT_EQ(s.text, "xa");
  EXPECT_EQ(s.matched, "bc");
  // Ending at the same byte: the longer one.
  std::string matched;
  EXPECT_EQ(apply_stop_strings("xabc", {"bc", "abc"}, false, &matched), "x");
  EXPECT_EQ(matched, "abc");
}

TEST(StopStrings, NoStopsPassesEverythingAtOnce) {
  StopStringMatcher m({}, false);
  EXPECT_EQ(m.push("abc").emit, "abc");
  StopStringMatcher e({""}, false);  // an empty stop string would stop everything: ignored
  EXPECT_EQ(e.push("abc").emit, "abc");
}

// Independent of the implementation: the first end position at which some stop string ends.
std::string brute_force(const std::string& text, const std::vector<std::string>& stops, bool include,
                        std::string* matched) {
  for (size_t end = 1; end <= text.size(); ++end) {
    const std::string* best = nullptr;
    for (const std::string& s : stops)
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 && (!best || s.size() > best->size()))
        best = &s;
    if (best) {
      *matched = *best;
      return text.substr(0, include ? end : end - best->size());
    }
  }
  matched->clear();
  return text;
}

TEST(StopStrings, RandomSplitsAgreeWithTheWholeText) {
  Rng rng(1234);
  const auto rand_string = [&](size_t max_len, size_t min_len) {
    std::string s(min_len + rng.next_u64() % (max_len - min_len + 1), 'a');
    for (char& c : s) c = char('a' + rng.next_u64() % 3);  // a small alphabet makes overlaps common
    return s;
  };
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::string> stops;
    const size_t nstops = rng.next_u64() % 4;
    size_t longest = 0;
    for (size_t i = 0; i < nstops; ++i) {
      stops.push_back(rand_string(5, 1));
      longest = std::max(longest, stops.back().size());
    }
    const bool include = rng.next_u64() % 2;
    const std::string text = rand_string(40, 0);

    std::vector<std::string> pieces;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::min(text.size() - pos, size_t(rng.next_u64() % 5));  // empty pieces too
      pieces.push_back(text.substr(pos, n));
      pos += n;
    }

    std::string want_match;
    const std::string want = brute_force(text, stops, include, &want_match);
    std::string one_shot_match;
    ASSERT_EQ(apply_stop_strings(text, stops, include, &one_shot_match), want);
    ASSERT_EQ(one_shot_match, want_match);

    StopStringMatcher m(stops, include);
    Streamed s;
    size_t pushed = 0;
    for (const std::string& p : pieces) {
      const auto r = m.push(p);
      pushed += p.size();
      s.text += r.emit;
      if (r.stopped) {
        s.stopped = true;
        s.matched = r.matched;
        break;
      }
      // Nothing is held back that could not still become a stop string.
      ASSERT_LE(pushed - s.text.size(), longest ? longest - 1 : 0) << text;
    }
    if (!s.stopped) s.text += m.flush();
    ASSERT_EQ(s.text, want) << "text " << text << " include " << include;
    ASSERT_EQ(s.matched, want_match) << text;
    ASSERT_EQ(s.stopped, !want_match.empty()) << text;
  }
}

}  // namespace
}  // namespace kimi
