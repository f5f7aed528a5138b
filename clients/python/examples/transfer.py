"""Move money between two accounts under fencegate locks.

Each account is a resource ("account:ID"). A transfer takes both locks (in
one order, so two opposite transfers never wait for each other forever),
then reads and writes in one transaction that starts with both fences. A
worker whose lock expired while it stalled gets StaleTokenError instead of
overwriting a newer holder's balances, and nothing of its transaction
commits. Each transfer carries an id, so a COMMIT whose answer was lost can
be checked and never applied twice.

Once, as an administrator, in the database `fencegate dev` made (postgres
straight at 127.0.0.1:5432; dev installed schema fencegate there with the
grants of its application role fencegate_app): the tables, their
protection, and the role's table grants. The proxy admits the
application role and refuses the administrator.

    ADMIN=postgres://postgres@127.0.0.1:5432/fencegate_dev
    psql $ADMIN -c 'CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)'
    psql $ADMIN -c 'CREATE TABLE transfers (id text PRIMARY KEY, src text NOT NULL, dst text NOT NULL, cents bigint NOT NULL)'
    psql $ADMIN -c "INSERT INTO accounts VALUES ('alice', 5000), ('bob', 0)"
    fencegate protect accounts --resource "'account:' || id" --db $ADMIN
    fencegate protect transfers --resource "'account:' || src" --db $ADMIN
    psql $ADMIN -c 'GRANT SELECT, INSERT, UPDATE, DELETE ON accounts, transfers TO fencegate_app'

Then, as the application, through the proxy (Redis, three token nodes and
the proxy of `fencegate dev`), from the checkout (the password of
fencegate_app is in the pgpass file dev wrote):

    python3 clients/python/examples/transfer.py alice bob 1000
"""

import argparse
import os
import sys
import uuid

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fencegate  # noqa: E402


def transfer(locks, conn, src, dst, cents, transfer_id):
    # Take the locks in one order; the transaction fences them in one order too.
    first, second = sorted([src, dst])
    with locks.acquire("account:" + first) as a, locks.acquire("account:" + second) as b:
        with fencegate.transaction(conn, a, b) as cur:
            cur.execute("SELECT 1 FROM transfers WHERE id = %s", (transfer_id,))
            if cur.fetchone():
                return "already done"
            cur.execute("SELECT balance FROM accounts WHERE id = %s", (src,))
            row = cur.fetchone()
            if row is None or row[0] < cents:
                return "refused: insufficient funds"
            cur.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (cents, src))
            cur.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (cents, dst))
            cur.execute("INSERT INTO transfers (id, src, dst, cents) VALUES (%s, %s, %s, %s)", (transfer_id, src, dst, cents))
            return "done"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("cents", type=int)
    p.add_argument("--db", default="postgresql://fencegate_app@127.0.0.1:6432/fencegate_dev?sslmode=disable&passfile=fencegate-data/pgpass",
                   help="PostgreSQL through the fencegate proxy, as the application role")
    p.add_argument("--redis", default="redis://127.0.0.1:6379")
    p.add_argument("--tokens", default="http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103")
    args = p.parse_args()

    locks = fencegate.LockClient(redis_urls=[args.redis], token_servers=args.tokens.split(","), ttl=10)
    conn = psycopg.connect(args.db)
    transfer_id = str(uuid.uuid4())
    try:
        for attempt in range(3):
            try:
                print(transfer(locks, conn, args.src, args.dst, args.cents, transfer_id))
                return
            except fencegate.StaleTokenError as e:
                print(f"stale lock, nothing committed; trying again: {e}", file=sys.stderr)
            except fencegate.FenceTimeoutError:
                print("another holder's transaction is stalled; trying again", file=sys.stderr)
            except fencegate.CommitUnknownError:
                # The transfer id tells on the next attempt whether it committed.
                print("the commit's answer was lost; checking", file=sys.stderr)
                conn = psycopg.connect(args.db)
        sys.exit("gave up after 3 attempts")
    finally:
        conn.close()
        locks.close()


if __name__ == "__main__":
    main()
