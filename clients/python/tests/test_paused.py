"""Kleppmann's paused holder, with a real process stopped by SIGSTOP: it
takes the lock and reads, is stopped past its TTL, another holder takes the
lock and charges, and the stopped one wakes up and charges from its stale
read. Its lease reports the loss the moment it resumes, and PostgreSQL
refuses its write (StaleTokenError); the account is charged once."""

import os
import signal
import subprocess
import sys

from support import HERE, StackTest, key_prefix, unique, wait_until


class PausedHolderTest(StackTest):
    def test_a_holder_paused_past_its_ttl_cannot_write(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        res = "account:" + acct
        child = subprocess.Popen(
            [sys.executable, "-B", os.path.join(HERE, "holder.py"), res, acct, "0.5"],
            cwd=HERE,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.addCleanup(child.kill)
        self.addCleanup(child.stdout.close)
        self.addCleanup(child.stdin.close)
        words = child.stdout.readline().split()
        self.assertEqual(words[:1], ["acquired"], words)
        child_token, read = int(words[1]), int(words[2])
        self.assertEqual(read, 100)

        os.kill(child.pid, signal.SIGSTOP)
        try:
            r = self.redis()
            wait_until(lambda: r.get(key_prefix() + res) is None, 10, "the stopped holder's lock to expire")
            with locks.acquire(res) as lock:
                self.assertGreater(lock.token, child_token)
                with lock.transaction(self.connect()) as cur:
                    cur.execute("SELECT balance FROM accounts WHERE id = %s", (acct,))
                    (bal,) = cur.fetchone()
                    cur.execute("UPDATE accounts SET balance = %s WHERE id = %s", (bal - 10, acct))
        finally:
            os.kill(child.pid, signal.SIGCONT)

        child.stdin.write("go\n")
        child.stdin.flush()
        self.assertEqual(child.stdout.readline().split(), ["lost", "True"])
        self.assertEqual(child.stdout.readline().split(), ["stale", "FG001"])
        self.assertEqual(child.wait(30), 0)
        self.assertEqual(self.balance(acct), 90)
        self.assertEqual(self.query("SELECT count(*) FROM requests WHERE account = %s", (acct,))[0][0], 0)
