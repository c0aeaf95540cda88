"""Loading checks, hooks on the real template, the env view and the
failure policy."""

import json
import shutil

import pytest

from conftest import sample_tools
from ecdysis_harness import (
    CallAction, ContractInput, ContractOutput, ContractViolation, Continue, FailurePolicy, Harness,
    HashMismatch, Limits, LoadError, Poisoned, Proceed, Realize, StepKind, StepReport, TaskView, TextAction,
    ToolCall, Trap, UnsupportedWorld, ViewOutput,
)


def contract_input():
    return ContractInput("tau2/retail", "You are a retail agent.", sample_tools())


def test_load_verifies_the_hash_and_refuses_an_unknown_world(template_dir, tmp_path):
    good = Harness.load(template_dir)
    manifest = json.loads((template_dir / "harness.json").read_text())
    assert good.hash == manifest["hash"]
    assert good.limits == Limits.from_json(manifest["limits"])

    tampered = tmp_path / "tampered"
    shutil.copytree(template_dir, tampered)
    wasm = bytearray((tampered / "harness.wasm").read_bytes())
    wasm[-1] ^= 0xFF
    (tampered / "harness.wasm").write_bytes(bytes(wasm))
    with pytest.raises(HashMismatch, match="blake3"):
        Harness.load(tampered)

    future = tmp_path / "future"
    shutil.copytree(template_dir, future)
    manifest["world"] = "ecdysis:harness/harness@0.2.0"
    (future / "harness.json").write_text(json.dumps(manifest))
    with pytest.raises(UnsupportedWorld, match="0.2.0"):
        Harness.load(future)


def test_the_template_answers_every_hook_within_the_contract(template_dir):
    harness = Harness.load(template_dir)
    with harness.episode("tau2/retail", 200, 10) as ep:
        out = ep.contract(contract_input())
        assert isinstance(out, ContractOutput) and out.system_prompt.startswith("You are a retail agent.")
        assert isinstance(ep.skills(TaskView("tau2/retail", "I want to cancel order #W1.")), list)
        decision = ep.realize(CallAction(ToolCall("c1", "get_order_details", '{"order_id":"#W1"}')))
        assert decision == Proceed()
        assert ep.last.fuel > 0 and ep.last.hook == "realize"
        # A call the model wrote as text is rescued as a structured call.
        rescued = ep.realize(TextAction('```json\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n```'))
        assert isinstance(rescued, Realize) and rescued.calls[0].name == "get_order_details"
        report = StepReport(3, 197, 10, StepKind.USER_MESSAGE, "thanks", [])
        assert ep.regulate(report) == Continue()
        assert [r.hook for r in ep.records] == ["constructor", "contract", "skills", "realize", "realize", "regulate"]


def test_switched_off_layers_are_not_called(fixtures, tmp_path):
    """harness.json `layers` (written by `export --layers contract,skills`):
    realize and regulate answer neutrally without calling the guest, and
    leave no record; the layers that are on still run."""
    two = Harness.load(fixtures / "template-two-layers")
    assert two.layers == frozenset({"contract", "skills"})
    assert json.loads((fixtures / "template-two-layers" / "harness.json").read_text())["layers"] == [
        "contract", "skills"]
    rescue = TextAction('```json\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n```')
    with two.episode("tau2/retail", 200, 10) as ep:
        out = ep.contract(contract_input())
        assert out.system_prompt.startswith("You are a retail agent.")
        ep.skills(TaskView("tau2/retail", "I want to cancel order #W1."))
        # The template would rescue this text as a call (see above).
        assert ep.realize(rescue) == Proceed()
        assert ep.regulate(StepReport(3, 197, 10, StepKind.USER_MESSAGE, "thanks", [])) == Continue()
        assert [r.hook for r in ep.records] == ["constructor", "contract", "skills"]
    # Positive control: the full export, loaded right after, still rescues.
    with Harness.load(fixtures / "template").episode("tau2/retail", 200, 10) as ep:
        ep.contract(contract_input())
        assert isinstance(ep.realize(rescue), Realize)
    # A caller's override wins over the manifest (the template learns the
    # episode's tools in its contract hook, so realize needs it on); bad
    # names are refused.
    override = Harness.load(fixtures / "template-two-layers", layers=["contract", "realize"])
    with override.episode("tau2/retail", 200, 10) as ep:
        ep.contract(contract_input())
        assert ep.skills(TaskView("tau2/retail", "I want to cancel order #W1.")) == []
        assert isinstance(ep.realize(rescue), Realize)
        assert [r.hook for r in ep.records] == ["constructor", "contract", "realize"]
    none = Harness.load(fixtures / "template-two-layers", layers=[])
    with none.episode("tau2/retail", 200, 10) as ep:
        assert ep.contract(contract_input()) == ContractOutput("You are a retail agent.", [])
    bad = tmp_path / "bad"
    shutil.copytree(fixtures / "template-two-layers", bad)
    manifest = json.loads((bad / "harness.json").read_text())
    manifest["layers"] = ["contract", "regulation"]
    (bad / "harness.json").write_text(json.dumps(manifest))
    with pytest.raises(LoadError, match="'regulation'"):
        Harness.load(bad)
    manifest["layers"] = "contract"
    (bad / "harness.json").write_text(json.dumps(manifest))
    with pytest.raises(LoadError, match="list of layer names"):
        Harness.load(bad)


def test_the_same_inputs_burn_the_same_fuel(template_dir):
    harness = Harness.load(template_dir)
    fuel = []
    for _ in range(2):
        with harness.episode("tau2/retail", 200, 10) as ep:
            ep.contract(contract_input())
            ep.realize(CallAction(ToolCall("c1", "get_order_details", '{"order_id":"#W1"}')))
            fuel.append(ep.last.fuel)
    assert fuel[0] == fuel[1] > 0


def test_the_env_view_answers_reads_and_refuses_mutating_tools(fixtures):
    seen = []

    def view(name, arguments):
        seen.append((name, arguments))
        return '{"order_id": "#W1", "status": "pending"}'

    good = Harness.load(fixtures / "hostile" / "good.wasm")
    with good.episode("tau2/retail", 200, 10, env_view=view, tools=sample_tools()) as ep:
        # The well-behaved guest reads the order named by a text action.
        assert ep.realize(TextAction("#W1")).text == '{"order_id": "#W1", "status": "pending"}'
        assert seen == [("get_order_details", {"order_id": "#W1"})]
        assert ep.view_log[0]["answer"] == {"tag": "ok", "val": '{"order_id": "#W1", "status": "pending"}'}

    seen.clear()
    hostile = Harness.load(fixtures / "hostile" / "mutating-env-view.wasm")
    with hostile.episode("tau2/retail", 200, 10, env_view=view, tools=sample_tools()) as ep:
        with pytest.raises(ContractViolation) as err:
            ep.realize(CallAction(ToolCall("c1", "get_order_details", "{}")))
        assert err.value.violation == "mutating_via_env_view"
    assert seen == [], "a mutating tool must never reach the environment"


def test_tool_errors_reach_the_guest_as_view_errors(fixtures):
    good = Harness.load(fixtures / "hostile" / "good.wasm")
    with good.episode("tau2/retail", 200, 10, env_view=lambda n, a: ViewOutput("Error: order not found", True), tools=sample_tools()) as ep:
        assert ep.realize(TextAction("#W9")).text == 'view error: ViewError::ToolError("Error: order not found")'


def test_fail_open_proceeds_neutrally_and_fail_closed_raises(fixtures):
    panic = fixtures / "hostile" / "panic.wasm"
    call = CallAction(ToolCall("c1", "get_order_details", "{}"))
    with Harness.load(panic, policy=FailurePolicy.FAIL_OPEN).episode("d", 10, 10, tools=sample_tools()) as ep:
        assert ep.realize(call) == Proceed()
        assert isinstance(ep.records[-1].error, Trap)
        # The instance is not trusted again: later hooks answer neutrally.
        assert ep.realize(call) == Proceed()
        assert isinstance(ep.records[-1].error, Poisoned)
        assert ep.failed
    with Harness.load(panic).episode("d", 10, 10, tools=sample_tools()) as ep:
        with pytest.raises(Trap, match="panicked on purpose"):
            ep.realize(call)
