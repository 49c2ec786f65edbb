// keel serve's connections: httplib parses each request's head, routes it and writes the answer;
// the bytes it reads come from here. Debian's httplib 0.11 reads a request line or header line of
// any length into memory, any number of headers, a chunked body whole whatever its size and a
// body without Content-Length until the client closes (then answers nothing), and gives each
// request of a connection a fresh read buffer, dropping the pipelined requests it had already
// read. Here a connection keeps one buffer for its life (pipelined requests are answered in
// order), a request's head and body are read under the limits below and one deadline, a chunked
// body is decoded here, and httplib is handed the request again with a Content-Length. Whatever
// breaks a limit is answered here (OpenAI-shaped JSON error, `Connection: close`) and the
// connection is closed.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>

namespace keel::cli {

struct HttpLimits {
  size_t max_body_bytes = 1 << 20;  // 413 beyond, chunked or not
  size_t max_request_line = 8192;   // 414 beyond (method, target and version)
  size_t max_header_bytes = 16384;  // 431 beyond (all header lines together)
  size_t max_headers = 100;         // 431 beyond
};

// The socket of the connection whose request this thread is answering (a route handler runs on
// its connection's thread), -1 outside one. httplib's Request does not carry it; the engine
// polls it to notice a client that left before its answer (engine_thread.h).
int current_client_socket();

class BoundedHttpServer : public httplib::Server {
 public:
  // The read timeout (set_read_timeout) is the deadline of one request: its head and body must
  // arrive whole within it once its first byte has (408 otherwise). The keep-alive timeout is how
  // long a connection may wait for its next request; set_keep_alive_max_count how many requests
  // it serves before `Connection: close`.
  explicit BoundedHttpServer(const HttpLimits& limits) : limits_(limits) {}

  // Called with the status of every answer written here (those httplib writes go to its logger).
  std::function<void(int status)> on_refusal;

 private:
  bool process_and_close_socket(socket_t sock) override;
  void serve_connection(socket_t sock, bool& ok, bool& refused);

  HttpLimits limits_;
};

}  // namespace keel::cli
