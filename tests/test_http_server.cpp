// `kimi serve`'s HTTP layer over raw sockets on 127.0.0.1: pipelining, HTTP/1.0 framing, bad
// Content-Length answered at once, slow clients that must not starve /health, CORS, a client that
// hangs up on a non-streaming request (the engine request must stop), and the shutdown sequence
// (503 while draining, /health 503, a drain time limit, a second signal).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "engine/async_engine.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/serving.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace kimi {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::seconds_since;

struct RawResponse {
  int status = 0;
  std::string head;  // status line and headers, lower-cased names kept as sent
  std::string body;
  bool chunked = false;
  bool ok = false;  // a whole response was read
  std::string header(const std::string& name) const {
    std::string h = head, n = name + ":";
    for (auto& c : h) c = char(std::tolower(uint8_t(c)));
    for (auto& c : n) c = char(std::tolower(uint8_t(c)));
    const size_t p = h.find("\n" + n);
    if (p == std::string::npos) return {};
    size_t b = p + 1 + n.size();
    const size_t e = head.find('\r', b);
    while (b < e && head[b] == ' ') ++b;
    return head.substr(b, e - b);
  }
};

// A client socket that reads responses one after another from what the server sent.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Reads more bytes within the deadline; false on EOF, error or time out.
  bool fill(Clock::time_point deadline) {
    const int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(tmp, size_t(n));
    return true;
  }
  // Reads until the bytes received so far contain `text`.
  bool wait_for(const std::string& text, std::chrono::milliseconds within) {
    const auto deadline = Clock::now() + within;
    while (buf_.find(text) == std::string::npos)
      if (!fill(deadline)) return false;
    return true;
  }
  // True when the server closed the connection (EOF) within the time.
  bool closed_by_server(std::chrono::milliseconds within) {
    const auto deadline = Clock::now() + within;
    while (!eof_ && fill(deadline)) {
    }
    return eof_;
  }
  RawResponse read_response(std::chrono::milliseconds within = 5000ms) {
    const auto deadline = Clock::now() + within;
    RawResponse r;
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline)) return r;
    r.head = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    r.status = std::atoi(r.head.substr(9, 3).c_str());
    if (r.status == 100) return read_response(within);
    const std::string cl = r.header("Content-Length"), te = r.header("Transfer-Encoding");
    if (!cl.empty()) {
      const size_t n = std::stoul(cl);
      while (buf_.size() < n)
        if (!fill(deadline)) return r;
      r.body = buf_.substr(0, n);
      buf_.erase(0, n);
    } else if (te.find("chunked") != std::string::npos) {
      r.chunked = true;
      for (;;) {
        size_t nl;
        while ((nl = buf_.find("\r\n")) == std::string::npos)
          if (!fill(deadline)) return r;
        const size_t size = std::stoul(buf_.substr(0, nl), nullptr, 16);
        while (buf_.size() < nl + 2 + size + 2)
          if (!fill(deadline)) return r;
        r.body += buf_.substr(nl + 2, size);
        buf_.erase(0, nl + 2 + size + 2);
        if (size == 0) break;
      }
    } else {
      while (fill(deadline)) {
      }
      if (!eof_) return r;  // a close-delimited body ends with the connection
      r.body = buf_;
      buf_.clear();
    }
    r.ok = true;
    return r;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

std::string post(const std::string& path, const std::string& body, const std::string& version = "1.1",
                 const std::string& extra = "") {
  return "POST " + path + " HTTP/" + version + "\r\nHost: t\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

class HttpServerTest : public test::TinyModelTest {
 protected:

  void start(HttpConfig hc = {}) {
    EngineConfig ec;
    ec.block_size = 16;
    ec.scheduler.max_model_len = 8192;
    ec.scheduler.max_num_seqs = 16;
    ec.kv_cache_bytes = size_t(2048) * KvStorage::bytes_per_block(model_->config(), ec.block_size);
    engine_ = std::make_unique<AsyncEngine>(*model_, tokenizer_.get(), ec);
    ServingConfig sc;
    sc.served_model_names = {"tiny"};
    sc.chat_template = tokenizer_->chat_template();
    serving_ = std::make_unique<OpenAiServing>(*engine_, *tokenizer_, sc);
    hc.host = "127.0.0.1";
    hc.port = 0;
    server_ = std::make_unique<HttpServer>(*serving_, *engine_, hc);
    listener_ = std::thread([this] { listened_ = server_->listen(); });
    for (int i = 0; i < 500 && server_->bound_port() == 0; ++i) std::this_thread::sleep_for(5ms);
    ASSERT_NE(server_->bound_port(), 0);
    // The port is bound before the loop runs: wait until the server answers.
    RawClient c(port());
    ASSERT_TRUE(c.send(get("/version")));
    ASSERT_EQ(c.read_response().status, 200);
  }
  void TearDown() override {
    if (server_ && listener_.joinable()) {
      if (!stopped_) {
        engine_->abort_all("test over");
        server_->stop();
      }
      listener_.join();
    }
    server_.reset();
    serving_.reset();
    engine_.reset();
  }
  int port() const { return server_->bound_port(); }
  // Waits (bounded) until the engine has no running or waiting request.
  bool engine_idle(std::chrono::milliseconds within) {
    const auto deadline = Clock::now() + within;
    while (Clock::now() < deadline) {
      const EngineStats s = engine_->stats();
      if (s.running == 0 && s.waiting == 0 && engine_->num_waiting() == 0) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  // Waits (bounded) until `count` requests run, then begins the graceful stop on another thread
  // and waits until the engine drains; the stop's future is returned.
  std::future<void> stop_with_running(int64_t count) {
    const auto deadline = Clock::now() + 3s;
    while (engine_->stats().running < count && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    auto stopper = std::async(std::launch::async, [this] { server_->stop(); });
    stopped_ = true;
    const auto drain_deadline = Clock::now() + 3s;
    while (!server_->draining() && Clock::now() < drain_deadline) std::this_thread::sleep_for(1ms);
    return stopper;
  }
  static std::string long_completion(bool stream, int max_tokens = 8000) {
    return R"({"model":"tiny","prompt":"Go on","max_tokens":)" + std::to_string(max_tokens) +
           R"(,"ignore_eos":true,"stream":)" + (stream ? "true" : "false") + "}";
  }

  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<OpenAiServing> serving_;
  std::unique_ptr<HttpServer> server_;
  std::thread listener_;
  bool listened_ = false;
  bool stopped_ = false;
};

TEST_F(HttpServerTest, PipelinedRequestsAreAllAnsweredInOrder) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.send(get("/version") + get("/health") + post("/tokenize", R"({"model":"tiny","prompt":"hi"})")));
  const RawResponse a = c.read_response(), b = c.read_response(), d = c.read_response();
  EXPECT_EQ(a.status, 200);
  EXPECT_NE(a.body.find("version"), std::string::npos);
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(d.status, 200);
  EXPECT_NE(d.body.find("tokens"), std::string::npos) << d.body;
}

TEST_F(HttpServerTest, Http10StreamIsNotChunked) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.send(post("/v1/completions", long_completion(true, 4), "1.0")));
  const RawResponse r = c.read_response(10000ms);
  ASSERT_TRUE(r.ok) << r.head;
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.chunked) << r.head;
  EXPECT_EQ(r.header("Transfer-Encoding"), "");
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("\r\n0\r\n"), std::string::npos) << "chunk framing in the body";
}

TEST_F(HttpServerTest, BadContentLengthIsRefusedAtOnce) {
  start();
  for (const char* bad : {"-1", "99999999999999999999999", "4294967296000", "12abc"}) {
    RawClient c(port());
    const auto t0 = Clock::now();
    ASSERT_TRUE(c.send(std::string("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: ") + bad + "\r\n\r\n"));
    const RawResponse r = c.read_response(3000ms);
    EXPECT_LT(seconds_since(t0), 1.0) << bad;
    EXPECT_TRUE(r.status == 400 || r.status == 413) << bad << ": " << r.status;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
    EXPECT_TRUE(c.closed_by_server(2000ms)) << bad;
  }
}

TEST_F(HttpServerTest, FormBodyOverEightKilobytesIsNotTooLarge) {
  start();
  RawClient c(port());
  const std::string body = "prompt=" + std::string(10000, 'a');
  ASSERT_TRUE(c.send("POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  const RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 400) << r.body;  // not JSON, rather than "too large"
  // curl -d sends JSON as form-urlencoded: it is read as JSON all the same.
  RawClient d(port());
  const std::string json = R"({"model":"tiny","prompt":")" + std::string(10000, 'a') + "\"}";
  ASSERT_TRUE(d.send("POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     "Content-Length: " + std::to_string(json.size()) + "\r\n\r\n" + json));
  EXPECT_EQ(d.read_response().status, 200);
}

TEST_F(HttpServerTest, SlowClientsDoNotStarveHealth) {
  HttpConfig hc;
  hc.threads = 4;
  start(hc);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 16; ++i) {
    slow.push_back(std::make_unique<RawClient>(port()));
    ASSERT_TRUE(slow.back()->send("GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: "));  // headers never end
  }
  std::this_thread::sleep_for(200ms);
  const auto t0 = Clock::now();
  RawClient c(port());
  ASSERT_TRUE(c.send(get("/health")));
  const RawResponse r = c.read_response(3000ms);
  EXPECT_EQ(r.status, 200);
  EXPECT_LT(seconds_since(t0), 1.0);
}

TEST_F(HttpServerTest, BusyWorkersDoNotStarveCheapEndpoints) {
  HttpConfig hc;
  hc.threads = 2;
  start(hc);
  RawClient a(port()), b(port());
  ASSERT_TRUE(a.send(post("/v1/completions", long_completion(true))));
  ASSERT_TRUE(b.send(post("/v1/completions", long_completion(true))));
  const auto deadline = Clock::now() + 3s;
  while (engine_->stats().running < 2 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(engine_->stats().running, 2);  // both workers hold a stream
  for (const char* path : {"/health", "/v1/models", "/metrics", "/version"}) {
    const auto t0 = Clock::now();
    RawClient c(port());
    ASSERT_TRUE(c.send(get(path)));
    EXPECT_EQ(c.read_response(3000ms).status, 200) << path;
    EXPECT_LT(seconds_since(t0), 1.0) << path;
  }
}

TEST_F(HttpServerTest, NonStreamingRequestIsAbortedWhenTheClientHangsUp) {
  start();
  {
    RawClient c(port());
    ASSERT_TRUE(c.send(post("/v1/completions", long_completion(false))));
    // Wait until it runs, then hang up.
    const auto deadline = Clock::now() + 3s;
    while (engine_->stats().running == 0 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    ASSERT_EQ(engine_->stats().running, 1);
  }
  EXPECT_TRUE(engine_idle(3000ms)) << "the orphaned request kept running";
  const std::string m = engine_->render_metrics("tiny");
  EXPECT_NE(m.find("kimi:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"} 1"), std::string::npos)
      << m;
}

TEST_F(HttpServerTest, DrainingAnswers503AndHealth503) {
  start();
  RawClient busy(port());
  // Long enough to outlast the probes below on a fast machine (a Release build decodes the tiny
  // model at thousands of tokens a second), short enough for ASan within the 30 s read.
  ASSERT_TRUE(busy.send(post("/v1/completions", long_completion(false, 2000))));
  auto stopper = stop_with_running(1);
  ASSERT_TRUE(server_->draining());
  ASSERT_EQ(engine_->stats().running, 1) << "the in-flight request ended before the probes";
  {
    RawClient c(port());
    ASSERT_TRUE(c.send(post("/v1/completions", long_completion(false, 4))));
    const RawResponse r = c.read_response();
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_NE(r.body.find("shutting down"), std::string::npos) << r.body;
  }
  {
    RawClient c(port());
    ASSERT_TRUE(c.send(get("/health")));
    EXPECT_EQ(c.read_response().status, 503);
  }
  const RawResponse done = busy.read_response(30000ms);
  EXPECT_EQ(done.status, 200) << "the in-flight request finishes: " << done.body;
  EXPECT_NE(done.body.find("\"length\""), std::string::npos) << done.body;
  stopper.get();
}

// A stream whose head promised keep-alive before the shutdown began: its client may pool the
// connection and send the next request on it during the drain (Node's agent does), which must get
// the drain's 503 and Connection: close, not a socket closed under it.
TEST_F(HttpServerTest, KeepAlivePromisedBeforeTheDrainIsKept) {
  start();
  RawClient busy(port()), streamer(port());
  // busy keeps the drain going while the stream ends and its connection is reused.
  ASSERT_TRUE(busy.send(post("/v1/completions", long_completion(false, 2000))));
  ASSERT_TRUE(streamer.send(post("/v1/completions", long_completion(true, 400))));
  ASSERT_TRUE(streamer.wait_for("\r\n\r\n", 5000ms));  // the head is out
  auto stopper = stop_with_running(2);
  ASSERT_TRUE(server_->draining());
  ASSERT_EQ(engine_->stats().running, 2) << "the stream ended before the drain began";
  const RawResponse s = streamer.read_response(30000ms);
  ASSERT_TRUE(s.ok);
  EXPECT_EQ(s.header("Connection"), "keep-alive");
  ASSERT_EQ(engine_->stats().running, 1) << "busy ended before the reuse: the drain is over";
  ASSERT_TRUE(streamer.send(post("/v1/completions", long_completion(false, 4))));
  const RawResponse r = streamer.read_response();
  EXPECT_EQ(r.status, 503) << "the reused connection was closed under its request";
  EXPECT_NE(r.body.find("shutting down"), std::string::npos) << r.body;
  EXPECT_EQ(r.header("Connection"), "close");
  EXPECT_TRUE(streamer.closed_by_server(3000ms));
  EXPECT_EQ(busy.read_response(30000ms).status, 200);
  stopper.get();
}

TEST_F(HttpServerTest, DrainTimeLimitAbortsAndAnswersTheRest) {
  start();
  RawClient busy(port()), streamer(port());
  ASSERT_TRUE(busy.send(post("/v1/completions", long_completion(false))));
  ASSERT_TRUE(streamer.send(post("/v1/completions", long_completion(true))));
  const auto deadline = Clock::now() + 3s;
  while (engine_->stats().running < 2 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  const auto t0 = Clock::now();
  server_->shutdown(300ms);  // returns once every answer is written
  stopped_ = true;
  EXPECT_LT(seconds_since(t0), 3.0);
  listener_.join();
  EXPECT_TRUE(listened_);
  const RawResponse r = busy.read_response();
  EXPECT_EQ(r.status, 503) << r.body;  // retryable elsewhere, as the refusals during the drain
  EXPECT_NE(r.body.find("ServiceUnavailableError"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("shutting down"), std::string::npos) << r.body;
  const RawResponse s = streamer.read_response();
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.body.find("shutting down"), std::string::npos) << "the stream ends with an error event";
  EXPECT_TRUE(engine_idle(2000ms));
}

TEST_F(HttpServerTest, AbortInFlightEndsAnUnlimitedDrain) {
  start();
  RawClient busy(port());
  ASSERT_TRUE(busy.send(post("/v1/completions", long_completion(false))));
  const auto deadline = Clock::now() + 3s;
  while (engine_->stats().running == 0 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  auto done = std::async(std::launch::async, [this] { server_->shutdown(-1ms); });
  stopped_ = true;
  EXPECT_EQ(done.wait_for(300ms), std::future_status::timeout) << "no limit: still draining";
  server_->abort_in_flight();  // the second signal
  EXPECT_EQ(done.wait_for(3s), std::future_status::ready);
  EXPECT_EQ(busy.read_response().status, 503);
}

TEST_F(HttpServerTest, KeepAliveAndCorsPreflight) {
  HttpConfig hc;
  hc.api_key = "k";
  hc.cors.allowed_origins = {"http://ok.example"};
  hc.cors.allowed_methods = {"GET", "POST"};
  hc.cors.allowed_headers = {"Authorization"};
  start(hc);
  RawClient c(port());
  // Preflight needs no key; the allowed origin is echoed.
  ASSERT_TRUE(c.send("OPTIONS /v1/completions HTTP/1.1\r\nHost: t\r\nOrigin: http://ok.example\r\n"
                     "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n\r\n"));
  RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "http://ok.example");
  EXPECT_NE(r.header("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_NE(r.header("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  // A refused origin, on the same (kept-alive) connection.
  ASSERT_TRUE(c.send("OPTIONS /v1/completions HTTP/1.1\r\nHost: t\r\nOrigin: http://evil.example\r\n"
                     "Access-Control-Request-Method: POST\r\n\r\n"));
  r = c.read_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "");
  // An actual request carries the header, and auth still applies.
  ASSERT_TRUE(c.send(get("/v1/models", "Origin: http://ok.example\r\n")));
  r = c.read_response();
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "http://ok.example");
  ASSERT_TRUE(c.send(get("/v1/models", "Origin: http://ok.example\r\nAuthorization: Bearer k\r\n")));
  r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("tiny"), std::string::npos);
}

TEST_F(HttpServerTest, ChunkedRequestBodyAndExpectContinue) {
  start();
  RawClient c(port());
  const std::string body = R"({"model":"tiny","prompt":"hello"})";
  ASSERT_TRUE(c.send("POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_TRUE(c.wait_for("HTTP/1.1 100 Continue\r\n\r\n", 2000ms)) << "curl waits for this before the body";
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size() - 5);
  ASSERT_TRUE(c.send("5\r\n" + body.substr(0, 5) + "\r\n"));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(c.send(std::string(size) + "\r\n" + body.substr(5) + "\r\n0\r\n\r\n"));
  const RawResponse r = c.read_response();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"count\""), std::string::npos) << r.body;
}

TEST_F(HttpServerTest, IdleAndSlowHeadersAreTimedOut) {
  HttpConfig hc;
  hc.header_timeout = 300ms;
  hc.idle_timeout = 300ms;
  start(hc);
  RawClient idle(port()), slow(port());
  ASSERT_TRUE(slow.send("GET /health HTTP/1.1\r\n"));
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(100ms);
    slow.send("X: y\r\n");  // a drip does not renew the header deadline
  }
  const RawResponse r = slow.read_response(2000ms);
  EXPECT_EQ(r.status, 408);
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_TRUE(idle.closed_by_server(1500ms));
}

// The signal path of `kimi serve`: SIGTERM drains (/health 503 meanwhile), a second SIGTERM aborts
// the in-flight request, which is answered, and the process exits 0.
TEST(HttpServeSignals, SecondSignalStopsAtOnce) {
  test::TempDir dir;
  const auto model = test::make_tiny_model(dir);
  const std::string log = (dir.path() / "serve.log").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    ::execl(KIMI_BINARY, KIMI_BINARY, "serve", model.c_str(), "--host", "127.0.0.1", "--port", "0", "--threads", "1",
            "--max-model-len", "8192", "--kv-cache-memory", "67108864", "--shutdown-timeout", "-1", (char*)nullptr);
    std::_Exit(127);
  }
  int port = 0;
  const auto deadline = Clock::now() + 20s;
  while (port == 0 && Clock::now() < deadline) {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t p = text.find("http://127.0.0.1:");
    if (p != std::string::npos) port = std::atoi(text.c_str() + p + 17);
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_GT(port, 0) << "the server did not start";
  RawClient busy(port);
  ASSERT_TRUE(busy.send(post("/v1/completions", R"({"prompt":"Go on","max_tokens":8000,"ignore_eos":true})")));
  std::this_thread::sleep_for(500ms);
  ::kill(pid, SIGTERM);
  std::this_thread::sleep_for(300ms);
  {
    RawClient h(port);
    ASSERT_TRUE(h.send(get("/health")));
    EXPECT_EQ(h.read_response().status, 503);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "still draining (no time limit)";
  const auto t0 = Clock::now();
  ::kill(pid, SIGTERM);
  const RawResponse r = busy.read_response(5000ms);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("shutting down"), std::string::npos) << r.body;
  pid_t w = 0;
  while ((w = ::waitpid(pid, &status, WNOHANG)) == 0 && seconds_since(t0) < 10) std::this_thread::sleep_for(20ms);
  if (w == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the server ignored the second signal";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(seconds_since(t0), 5.0);
}

}  // namespace
}  // namespace kimi
