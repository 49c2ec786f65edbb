#include "keel/serve/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "keel/serve/openai_response.h"

namespace keel::cli {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms <= 0 ? 0 : int(std::min<int64_t>(ms, 1 << 30));
}

// The bytes a connection has received and not yet used; kept for the connection's life, so the
// next pipelined request is whatever follows the current one.
class Reader {
 public:
  explicit Reader(int fd) : fd_(fd) {}
  std::string_view pending() const { return std::string_view(buf_).substr(pos_); }
  void consume(size_t n) {
    pos_ += n;
    if (pos_ == buf_.size()) buf_.clear(), pos_ = 0;
  }
  enum Fill { Read, Closed, TimedOut };
  // One receive of at most kChunk bytes: the buffer never holds more than the request being read
  // needs plus one receive.
  Fill fill(Clock::time_point deadline) {
    if (pos_ > 0) buf_.erase(0, pos_), pos_ = 0;
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      const int r = poll(&p, 1, remaining_ms(deadline));
      if (r == 0) return TimedOut;
      if (r < 0) {
        if (errno == EINTR) continue;
        return Closed;
      }
      char chunk[kChunk];
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        buf_.append(chunk, size_t(n));
        return Read;
      }
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return Closed;
    }
  }

 private:
  static constexpr size_t kChunk = 16384;
  int fd_;
  std::string buf_;
  size_t pos_ = 0;
};

bool write_all(int fd, const char* p, size_t n, int timeout_ms) {
  while (n > 0) {
    pollfd pf{fd, POLLOUT, 0};
    const int r = poll(&pf, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

// What httplib reads a request from: the request re-framed in memory. Its answer goes to the
// socket.
class FramedStream : public httplib::Stream {
 public:
  FramedStream(int fd, std::string request, int write_timeout_ms)
      : fd_(fd), request_(std::move(request)), write_timeout_ms_(write_timeout_ms) {}

  bool is_readable() const override { return true; }
  // httplib asks before each piece of a streamed answer: a client that closed its end is gone.
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    if (poll(&p, 1, write_timeout_ms_) <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
    char b;
    const ssize_t n = recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - off_);
    std::copy_n(request_.data() + off_, n, ptr);
    off_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    return write_all(fd_, ptr, size, write_timeout_ms_) ? ssize_t(size) : -1;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  // httplib looks at the descriptor only to refuse those select() cannot watch (it was built
  // without poll); this stream polls, so it shows no descriptor beyond that range.
  socket_t socket() const override { return fd_ < FD_SETSIZE ? fd_ : INVALID_SOCKET; }

 private:
  void address(bool remote, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    port = 0;
    ip.clear();
    if ((remote ? getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len)
                : getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
      return;
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  int fd_;
  std::string request_;
  size_t off_ = 0;
  int write_timeout_ms_;
};

struct Refusal {
  int status = 0;
  std::string message, code;
};

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    default: return "Error";
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// A decimal Content-Length, saturated at UINT64_MAX (past any body limit); false for anything
// else (signs, spaces inside, lists).
bool parse_length(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = uint64_t(c - '0');
    out = out > (UINT64_MAX - d) / 10 ? UINT64_MAX : out * 10 + d;
  }
  return true;
}

enum class Outcome { Request, Closed, Refused };

struct Head {
  std::string request_line;        // with its line end
  std::vector<std::string> lines;  // header lines kept for httplib, with their line ends
  std::string method;
  bool has_length = false, chunked = false, expect_continue = false;
  uint64_t length = 0;
};

class Connection {
 public:
  Connection(int fd, const HttpLimits& limits, int read_timeout_ms, int write_timeout_ms)
      : fd_(fd), reader_(fd), limits_(limits), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  Reader& reader() { return reader_; }

  // Reads the next request (its first byte is buffered) into `framed`: head and body within the
  // limits, before one deadline.
  Outcome next(std::string& framed, Refusal& refusal) {
    deadline_ = Clock::now() + std::chrono::milliseconds(read_timeout_ms_);
    Head head;
    Outcome o = read_head(head, refusal);
    if (o != Outcome::Request) return o;
    // The body is read straight after the head it is framed with (one copy of it, not two); its
    // Content-Length goes in once its size is known.
    framed = head.request_line;
    for (const std::string& l : head.lines) framed += l;
    const size_t head_end = framed.size();
    framed += "\r\n";
    const size_t body_start = framed.size();
    if (head.has_length && head.length <= limits_.max_body_bytes) framed.reserve(body_start + size_t(head.length) + 40);
    o = read_body(head, framed, body_start, refusal);
    if (o != Outcome::Request) return o;
    if (head.has_length || head.chunked)
      framed.insert(head_end, "Content-Length: " + std::to_string(framed.size() - body_start) + "\r\n");
    return Outcome::Request;
  }

  void write_refusal(const Refusal& r) {
    const std::string body =
        error_body(r.status, r.message, r.status >= 500 ? "server_error" : "invalid_request_error", r.code);
    const std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) +
                             "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                             "\r\nConnection: close\r\n\r\n";
    write_all(fd_, (head + body).data(), head.size() + body.size(), write_timeout_ms_);
  }

 private:
  static Outcome refuse(Refusal& r, int status, std::string message, std::string code) {
    r.status = status;
    r.message = std::move(message);
    r.code = std::move(code);
    return Outcome::Refused;
  }

  // More bytes before the deadline; Closed when the client went away or stalled (408 then).
  Outcome more(Refusal& refusal) {
    switch (reader_.fill(deadline_)) {
      case Reader::Read: return Outcome::Request;
      case Reader::TimedOut:
        return refuse(refusal, 408,
                      "the request did not arrive whole within " + std::to_string(read_timeout_ms_ / 1000) +
                          " s (--idle-timeout)",
                      "request_timeout");
      case Reader::Closed: break;
    }
    return Outcome::Closed;
  }

  Outcome read_head(Head& head, Refusal& refusal) {
    // Empty lines before a request line are ignored (RFC 9112 2.2).
    for (;;) {
      std::string_view p = reader_.pending();
      size_t skip = 0;
      while (skip < p.size() && (p[skip] == '\r' || p[skip] == '\n')) ++skip;
      reader_.consume(skip);
      if (!reader_.pending().empty()) break;
      if (Outcome o = more(refusal); o != Outcome::Request) return o;
    }
    size_t line_start = 0;  // offset in pending() of the line being read
    bool first = true;
    size_t header_bytes = 0;
    for (;;) {
      std::string_view p = reader_.pending();
      const size_t nl = p.find('\n', line_start);
      if (nl == std::string_view::npos) {
        const size_t partial = p.size() - line_start;
        if (first && partial > limits_.max_request_line)
          return refuse(refusal, 414, "the request line exceeds " + std::to_string(limits_.max_request_line) + " bytes",
                        "uri_too_long");
        if (!first && header_bytes + partial > limits_.max_header_bytes)
          return refuse(refusal, 431,
                        "the request headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes",
                        "headers_too_large");
        if (Outcome o = more(refusal); o != Outcome::Request) return o;
        continue;
      }
      const std::string_view line = p.substr(line_start, nl + 1 - line_start);
      line_start = nl + 1;
      if (first) {
        if (line.size() > limits_.max_request_line + 2)
          return refuse(refusal, 414, "the request line exceeds " + std::to_string(limits_.max_request_line) + " bytes",
                        "uri_too_long");
        head.request_line = std::string(line);
        head.method = std::string(line.substr(0, line.find(' ')));
        first = false;
        continue;
      }
      header_bytes += line.size();
      if (header_bytes > limits_.max_header_bytes)
        return refuse(refusal, 431, "the request headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes",
                      "headers_too_large");
      if (trim(line).empty()) break;  // the blank line ending the head
      if (head.lines.size() == limits_.max_headers)
        return refuse(refusal, 431, "the request has more than " + std::to_string(limits_.max_headers) + " headers",
                      "too_many_headers");
      if (line[0] == ' ' || line[0] == '\t')
        return refuse(refusal, 400, "a header line is folded (obsolete line folding)", "bad_request");
      const size_t colon = line.find(':');
      const std::string_view name = colon == std::string_view::npos ? line : line.substr(0, colon);
      const std::string_view value =
          colon == std::string_view::npos ? std::string_view() : trim(line.substr(colon + 1));
      if (iequals(name, "Content-Length")) {
        uint64_t n = 0;
        if (!parse_length(value, n) || (head.has_length && n != head.length))
          return refuse(refusal, 400, "the Content-Length header is not one decimal length", "bad_request");
        head.has_length = true;
        head.length = n;
        continue;
      }
      if (iequals(name, "Transfer-Encoding")) {
        if (!iequals(value, "chunked"))
          return refuse(refusal, 501, "Transfer-Encoding '" + std::string(value) + "' is not supported; only chunked",
                        "unsupported_transfer_encoding");
        head.chunked = true;
        continue;
      }
      if (iequals(name, "Expect")) {
        head.expect_continue = iequals(value, "100-continue");
        continue;
      }
      head.lines.emplace_back(line);
    }
    reader_.consume(line_start);
    if (head.chunked && head.has_length)
      return refuse(refusal, 400, "the request has both Content-Length and Transfer-Encoding", "bad_request");
    return Outcome::Request;
  }

  Outcome too_large(Refusal& refusal) {
    return refuse(refusal, 413,
                  "the request body exceeds --max-body-bytes " + std::to_string(limits_.max_body_bytes) + " bytes",
                  "body_too_large");
  }

  // Bytes of the body: exactly `n` more into `body`.
  Outcome take(uint64_t n, std::string& body, Refusal& refusal) {
    while (reader_.pending().size() < n)
      if (Outcome o = more(refusal); o != Outcome::Request) return o;
    body.append(reader_.pending().substr(0, size_t(n)));
    reader_.consume(size_t(n));
    return Outcome::Request;
  }

  // One line of the chunked framing (a size line or a trailer), at most `limit` bytes.
  Outcome framing_line(std::string& line, size_t limit, Refusal& refusal) {
    for (;;) {
      const std::string_view p = reader_.pending();
      const size_t nl = p.find('\n');
      if (nl != std::string_view::npos && nl < limit) {
        line = std::string(p.substr(0, nl + 1));
        reader_.consume(nl + 1);
        return Outcome::Request;
      }
      if (p.size() >= limit)
        return refuse(refusal, 400, "a line of the chunked body exceeds " + std::to_string(limit) + " bytes",
                      "bad_request");
      if (Outcome o = more(refusal); o != Outcome::Request) return o;
    }
  }

  // Appends the body to `out`, where it starts at `body_start`.
  Outcome read_body(const Head& head, std::string& out, size_t body_start, Refusal& refusal) {
    const bool may_have_body = head.method == "POST" || head.method == "PUT" || head.method == "PATCH";
    if (!head.has_length && !head.chunked) {
      // A request without either has no body (RFC 9112 6.3); a POST here always needs one, and
      // bytes the client sends after the head cannot be framed: refused, connection closed.
      if (may_have_body)
        return refuse(refusal, 411, "a request body needs a Content-Length header (or Transfer-Encoding: chunked)",
                      "length_required");
      return Outcome::Request;
    }
    if (head.has_length && head.length > limits_.max_body_bytes) return too_large(refusal);
    if (head.expect_continue) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      write_all(fd_, kContinue, sizeof kContinue - 1, write_timeout_ms_);
    }
    if (head.has_length) return take(head.length, out, refusal);
    std::string line;
    for (;;) {
      if (Outcome o = framing_line(line, 1024, refusal); o != Outcome::Request) return o;
      size_t digits = 0;
      uint64_t size = 0;
      while (digits < line.size() && isxdigit(static_cast<unsigned char>(line[digits]))) {
        const char c = line[digits];
        size = size * 16 + uint64_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        if (++digits > 15) return too_large(refusal);
      }
      if (digits == 0) return refuse(refusal, 400, "a chunk size is not hexadecimal", "bad_request");
      if (size == 0) break;
      if (out.size() - body_start + size > limits_.max_body_bytes) return too_large(refusal);
      if (Outcome o = take(size, out, refusal); o != Outcome::Request) return o;
      std::string crlf;
      if (Outcome o = framing_line(crlf, 3, refusal); o != Outcome::Request) return o;
      if (!trim(crlf).empty()) return refuse(refusal, 400, "a chunk is longer than its size", "bad_request");
    }
    // Trailers, bounded as headers are, then the blank line.
    size_t trailer_bytes = 0;
    for (;;) {
      if (Outcome o = framing_line(line, limits_.max_header_bytes + 2, refusal); o != Outcome::Request) return o;
      if (trim(line).empty()) return Outcome::Request;
      trailer_bytes += line.size();
      if (trailer_bytes > limits_.max_header_bytes)
        return refuse(refusal, 431, "the trailers exceed " + std::to_string(limits_.max_header_bytes) + " bytes",
                      "headers_too_large");
    }
  }

  int fd_;
  Reader reader_;
  const HttpLimits& limits_;
  int read_timeout_ms_, write_timeout_ms_;
  Clock::time_point deadline_;
};

thread_local int current_socket = -1;

// Sets current_socket for the request being answered, whatever way process_request leaves.
struct CurrentSocket {
  explicit CurrentSocket(int fd) { current_socket = fd; }
  ~CurrentSocket() { current_socket = -1; }
};

}  // namespace

int current_client_socket() { return current_socket; }

void BoundedHttpServer::serve_connection(socket_t sock, bool& ok, bool& refused) {
  const int read_ms = int(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
  const int write_ms = int(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000);
  Connection c(sock, limits_, std::max(read_ms, 1), std::max(write_ms, 1));
  for (size_t served = 0; ok && served < keep_alive_max_count_; ++served) {
    // Wait for the next request's first byte, watching for the server stopping.
    const auto idle_deadline = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    bool ready = !c.reader().pending().empty();
    while (!ready && svr_sock_ != INVALID_SOCKET && Clock::now() < idle_deadline) {
      const Reader::Fill f = c.reader().fill(std::min(idle_deadline, Clock::now() + std::chrono::milliseconds(100)));
      if (f == Reader::Closed) break;
      ready = f == Reader::Read;
    }
    if (!ready || svr_sock_ == INVALID_SOCKET) break;
    std::string framed;
    Refusal refusal;
    const Outcome o = c.next(framed, refusal);
    if (o == Outcome::Closed) break;
    if (o == Outcome::Refused) {
      c.write_refusal(refusal);
      if (on_refusal) on_refusal(refusal.status);
      refused = true;
      break;
    }
    FramedStream stream(sock, std::move(framed), std::max(write_ms, 1));
    bool closed = false;
    const CurrentSocket current(sock);
    ok = process_request(stream, served + 1 == keep_alive_max_count_, closed, nullptr);
    if (closed) break;
  }
}

bool BoundedHttpServer::process_and_close_socket(socket_t sock) {
  bool ok = true, refused = false;
  // An exception here would end the process from a pool thread: it ends the connection instead.
  try {
    serve_connection(sock, ok, refused);
  } catch (const std::exception& e) {
    fprintf(stderr, "keel serve: a connection ended on an internal error: %s\n", e.what());
    ok = false;
  }
  shutdown(sock, SHUT_WR);
  if (refused) {
    // The client may still be sending what was refused; closing now would reset the connection
    // and could discard the answer before the client reads it. Its bytes are read and dropped
    // while they keep coming, for 2 s at most; a client silent for 200 ms is not waited for.
    const auto linger = Clock::now() + std::chrono::seconds(2);
    char sink[16384];
    for (;;) {
      pollfd p{sock, POLLIN, 0};
      if (poll(&p, 1, std::min(remaining_ms(linger), 200)) <= 0) break;
      if (recv(sock, sink, sizeof sink, 0) <= 0) break;
    }
  }
  close(sock);
  return ok;
}

}  // namespace keel::cli
