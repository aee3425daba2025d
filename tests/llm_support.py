"""A scripted OpenAI-compatible server on 127.0.0.1 for the LLM agent's tests (litellm's real HTTP
path): `ScriptedLLM` plays a queue of answers (a step may also be an error status, a delay, or a
dropped connection) and records the requests; `llm_server` is its pytest
fixture (import it into a test module to use it there). A recorded request keeps the server's own header
message, which reads names case-insensitively as HTTP requires (clients differ in the case they send)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class ScriptedLLM:
    """An OpenAI-compatible /v1/chat/completions that plays a queue of answers and records requests."""

    def __init__(self):
        self.script: list[dict] = []
        self.default: dict | None = None
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": self.headers, "body": body})
                    step = outer.script.pop(0) if outer.script else outer.default
                if step is None:
                    step = {"status": 500, "error": "script exhausted"}
                time.sleep(step.get("delay", 0))
                try:
                    if step.get("drop"):  # the connection closes with no answer at all
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                    elif "status" in step:
                        payload = {"error": {"message": step["error"], "type": "server_error", "code": step["status"]}}
                        self._send(step["status"], payload, step.get("headers", {}))
                    else:
                        prompt, completion = step.get("prompt_tokens", 1000), step.get("completion_tokens", 200)
                        self._send(200, {
                            "id": f"chatcmpl-{len(outer.requests)}", "object": "chat.completion",
                            "created": int(time.time()), "model": body.get("model", "test-model"),
                            "choices": [{"index": 0, "finish_reason": step.get("finish", "stop"),
                                         "message": {"role": "assistant", "content": step["content"]}}],
                            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                      "total_tokens": prompt + completion},
                        })
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                    pass

            def _send(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def play(self, *steps: dict | str) -> None:
        self.script = [{"content": s} if isinstance(s, str) else s for s in steps]
        self.requests = []

    def user_messages(self, i: int) -> list[str]:
        return [m["content"] for m in self.requests[i]["body"]["messages"] if m["role"] == "user"]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def llm_server():
    server = ScriptedLLM()
    yield server
    server.close()
