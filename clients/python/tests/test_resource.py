"""The resource-name rule of the Python client matches the service's and the
Go client's (tokenclient.ValidateResource), and it is checked before
anything is sent."""

import json
import os
import socket
import threading
import unittest

import fencegate
from fencegate.tokens import MAX_RESOURCE_BYTES, TokenClient, validate_resource

from support import key_prefix, redis_url

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tokenapi", "testdata", "resource-names.json")


def table_cases():
    """The shared resource-name table: each name as Python holds it. Bytes
    that are not UTF-8 become lone surrogates (surrogateescape), the str a
    Python program gets from such bytes."""
    with open(TABLE, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    return [(bytes.fromhex(c["hex"]).decode("utf-8", "surrogateescape"), c["valid"], c["why"]) for c in cases]


class ResourceRule(unittest.TestCase):
    def test_names_refused(self):
        for bad in ["", "   ", "a\x00b", "a\udc80b", "a\ufffdb", "x" * (MAX_RESOURCE_BYTES + 1)]:
            with self.assertRaises(ValueError, msg=repr(bad)):
                validate_resource(bad)

    def test_names_taken(self):
        for good in ["orders/42", "ü" * (MAX_RESOURCE_BYTES // 2), "x" * MAX_RESOURCE_BYTES, "a\tb"]:
            validate_resource(good)

    def test_shared_table(self):
        """Every case of tokenapi/testdata/resource-names.json, through
        validate_resource, the token client and a lock client with and
        without a token source: a refused name raises ValueError before any
        network write (the servers' ports refuse connections, so an attempt
        to reach them would raise something else), a valid one is granted."""
        cases = table_cases()
        self.assertGreaterEqual(len(cases), 30)
        dead = "http://127.0.0.1:1"
        tc = TokenClient([dead])
        offline = fencegate.LockClient(redis_urls=["redis://127.0.0.1:1"], ttl=10)
        offline_tok = fencegate.LockClient(redis_urls=["redis://127.0.0.1:1"], token_servers=[dead], ttl=10)
        live = fencegate.LockClient(redis_urls=[redis_url()], ttl=10, key_prefix=key_prefix())
        counts = {"valid": 0, "refused": 0}
        try:
            for name, valid, why in cases:
                with self.subTest(why=why):
                    if valid:
                        validate_resource(name)
                        lock = live.try_acquire(name)
                        lock.release()
                        counts["valid"] += 1
                        continue
                    with self.assertRaises(ValueError):
                        validate_resource(name)
                    with self.assertRaises(ValueError):
                        tc.next_token(name, timeout=1)
                    for c in (offline, offline_tok):
                        with self.assertRaises(ValueError):
                            c.acquire(name, timeout=1)
                        with self.assertRaises(ValueError):
                            c.try_acquire(name)
                    counts["refused"] += 1
        finally:
            tc.close()
            for c in (offline, offline_tok, live):
                c.close()
        print(f"resource-name table: {len(cases)} cases, {counts['valid']} valid, {counts['refused']} refused", flush=True)

    def test_refused_before_any_network_write(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        srv.settimeout(0.5)
        accepted = []

        def accept():
            try:
                c, _ = srv.accept()
                accepted.append(c)
            except OSError:
                pass

        t = threading.Thread(target=accept)
        t.start()
        tc = TokenClient([f"http://127.0.0.1:{srv.getsockname()[1]}"])
        try:
            for bad in ["a\x00b", "a\udc80b"]:
                with self.assertRaises(ValueError):
                    tc.next_token(bad, timeout=1)
        finally:
            t.join()
            srv.close()
            tc.close()
        self.assertEqual(accepted, [], "the client connected to the node for a bad resource name")


if __name__ == "__main__":
    unittest.main()
