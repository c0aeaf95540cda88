"""Canonical JSON and the JSON-object rules match the Rust host's."""

import pytest

from ecdysis_harness import (
    Block, CallAction, ContractInput, Continue, ForceCall, Proceed, Realize, StepKind, StepReport,
    TextAction, ToolCall, ToolOutcome, ToolSpec, canonical_dumps, from_canonical, to_canonical,
)
from ecdysis_harness.checks import arguments_object
from ecdysis_harness.types import ActionDecision, AgentAction, Regulation


def test_canonical_json_is_byte_identical_to_the_rust_hosts():
    report = StepReport(
        step=3, steps_left=7, errors_left=2, kind=StepKind.TOOL_RESULTS, text=None,
        outcomes=[ToolOutcome(ToolCall("c1", "get", '{"a":1}'), "é\u0001\n\t\u007f\u2028\"\\/", False, True)],
    )
    # The same string host/sandbox/src/sandbox/recorder.rs asserts for this value.
    assert canonical_dumps(to_canonical(report)) == (
        '{"step":3,"steps-left":7,"errors-left":2,"kind":"tool-results","text":null,'
        '"outcomes":[{"call":{"id":"c1","name":"get","arguments":"{\\"a\\":1}"},'
        '"content":"é\\u0001\\n\\t\u007f\u2028\\"\\\\/","error":false,"blocked":true}]}'
    )
    assert canonical_dumps(to_canonical(Proceed())) == '{"tag":"proceed"}'


@pytest.mark.parametrize(
    "tp,value",
    [
        (AgentAction, CallAction(ToolCall("1", "t", "{}"))),
        (AgentAction, TextAction("hello")),
        (ActionDecision, Realize([ToolCall("1", "t", "{}")])),
        (ActionDecision, Block("no")),
        (Regulation, ForceCall(ToolCall("f", "t", "{}"))),
        (Regulation, Continue()),
        (ContractInput, ContractInput("d", "p", [ToolSpec("t", "d", "{}", True)])),
        (StepReport, StepReport(0, 1, 2, StepKind.USER_MESSAGE, "hi", [])),
    ],
)
def test_values_round_trip_through_canonical_json(tp, value):
    assert from_canonical(tp, to_canonical(value)) == value


@pytest.mark.parametrize(
    "text,ok",
    [
        ('{"a":1}', True),
        (' {"a":1,"a":2} \n', True),
        ('{"a":NaN}', False),
        ('{"a":1e400}', False),
        ('{"a":"\\ud800"}', False),
        ('{"a":"\\ud83d\\ude00"}', True),
        ('{"a":' + "[" * 126 + "]" * 126 + "}", True),
        ('{"a":' + "[" * 127 + "]" * 127 + "}", False),
        ("[1]", False),
        ('{"a":1}x', False),
        ('\ufeff{}', False),
    ],
)
def test_arguments_are_json_objects_exactly_when_serde_json_says_so(text, ok):
    # Cases checked against serde_json 1.x, the Rust host's parser.
    assert (arguments_object(text)[0] is not None) == ok
