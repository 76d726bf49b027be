import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

sys.path.insert(0, os.path.dirname(__file__))


class FileServer:
    """A real HTTP server on 127.0.0.1 serving `files` with Range support.

    `drop_once` paths close the connection after half the body on their first full GET;
    `delay` slows each chunk (to make concurrent downloads overlap); `log` records
    (path, Range header) per request.
    """

    def __init__(self):
        self.files, self.drop_once, self.delay, self.log = {}, set(), 0.0, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{path}"

    def handle(self, request):
        import time
        path = request.path.lstrip("/")
        rng = request.headers.get("Range")
        self.log.append((path, rng))
        if path not in self.files:
            request.send_error(404)
            return
        body, start = self.files[path], 0
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            request.send_response(206)
            request.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            request.send_response(200)
        request.send_header("Content-Length", str(len(body) - start))
        request.end_headers()
        part = body[start:]
        if path in self.drop_once and not rng:
            self.drop_once.discard(path)
            request.wfile.write(part[:len(part) // 2])
            request.wfile.flush()
            request.close_connection = True
            return
        for i in range(0, len(part), 8192):
            request.wfile.write(part[i:i + 8192])
            if self.delay:
                time.sleep(self.delay)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    srv = FileServer()
    yield srv
    srv.close()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private $TIANYUAN_HOME, online."""
    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TIANYUAN_OFFLINE", raising=False)
    return tmp_path / "home"
