#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "args.h"
#include "engine/tp_executor.h"
#include "parallel_launch.h"
#include "common/error.h"
#include "engine/async_engine.h"
#include "kvtransfer/kv_transfer_config.h"
#include "kvtransfer/ucx_connector.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "server/http_server.h"
#include "server/serving.h"
#include "tokenizer/tokenizer.h"

namespace kimi::cli {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// A list flag as vLLM takes it (a JSON list: '["http://a.example","http://b.example"]'), or
// comma-separated.
std::vector<std::string> list_flag(const std::string& name, const std::string& v) {
  if (!v.empty() && v.front() == '[') {
    try {
      return nlohmann::json::parse(v).get<std::vector<std::string>>();
    } catch (const std::exception& e) {
      throw Error("--" + name + ": not a JSON list of strings: " + e.what());
    }
  }
  return split_commas(v);
}

void usage() {
  std::printf(
      "usage: kimi serve MODEL_DIR [options]   (an OpenAI-compatible server, flags as in vllm serve)\n\n"
      "  --host H (0.0.0.0)  --port P (8000)  --api-key KEY  --served-model-name NAME[,NAME...]\n"
      "  --max-model-len N  --max-num-seqs N (256)  --max-num-batched-tokens N (2048)  --block-size N (16)\n"
      "  --enable-prefix-caching | --no-enable-prefix-caching  --seed N  --max-waiting N (1024)\n"
      "  --kv-cache-memory BYTES (per rank) | --gpu-memory-utilization F (fraction of RAM for the KV cache, 0.25,\n"
      "    shared by a node's ranks)\n"
      "  --kv-cache-dtype auto|bfloat16|fp8|fp8_e4m3|float32 (auto = bfloat16; fp8 = e4m3, a scale per row)\n"
      "  --chat-template FILE_OR_TEMPLATE  --tool-call-parser kimi_k2  --reasoning-parser kimi_k2\n"
      "  --enable-auto-tool-choice  --exclude-tools-when-tool-choice-none  --trust-remote-code\n"
      "  --allowed-local-media-path DIR (accepted)\n"
      "  --threads N (compute threads)  --api-threads N (256 requests answered at once)  --scheduling-policy fcfs|priority\n"
      "  --shutdown-timeout S (30: on SIGTERM/SIGINT wait at most S seconds for in-flight requests, then abort\n"
      "    them; -1 waits without limit; a second signal aborts at once)\n"
      "  --allowed-origins L ([\"*\"])  --allowed-methods L ([\"*\"])  --allowed-headers L ([\"*\"])  --allow-credentials\n"
      "    (CORS; L a JSON list or comma-separated)\n"
      "  --quantization compressed-tensors|ascend|int4|w4a16|w4a8|w8a8 (default: as the checkpoint is stored)\n"
      "  --dtype auto|float32|bfloat16 (bfloat16 rounds the inputs of the BF16 and W4A16 linears, and the\n"
      "    absorbed attention's queries over a bf16 KV cache; auto: what a bfloat16 checkpoint gains by on\n"
      "    this CPU, else float32)\n"
      "  --tensor-parallel-size|-tp N  --data-parallel-size|-dp M  --enable-expert-parallel\n"
      "    (tp x dp processes over 127.0.0.1 or several nodes: each of the M replicas has its own scheduler\n"
      "    and KV cache, requests go to the least loaded; attention and dense layers split over a replica's\n"
      "    N ranks; routed experts over all N x M ranks, whole with --enable-expert-parallel, which must\n"
      "    divide E, sliced without)\n"
      "  --data-parallel-address HOST --data-parallel-rpc-port P  (rank 0's rendezvous store, default\n"
      "    127.0.0.1:29550)  --data-parallel-size-local L (replicas on this node)  --headless\n"
      "    --data-parallel-start-rank S (a node without the API server, running replicas S..S+L-1;\n"
      "    KIMI_HOST_IP: the address its ranks are reached at)  --parallel-timeout SECONDS (120)\n"
      "  --all2all-backend allgather_reducescatter|naive|alltoallv  (how MoE blocks move tokens between data-\n"
      "    parallel replicas: gather + reduce-scatter by replica (default), gather + all-reduce, or each\n"
      "    token only to the ranks holding its experts)\n"
      "  --numa auto|none  (auto: on a machine with several NUMA nodes each local rank runs on its own\n"
      "    share of them, CPUs and memory, with one thread per CPU of its share)\n"
      "  --speculative-config JSON  (vLLM's: {\"method\":\"eagle3\"|\"ngram\",\"model\":DRAFT_DIR,\n"
      "    \"num_speculative_tokens\":K, \"prompt_lookup_max\":N, \"prompt_lookup_min\":N, \"disable_by_batch_size\":B}; B: no drafts\n"
      "    while more than B requests run, default 1 for eagle3 and mtp, 0 (never) for ngram)\n"
      "  --kv-transfer-config JSON  (vLLM's, disaggregated prefill over UCX; UCX_TLS picks the transport:\n"
      "    {\"kv_connector\":\"NixlConnector\"|\"UcxConnector\", \"kv_role\":\"kv_producer\"|\"kv_consumer\"|\"kv_both\",\n"
      "     \"kv_ip\":IP (127.0.0.1), \"kv_port\":P (0: any), \"engine_id\":ID, \"kv_load_failure_policy\":\"recompute\"|\"fail\",\n"
      "     \"kv_connector_extra_config\":{\"abort_request_timeout\":S (120), \"transfer_timeout\":S (30),\n"
      "     \"transfer_chunk_bytes\":N (16 MiB)}})\n");
}

}  // namespace

int run_serve(int argc, char** argv) {
  std::set<std::string> value_flags{"host", "port", "api-key", "served-model-name", "max-model-len", "max-num-seqs",
                "max-num-batched-tokens", "block-size", "seed", "max-waiting", "kv-cache-memory",
                "gpu-memory-utilization", "chat-template", "tool-call-parser", "reasoning-parser", "threads",
                "api-threads", "allowed-local-media-path", "scheduling-policy", "uvicorn-log-level", "quantization", "dtype",
                "shutdown-timeout", "allowed-origins", "allowed-methods", "allowed-headers", "kv-cache-dtype",
                "speculative-config", "kv-transfer-config"};
  std::set<std::string> bool_flags{"help", "allow-credentials", "enable-prefix-caching", "no-enable-prefix-caching", "enable-auto-tool-choice",
                "trust-remote-code", "disable-log-requests", "disable-log-stats", "exclude-tools-when-tool-choice-none"};
  value_flags.insert(parallel_value_flags().begin(), parallel_value_flags().end());
  bool_flags.insert(parallel_bool_flags().begin(), parallel_bool_flags().end());
  const Args a(argc, argv, 2, value_flags, bool_flags);
  if (a.has("help") || a.positionals().size() != 1) {
    usage();
    return a.has("help") ? 0 : 1;
  }
  const std::string dir = a.positionals()[0];
  for (const char* parser : {"tool-call-parser", "reasoning-parser"})
    if (a.has(parser) && a.get(parser, "") != "kimi_k2")
      throw Error(std::string("--") + parser + " '" + a.get(parser, "") + "' is not supported (only kimi_k2)");

  // Checked before the model loads, so a bad config fails at once.
  std::optional<kvtransfer::KvTransferConfig> kv_transfer;
  if (a.has("kv-transfer-config")) kv_transfer = kvtransfer::parse_kv_transfer_config(a.get("kv-transfer-config", ""));

  // Signals go to a thread of their own (blocked everywhere else, inherited by every thread
  // started below), so shutdown runs as ordinary code rather than in a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  ModelOptions mo;
  mo.quantization = QuantizationRequest::parse(a.get("quantization", ""), a.get("dtype", ""));
  const ParallelArgs pa = parse_parallel_args(a);
  if (pa.data_parallel_size > 1)
    for (const char* flag : {"kv-transfer-config", "speculative-config"})
      if (a.has(flag)) throw Error(std::string("--") + flag + " is not supported with data parallelism yet");
  ParallelLaunch launch(pa, argc, argv, parallel_identity(dir, pa, a.get("quantization", "")));
  mo.num_threads = launch.threads_per_rank(int(a.get_int("threads", 0)));
  launch.configure(mo);
  // The KV budget, on every rank: a data-parallel replica's leader reports its own node's to rank 0.
  // Every local rank keeps its own KV cache in the same RAM (a TP rank a whole copy of the latent
  // cache, a replica its own), so a fraction of RAM is the node's, shared among its ranks; an
  // explicit --kv-cache-memory is per rank, as vLLM's is per device.
  EngineConfig ec;
  if (a.has("kv-cache-memory")) ec.kv_cache_bytes = size_t(a.get_int("kv-cache-memory", 0));
  ec.kv_cache_memory_fraction = a.get_double("gpu-memory-utilization", ec.kv_cache_memory_fraction);
  if (!a.has("kv-cache-memory") && launch.local_ranks() > 1) {
    ec.kv_cache_memory_fraction /= launch.local_ranks();
    if (!launch.is_worker())
      std::fprintf(stderr, "kv cache: %.3g of RAM per rank (the fraction shared by this node's %d ranks)\n",
                   ec.kv_cache_memory_fraction, launch.local_ranks());
  }
  Model model(dir, mo);
  if (launch.is_worker()) {  // rank 0 serves; this rank runs the steps it is sent
    launch.run_worker(model, kv_cache_budget_bytes(ec));
    return 0;
  }
  // What --quantization and --dtype came to (auto is decided at load): vLLM logs its dtype too.
  std::fprintf(stderr, "weights: %s; %s (--dtype %s)\n", model.weights().storage.c_str(),
               activation_summary(model.activation_plan()).c_str(),
               std::string(activation_dtype_name(mo.quantization.activations)).c_str());
  const Tokenizer tokenizer = Tokenizer::load(dir);

  ec.scheduler.max_model_len = a.get_int("max-model-len", 0);
  ec.scheduler.max_num_seqs = a.get_int("max-num-seqs", 256);
  ec.scheduler.max_num_batched_tokens = a.get_int("max-num-batched-tokens", 2048);
  const std::string policy = a.get("scheduling-policy", "fcfs");
  if (policy != "fcfs" && policy != "priority") throw Error("--scheduling-policy must be fcfs or priority");
  ec.scheduler.priority_policy = policy == "priority";
  ec.block_size = a.get_int("block-size", 16);
  ec.enable_prefix_caching = !a.has("no-enable-prefix-caching");
  ec.seed = uint64_t(a.get_int("seed", 0));
  ec.kv_cache_dtype = parse_kv_cache_dtype(a.get("kv-cache-dtype", "auto"));
  ec.speculative = spec::parse_speculative_config(a.get("speculative-config", ""));
  // The connector's listener port (kv_port 0: chosen at start-up), for the start-up line.
  auto kv_port = std::make_shared<int>(0);
  if (kv_transfer) {
    ec.kv_connector_factory = [cfg = *kv_transfer, kv_port](const KvConnectorContext& ctx) -> std::unique_ptr<KvConnector> {
      auto c = std::make_unique<kvtransfer::UcxKvConnector>(cfg, ctx.storage, ctx.model);
      *kv_port = c->port();
      return c;
    };
  }
  AsyncEngine engine(model, &tokenizer, ec, launch.replicas());
  if (pa.data_parallel_size > 1)
    std::fprintf(stderr, "data parallel: %d replicas of tensor-parallel size %d, routed experts %s over all %d ranks, "
                         "exchanged by %s\n",
                 pa.data_parallel_size, pa.tensor_parallel_size, pa.enable_expert_parallel ? "dealt out whole" : "sliced",
                 pa.data_parallel_size * pa.tensor_parallel_size, moe_exchange_name(pa.moe_exchange));
  if (kv_transfer) {
    std::fprintf(stderr, "kv transfer: %s, %s, engine_id %s", kv_transfer->kv_connector.c_str(),
                 std::string(kvtransfer::kv_role_name(kv_transfer->kv_role)).c_str(), kv_transfer->engine_id.c_str());
    if (kv_transfer->producer()) std::fprintf(stderr, ", listening on %s:%d", kv_transfer->kv_ip.c_str(), *kv_port);
    std::fprintf(stderr, " (UCX_TLS=%s)\n", std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "default");
    if (kv_transfer->consumer())
      std::fprintf(stderr, "kv transfer: %s\n",
                   kv_transfer->trusted_producers.empty()
                       ? "pulls from any producer a request names; pulled KV stays out of the prefix cache "
                         "(list kv_connector_extra_config.trusted_producers to share it)"
                       : "pulls only from kv_connector_extra_config.trusted_producers");
  }

  ServingConfig sc;
  sc.served_model_names = split_commas(a.get("served-model-name", dir));
  if (sc.served_model_names.empty()) throw Error("--served-model-name is empty");
  sc.chat_template = tokenizer.chat_template();
  if (a.has("chat-template")) {
    const std::string t = a.get("chat-template", "");
    std::ifstream in(t);
    if (in) sc.chat_template.assign(std::istreambuf_iterator<char>(in), {});
    else if (t.find("{{") != std::string::npos || t.find("{%") != std::string::npos) sc.chat_template = t;
    else throw Error("--chat-template: cannot read '" + t + "'");
  }
  sc.reasoning_parser = a.has("reasoning-parser");
  sc.tool_parser = a.has("tool-call-parser");
  sc.exclude_tools_when_tool_choice_none = a.has("exclude-tools-when-tool-choice-none");
  sc.max_waiting = a.get_int("max-waiting", 1024);
  OpenAiServing serving(engine, tokenizer, sc);

  HttpConfig hc;
  hc.host = a.get("host", "0.0.0.0");
  hc.port = int(a.get_int("port", 8000));
  hc.api_key = a.get("api-key", "");
  hc.threads = int(a.get_int("api-threads", 256));
  if (a.has("allowed-origins")) hc.cors.allowed_origins = list_flag("allowed-origins", a.get("allowed-origins", ""));
  if (a.has("allowed-methods")) hc.cors.allowed_methods = list_flag("allowed-methods", a.get("allowed-methods", ""));
  if (a.has("allowed-headers")) hc.cors.allowed_headers = list_flag("allowed-headers", a.get("allowed-headers", ""));
  hc.cors.allow_credentials = a.has("allow-credentials");
  const double shutdown_s = a.get_double("shutdown-timeout", 30);
  hc.shutdown_timeout = std::chrono::milliseconds(shutdown_s < 0 ? -1 : int64_t(shutdown_s * 1000));
  HttpServer server(serving, engine, hc);

  // The first signal starts the graceful stop (drain, at most --shutdown-timeout); a second one
  // aborts the in-flight requests, which are then answered, and the server exits.
  std::atomic<bool> finished{false};
  std::thread shutdown_thread;
  std::thread signal_thread([&] {
    int seen = 0;
    while (!finished) {
      const timespec poll_interval{0, 100'000'000};
      const int sig = sigtimedwait(&signals, nullptr, &poll_interval);
      if (sig < 0) continue;
      if (++seen == 1) {
        std::fprintf(stderr, "kimi serve: signal %d, finishing in-flight requests (a second signal stops at once)\n", sig);
        shutdown_thread = std::thread([&] { server.stop(); });
      } else if (seen == 2) {
        std::fprintf(stderr, "kimi serve: signal %d again, aborting in-flight requests\n", sig);
        server.abort_in_flight();
      }
    }
  });
  std::thread announcer([&] {
    for (int i = 0; i < 100 && server.bound_port() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const KvCacheInfo kv = engine.kv_cache_info();
    const std::string speculative =
        ec.speculative.enabled() ? "; speculative " + std::string(spec::method_name(ec.speculative.method)) + ", " +
                                       std::to_string(ec.speculative.num_speculative_tokens) + " draft tokens"
                                 : "";
    std::fprintf(stderr,
                 "kimi serve: %s on http://%s:%d (max_model_len %lld; KV cache %s, %lld bytes per token, "
                 "%lld tokens%s)\n",
                 sc.served_model_names[0].c_str(), hc.host.c_str(), server.bound_port(),
                 (long long)engine.max_model_len(), kv.cache_dtype.c_str(), (long long)kv.bytes_per_token,
                 (long long)kv.capacity_tokens(), speculative.c_str());
  });
  const bool ok = server.listen();
  announcer.join();
  finished = true;
  signal_thread.join();
  if (shutdown_thread.joinable()) shutdown_thread.join();
  if (!ok) throw Error("cannot listen on " + hc.host + ":" + std::to_string(hc.port));
  std::fprintf(stderr, "kimi serve: stopped\n");
  return 0;
}

}  // namespace kimi::cli
