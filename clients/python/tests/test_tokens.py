"""The token client: the real cluster, failover, leader redirects, fast
failure, TLS with client certificates and bearer credentials."""

import http.server
import json
import os
import ssl
import tempfile
import threading

from support import StackTest, closed_port, env, peer, token_servers, unique, wait_until

import fencegate


class FakeNode:
    """An HTTP(S) server on 127.0.0.1 answering with answer(n, request)
    -> (status, body dict or bytes, headers); it records each request."""

    def __init__(self, case, answer, tls=False):
        self.requests = []
        node = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                node.requests.append((self.path, dict(self.headers), body))
                status, out, headers = answer(len(node.requests), body)
                data = out if isinstance(out, bytes) else json.dumps(out).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(env("FENCEGATE_TEST_TLS_SERVER_CERT"), env("FENCEGATE_TEST_TLS_SERVER_KEY"))
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        t = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        t.start()
        case.addCleanup(t.join)
        case.addCleanup(self.httpd.server_close)
        case.addCleanup(self.httpd.shutdown)


SECRET = "x" * 20 + "secret-value-0123456789"


def token_answer(value):
    return 200, {"resource": "r", "token": value, "term": 2, "index": 9, "leader": "n1"}, None


class TokenClientTest(StackTest):
    def client(self, servers, **kw):
        tc = fencegate.TokenClient(servers, **kw)
        self.addCleanup(tc.close)
        return tc

    def cluster(self):
        _, nodes = peer("/cluster/state")
        return nodes

    def leader_url(self):
        box = []

        def found():
            box[:] = [n["url"] for n in self.cluster() if n["state"] == "Leader"]
            return len(box) == 1

        wait_until(found, 30, "a token leader")
        return box[0]

    def test_tokens_increase_across_nodes(self):
        clients = [self.client([u]) for u in token_servers()]
        res = unique("tok")
        seen = []
        for i in range(9):
            seen.append(clients[i % 3].next_token(res))
        self.assertEqual(seen, sorted(set(seen)), "tokens from different nodes did not increase")

    def test_next_names_the_entry_that_minted_it(self):
        tok = self.client(token_servers()).next("order:42")
        self.assertEqual(tok.resource, "order:42")
        self.assertGreater(tok.value, 0)
        self.assertGreater(tok.term, 0)
        self.assertGreater(tok.index, 0)
        self.assertTrue(tok.leader)

    def test_follows_the_leader(self):
        leader = self.leader_url()
        follower = next(u for u in token_servers() if u != leader)
        tc = self.client([follower])
        tc.next_token(unique("follow"))
        self.assertEqual(tc._pick(), leader)
        self.assertIn(leader, tc.servers)
        stay = self.client([follower], follow_leader=False)
        stay.next_token(unique("follow"))
        self.assertEqual(stay._pick(), follower)

    def test_fails_over_past_a_refused_node(self):
        dead = f"http://127.0.0.1:{closed_port()}"
        tc = self.client([dead] + token_servers())
        self.assertGreater(tc.next_token(unique("failover")), 0)
        self.assertNotEqual(tc._pick(), dead)

    def test_every_node_refused_gives_up_at_once(self):
        dead = [f"http://127.0.0.1:{closed_port()}" for _ in range(3)]
        tc = self.client(dead, max_wait=300)
        with self.assertRaises(fencegate.TokenUnavailableError) as cm:
            tc.next_token("r")
        e = cm.exception
        self.assertEqual(e.kind, "refused")
        self.assertEqual(sorted(e.node_errors), sorted(dead))
        self.assertIn("connection refused", str(e))
        self.assertNotIn("\n", str(e))

    def test_not_the_token_api_gives_up_at_once(self):
        fake = FakeNode(self, lambda n, body: (404, b"<html>not found</html>", {"Content-Type": "text/html"}))
        tc = self.client([fake.url], max_wait=300)
        with self.assertRaises(fencegate.TokenUnavailableError) as cm:
            tc.next_token("r")
        self.assertEqual(cm.exception.kind, "bad_answer")
        self.assertIn("not the token API", str(cm.exception))
        self.assertEqual(len(fake.requests), 1)

    def test_an_answer_that_is_no_token_is_refused(self):
        answers = {
            "no token": {"resource": "r"},
            "zero": {"resource": "r", "token": 0},
            "negative": {"resource": "r", "token": -5},
            "too large": {"resource": "r", "token": 2**63},
            "a string": {"resource": "r", "token": "7"},
            "a boolean": {"resource": "r", "token": True},
            "another resource": {"resource": "s", "token": 7},
            "a list": [7],
            "a malformed proof": {"resource": "r", "token": 7, "proof": "k1.XYZ"},
            "a proof that is no string": {"resource": "r", "token": 7, "proof": 5},
        }
        for name, body in answers.items():
            with self.subTest(name):
                fake = FakeNode(self, lambda n, _b, body=body: (200, body, None))
                with self.assertRaises(fencegate.TokenServiceError) as cm:
                    self.client([fake.url]).next_token("r")
                self.assertEqual(cm.exception.kind, "bad_answer")

    def test_bad_request_is_not_retried(self):
        fake = FakeNode(self, lambda n, body: (400, {"error": "tokenservice: bad request: x", "code": "bad_request"}, None))
        tc = self.client([fake.url])
        with self.assertRaises(fencegate.TokenRequestError):
            tc.next_token("r")
        self.assertEqual(len(fake.requests), 1)
        # The real service says the same about a name only it checks.
        real = self.client(token_servers())
        with self.assertRaises(fencegate.TokenRequestError):
            real._call("POST", "/v1/tokens", b'{"resource":""}', "token", None)

    def test_retryable_answers_are_retried(self):
        def answer(n, body):
            if n <= 2:
                return 503, {"error": "no quorum", "code": "no_quorum"}, None
            return token_answer(7)

        fake = FakeNode(self, answer)
        tc = self.client([fake.url], backoff=(0.001, 0.01))
        self.assertEqual(tc.next_token("r"), 7)
        self.assertEqual(len(fake.requests), 3)
        self.assertEqual(json.loads(fake.requests[0][2]), {"resource": "r"})
        self.assertEqual(fake.requests[0][0], "/v1/tokens")

    def test_retryable_until_the_time_runs_out(self):
        fake = FakeNode(self, lambda n, body: (503, {"error": "no quorum here", "code": "no_quorum"}, None))
        tc = self.client([fake.url], backoff=(0.001, 0.01))
        with self.assertRaises(fencegate.TokenUnavailableError) as cm:
            tc.next_token("r", timeout=0.3)
        self.assertEqual(cm.exception.kind, "timeout")
        self.assertIn("no quorum here", str(cm.exception))

    def test_not_leader_redirects_to_the_leader(self):
        leader = FakeNode(self, lambda n, body: token_answer(9))
        follower = FakeNode(
            self, lambda n, body: (503, {"error": "not leader", "code": "not_leader", "leader_api": leader.url}, None)
        )
        tc = self.client([follower.url])
        self.assertEqual(tc.next_token("r"), 9)
        self.assertEqual((len(follower.requests), len(leader.requests)), (1, 1))
        self.assertEqual(tc._pick(), leader.url)

    def test_two_nodes_naming_each_other_do_not_bounce_the_call(self):
        box = {}
        a = FakeNode(self, lambda n, body: (503, {"error": "not leader", "code": "not_leader", "leader_api": box["b"]}, None))
        b = FakeNode(self, lambda n, body: (503, {"error": "not leader", "code": "not_leader", "leader_api": a.url}, None))
        box["b"] = b.url
        tc = self.client([a.url, b.url], backoff=(0.05, 0.05))
        with self.assertRaises(fencegate.TokenUnavailableError):
            tc.next_token("r", timeout=0.5)
        # With a pause after every two redirects, 0.5 s holds about a hundred
        # requests; bouncing without one, thousands.
        self.assertLess(len(a.requests) + len(b.requests), 500)

    def test_a_leader_hint_never_downgrades_https_to_http(self):
        plain = FakeNode(self, lambda n, body: token_answer(5))
        tls = FakeNode(
            self,
            lambda n, body: (503, {"error": "not leader", "code": "not_leader", "leader_api": plain.url}, None),
            tls=True,
        )
        tc = self.client([tls.url], tls_ca=env("FENCEGATE_TEST_TLS_CA"), backoff=(0.001, 0.01))
        with self.assertRaises(fencegate.TokenUnavailableError):
            tc.next_token("r", timeout=0.3)
        self.assertEqual(len(plain.requests), 0, "the client followed an https node to a plain-HTTP leader")
        self.assertGreater(len(tls.requests), 0)

    def test_a_followed_https_leader_must_present_its_certificate(self):
        # The node's certificate names 127.0.0.1; a leader followed as "n9"
        # must present n9's certificate, or its answers are refused.
        for leader_id, accepted in (("n9", False), ("127.0.0.1", True), ("", False)):
            with self.subTest(leader_id=leader_id):
                leader = FakeNode(self, lambda n, body: token_answer(11), tls=True)
                follower = FakeNode(
                    self,
                    lambda n, body: (
                        503,
                        {"error": "not leader", "code": "not_leader", "leader_api": leader.url, "leader_id": leader_id},
                        None,
                    ),
                    tls=True,
                )
                tc = self.client([follower.url], tls_ca=env("FENCEGATE_TEST_TLS_CA"), backoff=(0.001, 0.01))
                if accepted:
                    self.assertEqual(tc.next_token("r", timeout=5), 11)
                    continue
                with self.assertRaises(fencegate.TokenUnavailableError) as cm:
                    tc.next_token("r", timeout=0.3)
                if leader_id:
                    self.assertIn("answered as '127.0.0.1'; refused", str(cm.exception))
                else:
                    self.assertEqual(len(leader.requests), 0, "followed an https leader named without its ID")

    def test_bearer_credentials_on_every_request(self):
        fake = FakeNode(self, lambda n, body: token_answer(n))
        cred = self.credentials_file("# comment\n\napp-1 " + SECRET + "\n")
        tc = self.client([fake.url], credentials=cred)
        tc.next_token("r")
        tc.next_token("r")
        self.assertEqual([h.get("Authorization") for _, h, _ in fake.requests], [f"Bearer app-1:{SECRET}"] * 2)
        self.assertNotIn(SECRET, repr(tc))

    def test_partitioned_leader(self):
        leader = self.leader_url()
        urls = token_servers()
        i = urls.index(leader)
        tc = self.client([leader] + [u for u in urls if u != leader])
        before = tc.next_token(unique("part"))
        peer("/cluster/cut", node=i)
        self.addCleanup(self.leader_url)
        self.addCleanup(peer, "/cluster/heal", node=i)
        after = tc.next_token(unique("part"), timeout=60)
        self.assertGreater(after, before)
        self.assertNotEqual(tc._pick(), leader)

    # --- TLS and credentials ---------------------------------------------

    def credentials_file(self, text):
        fd, path = tempfile.mkstemp(prefix="fgcred")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.remove, path)
        return path

    def tls_opts(self, **kw):
        opts = dict(
            tls_ca=env("FENCEGATE_TEST_TLS_CA"),
            tls_cert=env("FENCEGATE_TEST_TLS_CERT"),
            tls_key=env("FENCEGATE_TEST_TLS_KEY"),
            credentials=env("FENCEGATE_TEST_CREDENTIALS"),
        )
        opts.update(kw)
        return {k: v for k, v in opts.items() if v is not None}

    def test_tls_with_client_certificate_and_bearer(self):
        url = env("FENCEGATE_TEST_TLS_TOKEN_URL")
        tc = self.client([url], **self.tls_opts())
        self.assertGreater(tc.next_token(unique("tls")), 0)
        # Bare HOST:PORT means https when TLS options are given.
        bare = self.client([url.removeprefix("https://")], **self.tls_opts())
        self.assertGreater(bare.next_token(unique("tls")), 0)
        locks = self.lock_client(token_servers=[url], **self.tls_opts())
        with locks.acquire(unique("tls")) as lock:
            self.assertGreater(lock.token, 0)

    def test_tls_wrong_bearer_fails_at_once_and_shows_no_secret(self):
        with open(env("FENCEGATE_TEST_CREDENTIALS")) as f:
            right = f.read().strip()
        tc = self.client([env("FENCEGATE_TEST_TLS_TOKEN_URL")], **self.tls_opts(credentials=self.credentials_file("python-test " + SECRET + "\n")))
        with self.assertRaises(fencegate.TokenAuthError) as cm:
            tc.next_token("r", timeout=300)
        self.assertEqual(cm.exception.kind, "auth")
        for secret in (SECRET, right.split()[-1]):
            self.assertNotIn(secret, str(cm.exception))
            self.assertNotIn(secret, repr(tc))

    def test_tls_without_client_certificate(self):
        tc = self.client([env("FENCEGATE_TEST_TLS_TOKEN_URL")], **self.tls_opts(tls_cert=None, tls_key=None))
        with self.assertRaises(fencegate.TokenAuthError) as cm:
            tc.next_token("r", timeout=300)
        self.assertIn("TLS", str(cm.exception))

    def test_tls_server_not_trusted(self):
        tc = self.client([env("FENCEGATE_TEST_TLS_TOKEN_URL")], **self.tls_opts(tls_ca=None))
        with self.assertRaises(fencegate.TokenAuthError) as cm:
            tc.next_token("r", timeout=300)
        self.assertIn("not trusted", str(cm.exception))

    def test_tls_to_a_plain_http_node(self):
        node = token_servers()[0].replace("http://", "https://")
        tc = self.client([node], **self.tls_opts(credentials=None))
        with self.assertRaises(fencegate.TokenUnavailableError) as cm:
            tc.next_token("r", timeout=300)
        self.assertEqual(cm.exception.kind, "bad_answer")

    def test_bad_tls_and_credentials_options(self):
        missing = "/nonexistent/fg.pem"
        cases = [
            (dict(tls_ca=missing), "tls_ca"),
            (dict(tls_ca=env("FENCEGATE_TEST_TLS_CA"), tls_cert=missing), "tls_cert"),
            (dict(tls_key=env("FENCEGATE_TEST_TLS_KEY")), "without tls_cert"),
            (dict(credentials=missing), "cannot read"),
            (dict(credentials=self.credentials_file("")), "holds no credential"),
            (dict(credentials=self.credentials_file("# only a comment\n")), "holds no credential"),
            (dict(credentials=self.credentials_file(f"a {SECRET}\nb {SECRET}\n")), "line 2: a client's file holds one"),
            (dict(credentials=self.credentials_file(f"a client sha256:{SECRET}\n")), "a node's line"),
            (dict(credentials=self.credentials_file(SECRET + "\n")), "want NAME SECRET"),
            (dict(credentials=self.credentials_file("a short\n")), "too short"),
            (dict(credentials=self.credentials_file(f"-bad {SECRET}\n")), "name"),
            (dict(credentials=self.credentials_file(f"a {SECRET}:x\n")), "malformed"),
        ]
        for kw, words in cases:
            with self.subTest(kw=kw):
                with self.assertRaises(ValueError) as cm:
                    fencegate.TokenClient(["https://127.0.0.1:1"], **kw)
                self.assertIn(words, str(cm.exception))
                self.assertNotIn(SECRET, str(cm.exception))
        cred = self.credentials_file(f"app {SECRET}\n")
        with self.assertRaises(ValueError) as cm:
            fencegate.TokenClient(["http://10.1.2.3:7101"], credentials=cred)
        self.assertIn("clear text", str(cm.exception))
        self.assertNotIn(SECRET, str(cm.exception))
        with self.assertRaises(ValueError):
            fencegate.TokenClient(["http://127.0.0.1:1"], tls_ca=env("FENCEGATE_TEST_TLS_CA"))
        with self.assertRaises(ValueError):
            fencegate.TokenClient(["http://user:pw@127.0.0.1:1"])
