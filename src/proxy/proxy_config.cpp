#include "proxy/proxy_config.h"

#include <cerrno>
#include <cstdlib>
#include <map>

#include "common/error.h"

namespace kimi::proxy {

std::string Endpoint::name() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

const char* proxy_usage() {
  return "usage: kimi proxy [options]\n\n"
         "A load-balancing proxy for prefill/decode disaggregation (the flags of vLLM's\n"
         "disaggregation proxies): each completion is prefilled on a prefill instance (max_tokens 1,\n"
         "kv_transfer_params asking for a remote decode), then sent with the prefill's\n"
         "kv_transfer_params to a decode instance, whose answer goes back to the client unchanged.\n\n"
         "options:\n"
         "  --host HOST                  address to listen on (default localhost)\n"
         "  --port PORT                  port to listen on (default 8000; 0: any free port)\n"
         "  --prefiller-hosts HOST...    prefill instances' hosts (default localhost)\n"
         "  --prefiller-ports PORT...    their ports, one per host (default 8100)\n"
         "  --decoder-hosts HOST...      decode instances' hosts (default localhost)\n"
         "  --decoder-ports PORT...      their ports, one per host (default 8200)\n"
         "  --max-retries N              further attempts on another instance after a connection\n"
         "                               error or a 5xx (default 3); a decode is retried only\n"
         "                               before its first byte reached the client\n"
         "  --retry-delay SECONDS        wait before the first retry, doubled before each next one\n"
         "                               (default 0.001)\n"
         "  --api-threads N              requests answered at once (default 256; a request holds\n"
         "                               a thread until its answer ends, a stream for its life)\n\n"
         "endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models (from a decode\n"
         "instance), GET /healthcheck, GET /metrics (Prometheus text)\n";
}

namespace {

int parse_port(const std::string& flag, const std::string& v, bool allow_zero) {
  char* end = nullptr;
  errno = 0;
  const long p = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || p < (allow_zero ? 0 : 1) || p > 65535)
    throw Error("--" + flag + ": '" + v + "' is not a port (" + (allow_zero ? "0" : "1") + "..65535)");
  return int(p);
}

std::vector<Endpoint> endpoints(const std::string& role, const std::vector<std::string>& hosts,
                                const std::vector<std::string>& ports) {
  if (hosts.size() != ports.size())
    throw Error("--" + role + "-hosts has " + std::to_string(hosts.size()) + " value(s) but --" + role + "-ports has " +
                std::to_string(ports.size()) + ": give one port per host");
  std::vector<Endpoint> out;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i].empty()) throw Error("--" + role + "-hosts: an empty host name");
    out.push_back({hosts[i], parse_port(role + "-ports", ports[i], false)});
  }
  return out;
}

}  // namespace

ProxyConfig parse_proxy_args(const std::vector<std::string>& args, bool* help) {
  const std::map<std::string, bool> flags = {  // name -> takes a list (nargs='+')
      {"host", false},          {"port", false},          {"prefiller-hosts", true}, {"prefiller-ports", true},
      {"decoder-hosts", true},  {"decoder-ports", true},  {"max-retries", false},    {"retry-delay", false},
      {"api-threads", false}};
  std::map<std::string, std::vector<std::string>> given;
  if (help) *help = false;
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      if (help) *help = true;
      return {};
    }
  for (size_t i = 0; i < args.size();) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) throw Error("unexpected argument '" + a + "' (kimi proxy takes no positional arguments)");
    std::string name = a.substr(2);
    std::vector<std::string> values;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      values.push_back(name.substr(eq + 1));
      name.resize(eq);
    }
    const auto f = flags.find(name);
    if (f == flags.end()) throw Error("unknown option '--" + name + "' (see kimi proxy --help)");
    if (given.count(name)) throw Error("--" + name + " is given twice");
    ++i;
    if (values.empty()) {
      // A list takes every value up to the next flag; a single value takes one.
      while (i < args.size() && args[i].rfind("--", 0) != 0 && (f->second || values.empty())) values.push_back(args[i++]);
    }
    if (values.empty()) throw Error("--" + name + " needs a value");
    given[name] = std::move(values);
  }
  auto one = [&](const std::string& name, const std::string& def) {
    auto it = given.find(name);
    return it == given.end() ? def : it->second[0];
  };
  auto list = [&](const std::string& name, const std::string& def) {
    auto it = given.find(name);
    return it == given.end() ? std::vector<std::string>{def} : it->second;
  };

  ProxyConfig c;
  c.host = one("host", c.host);
  if (c.host.empty()) throw Error("--host is empty");
  c.port = parse_port("port", one("port", "8000"), true);
  c.prefillers = endpoints("prefiller", list("prefiller-hosts", "localhost"), list("prefiller-ports", "8100"));
  c.decoders = endpoints("decoder", list("decoder-hosts", "localhost"), list("decoder-ports", "8200"));
  {
    const std::string v = one("max-retries", "3");
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || n < 0 || n > 1000)
      throw Error("--max-retries: '" + v + "' is not a count (0..1000)");
    c.max_retries = int(n);
  }
  {
    const std::string v = one("api-threads", "256");
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || n < 1 || n > 65536)
      throw Error("--api-threads: '" + v + "' is not a thread count (1..65536)");
    c.work_threads = int(n);
  }
  {
    const std::string v = one("retry-delay", "0.001");
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || errno != 0 || !(d >= 0) || d > 3600)
      throw Error("--retry-delay: '" + v + "' is not a number of seconds (0..3600)");
    c.retry_delay_s = d;
  }
  return c;
}

}  // namespace kimi::proxy
