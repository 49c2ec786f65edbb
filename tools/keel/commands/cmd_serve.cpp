// keel serve: an HTTP server speaking the OpenAI API (completions, chat completions, streamed
// as server-sent events or not), one engine thread behind a bounded queue (serve/engine_thread.h).
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "keel/serve/completion_text.h"
#include "keel/serve/engine_thread.h"
#include "keel/serve/http_connection.h"
#include "keel/serve/http_pool.h"
#include "keel/serve/openai_response.h"
#include "keel/serve/prompt.h"
#include "keel/cli/session.h"
#include "ports/linux/mapped_file.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel serve -m MODEL.keel [--host 127.0.0.1] [--port 8080] [--slots N] [options]\n"
    "\n"
    "An HTTP server for the OpenAI API as its clients use it (docs/serve.md):\n"
    "POST /v1/completions, POST /v1/chat/completions (ChatML models; \"stream\": true for\n"
    "server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus text). One\n"
    "engine thread decodes up to N requests side by side; more wait in a bounded queue. On SIGINT\n"
    "or SIGTERM new requests get 503, waiting ones are cancelled, running ones finish, and the\n"
    "server exits 0.\n"
    "\n"
    "options:\n"
    "%s"
    "\n"
    "The KV policy and budget are the model's unless given; every slot has its own budget.\n"
    "Under --kv-policy full a prompt that does not fit the budget gets 400 with both numbers;\n"
    "the bounded policies take prompts of any length.\n";

// A keep-alive connection serves this many requests, the last answered with `Connection: close`.
constexpr size_t kMaxRequestsPerConnection = 100;

using httplib::Request;
using httplib::Response;

struct Options {
  std::string host = "127.0.0.1";
  uint32_t port = 8080, slots = 4, queue = 64, max_tokens = 2048, max_body = 1 << 20;
  uint32_t timeout_s = 600, idle_timeout_s = 10, http_threads = 1024;
  uint32_t max_slots_per_client = 0;  // set from --slots unless given
  std::string alias;
};

bool store_per_client(const std::string& v, Options& o) {
  char* end = nullptr;
  const unsigned long n = std::strtoul(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || v[0] == '-' || n == 0 || n > UINT32_MAX) return false;
  o.max_slots_per_client = uint32_t(n);
  return true;
}

const OptionSpec<Options> kServeOptions[] = {
    {.long_name = "--host",
     .metavar = "ADDR",
     .help = "address to listen on (default 127.0.0.1)",
     .field = &Options::host},
    {.long_name = "--port",
     .metavar = "N",
     .help = "TCP port (default 8080; 0 = any free port, printed on stderr)",
     .kind = OptionKind::U32,
     .field = &Options::port},
    {.long_name = "--slots",
     .metavar = "N",
     .help = "requests decoded side by side (default 4)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &Options::slots},
    {.long_name = "--queue",
     .metavar = "N",
     .help = "requests waiting for a slot at most; beyond: 503 (default 64)",
     .kind = OptionKind::U32,
     .field = &Options::queue},
    {.long_name = "--max-slots-per-client",
     .metavar = "N",
     .help = "slots one client (peer address) may hold at once; its further\n"
             "requests wait while other clients' pass them (default: half the\n"
             "slots, rounded up; N >= --slots: no limit)",
     .kind = OptionKind::Custom,
     .store = store_per_client,
     .expects = "a number of slots, at least 1 (--slots or more: no limit)"},
    {.long_name = "--alias",
     .metavar = "NAME",
     .help = "the model's id in requests and /v1/models (default: the file\n"
             "name without .keel); other names get 404",
     .field = &Options::alias},
    {.long_name = "--max-tokens",
     .metavar = "N",
     .help = "most tokens a request may generate (default 2048); without\n"
             "max_tokens a completion gets 16 and a chat this",
     .kind = OptionKind::U32AtLeastOne,
     .field = &Options::max_tokens},
    {.long_name = "--max-body-bytes",
     .metavar = "N",
     .help = "largest request body, chunked or not (default 1048576); beyond:\n"
             "413 as soon as it is passed, and the connection is closed",
     .kind = OptionKind::U32AtLeastOne,
     .field = &Options::max_body},
    {.long_name = "--timeout",
     .metavar = "S",
     .help = "a request running longer is cancelled: 504, or an error event in\n"
             "a stream (default 600); a prompt that the measured prefill rate\n"
             "cannot run within it is refused up front: 400",
     .kind = OptionKind::U32,
     .field = &Options::timeout_s},
    {.long_name = "--idle-timeout",
     .metavar = "S",
     .help = "a connection silent this long is closed, and a request must\n"
             "arrive whole within it once begun, else 408 (default 10)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &Options::idle_timeout_s},
    {.long_name = "--http-threads",
     .metavar = "N",
     .help = "connection threads at most, started on demand (default 1024);\n"
             "an idle connection holds one until --idle-timeout",
     .kind = OptionKind::U32,
     .field = &Options::http_threads},
};

struct Counters {
  std::atomic<uint64_t> by_status[6] = {};  // 1xx..5xx by first digit, [0] unused
  std::atomic<uint64_t> completions{0}, chat{0}, streamed{0}, disconnects{0}, deadline_refused{0};
  void count(int status) {
    if (status >= 100 && status < 600) ++by_status[status / 100];
  }
};

class Server {
 public:
  Server(Session& s, const Options& o, EngineThread& engine, HostTokenizer& tok)
      : session_(s), opts_(o), engine_(engine), tok_(tok) {
    model_id_ = o.alias.empty() ? namespace_from_path(s.options().model_path) : o.alias;
    system_ = default_system_message(s.model());
    limits_.max_tokens = o.max_tokens;
    limits_.max_body_bytes = o.max_body;
    created_ = int64_t(time(nullptr));
  }

  void routes(httplib::Server& http);
  const std::string& model_id() const { return model_id_; }
  // Streams whose last event is not yet written: httplib ends streams once it stops, so a
  // shutdown waits for them first.
  int open_streams() const { return open_streams_.load(); }

 private:
  void completion(const Request& req, Response& res, Endpoint e);
  void stream(Response& res, Endpoint e, std::shared_ptr<Ticket> t, const OpenAiRequest& r, CompletionIds ids,
              uint32_t prompt_tokens);
  void error(Response& res, int status, const std::string& message, const std::string& type, const std::string& code);
  std::string metrics_text() const;

  Session& session_;
  Options opts_;
  EngineThread& engine_;
  HostTokenizer& tok_;
  std::string model_id_, system_;
  RequestLimits limits_;
  int64_t created_ = 0;
  std::atomic<uint64_t> next_id_{1};
  std::random_device seeds_;
  std::mutex seed_m_;
  std::atomic<int> open_streams_{0};

 public:
  Counters counters;
};

void Server::error(Response& res, int status, const std::string& message, const std::string& type,
                   const std::string& code) {
  res.status = status;
  res.set_content(error_body(status, message, type, code), "application/json");
}

// One request's events turned into text: tokens through CompletionText (stop strings), and how
// the request ended (a stop string counts as an end token: finish_reason "stop").
struct Collector {
  CompletionText text;
  std::string out;
  uint32_t tokens = 0;
  FinishReason finish = FinishReason::None;
  bool stop_string = false;
  std::string error;
  bool ended = false;

  Collector(const text::Tokenizer& tok, std::vector<std::string> stops) : text(tok, std::move(stops)) {}
  void take(const LoopEvent& ev) {
    if (ended) return;
    if (ev.token >= 0) {
      ++tokens;
      if (text.push(ev.token, out)) {
        stop_string = true;
        finish = FinishReason::StopToken;
        ended = true;
        return;
      }
    }
    if (ev.finish == FinishReason::None) return;
    ended = true;
    finish = ev.finish;
    if (ev.finish == FinishReason::Error) {
      error = ev.error;
    } else if (ev.finish != FinishReason::Cancelled) {
      stop_string = text.finish(out);
    }
  }
};

void Server::completion(const Request& req, Response& res, Endpoint e) {
  (e == Endpoint::Completions ? counters.completions : counters.chat)++;
  OpenAiRequest r;
  RequestError err;
  if (!parse_openai_request(req.body, e, limits_, r, err)) {
    res.status = err.http_status;
    res.set_content(error_body(err), "application/json");
    return;
  }
  if (!r.model.empty() && r.model != model_id_)
    return error(res, 404, "The model '" + r.model + "' does not exist; this server serves '" + model_id_ + "'",
                 "invalid_request_error", "model_not_found");
  auto t = std::make_shared<Ticket>();
  std::string why;
  if (!build_prompt(r, tok_, system_, t->request.prompt, why))
    return error(res, 400, why, "invalid_request_error", "invalid_prompt");
  {
    std::lock_guard<std::mutex> lk(seed_m_);
    t->request.sampler = request_sampler(r, (uint64_t(seeds_()) << 32) | seeds_());
  }
  t->request.max_tokens = r.max_tokens;
  why = engine_.refusal(t->request);
  if (!why.empty()) return error(res, 400, why, "invalid_request_error", "context_length_exceeded");
  const uint32_t prompt_tokens = uint32_t(t->request.prompt.size());
  if (opts_.timeout_s) {
    t->deadline = now_seconds() + opts_.timeout_s;
    // A prompt that cannot be through the model by its deadline would hold a slot until then
    // for nothing: refused before it takes one. The same code as a prompt beyond the context,
    // so that a client shortens it rather than retries it as is.
    const double rate = engine_.prefill_rate();
    if (double(prompt_tokens) > rate * opts_.timeout_s) {
      ++counters.deadline_refused;
      char msg[320];
      snprintf(msg, sizeof msg,
               "the prompt is %u tokens; at the measured prefill rate of %.0f tokens/s it needs %.0f s, beyond the "
               "request deadline of %u s (--timeout); at most %.0f prompt tokens fit",
               prompt_tokens, rate, double(prompt_tokens) / rate, opts_.timeout_s, std::floor(rate * opts_.timeout_s));
      return error(res, 400, msg, "invalid_request_error", "context_length_exceeded");
    }
  }
  t->request.client = req.remote_addr;
  t->client_fd = current_client_socket();
  // From here on the engine may poll the connection: whatever way this handler leaves, the
  // request is cancelled first (harmless once it ended), so the socket outlives the polling.
  struct CancelOnExit {
    Ticket* t;
    ~CancelOnExit() {
      if (t) t->cancelled = true;
    }
  } cancel_on_exit{t.get()};
  switch (engine_.submit(t)) {
    case EngineThread::Admit::Accepted: break;
    case EngineThread::Admit::QueueFull:
      res.set_header("Retry-After", "1");
      return error(res, 503,
                   "the server is busy: " + std::to_string(engine_.capacity()) +
                       " requests running or waiting (--slots + --queue); retry later",
                   "server_error", "queue_full");
    case EngineThread::Admit::Stopping:
      return error(res, 503, "the server is shutting down", "server_error", "shutting_down");
  }
  CompletionIds ids;
  ids.id = std::string(e == Endpoint::Completions ? "cmpl-" : "chatcmpl-") + std::to_string(next_id_++);
  ids.model = model_id_;
  ids.created = int64_t(time(nullptr));
  if (r.stream) {
    // The stream's provider runs after this returns; its releaser cancels instead.
    cancel_on_exit.t = nullptr;
    return stream(res, e, t, r, ids, prompt_tokens);
  }

  Collector c(tok_.tokenizer(), r.stop);
  std::deque<LoopEvent> events;
  while (!c.ended) {
    events.clear();
    t->wait(events, 1.0);
    for (const LoopEvent& ev : events) c.take(ev);
  }
  if (c.stop_string) t->cancelled = true;
  if (c.finish == FinishReason::Error) return error(res, 500, c.error, "server_error", "engine_error");
  if (c.finish == FinishReason::Cancelled) {
    // Nobody reads this answer; it is written for the status counts and the log.
    if (t->client_gone.load())
      return error(res, 400, "the client closed the connection before the answer", "invalid_request_error",
                   "client_disconnected");
    std::lock_guard<std::mutex> lk(t->m);
    if (t->timed_out)
      return error(res, 504, "the request ran longer than --timeout " + std::to_string(opts_.timeout_s) + " s",
                   "server_error", "timeout");
    return error(res, 503, "the server is shutting down", "server_error", "shutting_down");
  }
  res.set_content(
      completion_body(e, ids, c.out, openai_finish_reason(c.finish, c.stop_string), Usage{prompt_tokens, c.tokens}),
      "application/json");
}

void Server::stream(Response& res, Endpoint e, std::shared_ptr<Ticket> t, const OpenAiRequest& r, CompletionIds ids,
                    uint32_t prompt_tokens) {
  ++counters.streamed;
  ++open_streams_;
  struct State {
    std::shared_ptr<Ticket> ticket;
    Collector collector;
    bool first = true;
    bool include_usage;
    bool done = false;
  };
  auto st = std::make_shared<State>(State{t, Collector(tok_.tokenizer(), r.stop), true, r.include_usage});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, e, ids, prompt_tokens](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          // The client is gone: the engine frees the slot before its next step.
          st->ticket->cancelled = true;
          if (!st->ticket->client_gone.exchange(true)) ++counters.disconnects;
          return false;
        };
        std::deque<LoopEvent> events;
        if (!st->ticket->wait(events, 1.0)) return write(": keep-alive\n\n");
        Collector& c = st->collector;
        for (const LoopEvent& ev : events) {
          c.take(ev);
          // The text of the event that ends the request goes out with the finish reason.
          if (c.ended) break;
          std::string piece;
          piece.swap(c.out);
          if (piece.empty()) continue;
          if (!write(sse_event(stream_chunk(e, ids, piece, nullptr, st->first)))) return false;
          st->first = false;
        }
        if (!c.ended) return true;
        // The engine saw the client leave: nothing to write to.
        if (c.finish == FinishReason::Cancelled && st->ticket->client_gone.load()) return false;
        if (c.stop_string) st->ticket->cancelled = true;
        std::string tail;
        if (c.finish == FinishReason::Error || c.finish == FinishReason::Cancelled) {
          bool timed_out;
          {
            std::lock_guard<std::mutex> lk(st->ticket->m);
            timed_out = st->ticket->timed_out;
          }
          const std::string msg = c.finish == FinishReason::Error ? c.error
                                  : timed_out                     ? "the request ran longer than --timeout"
                                                                  : "the server is shutting down";
          const char* code = c.finish == FinishReason::Error ? "engine_error" : timed_out ? "timeout" : "shutting_down";
          tail = sse_event(error_body(500, msg, "server_error", code));
        } else {
          tail = sse_event(stream_chunk(e, ids, c.out, openai_finish_reason(c.finish, c.stop_string), st->first));
          if (st->include_usage) tail += sse_event(stream_usage_chunk(e, ids, Usage{prompt_tokens, c.tokens}));
        }
        tail += kSseDone;
        if (!write(tail)) return false;
        st->done = true;
        sink.done();
        return true;
      },
      [this, st](bool) {
        if (!st->done) st->ticket->cancelled = true;
        --open_streams_;
      });
}

std::string Server::metrics_text() const {
  const EngineMetrics m = engine_.metrics();
  std::string s;
  auto line = [&](const char* name, const char* type, const char* help, const std::string& value) {
    s +=
        std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + value + "\n";
  };
  s += "# HELP keel_http_responses_total HTTP responses by status class.\n# TYPE keel_http_responses_total counter\n";
  for (int k = 1; k <= 5; ++k)
    s += "keel_http_responses_total{class=\"" + std::to_string(k) + "xx\"} " +
         std::to_string(counters.by_status[k].load()) + "\n";
  s += "# HELP keel_requests_total Completion requests received, by endpoint.\n# TYPE keel_requests_total counter\n";
  s += "keel_requests_total{endpoint=\"/v1/completions\"} " + std::to_string(counters.completions.load()) + "\n";
  s += "keel_requests_total{endpoint=\"/v1/chat/completions\"} " + std::to_string(counters.chat.load()) + "\n";
  line("keel_requests_streamed_total", "counter", "Requests answered as server-sent events.",
       std::to_string(counters.streamed.load()));
  line("keel_requests_finished_total", "counter", "Requests the engine ran to their end.",
       std::to_string(m.requests_finished));
  line("keel_requests_cancelled_total", "counter",
       "Requests cancelled (client gone, stop string, shutdown) before their end.",
       std::to_string(m.requests_cancelled));
  line("keel_requests_timed_out_total", "counter", "Requests cancelled at --timeout.",
       std::to_string(m.requests_timed_out));
  line("keel_requests_failed_total", "counter", "Requests the engine failed.", std::to_string(m.requests_failed));
  line("keel_client_disconnects_total", "counter",
       "Requests whose client went away before their end (streamed or not, waiting, prefilling or generating).",
       std::to_string(counters.disconnects.load() + m.client_disconnects));
  line("keel_requests_deadline_refused_total", "counter",
       "Requests refused because their prompt cannot be prefilled within --timeout at the measured rate.",
       std::to_string(counters.deadline_refused.load()));
  line("keel_prefill_tokens_per_second", "gauge",
       "Prompt tokens per second through the model over the recent prefilling steps.",
       std::to_string(int64_t(std::llround(m.prefill_tokens_per_second))));
  line("keel_max_slots_per_client", "gauge", "Slots one client may hold at once (--max-slots-per-client).",
       std::to_string(opts_.max_slots_per_client));
  line("keel_prompt_tokens_total", "counter", "Prompt tokens admitted.", std::to_string(m.prompt_tokens));
  line("keel_generated_tokens_total", "counter", "Tokens generated.", std::to_string(m.generated_tokens));
  line("keel_engine_steps_total", "counter", "Engine steps run.", std::to_string(m.steps));
  line("keel_slots", "gauge", "Slots (sequences decoded side by side).", std::to_string(engine_.slots()));
  line("keel_slots_busy", "gauge", "Slots holding a request.", std::to_string(m.slots_busy));
  line("keel_queue_length", "gauge", "Requests waiting for a slot.", std::to_string(m.queue_length));
  line("keel_queue_capacity", "gauge", "Requests that may wait for a slot (--queue).", std::to_string(opts_.queue));
  s += "# HELP keel_kv_used_tokens KV cache entries in use, per slot.\n# TYPE keel_kv_used_tokens gauge\n";
  for (size_t i = 0; i < m.slots.size(); ++i)
    s += "keel_kv_used_tokens{slot=\"" + std::to_string(i) + "\"} " + std::to_string(m.slots[i].kv_tokens) + "\n";
  s += "# HELP keel_kv_budget_tokens KV cache budget, per slot.\n# TYPE keel_kv_budget_tokens gauge\n";
  for (size_t i = 0; i < m.slots.size(); ++i)
    s += "keel_kv_budget_tokens{slot=\"" + std::to_string(i) + "\"} " + std::to_string(m.slots[i].kv_budget) + "\n";
  line("keel_resident_memory_bytes", "gauge", "Resident set size of the process.",
       std::to_string(port::current_rss_bytes()));
  line("keel_peak_resident_memory_bytes", "gauge", "Peak resident set size of the process.",
       std::to_string(port::peak_rss_bytes()));
  return s;
}

void Server::routes(httplib::Server& http) {
  http.Post("/v1/completions", [this](const Request& q, Response& r) { completion(q, r, Endpoint::Completions); });
  http.Post("/v1/chat/completions",
            [this](const Request& q, Response& r) { completion(q, r, Endpoint::ChatCompletions); });
  http.Get("/v1/models", [this](const Request&, Response& r) {
    r.set_content(models_body(model_id_, created_), "application/json");
  });
  http.Get("/health", [](const Request&, Response& r) { r.set_content("{\"status\":\"ok\"}", "application/json"); });
  http.Get("/metrics", [this](const Request&, Response& r) {
    r.set_content(metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // Statuses httplib sets itself (unknown path or method, 413, a malformed request line)
  // get an OpenAI-shaped body too.
  http.set_error_handler([this](const Request& q, Response& r) {
    if (!r.body.empty()) return;
    std::string message = "HTTP " + std::to_string(r.status);
    std::string code = "http_error";
    if (r.status == 404) message = "no route " + q.method + " " + q.path, code = "not_found";
    if (r.status == 413)
      message = "the request body exceeds --max-body-bytes " + std::to_string(opts_.max_body), code = "body_too_large";
    if (r.status == 400) message = "malformed HTTP request", code = "bad_request";
    r.set_content(error_body(r.status, message, r.status >= 500 ? "server_error" : "invalid_request_error", code),
                  "application/json");
  });
  // An exception is a defect of the server, not of the request: its text goes to the log, the
  // client gets a fixed message.
  http.set_exception_handler([](const Request& q, Response& r, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    fprintf(stderr, "keel serve: %s %s: internal error: %s\n", q.method.c_str(), q.path.c_str(), what.c_str());
    r.status = 500;
    r.set_content(error_body(500, "internal error; the server log has the details", "server_error", "internal_error"),
                  "application/json");
  });
  http.set_logger([this](const Request&, const Response& r) { counters.count(r.status); });
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  SessionOptions so;
  // The command's options, then the session's, fill the help's one %s: the tables' text is
  // never a printf format.
  const std::string options_help = render_help(kServeOptions) + session_help();
  CommandLine cl("serve", argc, argv, kHelp, &so, options_help.c_str());
  if (cl.help_shown()) return 0;
  Options o;
  std::string check_error;
  parse_options(cl.args, kServeOptions, o, check_error);
  if (!cl.finish()) return 2;
  if (!check_error.empty()) return usage_error("serve", check_error);
  if (o.port > 65535) return usage_error("serve", "--port " + std::to_string(o.port) + " is not a TCP port");
  if (o.http_threads < 2) return usage_error("serve", "--http-threads must be at least 2");
  const bool per_client_given = o.max_slots_per_client > 0;
  if (!per_client_given) o.max_slots_per_client = (o.slots + 1) / 2;
  o.max_slots_per_client = std::min(o.max_slots_per_client, o.slots);

  // Signals go to the thread that waits for them; a client that vanishes is a failed write.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Session session;
  std::string error;
  so.slots = o.slots;
  so.queue_capacity = EngineLoop::plan_queue_capacity(o.slots, o.queue);
  if (!session.load(so, error)) return fail("serve", error);
  if (!session.resolve_policy(nullptr, error)) return usage_error("serve", error);
  const uint32_t budget = uint32_t(session.kv_budget(Session::kNeedUnknown));
  if (!session.start(budget, error)) return fail("serve", error);
  HostTokenizer tok;
  if (!tok.init(session.model(), error)) return fail("serve", error);

  EngineThread engine(session.runtime(), o.queue, o.max_slots_per_client < o.slots ? o.max_slots_per_client : 0);
  Server server(session, o, engine, tok);
  HttpLimits limits;
  limits.max_body_bytes = o.max_body;
  BoundedHttpServer http(limits);
  http.on_refusal = [&server](int status) { server.counters.count(status); };
  const size_t max_threads = o.http_threads;
  http.new_task_queue = [max_threads] { return new HttpPool(max_threads); };
  http.set_payload_max_length(o.max_body);
  http.set_read_timeout(o.idle_timeout_s, 0);
  http.set_write_timeout(o.idle_timeout_s, 0);
  http.set_keep_alive_timeout(o.idle_timeout_s);
  http.set_keep_alive_max_count(kMaxRequestsPerConnection);
  server.routes(http);
  // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of connections
  // on a busy host overflows it and the kernel drops SYNs, which clients retry only after a
  // second. The listening socket is the first one httplib configures; once bound it listens
  // again with a backlog of kListenBacklog (Linux updates the backlog of a listening socket).
  constexpr int kListenBacklog = 1024;
  int listen_fd = -1;
  http.set_socket_options([&listen_fd](socket_t sock) {
    const int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (listen_fd < 0) listen_fd = sock;
  });
  int port = int(o.port);
  if (port == 0) {
    port = http.bind_to_any_port(o.host);
    if (port <= 0) return fail("serve", "cannot listen on " + o.host);
  } else if (!http.bind_to_port(o.host, port)) {
    return fail("serve", "cannot listen on " + o.host + ":" + std::to_string(port));
  }
  if (listen_fd >= 0) ::listen(listen_fd, kListenBacklog);
  engine.start();
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    fprintf(stderr, "keel serve: %s: finishing running requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    engine.stop_accepting();
    engine.join();
    for (int i = 0; i < 100 && server.open_streams() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    http.stop();
  });
  fprintf(stderr, "keel serve: %s on http://%s:%d (%u slots, KV %s %u tokens each, queue %u, %u slots per client)\n",
          server.model_id().c_str(), o.host.c_str(), port, o.slots, kv_policy_name(session.policy()), budget, o.queue,
          o.max_slots_per_client);
  const bool ok = http.listen_after_bind();
  // Only the signal thread stops the listener; if the listener failed on its own, wake that
  // thread (the signal stays pending until it takes it) so that it drains the engine.
  if (!ok) kill(getpid(), SIGTERM);
  signal_thread.join();
  engine.join();
  if (!ok) return fail("serve", "the listening socket failed");
  fprintf(stderr, "keel serve: stopped\n");
  return 0;
}

}  // namespace keel::cli
