"""Checks the fencegate contract through psycopg2. Usage: psycopg_contract.py DSN"""
import sys

import psycopg2

dsn = sys.argv[1]


def sqlstate_of(fn):
    try:
        fn()
    except psycopg2.Error as e:
        return e.pgcode
    return None


conn = psycopg2.connect(dsn)

# Fenced write: psycopg2 opens the transaction with BEGIN on the first statement.
cur = conn.cursor()
cur.execute("SELECT fencegate.fence(%s, %s)", ("order:42", 34))
assert cur.fetchone()[0] == 34
cur.execute("UPDATE orders SET state = %s WHERE id = 42", ("paid",))
conn.commit()


def stale():
    cur = conn.cursor()
    cur.execute("SELECT fencegate.fence(%s, %s)", ("order:42", 33))
    cur.execute("UPDATE orders SET state = 'stale' WHERE id = 42")
    conn.commit()


code = sqlstate_of(stale)
conn.rollback()
assert code == "FG001", code


def unfenced():
    cur = conn.cursor()
    cur.execute("UPDATE orders SET state = 'unfenced' WHERE id = 42")
    conn.commit()


code = sqlstate_of(unfenced)
conn.rollback()
assert code == "FG002", code


def bad_token():
    cur = conn.cursor()
    cur.execute("SELECT fencegate.fence(%s, %s)", ("order:42", -1))


code = sqlstate_of(bad_token)
conn.rollback()
assert code == "FG003", code

def other_resource():
    cur = conn.cursor()
    cur.execute("SELECT fencegate.fence(%s, %s)", ("order:43", 34))
    cur.execute("UPDATE orders SET state = 'other' WHERE id = 42")


code = sqlstate_of(other_resource)
conn.rollback()
assert code == "FG002", code

conn.autocommit = True

# A fence alone in autocommit guards nothing after its own statement.
cur = conn.cursor()
cur.execute("SELECT fencegate.fence(%s, %s)", ("order:42", 35))
assert cur.fetchone()[0] == 35


def after_alone():
    conn.cursor().execute("UPDATE orders SET state = 'alone' WHERE id = 42")


code = sqlstate_of(after_alone)
assert code == "FG002", code

cur = conn.cursor()
cur.execute("SELECT state FROM orders WHERE id = 42")
assert cur.fetchone()[0] == "paid"
print("ok")
