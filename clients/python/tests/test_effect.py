"""Effects: the current holder records one in its fenced transaction; a
stale holder, a transaction without the fence and a rollback record none."""

import json

from support import StackTest, unique

import fencegate


class EffectTest(StackTest):
    def test_effect_is_fenced(self):
        short = self.lock_client(ttl=0.3)
        locks = self.lock_client()
        res = unique("effect")
        old = short.acquire(res)
        self.assertTrue(old.lost.wait(10))  # old stalls past its TTL
        with locks.acquire(res) as new:
            with new.transaction(self.connect()) as cur:
                eid = fencegate.record_effect(cur, new, "payments", {"amount": 10})
                raw = fencegate.record_effect(cur, new, "payments", b'{"amount": 11}')
            self.assertGreater(raw, eid)
            ran = []
            with self.assertRaises(fencegate.StaleTokenError):
                with old.transaction(self.connect()) as cur:
                    ran.append(True)
                    fencegate.record_effect(cur, old, "payments", {"amount": 99})
            self.assertEqual(ran, [])
            conn = self.connect()
            with self.assertRaises(fencegate.UnfencedWriteError):
                with conn, conn.cursor() as cur:
                    fencegate.record_effect(cur, new, "payments", {"amount": 98})
            with self.assertRaises(RuntimeError):
                with new.transaction(self.connect()) as cur:
                    fencegate.record_effect(cur, new, "payments", {"amount": 97})
                    raise RuntimeError("changed my mind")
        rows = self.query("SELECT token, payload::text FROM fencegate.effects WHERE resource = %s ORDER BY id", (res,))
        self.assertEqual([(t, json.loads(p)) for t, p in rows], [(new.token, {"amount": 10}), (new.token, {"amount": 11})])
