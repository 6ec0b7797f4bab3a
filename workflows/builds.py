"""Which build of a versioned deployment a run goes on on (`TARRY_DEPLOYMENT`): a run is
pinned to the build it started on, and moves to the current build at its hand-over.

On an unversioned worker neither has any effect: the server never reports a target
build that changed, and it ignores the versioning behaviour of a continue-as-new.
"""

from __future__ import annotations

from temporalio import workflow


def moves_to_new_build() -> bool:
    """A lead run pinned to a build that is no longer its deployment's current (or
    ramping) one: it hands over at its next stop point, onto the new build. The server
    tells a run so only with a workflow task (a reply, a decision, any signal such as
    `wake`): a parked run learns it when it is next woken, never while it sleeps. Never
    for a sub-agent, which stays on its lead's build."""
    info = workflow.info()
    return info.parent is None and info.is_target_worker_deployment_version_changed()


def next_build() -> workflow.ContinueAsNewVersioningBehavior | None:
    """How a hand-over picks the next run's build: a lead run's goes on on the
    deployment's current build (AUTO_UPGRADE); a sub-agent's stays on its lead's (None:
    the pinned build is inherited)."""
    if workflow.info().parent is None:
        return workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
    return None
