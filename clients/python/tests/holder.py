"""A lock holder in a process of its own, for test_paused: it takes the lock,
reads the balance in a fenced transaction, waits for a line on stdin (the
test stops it with SIGSTOP meanwhile), then charges from what it read.

Usage: holder.py RESOURCE ACCOUNT TTL_SECONDS
"""

import sys

from support import env, key_prefix, redis_url, token_servers

import fencegate
import psycopg


def main():
    resource, account, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    locks = fencegate.LockClient([redis_url()], token_servers(), ttl=ttl, key_prefix=key_prefix(), node_timeout=1.0)
    conn = psycopg.connect(env("FENCEGATE_TEST_DSN"))
    lock = locks.acquire(resource)
    with lock.transaction(conn) as cur:
        cur.execute("SELECT balance FROM accounts WHERE id = %s", (account,))
        (balance,) = cur.fetchone()
    print("acquired", lock.token, balance, flush=True)
    sys.stdin.readline()
    print("lost", lock.lost.is_set(), flush=True)
    try:
        with lock.transaction(conn) as cur:
            cur.execute("INSERT INTO requests (id, account, amount) VALUES (%s, %s, -10)", (f"holder-{lock.token}", account))
            cur.execute("UPDATE accounts SET balance = %s WHERE id = %s", (balance - 10, account))
        print("committed", flush=True)
    except fencegate.StaleTokenError as e:
        print("stale", e.sqlstate, flush=True)
    locks.close()


if __name__ == "__main__":
    main()
