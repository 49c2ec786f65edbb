#!/usr/bin/env python3
"""keel serve against real clients: the official `openai` Python client (streaming and not),
curl, and hostile input over raw sockets. Every request is greedy, so the answer to the baseline
request must come back byte for byte after each hostile case.

usage: serve_test.py KEEL STORIES260K.keel SMOLLM2.keel

Run by the venv python that scripts/setup.sh fills ($KEEL_CACHE_DIR/venv); the system python
re-executes itself there. Each server is started on a free port (--port 0), awaited on /health,
and always killed at the end.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

try:
    import openai
except ImportError:
    venv = os.path.join(os.environ.get("KEEL_CACHE_DIR", os.path.expanduser("~/.cache/keel")), "venv")
    venv_python = os.path.join(venv, "bin", "python")
    if os.path.exists(venv_python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(venv_python, [venv_python] + sys.argv)
    sys.exit("serve_test: the openai package is missing (scripts/setup.sh installs it into " + venv_python + ")")

from serve_support import ServerProcess, check, report

KEEL, STORIES, SMOLLM2 = sys.argv[1:4]
BASELINE = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}


class Server(ServerProcess):
    def __init__(self, model, *extra):
        self.log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"keel_serve_{os.getpid()}.log"), "w+")
        super().__init__(KEEL, model, *extra, stdout=self.log)

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path):
        c = self.conn(10)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()

    def post(self, path, body, headers=None):
        c = self.conn()
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        c.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw), r
        except ValueError:
            return r.status, raw, r

    def client(self):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none", max_retries=0)


def error_of(status, body, want_status, want_code=None, want_param=None):
    ok = status == want_status and isinstance(body, dict) and "error" in body
    if ok:
        e = body["error"]
        ok = bool(e.get("message")) and "type" in e and "code" in e
        ok = ok and (want_code is None or e["code"] == want_code)
        ok = ok and (want_param is None or (e.get("param") or "").startswith(want_param))
    return ok


def stories_cases(srv):
    status, body, _ = srv.post("/v1/completions", BASELINE)
    check(status == 200 and body["choices"][0]["finish_reason"] == "length", "baseline completion: 200, length")
    answer = body["choices"][0]["text"]
    check(len(answer) > 20 and body["usage"] == {"prompt_tokens": 5, "completion_tokens": 24, "total_tokens": 29},
          f"baseline has text and usage ({answer!r}, {body['usage']})")

    def same_answer(after):
        s, b, _ = srv.post("/v1/completions", BASELINE)
        check(s == 200 and b["choices"][0]["text"] == answer, f"same answer after {after}")

    client = srv.client()
    r = client.completions.create(model="stories260K", **BASELINE)
    check(r.choices[0].text == answer and r.usage.completion_tokens == 24, "openai client: completion")
    stream = client.completions.create(model="stories260K", stream=True, stream_options={"include_usage": True},
                                       **BASELINE)
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    check("".join(pieces) == answer and finish == "length" and usage and usage.completion_tokens == 24,
          "openai client: streamed completion equals the whole one, with usage")
    models = client.models.list()
    check([m.id for m in models.data] == ["stories260K"], "openai client: models.list")
    try:
        client.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "hi"}])
        check(False, "chat on a model without a chat template is refused")
    except openai.BadRequestError as e:
        check("chat template" in str(e), "chat on a model without a chat template: 400 naming it")

    out = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", f"http://127.0.0.1:{srv.port}/v1/completions",
                          "-H", "Content-Type: application/json", "-d", json.dumps(BASELINE)],
                         capture_output=True, text=True, timeout=60)
    body, code = out.stdout.rsplit("\n", 1)
    check(code == "200" and json.loads(body)["choices"][0]["text"] == answer, "curl: completion")
    out = subprocess.run(["curl", "-sSN", f"http://127.0.0.1:{srv.port}/v1/completions", "-d",
                          json.dumps({**BASELINE, "stream": True})], capture_output=True, text=True, timeout=60)
    events = [line[6:] for line in out.stdout.splitlines() if line.startswith("data: ")]
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    check(events[-1] == "[DONE]" and text == answer, "curl: server-sent events end with [DONE], same text")

    # Hostile and malformed requests.
    s, b, _ = srv.post("/v1/completions", b'{"prompt": "x", ')
    check(error_of(s, b, 400, "invalid_json"), "malformed JSON: 400 invalid_json")
    s, b, _ = srv.post("/v1/completions", b"[1, 2]")
    check(error_of(s, b, 400, "invalid_type"), "a body that is not an object: 400")
    for field, value in [("max_tokens", "5"), ("max_tokens", 2.5), ("temperature", "hot"), ("top_p", [1]),
                         ("stop", 5), ("stream", "yes"), ("seed", 1.5), ("prompt", {"a": 1})]:
        s, b, _ = srv.post("/v1/completions", {**BASELINE, field: value})
        check(error_of(s, b, 400, "invalid_type", field) and field in b["error"]["message"],
              f"wrong type {field}={value!r}: 400 naming it ({b['error']['message'] if isinstance(b, dict) else b})")
    for field, value in [("max_tokens", 0), ("max_tokens", 10**9), ("temperature", 7), ("top_p", -1),
                         ("stop", ["a", "b", "c", "d", "e"]), ("stop", [""]), ("n", 3), ("logprobs", 5)]:
        s, b, _ = srv.post("/v1/completions", {**BASELINE, field: value})
        check(error_of(s, b, 400, None, field), f"absurd {field}={value!r}: 400 ({b['error']['message']})")
    s, b, _ = srv.post("/v1/completions", {**BASELINE, "user": "u1", "metadata": {"a": 1}, "frobnicate": [1, 2]})
    check(s == 200 and b["choices"][0]["text"] == answer, "unknown fields are ignored: same answer")
    s, b, _ = srv.post("/v1/completions", b'{"prompt": "Once \xff\xfe upon", "max_tokens": 4}')
    check(error_of(s, b, 400, "invalid_utf8"), "invalid UTF-8: 400 invalid_utf8")
    s, b, _ = srv.post("/v1/completions", b'{"prompt": "\\udc00", "max_tokens": 4}')
    check(error_of(s, b, 400, "invalid_json"), "a lone surrogate escape: 400")
    same_answer("malformed requests")

    for path, body in [("/v1/completions", {**BASELINE, "model": "gpt-4o"}),
                       ("/v1/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})]:
        s, b, _ = srv.post(path, body)
        check(error_of(s, b, 404, "model_not_found") and "gpt-4o" in b["error"]["message"],
              f"another model on {path}: 404 model_not_found")
    s, b = srv.get("/v1/nothing")
    check(s == 404 and "error" in json.loads(b), "unknown path: 404 with a JSON error")

    # A 100 MB body: refused by its Content-Length, answered 413.
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    size = 100 << 20
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(size).encode() + b"\r\n\r\n")
    chunk = b"a" * (1 << 20)
    try:
        for _ in range(100):
            sock.sendall(chunk)
    except OSError:
        pass  # the server may stop reading once it has refused the body
    reply = b""
    try:
        while b"\r\n\r\n" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    except OSError:
        pass
    sock.close()
    check(reply.startswith(b"HTTP/1.1 413"), f"100 MB body: 413 ({reply[:40]!r})")
    same_answer("a 100 MB body")

    # 500 idle connections hold threads until --idle-timeout; the next request is still served.
    idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(500)]
    t0 = time.time()
    same_answer("500 idle connections")
    check(time.time() - t0 < 20, f"served beside 500 idle connections in {time.time() - t0:.1f} s")
    for sk in idle:
        sk.close()

    # Clients that drop mid-stream free their slots.
    drops_before = srv.metric("keel_client_disconnects_total")
    for _ in range(4):
        c = srv.conn()
        c.request("POST", "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 2000, "stream": True,
                                                         "temperature": 0}), {"Content-Type": "application/json"})
        r = c.getresponse()
        r.fp.readline()  # the first event arrives, then the client vanishes
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
    deadline = time.time() + 20
    while time.time() < deadline and (srv.metric("keel_slots_busy") or 0) > 0:
        time.sleep(0.1)
    check(srv.metric("keel_slots_busy") == 0, "dropped streams free their slots")
    check(srv.metric("keel_client_disconnects_total") >= drops_before + 4, "the drops are counted")
    same_answer("clients dropping mid-stream")

    # Stop strings: cut from the text, with everything after them, streamed or not.
    word = answer.split()[3]
    s, b, _ = srv.post("/v1/completions", {**BASELINE, "stop": [word, "zzzz"]})
    want = answer[:answer.index(word)]
    check(s == 200 and b["choices"][0]["text"] == want and b["choices"][0]["finish_reason"] == "stop",
          f"stop string {word!r}: text cut before it, finish_reason stop")
    pieces = [c.choices[0].text for c in client.completions.create(model="stories260K", stream=True, stop=word,
                                                                    **BASELINE)]
    check("".join(pieces) == want, "stop string in a stream: the same text")

    # A long prompt under the model's bounded policy is accepted whatever its length.
    long_prompt = "Once upon a time there was a girl. " * 400
    s, b, _ = srv.post("/v1/completions", {"prompt": long_prompt, "max_tokens": 4, "temperature": 0})
    check(s == 200 and b["usage"]["prompt_tokens"] > 2000, f"a prompt of {b['usage']['prompt_tokens']} tokens under"
          " a bounded policy: 200")

    # More requests than slots + queue: some get 503 queue_full, the rest finish.
    results = []

    def one():
        try:
            results.append(srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 1500, "temperature": 0}))
        except OSError as e:
            results.append((0, str(e), None))
    threads = [threading.Thread(target=one) for _ in range(14)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy = [r for r in results if r[0] == 503]
    check(len(busy) >= 1 and all(error_of(s, b, 503, "queue_full") for s, b, _ in busy)
          and busy[0][2].getheader("Retry-After") == "1", f"beyond slots + queue: {len(busy)} of 14 got 503 queue_full")
    check(all(r[0] in (200, 503) for r in results), "the others: 200")
    same_answer("a full queue")
    metrics = srv.get("/metrics")[1].decode()
    for name in ("keel_requests_total", "keel_generated_tokens_total", "keel_slots_busy", "keel_queue_length",
                 'keel_kv_used_tokens{slot="1"}'):
        check(name in metrics, f"/metrics has {name}")
    return answer


def full_policy_cases():
    srv = Server(STORIES, "--kv-policy", "full", "--kv-budget", "64", "--slots", "1")
    try:
        s, b, _ = srv.post("/v1/completions", {"prompt": "Once upon a time " * 40, "max_tokens": 4})
        check(error_of(s, b, 400, "context_length_exceeded") and "64" in b["error"]["message"],
              f"full policy, prompt beyond the budget: 400 with the numbers ({b['error']['message']})")
        s, b, _ = srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0})
        # The last token is sampled from the 64th position's logits and never stored.
        check(s == 200 and b["choices"][0]["finish_reason"] == "length" and b["usage"]["total_tokens"] == 65,
              f"full policy: generation ends at the budget ({b['usage']})")
    finally:
        srv.kill()


def shutdown_case():
    srv = Server(STORIES, "--slots", "1")
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    body = json.dumps({"prompt": "Once", "max_tokens": 300, "stream": True, "temperature": 0}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    reply = b""
    while b"data: " not in reply:
        reply += sock.recv(65536)
    srv.proc.send_signal(signal.SIGTERM)
    while True:
        data = sock.recv(65536)
        if not data:
            break
        reply += data
        if b"data: [DONE]" in reply:
            break
    sock.close()
    check(b"data: [DONE]" in reply and reply.count(b"data: ") > 10, "SIGTERM: the running stream finishes")
    try:
        code = srv.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    check(code == 0, f"SIGTERM: exit status 0 (got {code})")
    srv.kill()


def chat_case():
    srv = Server(SMOLLM2, "--slots", "2")
    try:
        client = srv.client()
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        r = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=16, temperature=0)
        text = r.choices[0].message.content
        check(r.choices[0].message.role == "assistant" and len(text) > 10 and r.usage.prompt_tokens > 20,
              f"openai client: chat on SmolLM2 ({text!r}, {r.usage.prompt_tokens} prompt tokens)")
        pieces = []
        for chunk in client.chat.completions.create(model="smollm2", messages=messages, max_tokens=16,
                                                    temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        check("".join(pieces) == text, "openai client: streamed chat equals the whole one")
    finally:
        srv.kill()


def main():
    srv = Server(STORIES, "--slots", "2", "--queue", "4", "--idle-timeout", "3", "--max-body-bytes", "1048576")
    try:
        stories_cases(srv)
        check(srv.proc.poll() is None, "the server is still running")
    finally:
        srv.kill()
    full_policy_cases()
    shutdown_case()
    chat_case()
    return report()


if __name__ == "__main__":
    sys.exit(main())
