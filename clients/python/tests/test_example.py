"""examples/transfer.py runs against the stack as a user would run it."""

import os
import subprocess
import sys

from support import HERE, StackTest, env, redis_url, token_servers


class ExampleTest(StackTest):
    def run_transfer(self, src, dst, cents):
        cmd = [
            sys.executable, "-B", os.path.join(HERE, "..", "examples", "transfer.py"), src, dst, str(cents),
            "--db", env("FENCEGATE_TEST_DSN"), "--redis", redis_url(), "--tokens", ",".join(token_servers()),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def test_transfer(self):
        locks = self.lock_client()
        a, b = self.new_account(locks, 100), self.new_account(locks, 0)
        self.assertEqual(self.run_transfer(a, b, 30), "done")
        self.assertEqual((self.balance(a), self.balance(b)), (70, 30))
        self.assertEqual(self.run_transfer(a, b, 500), "refused: insufficient funds")
        self.assertEqual(self.query("SELECT count(*) FROM transfers WHERE src = %s", (a,))[0][0], 1)
