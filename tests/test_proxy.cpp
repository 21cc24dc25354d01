// `kimi proxy` against small in-process upstreams on 127.0.0.1 (http::Server fakes that record
// what they receive, a raw socket for a decode that dies mid-stream, a bound port nobody listens
// on for a dead instance): the prefill rewriting, the kv_transfer_params hand-off, byte-for-byte
// pass-through of answers and SSE streams, the least-loaded choice, retries (prefill elsewhere;
// decode only before its first byte), cancellation when the client hangs up, /healthcheck,
// /metrics, /v1/models, and the command line.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "proxy/disagg_request.h"
#include "proxy/instance_pool.h"
#include "proxy/proxy_config.h"
#include "proxy/proxy_server.h"
#include "server/http/event_server.h"
#include "server/http/client.h"
#include "test_util.h"

namespace kimi {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using proxy::ojson;

using test::seconds_since;

// Waits (bounded) until pred() holds.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds within = 5000ms) {
  const auto deadline = Clock::now() + within;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

struct Recorded {
  std::string method, target, body;
  http::Headers headers;
  std::string header(const std::string& name) const {
    http::HttpRequest r;
    r.headers = headers;
    const std::string* v = r.header(name);
    return v ? *v : std::string();
  }
};

// An upstream instance: an http::Server on 127.0.0.1 that records each request, then answers
// with `handler`.
class FakeUpstream {
 public:
  using Handler = std::function<void(http::Exchange&)>;
  explicit FakeUpstream(Handler handler)
      : handler_(std::move(handler)),
        server_(
            [] {
              http::ServerOptions o;
              o.work_threads = 8;
              o.control_threads = 1;
              return o;
            }(),
            [](const http::HttpRequest&) { return http::Lane::Work; },
            [this](http::Exchange& ex) {
              {
                std::lock_guard lock(mu_);
                const auto& r = ex.request();
                requests_.push_back({r.method, r.target, r.body, r.headers});
              }
              handler_(ex);
            },
            [](int status, const std::string& m) { return http::Response{status, {}, m}; }) {
    EXPECT_TRUE(server_.bind("127.0.0.1", 0));
    thread_ = std::thread([this] { server_.run(); });
  }
  ~FakeUpstream() {
    server_.stop();
    thread_.join();
  }
  int port() const { return server_.port(); }
  std::vector<Recorded> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  size_t count() const {
    std::lock_guard lock(mu_);
    return requests_.size();
  }

 private:
  Handler handler_;
  mutable std::mutex mu_;
  std::vector<Recorded> requests_;
  http::Server server_;
  std::thread thread_;
};

http::Response json_reply(int status, const std::string& body, http::Headers extra = {}) {
  http::Response r{status, std::move(extra), body};
  r.headers.emplace_back("Content-Type", "application/json");
  return r;
}

// A prefill instance that hands off its KV as vLLM's NIXL connector does.
const std::string kKvParams =
    R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[3,4,5],"remote_engine_id":"engine-P",)"
    R"("remote_host":"127.0.0.1","remote_port":5600,"tp_size":1})";
FakeUpstream::Handler prefill_ok(const std::string& engine = "engine-P") {
  return [engine](http::Exchange& ex) {
    ojson params = ojson::parse(kKvParams);
    params["remote_engine_id"] = engine;
    ojson body = {{"id", "cmpl-p"}, {"object", "text_completion"}, {"choices", {{{"text", "x"}}}},
                  {"kv_transfer_params", params}};
    ex.respond(json_reply(200, body.dump()));
  };
}

const std::string kDecodeBody = "{\"id\":\"cmpl-d\",  \"choices\":[{\"text\":\" h\\u00e9llo\"}] }\n";
FakeUpstream::Handler decode_ok(const std::string& body = kDecodeBody) {
  return [body](http::Exchange& ex) {
    ex.respond(http::Response{200, {{"Content-Type", "application/json; charset=utf-8"}, {"X-Upstream", "decode"}}, body});
  };
}

// A port on 127.0.0.1 that is bound but not listening: connecting is refused (a dead instance).
class ClosedPort {
 public:
  ClosedPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~ClosedPort() { ::close(fd_); }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A decode instance that answers one request with `bytes` (a head and the start of a body) and
// then drops the connection: an instance that dies mid-stream.
class DyingUpstream {
 public:
  explicit DyingUpstream(std::string bytes) : bytes_(std::move(bytes)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve_one(); });
  }
  ~DyingUpstream() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  int served() const { return served_; }

 private:
  void serve_one() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) return;
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    std::string in;
    char buf[4096];
    // Read the head and its Content-Length body.
    for (;;) {
      const size_t end = in.find("\r\n\r\n");
      if (end != std::string::npos) {
        const size_t cl = in.find("Content-Length: ");
        const size_t want = cl == std::string::npos ? 0 : std::stoul(in.substr(cl + 16));
        if (in.size() >= end + 4 + want) break;
      }
      pollfd q{c, POLLIN, 0};
      if (::poll(&q, 1, 5000) <= 0) break;
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, size_t(n));
    }
    ++served_;
    [[maybe_unused]] ssize_t w = ::send(c, bytes_.data(), bytes_.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(50ms);  // the piece reaches the proxy before the connection drops
    ::close(c);
  }
  std::string bytes_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> served_{0};
  std::thread thread_;
};

proxy::ProxyConfig config_for(const std::vector<int>& prefill_ports, const std::vector<int>& decode_ports) {
  proxy::ProxyConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  for (int p : prefill_ports) c.prefillers.push_back({"127.0.0.1", p});
  for (int p : decode_ports) c.decoders.push_back({"127.0.0.1", p});
  c.work_threads = 16;
  c.connect_timeout_s = 5;
  c.io_timeout_s = 20;
  return c;
}

class RunningProxy {
 public:
  explicit RunningProxy(proxy::ProxyConfig c) : server_(std::move(c), /*log=*/false) {
    EXPECT_TRUE(server_.bind());
    thread_ = std::thread([this] { server_.run(); });
  }
  RunningProxy(const std::vector<int>& prefill_ports, const std::vector<int>& decode_ports)
      : RunningProxy(config_for(prefill_ports, decode_ports)) {}
  ~RunningProxy() {
    server_.stop();
    thread_.join();
  }
  int port() const { return server_.port(); }

 private:
  proxy::ProxyServer server_;
  std::thread thread_;
};

struct Reply {
  http::ClientError error = http::ClientError::None;
  http::ResponseHead head;
  std::string body;
  std::string header(const std::string& name) const {
    const std::string* v = head.header(name);
    return v ? *v : std::string();
  }
};

Reply call(int port, const std::string& method, const std::string& path, const std::string& body = {},
           http::Headers headers = {}, const std::function<void(std::string_view)>& on_piece = {}) {
  http::ClientRequest req;
  req.method = method;
  req.target = path;
  req.headers = std::move(headers);
  if (method == "POST") req.headers.emplace_back("Content-Type", "application/json");
  req.body = body;
  Reply r;
  r.error = http::send_request(
      "127.0.0.1", port, req, http::ClientTimeouts{5, 20}, [&](const http::ResponseHead& h) { r.head = h; },
      [&](std::string_view piece) {
        r.body.append(piece);
        if (on_piece) on_piece(piece);
        return true;
      },
      nullptr);
  return r;
}

Reply post(int port, const std::string& path, const std::string& body, http::Headers headers = {}) {
  return call(port, "POST", path, body, std::move(headers));
}

const std::string kRequest = R"({"model":"m","prompt":"Hello there","max_tokens":20,"temperature":0})";

// The value of a metric line "name{labels} value" in Prometheus text; -1 if absent.
double metric(const std::string& text, const std::string& series) {
  const size_t p = text.find("\n" + series + " ");
  if (p == std::string::npos) return -1;
  return std::atof(text.c_str() + p + 1 + series.size() + 1);
}

// The value of the first series of a metric with any labels ("name{...} value"); -1 if absent.
double prom_value(const std::string& text, const std::string& name) {
  const size_t p = text.find("\n" + name + "{");
  if (p == std::string::npos) return -1;
  const size_t close = text.find("} ", p);
  return close == std::string::npos ? -1 : std::atof(text.c_str() + close + 2);
}

// ------------------------------------------------------------------------------------------------
TEST(ProxyArgs, ListsFollowTheirFlagAsArgparseNargsPlus) {
  bool help = true;
  const proxy::ProxyConfig c = proxy::parse_proxy_args(
      {"--host", "127.0.0.1", "--port", "9000", "--prefiller-hosts", "p1", "p2", "--prefiller-ports", "8100", "8101",
       "--decoder-hosts", "d1", "--decoder-ports=8200", "--max-retries", "5", "--retry-delay", "0.25",
       "--api-threads", "64"},
      &help);
  EXPECT_FALSE(help);
  EXPECT_EQ(c.host, "127.0.0.1");
  EXPECT_EQ(c.port, 9000);
  ASSERT_EQ(c.prefillers.size(), 2u);
  EXPECT_EQ(c.prefillers[0].name(), "p1:8100");
  EXPECT_EQ(c.prefillers[1].name(), "p2:8101");
  ASSERT_EQ(c.decoders.size(), 1u);
  EXPECT_EQ(c.decoders[0].name(), "d1:8200");
  EXPECT_EQ(c.max_retries, 5);
  EXPECT_DOUBLE_EQ(c.retry_delay_s, 0.25);
  EXPECT_EQ(c.work_threads, 64);

  // The defaults of vLLM's proxies.
  const proxy::ProxyConfig d = proxy::parse_proxy_args({});
  EXPECT_EQ(d.port, 8000);
  EXPECT_EQ(d.prefillers[0].name(), "localhost:8100");
  EXPECT_EQ(d.decoders[0].name(), "localhost:8200");
  EXPECT_EQ(d.max_retries, 3);
  EXPECT_DOUBLE_EQ(d.retry_delay_s, 0.001);
  EXPECT_EQ(d.work_threads, 256);

  proxy::parse_proxy_args({"--port", "1", "--help"}, &help);
  EXPECT_TRUE(help);
}

TEST(ProxyArgs, BadArgumentsAreClearErrors) {
  auto error_of = [](const std::vector<std::string>& args) {
    try {
      proxy::parse_proxy_args(args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({"--prefiller-hosts", "a", "b", "--prefiller-ports", "8100"}).find("give one port per host"),
            std::string::npos);
  EXPECT_NE(error_of({"--decoder-ports", "8200", "8201"}).find("--decoder-hosts has 1 value(s) but --decoder-ports has 2"),
            std::string::npos);
  EXPECT_NE(error_of({"--prefiller-ports", "81x"}).find("not a port"), std::string::npos);
  EXPECT_NE(error_of({"--decoder-ports", "0"}).find("not a port"), std::string::npos);
  EXPECT_NE(error_of({"--port", "70000"}).find("not a port"), std::string::npos);
  EXPECT_NE(error_of({"--max-retries", "-1"}).find("--max-retries"), std::string::npos);
  EXPECT_NE(error_of({"--retry-delay", "soon"}).find("--retry-delay"), std::string::npos);
  EXPECT_NE(error_of({"--api-threads", "0"}).find("--api-threads"), std::string::npos);
  EXPECT_NE(error_of({"--prefiller-hosts"}).find("needs a value"), std::string::npos);
  EXPECT_NE(error_of({"--decoders", "x"}).find("unknown option '--decoders'"), std::string::npos);
  EXPECT_NE(error_of({"stray"}).find("unexpected argument 'stray'"), std::string::npos);
  EXPECT_NE(error_of({"--port", "1", "2"}).find("unexpected argument '2'"), std::string::npos);
  EXPECT_NE(error_of({"--port", "1", "--port", "2"}).find("given twice"), std::string::npos);
}

TEST(ProxyArgs, CommandLineReportsErrorsAndHelp) {
  const test::CmdResult bad = test::run_kimi("proxy --prefiller-hosts a b --prefiller-ports 8100");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("give one port per host"), std::string::npos) << bad.out;
  const test::CmdResult help = test::run_kimi("proxy --help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find("--prefiller-hosts"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--retry-delay"), std::string::npos) << help.out;
}

// ------------------------------------------------------------------------------------------------
TEST(ProxyRewrite, PrefillRequestAsksForARemoteDecodeOfOneToken) {
  const ojson in = ojson::parse(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},)"
      R"("max_tokens":50,"max_completion_tokens":50,"min_tokens":4,"temperature":0.5})");
  const ojson p = proxy::make_prefill_request(in);
  EXPECT_EQ(p["stream"], false);
  EXPECT_FALSE(p.contains("stream_options"));
  EXPECT_FALSE(p.contains("min_tokens"));
  EXPECT_EQ(p["max_tokens"], 1);
  EXPECT_EQ(p["max_completion_tokens"], 1);
  EXPECT_EQ(p["messages"], in["messages"]);
  EXPECT_EQ(p["temperature"], 0.5);
  EXPECT_EQ(p["kv_transfer_params"].dump(),
            R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,)"
            R"("remote_host":null,"remote_port":null})");
  // max_completion_tokens appears only where the client gave it.
  EXPECT_FALSE(proxy::make_prefill_request(ojson::parse(R"({"prompt":"x"})")).contains("max_completion_tokens"));

  const ojson kv = ojson::parse(kKvParams);
  const ojson d = proxy::make_decode_request(in, kv);
  EXPECT_EQ(d["kv_transfer_params"], kv);
  EXPECT_EQ(d["stream"], true);
  EXPECT_EQ(d["max_tokens"], 50);
  EXPECT_TRUE(d.contains("stream_options"));

  EXPECT_EQ(proxy::kv_params_of_response(R"({"id":"x","kv_transfer_params":)" + kKvParams + "}"), kv);
  EXPECT_FALSE(proxy::kv_params_of_response(R"({"id":"x"})"));
  EXPECT_FALSE(proxy::kv_params_of_response(R"({"id":"x","kv_transfer_params":null})"));
  EXPECT_FALSE(proxy::kv_params_of_response("not json"));
  EXPECT_FALSE(proxy::kv_params_of_response(R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}"));
}

TEST(ProxyBalance, PoolPicksTheLeastLoadedWithRoundRobinTies) {
  proxy::InstancePool pool(proxy::Role::Prefill, {{"a", 1}, {"b", 2}, {"c", 3}});
  {
    // Equal loads: round robin.
    EXPECT_EQ(pool.acquire(1).index(), 0u);
    EXPECT_EQ(pool.acquire(1).index(), 1u);
    EXPECT_EQ(pool.acquire(1).index(), 2u);
    EXPECT_EQ(pool.acquire(1).index(), 0u);
  }
  auto big = pool.acquire(100);  // a long prompt on b
  EXPECT_EQ(big.index(), 1u);
  auto small1 = pool.acquire(10);  // c
  auto small2 = pool.acquire(10);  // a
  EXPECT_EQ(small1.index(), 2u);
  EXPECT_EQ(small2.index(), 0u);
  // a and c carry 10, b 100: the next goes to one of the light ones, whichever comes first in turn.
  auto third = pool.acquire(1);
  EXPECT_NE(third.index(), 1u);
  // Avoiding the instances that failed this request; when all have, any.
  EXPECT_EQ(pool.acquire(1, {0, 2}).index(), 1u);
  EXPECT_LT(pool.acquire(1, {0, 1, 2}).index(), 3u);
  const auto stats = pool.stats();
  EXPECT_EQ(stats[1].in_flight, 1);
  EXPECT_EQ(stats[1].load, 100);
}

// ------------------------------------------------------------------------------------------------
TEST(ProxyFlow, PrefillThenDecodeWithTheKvHandOff) {
  FakeUpstream p(prefill_ok());
  FakeUpstream d(decode_ok());
  RunningProxy proxy({p.port()}, {d.port()});
  const std::string body =
      R"({"model":"m","prompt":"Hello","max_tokens":20,"max_completion_tokens":20,"stream":false,"stream_options":{"include_usage":true}})";
  const Reply r = post(proxy.port(), "/v1/completions", body, {{"Authorization", "Bearer k"}});
  ASSERT_EQ(r.error, http::ClientError::None);
  EXPECT_EQ(r.head.status, 200);
  // The decode's answer, byte for byte, with its headers.
  EXPECT_EQ(r.body, kDecodeBody);
  EXPECT_EQ(r.header("Content-Type"), "application/json; charset=utf-8");
  EXPECT_EQ(r.header("X-Upstream"), "decode");

  ASSERT_EQ(p.count(), 1u);
  ASSERT_EQ(d.count(), 1u);
  const Recorded pr = p.requests()[0], dr = d.requests()[0];
  EXPECT_EQ(pr.method, "POST");
  EXPECT_EQ(pr.target, "/v1/completions");
  const ojson pj = ojson::parse(pr.body);
  EXPECT_EQ(pj["max_tokens"], 1);
  EXPECT_EQ(pj["max_completion_tokens"], 1);
  EXPECT_EQ(pj["stream"], false);
  EXPECT_FALSE(pj.contains("stream_options"));
  EXPECT_EQ(pj["kv_transfer_params"]["do_remote_decode"], true);
  EXPECT_EQ(pj["kv_transfer_params"]["do_remote_prefill"], false);
  EXPECT_TRUE(pj["kv_transfer_params"]["remote_block_ids"].is_null());

  // The decode gets the client's request with the prefill's kv_transfer_params verbatim.
  EXPECT_EQ(dr.target, "/v1/completions");
  ojson expected = ojson::parse(body);
  expected["kv_transfer_params"] = ojson::parse(kKvParams);
  EXPECT_EQ(ojson::parse(dr.body), expected);
  // One request id for both, and the client's credentials passed on.
  EXPECT_FALSE(pr.header("X-Request-Id").empty());
  EXPECT_EQ(pr.header("X-Request-Id"), dr.header("X-Request-Id"));
  EXPECT_EQ(pr.header("Authorization"), "Bearer k");
  EXPECT_EQ(dr.header("Authorization"), "Bearer k");

  // A client's own X-Request-Id is kept.
  post(proxy.port(), "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})",
       {{"X-Request-Id", "req-42"}});
  ASSERT_EQ(d.count(), 2u);
  EXPECT_EQ(p.requests()[1].target, "/v1/chat/completions");
  EXPECT_EQ(d.requests()[1].target, "/v1/chat/completions");
  EXPECT_EQ(p.requests()[1].header("X-Request-Id"), "req-42");
  EXPECT_EQ(d.requests()[1].header("X-Request-Id"), "req-42");
}

TEST(ProxyFlow, WithoutKvParamsTheDecodeGetsTheRequestUnchanged) {
  FakeUpstream p([](http::Exchange& ex) { ex.respond(json_reply(200, R"({"id":"p","choices":[]})")); });
  FakeUpstream d(decode_ok());
  RunningProxy proxy({p.port()}, {d.port()});
  const std::string body = "{ \"prompt\" : \"Hi\",\n \"max_tokens\": 3 }";  // odd spacing: bytes, not a re-dump
  const Reply r = post(proxy.port(), "/v1/completions", body);
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(r.body, kDecodeBody);
  ASSERT_EQ(d.count(), 1u);
  EXPECT_EQ(d.requests()[0].body, body);
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_decode_without_kv_total{reason=\"no_kv_transfer_params\"}"), 1) << m;
}

TEST(ProxyFlow, StreamPassesThroughByteForByteAsItArrives) {
  // Pieces that split an SSE event, with bytes a re-encoding would change.
  const std::vector<std::string> pieces = {"data: {\"choices\":[{\"text\":\"H\\u00e9\"}]}\n\ndata: {\"cho",
                                           "ices\":[{\"text\":\"llo\"}]}\n\n", ": keep-alive comment\n\n",
                                           "data: [DONE]\n\n"};
  std::atomic<bool> client_got_first{false}, forwarded_at_once{false};
  FakeUpstream p(prefill_ok());
  FakeUpstream d([&](http::Exchange& ex) {
    ex.start_stream(200, {{"Content-Type", "text/event-stream; charset=utf-8"}, {"Cache-Control", "no-cache"}});
    ex.write(pieces[0]);
    // The rest only once the client has the first piece: a proxy that buffered would stall here.
    forwarded_at_once = eventually([&] { return client_got_first.load(); }, 5000ms);
    for (size_t i = 1; i < pieces.size(); ++i) ex.write(pieces[i]);
  });
  RunningProxy proxy({p.port()}, {d.port()});
  const std::string body = R"({"prompt":"Hello","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}})";
  const Reply r = call(proxy.port(), "POST", "/v1/completions", body, {},
                       [&](std::string_view) { client_got_first = true; });
  ASSERT_EQ(r.error, http::ClientError::None);
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "text/event-stream; charset=utf-8");
  EXPECT_EQ(r.header("Cache-Control"), "no-cache");
  EXPECT_EQ(r.body, pieces[0] + pieces[1] + pieces[2] + pieces[3]);
  EXPECT_TRUE(forwarded_at_once);
  // The prefill did not stream; the decode did, with its stream_options.
  ASSERT_EQ(p.count(), 1u);
  EXPECT_EQ(ojson::parse(p.requests()[0].body)["stream"], false);
  const ojson dj = ojson::parse(d.requests()[0].body);
  EXPECT_EQ(dj["stream"], true);
  EXPECT_EQ(dj["stream_options"]["include_usage"], true);
  EXPECT_EQ(dj["kv_transfer_params"], ojson::parse(kKvParams));
}

TEST(ProxyFlow, ErrorsAreTheRequestsOrPassedThrough) {
  FakeUpstream p(prefill_ok());
  FakeUpstream d1([](http::Exchange& ex) { ex.respond(json_reply(400, R"({"error":{"message":"bad","code":400}})")); });
  FakeUpstream d2(decode_ok());
  RunningProxy proxy({p.port()}, {d1.port(), d2.port()});
  // A decode's 4xx is the client's to fix: passed through, never retried.
  const Reply r = post(proxy.port(), "/v1/completions", kRequest);
  EXPECT_EQ(r.head.status, 400);
  EXPECT_EQ(r.body, R"({"error":{"message":"bad","code":400}})");
  EXPECT_EQ(d2.count(), 0u);
  // A body that is no JSON object: the proxy's own 400 in the OpenAI error shape; no upstream asked.
  const Reply bad = post(proxy.port(), "/v1/completions", "[1,2]");
  EXPECT_EQ(bad.head.status, 400);
  const ojson e = ojson::parse(bad.body);
  EXPECT_EQ(e["error"]["type"], "BadRequestError");
  EXPECT_EQ(e["error"]["code"], 400);
  // Nesting deep enough to overflow a recursive copy or dump is refused before any.
  const Reply deep = post(proxy.port(), "/v1/completions",
                          R"({"prompt":"x","extra":)" + std::string(200000, '[') + std::string(200000, ']') + "}");
  EXPECT_EQ(deep.head.status, 400);
  EXPECT_NE(ojson::parse(deep.body)["error"]["message"].get<std::string>().find("nests"), std::string::npos) << deep.body;
  const Reply text = post(proxy.port(), "/v1/completions", "not json");
  EXPECT_EQ(text.head.status, 400);
  EXPECT_EQ(ojson::parse(text.body)["error"]["code"], 400);
  EXPECT_EQ(p.count(), 1u);
  // Unknown routes and methods.
  const Reply nf = call(proxy.port(), "GET", "/v1/nothing");
  EXPECT_EQ(nf.head.status, 404);
  EXPECT_EQ(ojson::parse(nf.body)["error"]["type"], "NotFoundError");
  EXPECT_EQ(call(proxy.port(), "GET", "/v1/completions").head.status, 405);
  // A prefill's 4xx goes back as well, and nothing reaches a decode.
  FakeUpstream p4([](http::Exchange& ex) { ex.respond(json_reply(422, R"({"error":"too long"})")); });
  FakeUpstream d3(decode_ok());
  RunningProxy proxy2({p4.port()}, {d3.port()});
  const Reply r4 = post(proxy2.port(), "/v1/completions", kRequest);
  EXPECT_EQ(r4.head.status, 422);
  EXPECT_EQ(r4.body, R"({"error":"too long"})");
  EXPECT_EQ(d3.count(), 0u);
}

// ------------------------------------------------------------------------------------------------
TEST(ProxyBalance, DecodeGoesToTheLeastLoadedInstance) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  FakeUpstream p(prefill_ok());
  FakeUpstream d1([&](http::Exchange& ex) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, 10s, [&] { return release; });
    ex.respond(json_reply(200, R"({"from":"d1"})"));
  });
  FakeUpstream d2([](http::Exchange& ex) { ex.respond(json_reply(200, R"({"from":"d2"})")); });
  RunningProxy proxy({p.port()}, {d1.port(), d2.port()});
  auto held = std::async(std::launch::async, [&] { return post(proxy.port(), "/v1/completions", kRequest); });
  ASSERT_TRUE(eventually([&] { return d1.count() == 1; }));
  // d1 holds one request: the next ones go to d2, though round robin alone would give d1 its turn.
  EXPECT_EQ(post(proxy.port(), "/v1/completions", kRequest).body, R"({"from":"d2"})");
  EXPECT_EQ(post(proxy.port(), "/v1/completions", kRequest).body, R"({"from":"d2"})");
  EXPECT_EQ(d1.count(), 1u);
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_instance_in_flight{role=\"decode\",instance=\"127.0.0.1:" + std::to_string(d1.port()) +
                          "\"}"),
            1)
      << m;
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ(held.get().body, R"({"from":"d1"})");
}

TEST(ProxyBalance, PrefillTiesGoRoundRobin) {
  FakeUpstream p1(prefill_ok("P1")), p2(prefill_ok("P2"));
  FakeUpstream d(decode_ok());
  RunningProxy proxy({p1.port(), p2.port()}, {d.port()});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(post(proxy.port(), "/v1/completions", kRequest).head.status, 200);
  EXPECT_EQ(p1.count(), 2u);
  EXPECT_EQ(p2.count(), 2u);
  // Each decode carries the hand-off of the prefill that ran it.
  const auto dr = d.requests();
  ASSERT_EQ(dr.size(), 4u);
  std::vector<std::string> engines;
  for (const auto& r : dr) engines.push_back(ojson::parse(r.body)["kv_transfer_params"]["remote_engine_id"].get<std::string>());
  EXPECT_EQ(engines, (std::vector<std::string>{"P1", "P2", "P1", "P2"}));
}

// ------------------------------------------------------------------------------------------------
TEST(ProxyRetry, PrefillMovesToAnotherInstanceWhenOneIsDownOr5xx) {
  ClosedPort dead;
  FakeUpstream failing([](http::Exchange& ex) { ex.respond(json_reply(500, R"({"error":"oom"})")); });
  FakeUpstream good(prefill_ok("good"));
  FakeUpstream d(decode_ok());
  RunningProxy proxy({dead.port(), failing.port(), good.port()}, {d.port()});
  // Round robin starts at the dead one, then the failing one: the third attempt succeeds.
  const Reply r = post(proxy.port(), "/v1/completions", kRequest);
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(r.body, kDecodeBody);
  EXPECT_EQ(failing.count(), 1u);
  EXPECT_EQ(good.count(), 1u);
  ASSERT_EQ(d.count(), 1u);
  EXPECT_EQ(ojson::parse(d.requests()[0].body)["kv_transfer_params"]["remote_engine_id"], "good");
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_retries_total{role=\"prefill\"}"), 2) << m;
  EXPECT_EQ(metric(m, "kimi_proxy_instance_failures_total{role=\"prefill\",instance=\"127.0.0.1:" +
                          std::to_string(dead.port()) + "\"}"),
            1)
      << m;
  EXPECT_EQ(metric(m, "kimi_proxy_instance_failures_total{role=\"prefill\",instance=\"127.0.0.1:" +
                          std::to_string(failing.port()) + "\"}"),
            1)
      << m;
}

TEST(ProxyRetry, PrefillRetryAvoidsTheFailedInstanceThoughItIsLeastLoaded) {
  ClosedPort dead;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> seen{0};
  FakeUpstream busy([&](http::Exchange& ex) {
    if (seen++ == 0) {  // the first request stays, so that this instance carries load
      std::unique_lock lock(mu);
      cv.wait_for(lock, 10s, [&] { return release; });
    }
    prefill_ok("busy")(ex);
  });
  FakeUpstream d(decode_ok());
  RunningProxy proxy({dead.port(), busy.port()}, {d.port()});
  auto held = std::async(std::launch::async, [&] { return post(proxy.port(), "/v1/completions", kRequest); });
  ASSERT_TRUE(eventually([&] { return busy.count() == 1; }));
  // The dead instance carries no load, yet after failing this request it is not asked again.
  const Reply r = post(proxy.port(), "/v1/completions", kRequest);
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(busy.count(), 2u);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ(held.get().head.status, 200);
  const auto dr = d.requests();
  ASSERT_EQ(dr.size(), 2u);
  for (const auto& q : dr) EXPECT_EQ(ojson::parse(q.body)["kv_transfer_params"]["remote_engine_id"], "busy") << q.body;
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_instance_failures_total{role=\"prefill\",instance=\"127.0.0.1:" +
                          std::to_string(dead.port()) + "\"}"),
            2)
      << m;
}

TEST(ProxyRetry, EveryPrefillFailingLeavesTheDecodeToComputeThePrompt) {
  FakeUpstream failing([](http::Exchange& ex) { ex.respond(json_reply(503, R"({"error":"down"})")); });
  FakeUpstream d(decode_ok());
  proxy::ProxyConfig c = config_for({failing.port()}, {d.port()});
  c.max_retries = 2;
  c.retry_delay_s = 0.05;
  RunningProxy proxy(c);
  const auto t0 = Clock::now();
  const Reply r = post(proxy.port(), "/v1/completions", kRequest);
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(r.body, kDecodeBody);
  EXPECT_EQ(failing.count(), 3u);  // the first attempt and two retries
  EXPECT_GE(seconds_since(t0), 0.05 + 0.1);  // the delay doubles
  ASSERT_EQ(d.count(), 1u);
  EXPECT_EQ(d.requests()[0].body, kRequest);
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_decode_without_kv_total{reason=\"prefill_failed\"}"), 1) << m;
}

TEST(ProxyRetry, DecodeRetriedBeforeItsFirstByte) {
  ClosedPort dead;
  FakeUpstream p(prefill_ok());
  FakeUpstream failing([](http::Exchange& ex) { ex.respond(json_reply(503, R"({"error":"busy"})")); });
  FakeUpstream good([](http::Exchange& ex) {
    ex.start_stream(200, {{"Content-Type", "text/event-stream"}});
    ex.write("data: {\"from\":\"good\"}\n\n");
    ex.write("data: [DONE]\n\n");
  });
  RunningProxy proxy({p.port()}, {dead.port(), failing.port(), good.port()});
  const Reply r = post(proxy.port(), "/v1/completions", R"({"prompt":"x","stream":true})");
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(r.body, "data: {\"from\":\"good\"}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(failing.count(), 1u);
  ASSERT_EQ(good.count(), 1u);
  // The retry carries the same hand-off.
  EXPECT_EQ(ojson::parse(good.requests()[0].body)["kv_transfer_params"], ojson::parse(kKvParams));
  EXPECT_EQ(p.count(), 1u);  // the prefill is not repeated
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_retries_total{role=\"decode\"}"), 2) << m;
}

TEST(ProxyRetry, AllDecodesFailingIsAnError) {
  ClosedPort dead1, dead2;
  FakeUpstream p(prefill_ok());
  proxy::ProxyConfig c = config_for({p.port()}, {dead1.port(), dead2.port()});
  c.max_retries = 1;
  RunningProxy proxy(c);
  const Reply r = post(proxy.port(), "/v1/completions", kRequest);
  EXPECT_EQ(r.head.status, 502);
  const ojson e = ojson::parse(r.body);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("no decode instance answered"), std::string::npos) << r.body;
  EXPECT_EQ(e["error"]["type"], "InternalServerError");
  // An instance's own 5xx answer is passed through when it was the last.
  FakeUpstream failing([](http::Exchange& ex) { ex.respond(json_reply(503, R"({"error":"busy"})")); });
  RunningProxy proxy2({p.port()}, {failing.port()});
  const Reply r2 = post(proxy2.port(), "/v1/completions", kRequest);
  EXPECT_EQ(r2.head.status, 503);
  EXPECT_EQ(r2.body, R"({"error":"busy"})");
  EXPECT_EQ(failing.count(), 4u);  // --max-retries 3 by default
}

TEST(ProxyRetry, DecodeNotRetriedAfterItsFirstByte) {
  const std::string first = "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n";
  char size[16];
  std::snprintf(size, sizeof size, "%zx", first.size());
  DyingUpstream dying("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
                      std::string(size) + "\r\n" + first + "\r\n");
  FakeUpstream p(prefill_ok());
  FakeUpstream spare(decode_ok());
  RunningProxy proxy({p.port()}, {dying.port(), spare.port()});
  const Reply r = post(proxy.port(), "/v1/completions", R"({"prompt":"x","stream":true})");
  EXPECT_EQ(r.head.status, 200);
  EXPECT_EQ(dying.served(), 1);
  EXPECT_EQ(spare.count(), 0u);  // a retry would repeat what the client already has
  ASSERT_EQ(r.body.rfind(first, 0), 0u) << r.body;
  const std::string rest = r.body.substr(first.size());
  ASSERT_EQ(rest.rfind("data: ", 0), 0u) << rest;
  const size_t end = rest.find("\n\n");
  ASSERT_NE(end, std::string::npos) << rest;
  const ojson e = ojson::parse(rest.substr(6, end - 6));
  EXPECT_NE(e["error"]["message"].get<std::string>().find("failed mid-stream"), std::string::npos) << rest;
  EXPECT_EQ(rest.substr(end + 2), "data: [DONE]\n\n");
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_failures_total{reason=\"stream_broken\"}"), 1) << m;
  EXPECT_EQ(metric(m, "kimi_proxy_retries_total{role=\"decode\"}"), 0) << m;
}

// ------------------------------------------------------------------------------------------------
// A raw client that sends a request and hangs up when it wants.
int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}
void send_post(int fd, const std::string& path, const std::string& body) {
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
}

TEST(ProxyCancel, ClientHangUpEndsTheUpstreamStream) {
  std::atomic<double> cut_after{-1};
  std::atomic<bool> sent_first{false};
  FakeUpstream p(prefill_ok());
  FakeUpstream d([&](http::Exchange& ex) {
    ex.start_stream(200, {{"Content-Type", "text/event-stream"}});
    ex.write("data: {\"n\":0}\n\n");
    sent_first = true;
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 10) {  // a long generation, one event per 20 ms
      std::this_thread::sleep_for(20ms);
      if (!ex.write("data: {\"n\":1}\n\n")) {
        cut_after = seconds_since(t0);
        return;
      }
    }
  });
  RunningProxy proxy({p.port()}, {d.port()});
  const int fd = connect_raw(proxy.port());
  send_post(fd, "/v1/completions", R"({"prompt":"x","stream":true})");
  ASSERT_TRUE(eventually([&] { return sent_first.load(); }));
  char buf[256];
  pollfd q{fd, POLLIN, 0};
  ASSERT_GT(::poll(&q, 1, 5000), 0);
  EXPECT_GT(::recv(fd, buf, sizeof buf, 0), 0);
  ::close(fd);
  ASSERT_TRUE(eventually([&] { return cut_after.load() >= 0; }, 5000ms)) << "the upstream stream went on";
  EXPECT_LT(cut_after.load(), 3.0);
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_client_disconnects_total"), 1) << m;
  EXPECT_TRUE(eventually([&] {
    return metric(call(proxy.port(), "GET", "/metrics").body,
                  "kimi_proxy_instance_in_flight{role=\"decode\",instance=\"127.0.0.1:" + std::to_string(d.port()) +
                      "\"}") == 0;
  }));
}

TEST(ProxyCancel, ClientHangUpDuringAQuietPrefillClosesItsConnection) {
  // The prefill sends nothing for a long time; only closing its connection tells it the client left.
  std::atomic<bool> noticed{false};
  FakeUpstream p([&](http::Exchange& ex) {
    noticed = eventually([&] { return ex.client_gone(); }, 8000ms);
    ex.respond(json_reply(200, R"({"id":"late"})"));
  });
  FakeUpstream d(decode_ok());
  RunningProxy proxy({p.port()}, {d.port()});
  const int fd = connect_raw(proxy.port());
  send_post(fd, "/v1/completions", kRequest);
  ASSERT_TRUE(eventually([&] { return p.count() == 1; }));
  const auto t0 = Clock::now();
  ::close(fd);
  ASSERT_TRUE(eventually([&] { return noticed.load(); }, 5000ms)) << "the prefill never saw the hang-up";
  EXPECT_LT(seconds_since(t0), 3.0);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(d.count(), 0u);  // nothing is decoded for a client that left
}

// ------------------------------------------------------------------------------------------------
TEST(ProxyEndpoints, HealthcheckModelsAndMetrics) {
  ClosedPort dead;
  FakeUpstream p1(prefill_ok()), p2(prefill_ok());
  FakeUpstream d([](http::Exchange& ex) {
    if (ex.request().path == "/v1/models")
      ex.respond(json_reply(200, R"({"object":"list","data":[{"id":"kimi","object":"model"}]})"));
    else
      decode_ok()(ex);
  });
  RunningProxy proxy({p1.port(), p2.port()}, {dead.port(), d.port()});
  const Reply h = call(proxy.port(), "GET", "/healthcheck");
  EXPECT_EQ(h.head.status, 200);
  EXPECT_EQ(ojson::parse(h.body), ojson::parse(R"({"status":"ok","prefill_instances":2,"decode_instances":2})"));

  // From a decode instance (the dead one skipped), passed through.
  const Reply models = call(proxy.port(), "GET", "/v1/models");
  EXPECT_EQ(models.head.status, 200);
  EXPECT_EQ(models.body, R"({"object":"list","data":[{"id":"kimi","object":"model"}]})");
  EXPECT_EQ(d.requests().at(0).target, "/v1/models");

  for (int i = 0; i < 3; ++i) EXPECT_EQ(post(proxy.port(), "/v1/completions", kRequest).head.status, 200);
  const Reply m = call(proxy.port(), "GET", "/metrics");
  EXPECT_EQ(m.head.status, 200);
  EXPECT_EQ(m.header("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  const std::string& t = m.body;
  EXPECT_NE(t.find("# TYPE kimi_proxy_instance_requests_total counter"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE kimi_proxy_instance_in_flight gauge"), std::string::npos) << t;
  const std::string p1l = "role=\"prefill\",instance=\"127.0.0.1:" + std::to_string(p1.port()) + "\"";
  const std::string p2l = "role=\"prefill\",instance=\"127.0.0.1:" + std::to_string(p2.port()) + "\"";
  const std::string dl = "role=\"decode\",instance=\"127.0.0.1:" + std::to_string(d.port()) + "\"";
  EXPECT_EQ(metric(t, "kimi_proxy_instance_requests_total{" + p1l + "}") +
                metric(t, "kimi_proxy_instance_requests_total{" + p2l + "}"),
            3)
      << t;
  EXPECT_EQ(metric(t, "kimi_proxy_instance_requests_total{" + dl + "}"), 4) << t;  // 3 completions and /v1/models
  EXPECT_EQ(metric(t, "kimi_proxy_instance_in_flight{" + dl + "}"), 0) << t;
  EXPECT_EQ(metric(t, "kimi_proxy_requests_total"), 3) << t;
  EXPECT_GE(metric(t, "kimi_proxy_retries_total{role=\"decode\"}"), 1) << t;  // the dead decode instance
  EXPECT_EQ(metric(t, "kimi_proxy_failures_total{reason=\"no_decode_instance\"}"), 0) << t;
}

// Many streams at once through 2P2D: every client gets its own stream whole, the loads spread,
// and every lease is returned.
TEST(ProxyLoad, ConcurrentStreamsAllComplete) {
  FakeUpstream p1(prefill_ok("P1")), p2(prefill_ok("P2"));
  auto streamer = [](const std::string& name) {
    return [name](http::Exchange& ex) {
      const ojson req = ojson::parse(ex.request().body);
      ex.start_stream(200, {{"Content-Type", "text/event-stream"}});
      for (int i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(2ms);
        ex.write("data: {\"n\":" + std::to_string(i) + ",\"prompt\":" + req["prompt"].dump() + "}\n\n");
      }
      ex.write("data: [DONE]\n\n");
    };
  };
  FakeUpstream d1(streamer("d1")), d2(streamer("d2"));
  RunningProxy proxy({p1.port(), p2.port()}, {d1.port(), d2.port()});
  constexpr int kClients = 24;
  std::vector<std::future<std::pair<std::string, std::string>>> results;
  for (int c = 0; c < kClients; ++c)
    results.push_back(std::async(std::launch::async, [&, c] {
      const std::string prompt = "client " + std::to_string(c);
      std::string expected;
      for (int i = 0; i < 5; ++i) expected += "data: {\"n\":" + std::to_string(i) + ",\"prompt\":\"" + prompt + "\"}\n\n";
      expected += "data: [DONE]\n\n";
      const Reply r = post(proxy.port(), "/v1/completions", R"({"prompt":")" + prompt + R"(","stream":true})");
      return std::make_pair(expected, r.body);
    }));
  for (auto& f : results) {
    const auto [expected, got] = f.get();
    EXPECT_EQ(got, expected);
  }
  EXPECT_EQ(p1.count() + p2.count(), size_t(kClients));
  EXPECT_EQ(d1.count() + d2.count(), size_t(kClients));
  EXPECT_GT(d1.count(), 0u);
  EXPECT_GT(d2.count(), 0u);
  EXPECT_GT(p1.count(), 0u);
  EXPECT_GT(p2.count(), 0u);
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  for (const FakeUpstream* u : {&p1, &p2, &d1, &d2}) {
    const std::string role = u == &p1 || u == &p2 ? "prefill" : "decode";
    const std::string l = "role=\"" + role + "\",instance=\"127.0.0.1:" + std::to_string(u->port()) + "\"";
    EXPECT_EQ(metric(m, "kimi_proxy_instance_in_flight{" + l + "}"), 0) << m;
    EXPECT_EQ(metric(m, "kimi_proxy_instance_load{" + l + "}"), 0) << m;
  }
}

// `kimi proxy` as a process: it announces its port, proxies, and stops on SIGTERM.
TEST(ProxyProcess, ServesAndStopsOnSigterm) {
  FakeUpstream p(prefill_ok());
  FakeUpstream d(decode_ok());
  test::TempDir dir;
  const std::string log = (dir.path() / "proxy.log").string();
  const std::string pp = std::to_string(p.port()), dp = std::to_string(d.port());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    ::execl(KIMI_BINARY, KIMI_BINARY, "proxy", "--host", "127.0.0.1", "--port", "0", "--prefiller-hosts", "127.0.0.1",
            "--prefiller-ports", pp.c_str(), "--decoder-hosts", "127.0.0.1", "--decoder-ports", dp.c_str(),
            (char*)nullptr);
    std::_Exit(127);
  }
  int port = 0;
  eventually(
      [&] {
        std::ifstream in(log);
        const std::string text((std::istreambuf_iterator<char>(in)), {});
        const size_t at = text.find("http://127.0.0.1:");
        if (at != std::string::npos) port = std::atoi(text.c_str() + at + 17);
        return port > 0;
      },
      10000ms);
  if (port > 0) {
    const Reply r = post(port, "/v1/completions", kRequest);
    EXPECT_EQ(r.head.status, 200);
    EXPECT_EQ(r.body, kDecodeBody);
    EXPECT_EQ(d.count(), 1u);
  } else {
    ADD_FAILURE() << "kimi proxy did not announce its port";
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  pid_t w = 0;
  const auto t0 = Clock::now();
  while ((w = ::waitpid(pid, &status, WNOHANG)) == 0 && seconds_since(t0) < 5) std::this_thread::sleep_for(20ms);
  if (w == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "kimi proxy ignored SIGTERM";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// ------------------------------------------------------------------------------------------------
// A `kimi serve` process on 127.0.0.1 (any free port), stopped with the object.
class ServeProcess {
 public:
  ServeProcess(const std::filesystem::path& model, const std::filesystem::path& log,
               const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {KIMI_BINARY, "serve", model.string(), "--host", "127.0.0.1", "--port", "0",
                                     "--threads", "1", "--max-model-len", "1024", "--kv-cache-memory", "16777216",
                                     "--api-threads", "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(log.c_str(), "w", stderr);
      ::execv(KIMI_BINARY, argv.data());
      std::_Exit(127);
    }
    eventually(
        [&] {
          std::ifstream in(log);
          const std::string text((std::istreambuf_iterator<char>(in)), {});
          const size_t at = text.find("http://127.0.0.1:");
          if (at != std::string::npos) port_ = std::atoi(text.c_str() + at + 17);
          return port_ > 0;
        },
        30000ms);
  }
  ~ServeProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// The text of a completion answer, whole or streamed (the SSE events' choices[0] text or delta
// content, in order).
std::string completion_text(const std::string& body) {
  std::string out;
  auto take = [&](const ojson& j) {
    if (!j.contains("choices") || j["choices"].empty()) return;
    const ojson& c = j["choices"][0];
    if (c.contains("text") && c["text"].is_string()) out += c["text"].get<std::string>();
    for (const char* k : {"message", "delta"})
      if (c.contains(k) && c[k].contains("content") && c[k]["content"].is_string())
        out += c[k]["content"].get<std::string>();
  };
  if (body.rfind("data: ", 0) != 0) {
    take(ojson::parse(body, nullptr, false));
    return out;
  }
  for (size_t p = 0; (p = body.find("data: ", p)) != std::string::npos;) {
    const size_t e = body.find("\n\n", p);
    const std::string data = body.substr(p + 6, e - p - 6);
    if (data != "[DONE]") take(ojson::parse(data, nullptr, false));
    p = e;
  }
  return out;
}

// Real instances: a producer and a consumer `kimi serve` (KV moved over UCX) on the tiny model behind
// the proxy give the greedy outputs of a single instance, whole and streamed, on both endpoints.
// All three run float32 activations: the consumer computes the prompt's tokens after the pulled
// blocks itself, in the absorbed form, where the single instance ran them in the naive prefill;
// in f32 the two forms agree to rounding, while with bf16 activations over a bf16 cache the
// absorbed form rounds queries and probabilities to bf16 (as vLLM's does), which may swap this
// random model's near-tied greedy tokens.
TEST(ProxyServeE2e, OnePrefillOneDecodeMatchesOneInstance) {
  test::TempDir dir;
  const auto model = test::make_tiny_model(dir);
  auto args = [](const char* r) {
    std::vector<std::string> a = {"--dtype", "float32"};
    if (r)
      a.insert(a.end(), {"--kv-transfer-config", std::string(R"({"kv_connector":"NixlConnector","kv_role":")") + r +
                                                     R"(","kv_ip":"127.0.0.1","kv_port":0})"});
    return a;
  };
  ServeProcess prefill(model, dir.path() / "prefill.log", args("kv_producer"));
  ServeProcess decode(model, dir.path() / "decode.log", args("kv_consumer"));
  ServeProcess single(model, dir.path() / "single.log", args(nullptr));
  ASSERT_GT(prefill.port(), 0) << "kimi serve (prefill) did not start";
  ASSERT_GT(decode.port(), 0) << "kimi serve (decode) did not start";
  ASSERT_GT(single.port(), 0) << "kimi serve (single) did not start";
  RunningProxy proxy({prefill.port()}, {decode.port()});
  // The first prompt spans several KV blocks, so the consumer pulls whole blocks from the producer.
  const std::string long_prompt =
      "The quick brown fox jumps over the lazy dog while the cat sleeps by the fire and the rain falls on the "
      "roof of the old house at the end of the long and winding road";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/completions", R"({"model":")" + model.string() + R"(","prompt":")" + long_prompt + R"(","max_tokens":12,"temperature":0})"},
      {"/v1/completions", R"({"model":")" + model.string() +
                              R"(","prompt":"Once upon a time","max_tokens":12,"temperature":0,"stream":true,"stream_options":{"include_usage":true}})"},
      {"/v1/chat/completions", R"({"model":")" + model.string() +
                                   R"(","messages":[{"role":"user","content":"Hello"}],"max_tokens":12,"temperature":0,"stream":true})"}};
  for (const auto& [path, body] : cases) {
    const Reply direct = post(single.port(), path, body);
    const Reply via = post(proxy.port(), path, body);
    ASSERT_EQ(direct.head.status, 200) << direct.body;
    ASSERT_EQ(via.head.status, 200) << via.body;
    EXPECT_EQ(via.header("Content-Type"), direct.header("Content-Type"));
    const std::string text = completion_text(direct.body);
    EXPECT_FALSE(text.empty()) << direct.body;
    EXPECT_EQ(completion_text(via.body), text) << path << " " << body;
  }
  const std::string m = call(proxy.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "kimi_proxy_requests_total"), 3) << m;
  EXPECT_EQ(metric(m, "kimi_proxy_failures_total{reason=\"no_decode_instance\"}"), 0) << m;
  // Every prefill ran (on the instance that was asked), none failed.
  const std::string pl = "role=\"prefill\",instance=\"127.0.0.1:" + std::to_string(prefill.port()) + "\"";
  EXPECT_EQ(metric(m, "kimi_proxy_instance_requests_total{" + pl + "}"), 3) << m;
  EXPECT_EQ(metric(m, "kimi_proxy_instance_failures_total{" + pl + "}"), 0) << m;
  EXPECT_EQ(metric(m, "kimi_proxy_decode_without_kv_total{reason=\"prefill_failed\"}"), 0) << m;
  EXPECT_EQ(metric(m, "kimi_proxy_decode_without_kv_total{reason=\"no_kv_transfer_params\"}"), 0) << m;
  // The consumer pulled the producer's blocks (the long prompt's at least) and none failed.
  const std::string dm = call(decode.port(), "GET", "/metrics").body;
  EXPECT_GE(prom_value(dm, "kimi:kv_transfer_loads_total"), 1) << dm;
  EXPECT_EQ(prom_value(dm, "kimi:kv_transfer_failures_total"), 0) << dm;
  // The models list comes from the decode instance.
  const Reply models = call(proxy.port(), "GET", "/v1/models");
  EXPECT_EQ(ojson::parse(models.body)["data"][0]["id"], model.string()) << models.body;
}

}  // namespace
}  // namespace kimi
