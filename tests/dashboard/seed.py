"""Jobs in every state of the lifecycle, written through the Engine as workers would."""

from __future__ import annotations

from contextlib import suppress

from fsm import Engine, Owner
from fsm.errors import LeaseLost

XSS = "<script>window.__xss = 1; alert('xss')</script>"
OWNER_A = Owner("worker-a.example", 4101, "a1b2c3d4e5f6a7b8")
OWNER_B = Owner("worker-b.example", 4202, "b9c8d7e6f5a4b3c2")


def _started(engine: Engine, kind: str, payload: object, owner: Owner, **opts: object) -> str:
    job = engine.submit(kind, payload, **opts)
    (leased,) = engine.claim(owner, [job.queue], limit=1, ids=[job.id])
    engine.start(job.id, leased.fence)
    return job.id


def seed(engine: Engine) -> dict[str, str]:
    """Create one job per state (plus a few more); returns state -> a job id in it."""
    ids: dict[str, str] = {}
    for i in range(3):
        ids["queued"] = engine.submit(
            "mail.send", {"to": f"user{i}@example.com"}, idempotency_key=f"mail-{i}"
        ).id
    engine.submit("report.build", {"month": "2026-11"}, queue="reports", correlation_id="req-42")
    job = engine.submit("mail.send", {"to": "x@example.com"})
    engine.claim(OWNER_A, ["default"], limit=1, ids=[job.id])
    ids["leased"] = job.id
    month = {"month": "2026-10"}
    ids["running"] = _started(engine, "report.build", month, OWNER_B, queue="reports")
    rid = _started(engine, "mail.send", {"to": "y@example.com"}, OWNER_A)
    engine.fail(rid, engine.get(rid).fence, "SMTP 451 try later", delay=600)
    ids["retry_wait"] = rid
    cid = _started(engine, "report.build", {"month": "2026-09"}, OWNER_B, queue="reports")
    engine.cancel(cid, actor="ops-bot", reason="superseded by a newer report")
    ids["cancelling"] = cid
    sid = _started(engine, "mail.send", {"note": XSS}, OWNER_A, idempotency_key=XSS)
    with suppress(LeaseLost):  # a stale report (old fence): rejected, recorded, no change
        engine.succeed(sid, fence=0, result={"late": True})
    engine.succeed(sid, engine.get(sid).fence, result={"sent": True, "echo": XSS})
    ids["succeeded"] = sid
    ids["xss"] = sid
    fid = _started(engine, "mail.send", {"to": "bad@"}, OWNER_A)
    engine.fail(fid, engine.get(fid).fence, "invalid address <bad@>", permanent=True)
    ids["failed"] = fid
    kid = engine.submit("mail.send", {"to": "z@example.com"}).id
    engine.cancel(kid, actor="alice", reason="customer unsubscribed")
    ids["cancelled"] = kid
    pid = _started(engine, "payment.charge", {"cents": 1250}, OWNER_B, queue="payments")
    engine.ambiguous(pid, engine.get(pid).fence, "gateway timed out after the charge was sent")
    ids["investigate"] = pid
    pid2 = _started(engine, "payment.charge", {"cents": 990}, OWNER_B, queue="payments")
    engine.ambiguous(pid2, engine.get(pid2).fence, "connection reset during capture")
    ids["investigate2"] = pid2
    return ids
