// The HTTP/1.1 request parser on its own (no sockets): requests split at every byte, pipelining,
// chunked bodies, and the limits and framing errors it must refuse at once.
#include <gtest/gtest.h>

#include "common/rng.h"
#include "server/http/request_parser.h"

namespace kimi::http {
namespace {

// Feeds `text` in pieces of `step` bytes and collects the complete requests; the status of the
// last parse() is returned in `last`.
std::vector<HttpRequest> parse_all(const std::string& text, size_t step, RequestParser::Status* last = nullptr,
                                   RequestParser* parser = nullptr, ParseLimits limits = {}) {
  RequestParser local(limits);
  RequestParser& p = parser ? *parser : local;
  std::vector<HttpRequest> out;
  RequestParser::Status st = RequestParser::Status::NeedMore;
  for (size_t i = 0; i < text.size() && st != RequestParser::Status::Error; i += step) {
    p.feed(std::string_view(text).substr(i, step));
    while ((st = p.parse()) == RequestParser::Status::Ready) out.push_back(p.take());
  }
  if (last) *last = st;
  return out;
}

TEST(HttpParser, SplitAtEveryByteGivesTheSameRequests) {
  const std::string text =
      "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nconnection: Close\r\n\r\nhello"
      "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
      "GET /v HTTP/1.0\r\n\r\n";
  for (size_t step = 1; step <= text.size(); ++step) {
    RequestParser::Status st;
    const auto reqs = parse_all(text, step, &st);
    ASSERT_EQ(reqs.size(), 4u) << "step " << step;
    EXPECT_EQ(reqs[0].method, "GET");
    EXPECT_EQ(reqs[0].path, "/health");
    EXPECT_TRUE(reqs[0].keep_alive);
    EXPECT_EQ(reqs[1].path, "/v1/completions");
    EXPECT_EQ(reqs[1].target, "/v1/completions?x=1");
    EXPECT_EQ(reqs[1].body, "hello");
    EXPECT_FALSE(reqs[1].keep_alive);
    ASSERT_NE(reqs[1].header("CONTENT-length"), nullptr);
    EXPECT_EQ(*reqs[1].header("content-length"), "5");
    EXPECT_EQ(reqs[2].body, "abcde");
    EXPECT_EQ(reqs[3].version_minor, 0);
    EXPECT_FALSE(reqs[3].keep_alive);
    EXPECT_EQ(st, RequestParser::Status::NeedMore);
  }
}

TEST(HttpParser, BadFramingIsRefusedAsSoonAsTheHeadersEnd) {
  struct Case {
    const char* head;
    int status;
  } cases[] = {
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nContent-Length: 33554433\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET /\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n folded\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2000001\r\n", 413},
  };
  for (const auto& c : cases) {
    RequestParser p;
    p.feed(c.head);
    EXPECT_EQ(p.parse(), RequestParser::Status::Error) << c.head;
    EXPECT_EQ(p.error_status(), c.status) << c.head << ": " << p.error_message();
    EXPECT_EQ(p.parse(), RequestParser::Status::Error) << "an error is final";
  }
}

TEST(HttpParser, HeaderLimits) {
  ParseLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_headers = 4;
  RequestParser p(limits);
  p.feed("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a'));  // headers not even complete
  EXPECT_EQ(p.parse(), RequestParser::Status::Error);
  EXPECT_EQ(p.error_status(), 431);
  RequestParser q(limits);
  q.feed("GET / HTTP/1.1\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\n\r\n");
  EXPECT_EQ(q.parse(), RequestParser::Status::Error);
  EXPECT_EQ(q.error_status(), 431);
}

TEST(HttpParser, ExpectContinueAndLeadingEmptyLines) {
  RequestParser p;
  p.feed("\r\n\r\nPOST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_EQ(p.parse(), RequestParser::Status::NeedMore);
  EXPECT_TRUE(p.take_continue_wanted());
  EXPECT_FALSE(p.take_continue_wanted()) << "once";
  EXPECT_TRUE(p.in_body());
  p.feed("ok");
  ASSERT_EQ(p.parse(), RequestParser::Status::Ready);
  EXPECT_EQ(p.take().body, "ok");
  EXPECT_FALSE(p.mid_request());
}

TEST(HttpParser, RandomBytesNeverCrashAndErrorsAreClientErrors) {
  Rng rng(5);
  const std::string alphabet = "GETPOST /HTP1.0\r\n:-chunkedContent-Length0123456789abcdefTransfer-Encoding;";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    const size_t n = rng.next_u64() % 300;
    for (size_t i = 0; i < n; ++i)
      s += rng.next_u64() % 4 ? alphabet[rng.next_u64() % alphabet.size()] : char(rng.next_u64() % 256);
    RequestParser p;
    RequestParser::Status st;
    parse_all(s, 1 + rng.next_u64() % 7, &st, &p);
    if (st == RequestParser::Status::Error) {
      EXPECT_GE(p.error_status(), 400);
      EXPECT_LT(p.error_status(), 600);
    }
  }
}

}  // namespace
}  // namespace kimi::http
