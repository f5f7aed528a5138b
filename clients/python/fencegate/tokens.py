"""TokenClient: the fencegate token service's HTTP/JSON API, over the standard
library's http.client (TLS through an ssl.SSLContext)."""

from __future__ import annotations

import errno
import http.client
import json
import math
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass

from .errors import TokenAuthError, TokenRequestError, TokenServiceError, TokenUnavailableError

#: The longest resource name the token service takes, in bytes.
MAX_RESOURCE_BYTES = 1024


#: The runes a resource name may not consist of alone: Unicode White_Space,
#: as the Go service's unicode.IsSpace (tokenapi.ResourceSpaces). Not
#: str.isspace, which also counts U+001C-U+001F.
RESOURCE_SPACES = frozenset(
    "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def validate_resource(resource: str) -> None:
    """Check a resource name by the one rule the service and every client
    share (tokenapi.ValidateResource; tokenapi/testdata/resource-names.json
    holds it case by case): not empty nor only white space, valid UTF-8
    without NUL or U+FFFD, at most MAX_RESOURCE_BYTES bytes. Raises
    ValueError before anything is sent."""
    if not isinstance(resource, str) or all(ch in RESOURCE_SPACES for ch in resource):
        raise ValueError(f"fencegate: resource {resource!r} is empty; name the resource the token fences")
    try:
        raw = resource.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"fencegate: bad resource name {resource[:64]!r}: it is not valid UTF-8") from None
    if len(raw) > MAX_RESOURCE_BYTES:
        raise ValueError(
            f"fencegate: bad resource name: it is {len(raw)} bytes; keep it to at most {MAX_RESOURCE_BYTES}"
        )
    if "\x00" in resource:
        raise ValueError(f"fencegate: bad resource name {resource[:64]!r}: it holds a NUL byte")
    if "\ufffd" in resource:
        raise ValueError(f"fencegate: bad resource name {resource[:64]!r}: it holds U+FFFD, the mark of bytes that were not UTF-8")


#: The response headers in which a node names the leader's API URL and ID.
LEADER_HEADER = "X-Fencegate-Leader-Api"
LEADER_ID_HEADER = "X-Fencegate-Leader-Id"

# Kinds of a node's answer that another try of the same node cannot turn
# into a token: when a whole round of nodes answered only these, the call
# gives up at once instead of retrying until its time runs out.
_DEAD_ENDS = {"refused", "unknown_host", "bad_answer"}

# How long every node must keep closing connections without an HTTP answer
# before the call believes that no token service listens there: PostgreSQL
# and Redis do that to an HTTP request, but so does a token node at its
# connection cap, for a moment.
_EOF_GRACE = 1.0

# What to do about a node that is not the token API.
_FIX_URL = "check the server URLs: each must be a token node's API address, e.g. http://127.0.0.1:7101"
_FIX_CA = "give the client the cluster's CA: tls_ca='ca.pem'"
_FIX_HTTPS = "that port speaks TLS: write https:// and give tls_ca"
_FIX_PLAIN = "write http://, or the port where the node serves TLS"


#: A proof's text form: KEYID.HEX (docs/protocol.md, "Proofs").
_PROOF_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\.[0-9a-f]{64}")


@dataclass(frozen=True)
class Token:
    """A fencing token and where it came from.

    ``proof`` is the token service's signature of the token, bound to its
    cluster and resource (``KEYID.HEX``), or None when the service does not
    sign. A database that requires signed tokens accepts the token only
    with it."""

    resource: str
    value: int
    term: int
    index: int
    leader: str
    proof: str | None = None


class _Attempt(Exception):
    """What one node answered to one request."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        retryable: bool,
        leader_api: str = "",
        leader_id: str = "",
        fix: str = "",
        eof: bool = False,
    ):
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.leader_api = leader_api
        self.leader_id = leader_id
        self.fix = fix  # what to do, for an answer that is not the token API
        self.eof = eof  # the connection closed without an HTTP answer


def normalize_url(s: str, default_scheme: str = "http") -> str:
    """Return scheme://host:port for a URL or HOST:PORT (as the Go client's
    NormalizeURL), or raise ValueError."""
    if not isinstance(s, str) or not s.strip():
        raise ValueError(f"fencegate: token server address {s!r} is empty; give a URL like http://127.0.0.1:7101")
    s = s.strip()
    if "://" not in s:
        s = f"{default_scheme}://{s}"
    u = urllib.parse.urlsplit(s)
    try:
        port = u.port
    except ValueError:
        port = None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"fencegate: token server {s!r} is not a URL like http://127.0.0.1:7101 or a HOST:PORT")
    if port is None:
        raise ValueError(f"fencegate: token server {s!r} has no port; write HOST:PORT")
    if u.username or u.password:
        raise ValueError("fencegate: a token server URL carries no credentials; use the credentials option (a file)")
    host = u.hostname if ":" not in u.hostname else f"[{u.hostname}]"
    return f"{u.scheme}://{host}:{port}"


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    return host == "localhost" or host.startswith("127.") or host == "::1"


class TokenClient:
    """A client of the fencegate token service. Safe to share between threads.

    It sends each call to the node that last answered (any node forwards to
    the leader), moves to the leader a node names, fails over to the other
    nodes, and retries retryable answers (no quorum, not leader,
    unavailable, no answer) with exponential backoff and full jitter until
    the call's time runs out. It gives up at once when a request is bad, when
    authentication fails, and when every node refused the connection or
    answered with something that is not the token API.

    Args:
        servers: the nodes' API URLs, ``http://host:port``,
            ``https://host:port`` or ``host:port`` (https when a TLS option is
            given, else http).
        tls_ca: PEM file of the CA that signed the nodes' certificates
            (default: the system's trusted CAs, for https URLs).
        tls_cert, tls_key: PEM files of this client's certificate and key,
            for nodes that require client certificates (tls_key may be
            omitted when the certificate file holds the key too).
        credentials: path of a file holding a bearer token; it is sent as
            ``Authorization: Bearer <token>`` on every request, only over
            https or to a loopback address, and never logged.
        attempt_timeout: bound, in seconds, on one request to one node.
            Default 3.
        max_wait: bound, in seconds, on one call (all retries included) when
            the call gives no timeout. Default 30.
        backoff: (first, largest) pause between rounds of retries; each pause
            is drawn uniformly below min(largest, first·2^round). Default
            (0.02, 1.0).
        follow_leader: send later calls straight to the leader a node names.
            Default True.
    """

    def __init__(
        self,
        servers,
        *,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        credentials: str | None = None,
        attempt_timeout: float = 3.0,
        max_wait: float = 30.0,
        backoff: tuple[float, float] = (0.02, 1.0),
        follow_leader: bool = True,
    ) -> None:
        if isinstance(servers, str):
            raise TypeError("fencegate: servers is a list of URLs, e.g. ['http://127.0.0.1:7101']")
        tls = any(x is not None for x in (tls_ca, tls_cert, tls_key))
        urls: list[str] = []
        for s in servers or []:
            u = normalize_url(s, "https" if tls else "http")
            if u not in urls:
                urls.append(u)
        if not urls:
            raise ValueError("fencegate: no token servers given; give the API URL of at least one node, e.g. http://127.0.0.1:7101")
        if tls:
            plain = [u for u in urls if u.startswith("http://")]
            if plain:
                raise ValueError(
                    f"fencegate: TLS options given but {plain[0]} is http://; write https:// (or HOST:PORT)"
                )
        for name, v in (("attempt_timeout", attempt_timeout), ("max_wait", max_wait)):
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)):
                raise ValueError(f"fencegate: {name} {v!r} must be a positive number of seconds")
        self._ssl = _ssl_context(tls_ca, tls_cert, tls_key) if (tls or any(u.startswith("https") for u in urls)) else None
        self._auth: str | None = None
        if credentials is not None:
            self._auth = _read_credentials(credentials)
            for u in urls:
                host = urllib.parse.urlsplit(u).hostname or ""
                if u.startswith("http://") and not _is_loopback(host):
                    raise ValueError(
                        f"fencegate: bearer credentials would cross the network in clear text to {u}; use https://"
                    )
        self._attempt_timeout = float(attempt_timeout)
        self._max_wait = float(max_wait)
        self._backoff = (float(backoff[0]), float(backoff[1]))
        self._follow_leader = follow_leader
        self._mu = threading.Lock()
        self._servers = urls
        self._given = list(urls)
        self._pinned: dict[str, str] = {}  # followed https URL -> the leader ID it was followed for
        self._https_only = all(u.startswith("https://") for u in urls)
        self._preferred = 0
        self._idle: dict[str, list[http.client.HTTPConnection]] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<fencegate.TokenClient servers={self.servers}>"

    @property
    def servers(self) -> list[str]:
        """The node URLs the client uses (a leader named by a node is added)."""
        with self._mu:
            return list(self._servers)

    def close(self) -> None:
        """Close the idle connections."""
        with self._mu:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for c in conns:
                c.close()

    def __enter__(self) -> "TokenClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the API -------------------------------------------------------------

    def next_token(self, resource: str, timeout: float | None = None) -> int:
        """A new fencing token for resource: greater than every token any node
        returned before this call started."""
        return self.next(resource, timeout).value

    def next(self, resource: str, timeout: float | None = None) -> Token:
        """next_token with the Raft term, index and leader that minted it."""
        validate_resource(resource)
        body = json.dumps({"resource": resource}).encode()
        out = self._call("POST", "/v1/tokens", body, f"token for {resource!r}", timeout)
        tok = out.get("token") if isinstance(out, dict) else None
        if isinstance(out, dict) and out.get("resource", resource) != resource:
            raise TokenServiceError(
                f"fencegate: token for {resource!r}: the answer is for another resource: {str(out)[:200]}",
                kind="bad_answer",
            )
        if not isinstance(tok, int) or isinstance(tok, bool) or not 0 < tok < 2**63:
            raise TokenServiceError(
                f"fencegate: token for {resource!r}: the answer holds no token > 0: {str(out)[:200]}", kind="bad_answer"
            )
        proof = out.get("proof")
        if proof is not None and not (isinstance(proof, str) and (proof == "" or _PROOF_RE.fullmatch(proof))):
            raise TokenServiceError(
                f"fencegate: token for {resource!r}: the answer's proof is not of the form KEYID.HEX: {str(proof)[:80]!r}",
                kind="bad_answer",
            )
        return Token(
            resource=str(out.get("resource", resource)),
            value=tok,
            term=int(out.get("term") or 0),
            index=int(out.get("index") or 0),
            leader=str(out.get("leader") or ""),
            proof=proof or None,
        )

    def next_signed(self, resource: str, timeout: float | None = None) -> tuple[int, str | None]:
        """next_token with the token's proof: (token, proof), the proof None
        when the token service does not sign. LockClient uses it to keep
        each lock's proof."""
        t = self.next(resource, timeout)
        return t.value, t.proof

    def status(self, timeout: float | None = None) -> dict:
        """GET /v1/status of the first node that answers."""
        return self._call("GET", "/v1/status", None, "status", timeout)

    # --- retries and failover -----------------------------------------------

    def _call(self, method: str, path: str, body: bytes | None, what: str, timeout: float | None):
        limit = self._max_wait if timeout is None else timeout
        deadline = time.monotonic() + max(limit, 0)
        last: dict[str, _Attempt] = {}
        round_kinds: dict[str, str] = {}
        rounds = 0
        dead_since: float | None = None  # when the first of the rounds of dead ends in a row ended
        n = 0
        hops = 0  # leader redirects followed in a row
        while True:
            srv = self._pick()
            try:
                out, leader = self._try(srv, method, path, body, deadline)
            except _Attempt as a:
                # An attempt cut short by the call's deadline says less than
                # the node's earlier answer ("no quorum"): keep that one.
                if srv not in last or not (a.kind == "unreachable" and time.monotonic() >= deadline):
                    last[srv] = a
                if not a.retryable:
                    raise self._error(what, a, last)
                round_kinds[srv] = a.kind
                if a.kind == "not_leader" and a.leader_api and hops < 2:
                    # At most two redirects in a row: two nodes naming each
                    # other during an election must not bounce the call
                    # between them without a pause.
                    leader_url = self._follow(a.leader_api, a.leader_id)
                    if leader_url and leader_url != srv and time.monotonic() < deadline:
                        hops += 1
                        self._prefer(leader_url)
                        continue
                hops = 0
                self._rotate(srv)
                n += 1
                k = len(self.servers)
                if n % k == 0:
                    # A whole round of nodes answered.
                    if round_kinds and set(round_kinds.values()) <= _DEAD_ENDS and len(round_kinds) >= k:
                        now = time.monotonic()
                        dead_since = now if dead_since is None else dead_since
                        eof_only = all(e.eof for e in last.values() if e.kind == "bad_answer") and any(
                            e.eof for e in last.values()
                        )
                        if not eof_only or now - dead_since >= _EOF_GRACE:
                            raise self._error(what, a, last, dead_end=True)
                    else:
                        dead_since = None
                    round_kinds = {}
                    rounds += 1
                    if not self._sleep(rounds, deadline):
                        raise self._error(what, a, last, timed_out=True)
                elif time.monotonic() >= deadline:
                    raise self._error(what, a, last, timed_out=True)
                continue
            if self._follow_leader and leader[0]:
                srv = self._follow(*leader) or srv
            self._prefer(srv)
            return out

    def _follow(self, url: str, leader_id: str) -> str | None:
        """The URL of the leader a node named, if the client may follow it.
        A URL the caller gave is followed as is. Over TLS another URL is
        followed only with the leader's ID and is pinned to it: whoever
        answers there must present a certificate for that ID, so a member
        address recorded by mistake or by an attacker cannot lead the client
        to another server. The client never follows https down to http."""
        try:
            u = normalize_url(url)
        except ValueError:
            return None
        with self._mu:
            if u in self._given:
                return u
            if u.startswith("https://"):
                if not leader_id:
                    return None
                self._pinned[u] = leader_id
                return u
            if self._https_only:
                return None
            return u

    def _error(self, what: str, a: _Attempt, last: dict[str, _Attempt], *, dead_end=False, timed_out=False):
        answers = {u: f"{e.kind}: {e}" for u, e in last.items()}
        detail = "; ".join(f"{u}: {m}" for u, m in answers.items())
        if a.kind == "bad_request":
            return TokenRequestError(f"fencegate: {what}: the token service refused the request: {a}", kind=a.kind, node_errors=answers)
        fixes: list[str] = []
        for e in last.values():
            f = e.fix or (_FIX_URL if e.kind in _DEAD_ENDS else "")
            if f and f not in fixes:
                fixes.append(f)
        todo = "; " + "; ".join(fixes) if fixes else ""
        if a.kind == "auth":
            return TokenAuthError(f"fencegate: {what}: authentication failed: {detail}{todo}", kind=a.kind, node_errors=answers)
        if dead_end:
            return TokenUnavailableError(
                f"fencegate: {what}: no node serves the token API: {detail}{todo}", kind=a.kind, node_errors=answers
            )
        if timed_out:
            return TokenUnavailableError(
                f"fencegate: {what}: no token within the call's time; the nodes answered: {detail}",
                kind="timeout",
                node_errors=answers,
            )
        return TokenServiceError(f"fencegate: {what}: {detail}", kind=a.kind, node_errors=answers)

    def _try(self, srv: str, method: str, path: str, body: bytes | None, deadline: float):
        """One request to one node; returns (decoded JSON, leader API URL)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Attempt("timeout", "the call's time ran out before this attempt", retryable=True)
        timeout = min(self._attempt_timeout, left)
        if self._auth and srv.startswith("http://") and not _is_loopback(urllib.parse.urlsplit(srv).hostname or ""):
            raise _Attempt(
                "insecure", f"refusing to send the bearer credential over plain HTTP to {srv}; use https://", retryable=False
            )
        conn, reused = self._conn(srv, timeout)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._auth:
            headers["Authorization"] = self._auth
        try:
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                if not reused:
                    raise _Attempt(
                        "bad_answer",
                        "closed the connection without an HTTP answer (PostgreSQL, Redis or another server listens "
                        "there, or a token node at its connection cap)",
                        retryable=True,
                        fix=_FIX_URL,
                        eof=True,
                    ) from e
                # A kept-alive connection the server closed meanwhile: one
                # fresh connection, as any HTTP client does.
                conn.close()
                conn, reused = self._conn(srv, timeout, fresh=True)
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
            self._check_pinned(srv, conn)
            data = resp.read(1 << 20)
            ctype = (resp.getheader("Content-Type") or "").split(";")[0].strip()
            leader = (resp.getheader(LEADER_HEADER) or "", resp.getheader(LEADER_ID_HEADER) or "")
            status = resp.status
            # Reuse the connection only when the answer was read whole.
            keep = not resp.will_close and resp.isclosed()
        except Exception as e:
            conn.close()
            raise _classify_exception(e) from None
        except BaseException:
            conn.close()
            raise
        if keep:
            self._put(srv, conn)
        else:
            conn.close()
        if status == 200:
            try:
                return json.loads(data), leader
            except ValueError:
                raise _Attempt(
                    "bad_answer", f"HTTP 200 {ctype or 'answer'} that is not the token API's JSON", retryable=True, fix=_FIX_URL
                ) from None
        raise _decode_error(status, data, ctype)

    def _check_pinned(self, srv: str, conn: http.client.HTTPConnection) -> None:
        """Refuse an answer from a followed URL that does not come from the
        node it was followed for."""
        with self._mu:
            want = self._pinned.get(srv)
        if want is None:
            return
        sock = conn.sock
        cert = sock.getpeercert() if isinstance(sock, ssl.SSLSocket) else None
        if not cert:
            raise _Attempt("unavailable", f"followed as leader {want}, it answered without TLS; refused", retryable=True)
        names = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
        if names[:1] != [want]:
            raise _Attempt(
                "unavailable", f"followed as leader {want}, it answered as {names[0] if names else '?'!r}; refused", retryable=True
            )

    def _conn(self, srv: str, timeout: float, fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        if not fresh:
            with self._mu:
                idle = self._idle.get(srv)
                conn = idle.pop() if idle else None
            if conn is not None:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                return conn, True
        u = urllib.parse.urlsplit(srv)
        if u.scheme == "https":
            return http.client.HTTPSConnection(u.hostname, u.port, timeout=timeout, context=self._ssl), False
        return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout), False

    def _put(self, srv: str, conn: http.client.HTTPConnection) -> None:
        with self._mu:
            if not self._closed:
                pool = self._idle.setdefault(srv, [])
                if len(pool) < 64:
                    pool.append(conn)
                    return
        conn.close()

    def _pick(self) -> str:
        with self._mu:
            return self._servers[self._preferred]

    def _prefer(self, srv: str) -> None:
        with self._mu:
            if srv not in self._servers:
                self._servers.append(srv)
            self._preferred = self._servers.index(srv)

    def _rotate(self, srv: str) -> None:
        with self._mu:
            if self._servers[self._preferred] == srv:
                self._preferred = (self._preferred + 1) % len(self._servers)

    def _sleep(self, rounds: int, deadline: float) -> bool:
        base, top = self._backoff
        d = min(top, base * 2 ** min(rounds, 16))
        d = random.uniform(0, d)
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(d, left))
        return time.monotonic() < deadline


def _classify_exception(e: BaseException) -> _Attempt:
    """Name what went wrong with one request, in distinct words."""
    if isinstance(e, _Attempt):
        return e
    if isinstance(e, (ssl.SSLCertVerificationError,)):
        return _Attempt(
            "auth", f"TLS: the server's certificate is not trusted ({e.verify_message})", retryable=False, fix=_FIX_CA
        )
    if isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        return _Attempt(
            "bad_answer",
            "closed the connection during the TLS handshake (PostgreSQL, Redis or another server listens there, or "
            "a token node at its connection cap)",
            retryable=True,
            fix=_FIX_URL,
            eof=True,
        )
    if isinstance(e, ssl.SSLError):
        reason = getattr(e, "reason", None) or str(e)
        if "CERTIFICATE" in str(reason).upper() or "HANDSHAKE" in str(reason).upper():
            return _Attempt("auth", f"TLS handshake failed ({reason}); check tls_cert/tls_key and tls_ca", retryable=False)
        if "WRONG_VERSION_NUMBER" in str(reason).upper() or "RECORD_LAYER" in str(reason).upper():
            return _Attempt("bad_answer", f"TLS: the node does not speak TLS ({reason})", retryable=True, fix=_FIX_PLAIN)
        return _Attempt("unreachable", f"TLS error ({reason})", retryable=True)
    if isinstance(e, ConnectionRefusedError) or (isinstance(e, OSError) and e.errno == errno.ECONNREFUSED):
        return _Attempt("refused", "connection refused (nothing listens there)", retryable=True)
    if isinstance(e, socket.gaierror):
        return _Attempt("unknown_host", f"unknown host ({e.strerror})", retryable=True)
    if isinstance(e, (socket.timeout, TimeoutError)):
        return _Attempt("unreachable", "no answer within the attempt timeout", retryable=True)
    if isinstance(e, http.client.BadStatusLine) and not isinstance(e, http.client.RemoteDisconnected):
        return _Attempt("bad_answer", f"not an HTTP answer ({e!r})", retryable=True)
    if isinstance(e, (http.client.HTTPException, OSError)):
        return _Attempt("unreachable", f"{type(e).__name__}: {e}", retryable=True)
    return _Attempt("internal", f"{type(e).__name__}: {e}", retryable=True)


def _decode_error(status: int, data: bytes, ctype: str = "") -> _Attempt:
    """An error answer: JSON {"error": "...", "code": "...", "leader_api": "..."}.
    Anything else is described by its status and type, never by its body
    (an HTML page does not belong in an error message)."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    code = doc.get("code") if isinstance(doc, dict) else None
    msg = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(code, str) or not code:
        answered = f"HTTP {status} {ctype}".rstrip()
        if status in (502, 503, 504):
            # A proxy in front of a node that restarts: try again.
            return _Attempt("unavailable", f"{answered}, not the token API's JSON", retryable=True)
        if status == 400 and b"HTTPS server" in data:
            return _Attempt("bad_answer", f"{answered} (a plain-HTTP request to a TLS port)", retryable=True, fix=_FIX_HTTPS)
        if status in (401, 403):
            return _Attempt("auth", f"{answered}: credentials refused", retryable=False)
        more = " (not a token node, or one too old for this request)" if status == 404 else ""
        return _Attempt("bad_answer", f"{answered}, not the token API's JSON{more}", retryable=True, fix=_FIX_URL)
    if status in (401, 403):
        return _Attempt("auth", f"HTTP {status}: {msg or 'credentials refused'}", retryable=False)
    text = f"{msg or ''}".strip() or f"HTTP {status}"
    if code == "bad_request":
        return _Attempt("bad_request", text, retryable=False)
    if code in ("unauthenticated", "unauthorized", "forbidden", "permission_denied"):
        return _Attempt("auth", text, retryable=False)
    if code not in ("not_leader", "no_quorum", "unavailable"):
        code = "internal"
    return _Attempt(
        code, text, retryable=True, leader_api=str(doc.get("leader_api") or ""), leader_id=str(doc.get("leader_id") or "")
    )


def _ssl_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    if key is not None and cert is None:
        raise ValueError("fencegate: tls_key given without tls_cert; give both (or a tls_cert file that holds the key)")
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"fencegate: tls_ca {ca}: cannot load it as PEM certificates ({_reason(e)})") from None
    if cert is not None:
        try:
            ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(
                f"fencegate: tls_cert {cert} / tls_key {key}: cannot load the client certificate and key ({_reason(e)})"
            ) from None
    return ctx


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e)


_CRED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MIN_SECRET = 32


def _read_credentials(path: str) -> str:
    """Read a client credential file (one line NAME SECRET; blank lines and
    # comments ignored) and return the Authorization header value
    "Bearer NAME:SECRET". Errors never show the secret."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise ValueError(f"fencegate: credentials file {path}: cannot read it ({_reason(e)})") from None
    except UnicodeDecodeError:
        raise ValueError(f"fencegate: credentials file {path}: not UTF-8 text") from None
    found: tuple[str, str] | None = None
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"fencegate: credentials file {path} line {n}"
        if found is not None:
            raise ValueError(f"{where}: a client's file holds one credential; this is a second one")
        fields = line.split()
        if len(fields) == 3 and fields[2].startswith("sha256:"):
            raise ValueError(f"{where}: this is a node's line (NAME ROLES sha256:HASH); a client's file holds NAME SECRET")
        if len(fields) != 2:
            raise ValueError(f"{where}: want NAME SECRET")
        name, secret = fields
        if not _CRED_NAME.match(name):
            raise ValueError(f"{where}: name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
        if len(secret) < _MIN_SECRET or ":" in secret:
            raise ValueError(f"{where}: the secret is too short or malformed; make one with fencegate token credential")
        found = (name, secret)
    if found is None:
        raise ValueError(f"fencegate: credentials file {path} holds no credential; want one line NAME SECRET")
    return f"Bearer {found[0]}:{found[1]}"
