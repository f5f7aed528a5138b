"""The token client gives up within seconds, in one line that says what is
wrong and what to do, against addresses that are not the token API
(PostgreSQL's port, a web page, a TLS cluster without its CA), and
acquire(timeout=...) bounds the whole call, token included, against a
token server that accepts connections and never answers."""

from __future__ import annotations

import http.server
import socket
import threading
import time
import urllib.parse

from support import StackTest, env, key_prefix, unique

import fencegate
from fencegate.tokens import TokenClient


def _serve(handler_cls) -> str:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _serve.servers.append(srv)
    return f"http://127.0.0.1:{srv.server_address[1]}"


_serve.servers = []


class _Page(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = b"<!DOCTYPE HTML>\n<html><body><h1>Error response</h1></body></html>\n"
        self.send_response(501)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Silent:
    """Accepts TCP connections and never answers on them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.conns = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


class GiveUpTest(StackTest):
    def tearDown(self):
        while _serve.servers:
            s = _serve.servers.pop()
            s.shutdown()
            s.server_close()

    def give_up(self, url: str, limit: float, *want: str, error=fencegate.TokenUnavailableError, **kw) -> str:
        tc = TokenClient([url], **kw)
        self.addCleanup(tc.close)
        start = time.monotonic()
        with self.assertRaises(error) as cm:
            tc.next_token("order:42")
        took = time.monotonic() - start
        msg = str(cm.exception)
        self.assertLess(took, limit, f"gave up after {took:.1f}s: {msg}")
        self.assertNotIn("\n", msg)
        self.assertNotIn("<", msg, "the error carries the page")
        for w in want:
            self.assertIn(w, msg)
        return msg

    def test_postgres_port(self):
        host = urllib.parse.urlsplit(env("FENCEGATE_TEST_ADMIN_DSN")).netloc.rsplit("@", 1)[-1]
        for url in (f"http://{host}", f"https://{host}"):
            with self.subTest(url=url):
                self.give_up(url, 5, "closed the connection", "check the server URLs")

    def test_web_page(self):
        self.give_up(_serve(_Page), 2, "HTTP 501 text/html, not the token API's JSON", "check the server URLs")

    def test_tls_cluster_without_its_ca(self):
        url = env("FENCEGATE_TEST_TLS_TOKEN_URL")
        self.give_up(url, 2, "not trusted", "tls_ca", error=fencegate.TokenServiceError)
        # The same port addressed as http://: the node speaks TLS.
        plain = "http://" + urllib.parse.urlsplit(url).netloc
        self.give_up(plain, 2, "plain-HTTP request to a TLS port", "write https://")

    def test_acquire_timeout_bounds_the_token(self):
        silent = _Silent()
        self.addCleanup(silent.close)
        res = unique("giveup")
        locks = self.lock_client(token_servers=[silent.url], ttl=10.0)
        start = time.monotonic()
        with self.assertRaises(fencegate.TokenUnavailableError):
            locks.acquire(res, timeout=3)
        took = time.monotonic() - start
        self.assertLess(took, 4.0, f"acquire(timeout=3) took {took:.1f}s against a token server that never answers")
        self.assertIsNone(self.redis().get(key_prefix() + res), "the failed acquire left its lock behind")
