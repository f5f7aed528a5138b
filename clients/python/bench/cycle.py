#!/usr/bin/env python3
"""The whole critical section a Python user runs around one write, fenced
against unfenced. Run it with ``make bench-python`` (the same as
``go test -run '^$' -bench '^BenchmarkPythonCycle$' -benchtime 1x -v ./clients/python/``):
the Go benchmark starts the stack (five redis-servers, a 3-node token
cluster, a database with the protected table ``counters`` and its
unprotected twin ``counters_plain`` behind the gate) and names it in the
FENCEGATE_BENCH_* variables.

What is measured, in this one process, per worker thread on a row (and a
resource) of its own, each worker with a psycopg 3 connection of its own
straight to PostgreSQL:

- unfenced: on one Redis, redis-py's ``Lock`` (SET NX PX, a compare-and-
  delete script to release); on five masters, ``QuorumLock`` below (no
  Redlock library is packaged for Debian: SET NX PX on each master in turn,
  a majority within the validity, compare-and-delete on every master);
  then UPDATE of the worker's row of counters_plain and COMMIT (psycopg
  sends BEGIN before the first statement), then the release;
- fenced: ``fencegate.LockClient`` with the token cluster, ``acquire``
  (grant, token, confirm), ``lock.transaction(conn)`` (BEGIN, fence, the
  same UPDATE of the protected table counters, COMMIT), ``release``.

At 1 and --workers concurrent workers, on one Redis and on all five. Each
configuration runs one warm-up round of each side, then --rounds rounds of
--seconds, the sides taking turns (in reverse order every other round). It
prints the median (and range) of cycles/s, the median of the rounds' p50,
the median CPU time of this process (user + system) per cycle, and the
median (and range) of the per-round ratio unfenced / fenced; then, at one
worker on one Redis, the median time of each step of both cycles (with
--profile FILE under cProfile). The load average at the start and at the
end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import threading
import time

import psycopg
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import fencegate  # noqa: E402


def env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        raise SystemExit(f"{name} is not set: run the benchmark with `make bench-python`, which starts the stack")
    return v


RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


class QuorumLock:
    """The Redlock algorithm as a user writes it with redis-py: SET NX PX on
    each master in turn, held when a majority said yes within the validity
    (TTL minus the time taken and a drift allowance); a compare-and-delete
    script on every master releases it (also after a failed attempt)."""

    def __init__(self, urls: list[str], ttl_ms: int = 10000, timeout: float = 1.0):
        self.masters = [redis.Redis.from_url(u, socket_timeout=timeout, socket_connect_timeout=timeout) for u in urls]
        self.scripts = [m.register_script(RELEASE) for m in self.masters]
        self.quorum = len(urls) // 2 + 1
        self.ttl_ms = ttl_ms

    def acquire(self, key: str) -> str:
        value = secrets.token_hex(16)
        start = time.monotonic()
        ok = 0
        for m in self.masters:
            try:
                ok += bool(m.set(key, value, nx=True, px=self.ttl_ms))
            except redis.RedisError:
                pass
        validity = self.ttl_ms / 1000 - (time.monotonic() - start) - (self.ttl_ms / 1000 * 0.01 + 0.002)
        if ok >= self.quorum and validity > 0:
            return value
        self.release(key, value)
        raise RuntimeError(f"QuorumLock: {key} not acquired ({ok} of {len(self.masters)})")

    def release(self, key: str, value: str) -> None:
        for s in self.scripts:
            try:
                s(keys=[key], args=[value])
            except redis.RedisError:
                pass

    def close(self) -> None:
        for m in self.masters:
            m.close()


def row(cells) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def fmt(x: float) -> str:
    return f"{round(x):,}"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(workers: int, secs: float, cycle) -> dict:
    """Drive `workers` threads of cycle(worker) for secs seconds: cycles/s,
    CPU µs per cycle of this process, p50 ms."""
    lat: list[list[float]] = [[] for _ in range(workers)]
    errors: list[BaseException] = []
    end = time.monotonic() + secs

    def loop(w: int) -> None:
        try:
            t = time.monotonic()
            while t < end:
                cycle(w)
                t1 = time.monotonic()
                lat[w].append(t1 - t)
                t = t1
        except BaseException as e:  # noqa: BLE001 - reported below, ends the run
            errors.append(e)

    cpu0 = time.process_time()
    t0 = time.monotonic()
    threads = [threading.Thread(target=loop, args=(w,)) for w in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dt = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    if errors:
        raise errors[0]
    all_lat = [x for ws in lat for x in ws]
    n = len(all_lat)
    return {"rate": n / dt, "cpu": cpu / n * 1e6, "p50": statistics.median(all_lat) * 1000}


def compare(workers: int, sides: dict, rounds: int, secs: float, warmup: float) -> dict:
    names = list(sides)
    res = {n: {"rate": [], "cpu": [], "p50": []} for n in names}
    for n in names:
        run(workers, warmup, sides[n])
    ratios = []
    for r in range(rounds):
        for n in names if r % 2 == 0 else reversed(names):
            m = run(workers, secs, sides[n])
            for k in m:
                res[n][k].append(m[k])
        ratios.append(res["unfenced"]["rate"][r] / res["fenced"]["rate"][r])
    out = {
        n: {
            "rate": statistics.median(res[n]["rate"]),
            "min": min(res[n]["rate"]),
            "max": max(res[n]["rate"]),
            "cpu": statistics.median(res[n]["cpu"]),
            "p50": statistics.median(res[n]["p50"]),
        }
        for n in names
    }
    out["ratio"] = (statistics.median(ratios), min(ratios), max(ratios))
    return out


def rid(w: int) -> str:
    return f"bench-{w}"


class Setup:
    """One Redis configuration: the fencegate client, the unfenced lock, and
    a connection per worker."""

    def __init__(self, urls: list[str], tokens: list[str], dsn: str, workers: int):
        self.locks = fencegate.LockClient(urls, tokens, ttl=10, node_timeout=1.0, retry=fencegate.no_retry())
        if len(urls) == 1:
            self.single = redis.Redis.from_url(urls[0], socket_timeout=1.0, socket_connect_timeout=1.0)
            self.quorum = None
        else:
            self.single = None
            self.quorum = QuorumLock(urls)
        self.conns = [psycopg.connect(dsn) for _ in range(workers)]
        for w, c in enumerate(self.conns):
            # Each worker's rows: the protected one inserted under its own
            # lock (an unfenced INSERT is refused), the twin's plainly.
            with self.locks.acquire(f"counter:{rid(w)}") as lock:
                with lock.transaction(c) as cur:
                    cur.execute("INSERT INTO counters (id) VALUES (%s) ON CONFLICT (id) DO NOTHING", (rid(w),))
            c.execute("INSERT INTO counters_plain (id) VALUES (%s) ON CONFLICT (id) DO NOTHING", (rid(w),))
            c.commit()

    def unfenced(self, w: int) -> None:
        key = f"counter:{rid(w)}"
        if self.single is not None:
            lk = self.single.lock(key, timeout=10)
            if not lk.acquire(blocking=False):
                raise RuntimeError(f"redis-py Lock: {key} not acquired")
            try:
                self._plain_update(w)
            finally:
                lk.release()
        else:
            value = self.quorum.acquire(key)
            try:
                self._plain_update(w)
            finally:
                self.quorum.release(key, value)

    def _plain_update(self, w: int) -> None:
        c = self.conns[w]
        try:
            c.execute("UPDATE counters_plain SET n = n + 1 WHERE id = %s", (rid(w),))
            c.commit()
        except BaseException:
            c.rollback()
            raise

    def fenced(self, w: int) -> None:
        with self.locks.acquire(f"counter:{rid(w)}") as lock:
            with lock.transaction(self.conns[w]) as cur:
                cur.execute("UPDATE counters SET n = n + 1 WHERE id = %s", (rid(w),))

    def close(self) -> None:
        self.locks.close()
        if self.single is not None:
            self.single.close()
        if self.quorum is not None:
            self.quorum.close()
        for c in self.conns:
            c.close()


def breakdown(s: Setup, secs: float) -> None:
    """The median time of each step of both cycles at one worker: where the
    fenced cycle's extra time goes. It wraps the lock client's grant, token
    and confirm steps, so it times them as acquire runs them."""
    steps: dict[str, list[float]] = {}

    def add(k: str, t0: float) -> float:
        t = time.monotonic()
        steps.setdefault(k, []).append((t - t0) * 1000)
        return t

    def wrap(name: str) -> None:
        orig = getattr(s.locks, name)

        def timed(*a, **kw):
            t0 = time.monotonic()
            try:
                return orig(*a, **kw)
            finally:
                add(f"fenced: {name.lstrip('_')}", t0)

        setattr(s.locks, name, timed)

    for name in ("_grant", "_next_token", "_extend"):
        wrap(name)
    c = s.conns[0]
    end = time.monotonic() + secs
    try:
        while time.monotonic() < end:
            t = time.monotonic()
            lk = s.single.lock("counter:bench-0", timeout=10)
            if not lk.acquire(blocking=False):
                raise RuntimeError("redis-py Lock: not acquired")
            t = add("unfenced: lock", t)
            c.execute("UPDATE counters_plain SET n = n + 1 WHERE id = %s", ("bench-0",))
            t = add("unfenced: BEGIN + UPDATE", t)
            c.commit()
            t = add("unfenced: COMMIT", t)
            lk.release()
            t = add("unfenced: release", t)
            lock = s.locks.acquire("counter:bench-0")
            t = add("fenced: acquire", t)
            tx = lock.transaction(c)
            cur = tx.__enter__()
            t = add("fenced: BEGIN + fence", t)
            cur.execute("UPDATE counters SET n = n + 1 WHERE id = %s", ("bench-0",))
            t = add("fenced: UPDATE", t)
            tx.__exit__(None, None, None)
            t = add("fenced: COMMIT", t)
            lock.release()
            add("fenced: release", t)
    finally:
        for name in ("_grant", "_next_token", "_extend"):
            delattr(s.locks, name)
    print(f"\nSteps of one cycle at 1 worker on one Redis: median ms over {len(steps['fenced: acquire'])} cycles of each")
    row(["step", "median ms"])
    row(["---", "---"])
    for k in sorted(steps):
        row([k, f"{statistics.median(steps[k]):.3f}"])


def profiled(f, s: Setup, secs: float, path: str | None) -> str:
    """What f(s, secs) prints, run under cProfile when path is set: then the
    stats go to path, and the functions with the most own time follow."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if not path:
            f(s, secs)
        else:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.runcall(f, s, secs)
            prof.dump_stats(path)
            print(f"\ncProfile of the steps written to {path}; the functions with the most own time:")
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--workers", type=int, default=16, help="the many-workers row (besides 1)")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the steps of one cycle")
    ap.add_argument("--profile", metavar="FILE", help="profile the steps of one cycle with cProfile, write the stats to FILE")
    a = ap.parse_args()
    redis_urls = env("FENCEGATE_BENCH_REDIS_URLS").split(",")
    tokens = env("FENCEGATE_BENCH_TOKEN_SERVERS").split(",")
    dsn = env("FENCEGATE_BENCH_DSN_DIRECT")

    print(
        f"Python {sys.version.split()[0]}, redis-py {redis.__version__}, psycopg {psycopg.__version__} "
        f"(libpq {psycopg.pq.version()}), fencegate {fencegate.__version__}; {os.cpu_count()} CPUs"
    )
    print(f"{a.rounds} rounds × {a.seconds:g} s per side and configuration (after a {a.warmup:g} s warm-up); "
          f"{len(redis_urls)} redis-servers, {len(tokens)} token nodes")
    print(f"load average at start: {load()}", flush=True)
    print(
        "\nCritical section (lock, [token,] BEGIN, [fence,] UPDATE of one row, COMMIT, release), cycles/s: "
        "median (min–max) of the rounds; p50 ms; CPU µs per cycle of the Python process"
    )
    row(["Redis", "workers", "unfenced cycles/s (p50 ms)", "fenced cycles/s (p50 ms)", "unfenced / fenced",
         "CPU µs/cycle unfenced / fenced"])
    row(["---"] * 6)
    later: list[str] = []
    for k in (1, len(redis_urls)):
        # One configuration's connections at a time: PostgreSQL's slots are
        # shared with whatever else runs on the server.
        s = Setup(redis_urls[:k], tokens, dsn, max(1, a.workers))
        try:
            for workers in (1, a.workers):
                m = compare(workers, {"unfenced": s.unfenced, "fenced": s.fenced}, a.rounds, a.seconds, a.warmup)
                u, f = m["unfenced"], m["fenced"]
                r, rmin, rmax = m["ratio"]
                mode = "1 (redis-py Lock)" if k == 1 else f"{k} masters (quorum lock / Redlock)"
                row([mode, workers, f"{fmt(u['rate'])} ({fmt(u['min'])}–{fmt(u['max'])}) ({u['p50']:.2f})",
                     f"{fmt(f['rate'])} ({fmt(f['min'])}–{fmt(f['max'])}) ({f['p50']:.2f})",
                     f"{r:.2f}x ({rmin:.2f}–{rmax:.2f})", f"{u['cpu']:.0f} / {f['cpu']:.0f}"])
            if k == 1 and not a.no_breakdown:
                # Printed after the table.
                later.append(profiled(breakdown, s, a.seconds, a.profile))
        finally:
            s.close()
    for text in later:
        print(text, end="")
    print(f"\nload average at end: {load()}", flush=True)


if __name__ == "__main__":
    main()
