#pragma once
// The settings of `kimi proxy` and their command line, with the flags of vLLM's disaggregation
// proxies (toy_proxy_server.py, vllm-ascend's load_balance_proxy_server_example.py): lists given
// as space-separated values after their flag, as argparse's nargs='+'.
#include <string>
#include <vector>

namespace kimi::proxy {

// An upstream `kimi serve` (or vLLM) instance.
struct Endpoint {
  std::string host;
  int port = 0;
  std::string name() const;  // "host:port" ("[v6]:port")
};

struct ProxyConfig {
  std::string host = "localhost";
  int port = 8000;  // 0: any free port
  std::vector<Endpoint> prefillers;
  std::vector<Endpoint> decoders;
  int max_retries = 3;       // further attempts, each on another instance where there is one
  double retry_delay_s = 0.001;  // before the first retry, doubled before each next one
  int work_threads = 256;  // --api-threads: a request holds one for its life
  // Not flags: the waits on upstreams (a decode stream may be quiet for long between tokens).
  double connect_timeout_s = 10;
  double io_timeout_s = 600;
};

// Parses the arguments after `kimi proxy`; throws kimi::Error with a sentence a user can act on.
// `help` is set (and nothing checked) when --help or -h is among them.
ProxyConfig parse_proxy_args(const std::vector<std::string>& args, bool* help = nullptr);

// The --help text.
const char* proxy_usage();

}  // namespace kimi::proxy
