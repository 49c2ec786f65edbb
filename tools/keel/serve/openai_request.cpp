#include "keel/serve/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace keel::cli {

using json = nlohmann::json;

const char* endpoint_path(Endpoint e) {
  return e == Endpoint::Completions ? "/v1/completions" : "/v1/chat/completions";
}

size_t invalid_utf8_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t lo = 0x80, hi = 0xBF;  // bounds of the second byte (overlongs, surrogates, > U+10FFFF)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

namespace {

// The longest prefix of `s` of at most n bytes that does not split a UTF-8 sequence: error
// messages quote cut values, and a cut character would reach the client as U+FFFD.
std::string utf8_prefix(const std::string& s, size_t n) {
  if (n >= s.size()) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

struct Fail {
  RequestError& e;
  bool operator()(const std::string& param, const std::string& message, const char* code = "invalid_value") const {
    e.http_status = 400;
    e.type = "invalid_request_error";
    e.param = param;
    e.code = code;
    e.message = message;
    return false;
  }
};

// Builds the document from the parser's events, refusing what no request needs before it is
// stored: nesting deeper than kMaxJsonDepth, numbers beyond a double, integers beyond 64 bits.
// nlohmann's parser and its destructor walk a document with explicit stacks, but dump(), copies
// and comparisons recurse once a level, so the depth limit is what keeps them on the stack.
class BoundedDocument {
 public:
  BoundedDocument(std::string_view body, json& root, const Fail& fail) : body_(body), root_(root), fail_(fail) {}
  bool failed() const { return failed_; }

  bool null() { return store(json(nullptr)); }
  bool boolean(bool v) { return store(json(v)); }
  bool number_integer(json::number_integer_t v) { return store(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return store(json(v)); }
  bool number_float(json::number_float_t v, const std::string& lexeme) {
    // The lexer reads an integer that does not fit 64 bits as a double, rounded.
    if (integer_literal(lexeme)) return too_large(lexeme);
    return store(json(v));
  }
  bool string(std::string& s) { return store(json(std::move(s))); }
  bool binary(json::binary_t&) { return store(json()); }  // JSON text has no binary values
  bool start_object(size_t) { return open(json::object()); }
  bool start_array(size_t) { return open(json::array()); }
  bool key(std::string& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(size_t position, const std::string& token, const json::exception& ex) {
    // 406: a number literal beyond the range of a double; the token is the literal.
    if (ex.id == 406) return too_large(token);
    failed_ = true;
    // `position` counts the bytes read, the offending one included.
    size_t at = position ? position - 1 : 0;
    // The body is well-formed UTF-8: the byte is quoted with the rest of its character.
    while (at > 0 && at < body_.size() && (static_cast<unsigned char>(body_[at]) & 0xC0) == 0x80) --at;
    const char c = at < body_.size() ? body_[at] : '\0';
    const bool not_a_number = c == 'N' || c == 'I' || c == 'i' || (c == 'a' && at > 0 && body_[at - 1] == 'n');
    if (not_a_number && !frames_.empty()) {
      const std::string where = path();
      return fail_(where,
                   "'" + where + "' is not a JSON value (byte " + std::to_string(at) +
                       "); NaN and Infinity are not numbers in JSON",
                   "invalid_json");
    }
    if (position > body_.size())
      return fail_("", "the request body is not valid JSON: it ends before the value is complete", "invalid_json");
    return fail_(
        "",
        "the request body is not valid JSON: unexpected byte " + std::to_string(at) + " ('" + character_at(at) + "')",
        "invalid_json");
  }

 private:
  struct Frame {
    json* value;
    std::string key;   // objects: the key of the member being read
    size_t count = 0;  // arrays: elements stored so far
  };

  static bool integer_literal(const std::string& s) {
    const size_t digits = s.size() - (s.rfind("-", 0) == 0 ? 1 : 0);
    return digits > 0 && s.find_first_of(".eE") == std::string::npos;
  }
  static std::string clip(const std::string& s, size_t n) { return s.size() > n ? utf8_prefix(s, n) + "..." : s; }
  std::string character_at(size_t at) const {
    if (at >= body_.size()) return std::string();
    size_t end = at + 1;
    while (end < body_.size() && (static_cast<unsigned char>(body_[end]) & 0xC0) == 0x80) ++end;
    return std::string(body_.substr(at, end - at));
  }

  bool too_large(const std::string& lexeme) {
    failed_ = true;
    const std::string where = path();
    const std::string name = where.empty() ? "the request body" : "'" + where + "'";
    if (integer_literal(lexeme)) {
      const size_t digits = lexeme.size() - (lexeme[0] == '-' ? 1 : 0);
      return fail_(where,
                   name + " is an integer of " + std::to_string(digits) +
                       " digits; integers must fit in 64 bits (-9223372036854775808 to 18446744073709551615)",
                   "number_out_of_range");
    }
    return fail_(where, name + " is " + clip(lexeme, 24) + ", beyond the range of a double (1.8e308)",
                 "number_out_of_range");
  }

  // The name of the value being read, as the error messages write fields: messages[0].content.
  std::string path() const {
    std::string p;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      const bool last = i + 1 == frames_.size();
      if (f.value->is_array()) {
        p += '[';
        p += std::to_string(last ? f.count : f.count - 1);
        p += ']';
      } else {
        if (!p.empty()) p += ".";
        p += f.key;
      }
    }
    return p;
  }

  json* put(json v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.value->is_array()) {
      f.value->push_back(std::move(v));
      ++f.count;
      return &f.value->back();
    }
    json& member = (*f.value)[f.key];
    member = std::move(v);
    return &member;
  }
  bool store(json v) {
    put(std::move(v));
    return true;
  }

  bool open(json container) {
    if (frames_.size() >= kMaxJsonDepth) {
      failed_ = true;
      const std::string where = path();
      const std::string top = frames_.size() > 1 ? (frames_[0].value->is_array() ? "" : frames_[0].key) : "";
      return fail_(
          top,
          "'" + clip(where, 48) + "' nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) + " levels",
          "nesting_too_deep");
    }
    frames_.push_back(Frame{put(std::move(container)), {}, 0});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }

  std::string_view body_;
  json& root_;
  const Fail& fail_;
  std::vector<Frame> frames_;
  bool failed_ = false;
};

std::string found(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = utf8_prefix(s, 37) + "...";
  return std::string(v.type_name()) + " " + s;
}

bool type_error(const Fail& fail, const std::string& param, const char* expected, const json& v) {
  return fail(param, "'" + param + "' must be " + expected + ", got " + found(v), "invalid_type");
}

bool read_number(const json& body, const char* key, double lo, double hi, float& out, const Fail& fail) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number()) return type_error(fail, key, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    char range[64];
    snprintf(range, sizeof range, "between %g and %g", lo, hi);
    return fail(key, "'" + std::string(key) + "' must be " + range + ", got " + it->dump());
  }
  out = float(v);
  return true;
}

bool read_max_tokens(const json& body, const RequestLimits& limits, uint32_t& out, bool& given, const Fail& fail) {
  given = false;
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number_integer()) return type_error(fail, key, "an integer", *it);
    if (it->is_number_unsigned() ? it->get<uint64_t>() == 0 : it->get<int64_t>() < 1)
      return fail(key, "'" + std::string(key) + "' must be at least 1, got " + it->dump());
    if (!it->is_number_unsigned() || it->get<uint64_t>() > limits.max_tokens)
      return fail(key, "'" + std::string(key) + "' is " + it->dump() + "; this server generates at most " +
                           std::to_string(limits.max_tokens) + " tokens per request");
    const uint32_t v = uint32_t(it->get<uint64_t>());
    if (given && v != out)
      return fail(key, "'max_tokens' and 'max_completion_tokens' differ (" + std::to_string(v) + " and " +
                           std::to_string(out) + "); give one");
    out = v;
    given = true;
  }
  return true;
}

bool read_stop(const json& body, std::vector<std::string>& out, const Fail& fail) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return true;
  std::vector<const json*> items;
  if (it->is_string()) {
    items.push_back(&*it);
  } else if (it->is_array()) {
    if (it->size() > kMaxStopStrings)
      return fail("stop", "'stop' holds at most " + std::to_string(kMaxStopStrings) + " strings, got " +
                              std::to_string(it->size()));
    for (const json& s : *it) items.push_back(&s);
  } else {
    return type_error(fail, "stop", "a string or a list of strings", *it);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string where = it->is_array() ? "stop[" + std::to_string(i) + "]" : "stop";
    if (!items[i]->is_string()) return type_error(fail, where, "a string", *items[i]);
    const std::string s = items[i]->get<std::string>();
    if (s.empty()) return fail(where, "'" + where + "' is empty; a stop string needs at least one character");
    if (s.size() > kMaxStopBytes)
      return fail(
          where, "'" + where + "' is " + std::to_string(s.size()) + " bytes; at most " + std::to_string(kMaxStopBytes));
    out.push_back(s);
  }
  return true;
}

// Fields whose only accepted value changes nothing: a request asking for more is refused rather
// than answered as if it had not asked.
bool check_inert_fields(const json& body, const Fail& fail) {
  struct Inert {
    const char* key;
    const char* allowed;  // as the message says it
    bool (*ok)(const json&);
  };
  static const Inert kInert[] = {
      {"n", "1", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }},
      {"best_of", "1", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }},
      {"echo", "false", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"logprobs", "false or null", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"top_logprobs", "0", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 0; }},
      {"presence_penalty", "0", [](const json& v) { return v.is_number() && v.get<double>() == 0; }},
      {"frequency_penalty", "0", [](const json& v) { return v.is_number() && v.get<double>() == 0; }},
      {"suffix", "null or \"\"", [](const json& v) { return v.is_string() && v.get<std::string>().empty(); }},
      {"logit_bias", "{} or null", [](const json& v) { return v.is_object() && v.empty(); }},
      {"tools", "[] or null", [](const json& v) { return v.is_array() && v.empty(); }},
      {"tool_choice", "\"none\" or null",
       [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; }},
      {"response_format", "{\"type\": \"text\"} or null",
       [](const json& v) { return v.is_object() && v.size() == 1 && v.value("type", json()) == "text"; }},
  };
  for (const Inert& f : kInert) {
    const auto it = body.find(f.key);
    if (it == body.end() || it->is_null() || f.ok(*it)) continue;
    return fail(
        f.key,
        "'" + std::string(f.key) + "' " + it->dump() + " is not supported; this server accepts only " + f.allowed,
        "unsupported_value");
  }
  return true;
}

bool read_content(const json& m, const std::string& where, const std::string& role, std::string& out,
                  const Fail& fail) {
  const auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (role == "assistant") return true;
    return fail(where + ".content", "'" + where + ".content' is missing; a " + role + " message needs text");
  }
  if (it->is_string()) {
    out = it->get<std::string>();
    return true;
  }
  if (!it->is_array()) return type_error(fail, where + ".content", "a string or a list of text parts", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    const std::string pw = where + ".content[" + std::to_string(i) + "]";
    if (!part.is_object()) return type_error(fail, pw, "an object", part);
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return fail(pw + ".type", "'" + pw + ".type' must be the string \"text\"", "invalid_type");
    if (type->get<std::string>() != "text")
      return fail(pw + ".type", "'" + pw + ".type' is " + type->dump() + "; this server reads text parts only",
                  "unsupported_value");
    const auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return type_error(fail, pw + ".text", "a string", text == part.end() ? json() : *text);
    out += text->get<std::string>();
  }
  return true;
}

bool read_messages(const json& body, std::vector<ChatMessage>& out, const Fail& fail) {
  const auto it = body.find("messages");
  if (it == body.end()) return fail("messages", "'messages' is required for /v1/chat/completions", "missing_field");
  if (!it->is_array()) return type_error(fail, "messages", "a list of messages", *it);
  if (it->empty()) return fail("messages", "'messages' is empty; give at least one message");
  if (it->size() > kMaxMessages)
    return fail("messages", "'messages' holds " + std::to_string(it->size()) + " messages; at most " +
                                std::to_string(kMaxMessages));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return type_error(fail, where, "an object", m);
    const auto role = m.find("role");
    if (role == m.end()) return fail(where + ".role", "'" + where + ".role' is required", "missing_field");
    if (!role->is_string()) return type_error(fail, where + ".role", "a string", *role);
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      return fail(where + ".role",
                  "'" + where + ".role' is " + role->dump() + "; expected system, developer, user or assistant",
                  "unsupported_value");
    if (!read_content(m, where, msg.role, msg.content, fail)) return false;
    out.push_back(std::move(msg));
  }
  return true;
}

}  // namespace

bool parse_openai_request(std::string_view body, Endpoint endpoint, const RequestLimits& limits, OpenAiRequest& out,
                          RequestError& error) {
  const Fail fail{error};
  out = OpenAiRequest{};
  out.endpoint = endpoint;
  if (body.empty()) return fail("", "the request body is empty; expected a JSON object", "invalid_json");
  const size_t bad = invalid_utf8_offset(body);
  if (bad != std::string_view::npos)
    return fail("", "the request body is not valid UTF-8 (byte " + std::to_string(bad) + ")", "invalid_utf8");
  if (limits.max_body_bytes && body.size() > limits.max_body_bytes) {
    fail("",
         "the request body is " + std::to_string(body.size()) + " bytes; at most " +
             std::to_string(limits.max_body_bytes),
         "body_too_large");
    error.http_status = 413;
    return false;
  }
  json j;
  BoundedDocument doc(body, j, fail);
  // No exception leaves the parser: every refusal comes back through the document's handlers.
  if (!json::sax_parse(body.data(), body.data() + body.size(), &doc) || doc.failed()) {
    if (!doc.failed()) fail("", "the request body is not valid JSON", "invalid_json");
    return false;
  }
  if (!j.is_object()) return fail("", "the request body must be a JSON object, got " + found(j), "invalid_type");

  if (const auto it = j.find("model"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return type_error(fail, "model", "a string", *it);
    out.model = it->get<std::string>();
  }
  if (endpoint == Endpoint::Completions) {
    const auto it = j.find("prompt");
    if (it == j.end() || it->is_null())
      return fail("prompt", "'prompt' is required for /v1/completions", "missing_field");
    if (it->is_string()) {
      out.prompt = it->get<std::string>();
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
      out.prompt = (*it)[0].get<std::string>();
    } else if (it->is_array() && it->size() != 1 &&
               std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_string(); })) {
      return fail("prompt",
                  "'prompt' holds " + std::to_string(it->size()) + " prompts; this server takes one a request",
                  "unsupported_value");
    } else {
      return type_error(fail, "prompt", "a string", *it);
    }
  } else {
    if (j.contains("prompt"))
      return fail("prompt", "'prompt' belongs to /v1/completions; /v1/chat/completions takes 'messages'",
                  "unexpected_field");
    if (!read_messages(j, out.messages, fail)) return false;
  }
  bool given = false;
  if (!read_max_tokens(j, limits, out.max_tokens, given, fail)) return false;
  if (!given) {
    const uint32_t d =
        endpoint == Endpoint::Completions ? limits.default_max_tokens_completion : limits.default_max_tokens_chat;
    out.max_tokens = d ? std::min(d, limits.max_tokens) : limits.max_tokens;
  }
  if (!read_number(j, "temperature", 0, 2, out.temperature, fail)) return false;
  if (!read_number(j, "top_p", 0, 1, out.top_p, fail)) return false;
  if (const auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return type_error(fail, "seed", "an integer", *it);
    out.seed = it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t(it->get<int64_t>());
  }
  if (!read_stop(j, out.stop, fail)) return false;
  if (const auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return type_error(fail, "stream", "a boolean", *it);
    out.stream = it->get<bool>();
  }
  if (const auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return type_error(fail, "stream_options", "an object", *it);
    if (const auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) return type_error(fail, "stream_options.include_usage", "a boolean", *u);
      out.include_usage = u->get<bool>();
    }
  }
  return check_inert_fields(j, fail);
}

}  // namespace keel::cli
