"""The producer side of TestCeleryWorker: sends tasks to the one worker the test runs
and checks what comes back through the file-system result backend. Prints one line per
step; any failure raises.

Last, it sends a task with a countdown of ten minutes, which the worker receives and
holds: the test then stops the worker, whose warm shutdown gives that message back to
the queue (kombu makes it visible again with ChangeMessageVisibility).
"""

import time

from celery import group

import okiba_tasks as t

TIMEOUT = 20


def step(what):
    print("ok:", what, flush=True)


start = time.time()
assert t.add.delay(2, 3).get(timeout=TIMEOUT) == 5
step("a task sent and its result read back (%.1fs)" % (time.time() - start))

r = t.flaky.delay(2).get(timeout=TIMEOUT)
assert r["retries"] == 2 and len(r["runs"]) == 3, r
gaps = [b - a for a, b in zip(r["runs"], r["runs"][1:])]
assert all(g >= 0.9 for g in gaps), "retried before its countdown: %s" % gaps
step("retried twice with a countdown of 1 s (gaps %s)" % ", ".join("%.2fs" % g for g in gaps))

g = group(t.add.s(i, i) for i in range(10)).apply_async()
assert g.get(timeout=TIMEOUT) == [2 * i for i in range(10)]
step("a group of 10 tasks, results from the file-system backend")

r = t.late.delay("late-1").get(timeout=TIMEOUT)
assert r == {"token": "late-1", "in_flight": 1}, "acks_late: the task's message should be in flight while it runs: %r" % r
step("acks_late: the message stays in flight while the task runs")

held = t.add.apply_async((40, 2), countdown=600)
print("held:", held.id, flush=True)
step("a task with a countdown of 10 minutes sent, for the worker to hold")
