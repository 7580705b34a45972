"""A real OpenAI-compatible HTTP server on 127.0.0.1 that fails the way a server in the field
fails, for what llm-katan cannot do: it never answers a completion (``hang``), answers one
with ``content: null`` (``null``), or answers one request at a time, each in ``delay`` seconds, going
on with a request whose client has given up (``serial``: a busy server, not a hung one). It lists its
model, and counts (and times) the completions it is sent."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "plain-model"


class PlainServer:
    def __init__(self, mode: str, delay: float = 0.0) -> None:
        assert mode in ("hang", "null", "serial", "slow")
        self.mode = mode
        self.delay = delay
        self.answered: list[float] = []  # time.monotonic() of every completion answered (serial)
        self._one_at_a_time = threading.Lock()
        self.posts: list[float] = []  # time.monotonic() of every completion request
        self.closing = threading.Event()
        self.in_flight = self.most_in_flight = 0  # completions at the server now (any mode), and the most at once
        self._counting = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _json(self, obj: dict) -> None:
                self._done()  # answered: its client may send its next request before this thread goes on
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

            def _done(self) -> None:
                with server._counting:
                    if getattr(self, "_counted", False):
                        self._counted = False
                        server.in_flight -= 1

            def do_POST(self) -> None:  # noqa: N802
                # in flight at the server: from its arrival until its answer is written (or its end); counted
                # down before the answer goes out, else a client that read it and asked again was seen twice
                with server._counting:
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                    self._counted = True
                try:
                    self._post()
                finally:
                    self._done()

            def _post(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.posts.append(time.monotonic())
                if server.mode == "hang":
                    server.closing.wait()  # never answers
                    return
                if server.mode == "slow":
                    time.sleep(server.delay)
                    self._json({"id": "x", "object": "chat.completion", "model": MODEL,
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                             "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 10, "completion_tokens": 1}})  # fmt: skip
                    return
                if server.mode == "serial":
                    with server._one_at_a_time:  # one at a time, whether or not its client still waits
                        time.sleep(server.delay)
                        server.answered.append(time.monotonic())
                    try:
                        self._json({"id": "x", "object": "chat.completion", "model": MODEL,
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                                 "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 10, "completion_tokens": 1}})  # fmt: skip
                    except OSError:  # the client gave up and closed the connection
                        pass
                    return
                self._json({"id": "x", "object": "chat.completion", "model": MODEL,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": None},
                                         "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 0}})  # fmt: skip

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> PlainServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
