"""The lookup service examples/http-enrich.yaml queries: GET /region/WORD answers the word's
region (region-N, N the sum of its bytes mod 7, the rule tests/async_io.rs checks against) after
1-20 ms, as a remote service would. Usage: python3 examples/lookup-service.py [PORT]"""

import random
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class Lookup(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the job's client reuses its connections

    def do_GET(self):
        prefix = "/region/"
        if not self.path.startswith(prefix):
            self.send_error(404)
            return
        word = unquote(self.path[len(prefix):])
        time.sleep(random.uniform(0.001, 0.020))
        body = f"region-{sum(word.encode()) % 7}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    # A job opens up to `capacity` connections per subtask at once: the default backlog of 5
    # drops most of their SYNs, and their retries (1 s, 3 s, 7 s ...) outlast the job's timeout.
    request_queue_size = 1024
    daemon_threads = True


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8089
    print(f"lookup service on http://127.0.0.1:{port}/region/", flush=True)
    Server(("127.0.0.1", port), Lookup).serve_forever()
