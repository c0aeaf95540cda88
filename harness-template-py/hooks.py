"""The Python starting harness: the `hooks` interface of the
`ecdysis:harness` world, adapting its types to the plain rules of
`rules.py` (built with `componentize-py ... componentize hooks`)."""

from wit_world.exports import hooks
from wit_world.imports import types as t

import rules


class Episode(hooks.Episode):
    def __init__(self, info: t.EpisodeInfo) -> None:
        self.domain = info.domain
        self.tools: set[str] = set()
        self.regulator = rules.Regulator()

    def contract(self, input: t.ContractInput) -> t.ContractOutput:
        self.tools = {tool.name for tool in input.tools}
        prompt, changes = rules.contract(
            input.domain, input.system_prompt, [(tool.name, tool.description) for tool in input.tools]
        )
        return t.ContractOutput(prompt, [t.ToolDescription(name, text) for name, text in changes])

    def skills(self, view: t.TaskView) -> list[t.Guidance]:
        return [t.Guidance(title, text) for title, text in rules.skills(view.domain, view.first_user_message)]

    def realize(self, action: t.AgentAction) -> t.ActionDecision:
        if isinstance(action, t.AgentAction_Call):
            c = action.value
            decision = rules.realize_call(self.domain, rules.Call(c.id, c.name, c.arguments), self.tools)
        else:
            decision = rules.realize_text(self.domain, action.value, self.tools)
        return _decision(decision)

    def regulate(self, report: t.StepReport) -> t.Regulation:
        if report.kind != t.StepKind.TOOL_RESULTS:
            return t.Regulation_Continue()
        outcomes = [
            rules.Outcome(rules.Call(o.call.id, o.call.name, o.call.arguments), o.content, o.error, o.blocked)
            for o in report.outcomes
        ]
        r = self.regulator.after_tools(outcomes)
        if r.kind == "annotate":
            return t.Regulation_Annotate(r.text)
        if r.kind == "inject":
            return t.Regulation_Inject(r.text)
        if r.kind == "stop":
            return t.Regulation_Stop(r.text)
        return t.Regulation_Continue()


def _call(c: rules.Call) -> t.ToolCall:
    return t.ToolCall(c.id, c.name, c.arguments)


def _decision(d: rules.Decision) -> t.ActionDecision:
    if d.kind == "execute":
        return t.ActionDecision_Execute(_call(d.call))
    if d.kind == "block":
        return t.ActionDecision_Block(d.text)
    if d.kind == "realize":
        return t.ActionDecision_Realize([_call(c) for c in d.calls])
    return t.ActionDecision_Proceed()
