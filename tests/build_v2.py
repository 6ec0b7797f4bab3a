"""The next build of the workers' code, for the rolling-deploy test: `AgentRun` as it
would ship with a visible change, registered under the same workflow type.

Its own module, holding nothing but the workflow: the SDK's sandbox imports the module
of every workflow it runs, and a test module brings pytest and the fixtures with it.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import WORKFLOW_TYPE, RunResult
    from workflows.agent_run import AgentRunWorkflow
    from workflows.memory import WorkflowInput

MARK = "[v2] "
"""What the next build puts before the summary a run takes from its first message."""


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRunV2(AgentRunWorkflow):
    """`AgentRun` with another summary text: a run started without a prompt that takes
    its summary from its first message on this build is listed as `[v2] <message>`, so
    which build served that message shows."""

    @workflow.run
    async def run(self, input: WorkflowInput) -> RunResult:
        return await super().run(input)

    def _title(self, text: str) -> None:
        super()._title(MARK + text)
