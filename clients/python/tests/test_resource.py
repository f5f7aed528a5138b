"""The resource-name rule of the Python client matches the service's and the
Go client's (tokenclient.ValidateResource), and it is checked before
anything is sent."""

import socket
import threading
import unittest

from fencegate.tokens import MAX_RESOURCE_BYTES, TokenClient, validate_resource


class ResourceRule(unittest.TestCase):
    def test_names_refused(self):
        for bad in ["", "   ", "a\x00b", "a\udc80b", "a\ufffdb", "x" * (MAX_RESOURCE_BYTES + 1)]:
            with self.assertRaises(ValueError, msg=repr(bad)):
                validate_resource(bad)

    def test_names_taken(self):
        for good in ["orders/42", "ü" * (MAX_RESOURCE_BYTES // 2), "x" * MAX_RESOURCE_BYTES, "a\tb"]:
            validate_resource(good)

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
