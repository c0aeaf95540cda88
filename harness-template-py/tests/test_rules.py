"""Unit tests of the Python starting harness's rules (no component needed):
`.ecdysis/python-tools/bin/pytest harness-template-py`."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rules  # noqa: E402
import tables  # noqa: E402
from rules import Call, Outcome  # noqa: E402

RETAIL_TOOLS = {"get_order_details", "cancel_pending_order", "find_user_id_by_email"}
DB_TOOLS = {"execute_sql", "commit_final_answer"}


def test_contract_appends_the_domains_rules_and_hints_only():
    prompt, changes = rules.contract(
        "tau2/retail", "POLICY", [("cancel_pending_order", "Cancel."), ("get_order_details", "Get.")]
    )
    assert prompt.startswith("POLICY\n\n" + tables.PROMPT_RULES_TITLE)
    assert "leading '#'" in prompt and "execute_sql" not in prompt
    assert [name for name, _ in changes] == ["cancel_pending_order"]
    assert changes[0][1].startswith("Cancel.\n\nPolicy check:")


def test_skills_need_two_keyword_hits_and_are_capped():
    got = rules.skills("tau2/retail", "I want to cancel my order, I ordered it by mistake")
    assert got[0][0] == "Cancel a pending order"
    assert rules.skills("tau2/retail", "hello there") == []
    assert len(rules.skills("dbbench", "how many rows: count the total number, update and insert a new row")) == 2


def test_a_correct_call_proceeds_untouched():
    call = Call("1", "get_order_details", json.dumps({"order_id": "#W1"}))
    assert rules.realize_call("tau2/retail", call, RETAIL_TOOLS) == rules.PROCEED


def test_slips_are_repaired():
    d = rules.realize_call("tau2/retail", Call("1", "get_order", '{"order_id": "W1"}'), RETAIL_TOOLS)
    assert d.kind == "execute" and d.call.name == "get_order_details"
    assert json.loads(d.call.arguments) == {"order_id": "#W1"}
    # Arguments double-encoded as a JSON string.
    d = rules.realize_call("tau2/retail", Call("1", "get_order_details", json.dumps('{"order_id": "#W1"}')), RETAIL_TOOLS)
    assert d.kind == "execute" and json.loads(d.call.arguments) == {"order_id": "#W1"}
    d = rules.realize_call("dbbench", Call("1", "commit_final_answer", '{"answers": "12"}'), DB_TOOLS)
    assert json.loads(d.call.arguments) == {"answers": ["12"]}


def test_unknown_tools_and_broken_arguments_are_blocked_with_feedback():
    d = rules.realize_call("tau2/retail", Call("1", "delete_everything", "{}"), RETAIL_TOOLS)
    assert d.kind == "block" and "delete_everything" in d.text and "get_order_details" in d.text
    d = rules.realize_call("tau2/retail", Call("1", "get_order_details", "{oops"), RETAIL_TOOLS)
    assert d.kind == "block" and "not a JSON object" in d.text
    d = rules.realize_call("dbbench", Call("1", "commit_final_answer", '{"answers": 12}'), DB_TOOLS)
    assert d.kind == "block" and "list of strings" in d.text


def test_calls_written_as_text_are_rescued():
    text = 'I will look it up.\n```json\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n```'
    d = rules.realize_text("tau2/retail", text, RETAIL_TOOLS)
    assert d.kind == "realize" and d.calls[0].name == "get_order_details"
    assert json.loads(d.calls[0].arguments) == {"order_id": "#W1"}
    d = rules.realize_text("tau2/retail", '<tool_call>{"tool": "get_order", "args": {"order_id": "#W1"}}</tool_call>', RETAIL_TOOLS)
    assert d.kind == "realize" and d.calls[0].name == "get_order_details"
    d = rules.realize_text("dbbench", "```sql\nSELECT 1;\n```", DB_TOOLS)
    assert d.calls[0] == Call("text_call", "execute_sql", json.dumps({"query": "SELECT 1;"}))


def test_plain_text_is_left_alone():
    for text in ["Your order is on its way.", "The total is {not json}.", '{"status": "ok"}', "```sql\n```"]:
        assert rules.realize_text("dbbench", text, DB_TOOLS) == rules.PROCEED, text


def test_repeated_failures_get_a_note_and_a_streak_a_recovery_message():
    reg = rules.Regulator()
    fail = Outcome(Call("1", "get_order_details", '{"order_id": "#W9"}'), "Error: not found", True)
    assert reg.after_tools([fail]) == rules.CONTINUE
    second = reg.after_tools([fail])
    assert second.kind == "annotate" and "failed 2 times" in second.text
    third = reg.after_tools([fail])
    assert third.kind == "inject" and "last 3 tool calls failed" in third.text
    ok = Outcome(Call("2", "get_order_details", '{"order_id": "#W1"}'), "{}", False)
    assert reg.after_tools([ok]) == rules.CONTINUE and reg.streak == 0
