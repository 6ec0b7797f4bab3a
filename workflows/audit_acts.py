"""`AuditAct`: the trail of what is not a run. A schedule and an eval have no history of
their own to keep their acts in, so each act on one (a schedule's creation, pause,
unpause, trigger or deletion; an eval's start) is one short workflow that records it and
ends, its record in its result: `tarry.client.audit` reads it back as it reads a run's ended
segment, with the same owner and readers as the schedule or eval it names, so the same
people see it. It is not a run (`tarry list`, the API and the inbox list `AgentRun`s).

The record's time is the workflow's start, when Temporal took the act's request, not
when a worker got to it. Deterministic: no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import (
        AUDIT_ACT_WORKFLOW,
        AUDIT_QUERY,
        TEMPORAL_UI,
        AuditRecord,
        Door,
        OtherAct,
    )


@workflow.defn(name=AUDIT_ACT_WORKFLOW)
class AuditActWorkflow:
    @workflow.init
    def __init__(self, act: OtherAct) -> None:
        self._record = AuditRecord(
            act=act.act,
            by=act.by or TEMPORAL_UI,
            door=act.door or Door.TEMPORAL_UI,
            at=workflow.info().workflow_start_time,
            what=act.what,
            schedule=act.schedule,
            eval=act.eval,
        )

    @workflow.run
    async def run(self, act: OtherAct) -> dict[str, list[AuditRecord]]:
        """The record, where a run's result keeps its records (`audit`)."""
        return {"audit": [self._record]}

    @workflow.query(name=AUDIT_QUERY)
    def audit_trail(self) -> list[AuditRecord]:
        return [self._record]
