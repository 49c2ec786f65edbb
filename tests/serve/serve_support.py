"""What the keel serve tests share: the checks and their report, and a server started on a free
port (--port 0), awaited on /health and always killed."""
import http.client
import re
import subprocess
import threading
import time

START = time.time()
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + f"[{time.time() - START:5.1f} s] " + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def report():
    """Prints the failed checks; the exit status of the test."""
    if failures:
        print(f"{len(failures)} checks failed:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


class ServerProcess:
    """`keel serve -m MODEL --port 0 -t 1 EXTRA...`; its stderr lines collect in `stderr_lines`."""

    def __init__(self, keel, model, *extra, stdout=subprocess.DEVNULL):
        self.proc = subprocess.Popen([keel, "serve", "-m", model, "--port", "0", "-t", "1", *extra],
                                     stdout=stdout, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"http://[\d.]+:(\d+)", line)
        if not m:
            self.kill()
            raise RuntimeError(f"keel serve did not start: {line}{self.proc.stderr.read()}")
        self.port = int(m.group(1))
        self.stderr_lines = [line]
        threading.Thread(target=lambda: self.stderr_lines.extend(self.proc.stderr), daemon=True).start()
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.health() == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("keel serve never answered /health")

    def health(self):
        """The status of GET /health."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", "/health")
            return c.getresponse().status
        finally:
            c.close()

    def metrics_text(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", "/metrics")
            return c.getresponse().read().decode()
        finally:
            c.close()

    def metric(self, name):
        """The value of an unlabelled metric in /metrics, or None."""
        m = re.search(rf"^{re.escape(name)} (\S+)$", self.metrics_text(), re.M)
        return float(m.group(1)) if m else None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
