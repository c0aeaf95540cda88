"""Every hostile guest ends in its typed error; the runtime survives and a
good guest works right after (the positive control)."""

import time

import pytest

from conftest import sample_tools
from ecdysis_harness import (
    Block, CallAction, ContractViolation, DeadlineExceeded, Execute, Harness, Limits, LinkError,
    MemoryLimit, OutOfFuel, Poisoned, StackOverflow, ToolCall, ToolSpec, Trap,
)

CALL = CallAction(ToolCall("call_7", "get_order_details", '{"order_id":"#W1"}'))
# The Rust sandbox tests' limits: tight enough for the guests to hit quickly.
LIMITS = Limits(fuel_per_hook=50_000_000, deadline_ms=20_000, memory_bytes=32 << 20)


def attack(fixtures, feature, limits=LIMITS):
    harness = Harness.load(fixtures / "hostile" / f"{feature}.wasm", limits=limits)
    with harness.episode("tau2/retail", 200, 10, env_view=lambda n, a: "{}", tools=sample_tools()) as ep:
        with pytest.raises(Exception) as err:
            ep.realize(CALL)
        with pytest.raises(Poisoned):
            ep.realize(CALL)
    positive_control(fixtures)
    return err.value


def positive_control(fixtures):
    good = Harness.load(fixtures / "hostile" / "good.wasm", limits=LIMITS)
    with good.episode("tau2/retail", 200, 10, tools=sample_tools()) as ep:
        assert ep.realize(CALL) == Execute(CALL.call)


@pytest.mark.parametrize(
    "feature,error,violation",
    [
        ("infinite-loop", OutOfFuel, None),
        ("memory-bomb", MemoryLimit, None),
        ("deep-recursion", StackOverflow, None),
        ("panic", Trap, None),
        ("huge-output", ContractViolation, "output_too_large"),
        ("unknown-tool", ContractViolation, "unknown_tool"),
        ("bad-json-args", ContractViolation, "arguments_not_object"),
        ("huge-args", ContractViolation, "arguments_too_large"),
        ("mutating-env-view", ContractViolation, "mutating_via_env_view"),
        ("env-view-flood", ContractViolation, "env_view_quota"),
    ],
)
def test_each_attack_ends_in_its_typed_error(fixtures, feature, error, violation):
    err = attack(fixtures, feature)
    assert type(err) is error, f"{feature}: {type(err).__name__}: {err}"
    assert err.hook == "realize"
    if violation:
        assert err.violation == violation


def test_an_unmetered_loop_hits_the_deadline(fixtures):
    err = attack(fixtures, "infinite-loop", Limits(fuel_per_hook=10**15, deadline_ms=300))
    assert isinstance(err, DeadlineExceeded)


def test_a_guest_importing_a_clock_is_refused_under_the_minimal_profile(fixtures):
    with pytest.raises(LinkError, match="wasi:clocks.*`minimal` WASI profile"):
        Harness.load(fixtures / "hostile" / "wants-clock.wasm", limits=Limits(wasi="minimal"))
    positive_control(fixtures)


def test_a_guest_reading_the_clock_sees_the_frozen_virtual_time(fixtures):
    # The default profile: the clock is the host's frozen virtual one.
    harness = Harness.load(fixtures / "hostile" / "wants-clock.wasm", limits=LIMITS)
    readings = []
    for _ in range(2):
        with harness.episode("tau2/retail", 200, 10, tools=sample_tools()) as ep:
            readings.append(ep.realize(CALL))
        time.sleep(0.02)
    assert isinstance(readings[0], Block) and "tv_sec: 1767225600" in readings[0].text, readings[0]
    assert readings[0] == readings[1]
    positive_control(fixtures)


def test_an_unknown_wasi_profile_is_refused_naming_it():
    with pytest.raises(ValueError, match="`full`"):
        Limits.from_json({"wasi": "full"})


def test_env_view_arguments_over_the_cap_are_refused_before_any_work(fixtures):
    # calc-bomb asks `calculate` 64 times for 300 factors of 4000 digits
    # (1.2 MB of arguments): each is refused at the 64 KiB cap with the
    # Rust host's error, and the environment is never called.
    expression = "*".join(["9" * 4000] * 300)
    size = len('{"expression":"%s"}' % expression)
    asked = []
    harness = Harness.load(fixtures / "hostile" / "calc-bomb.wasm", limits=LIMITS)
    tools = sample_tools() + [ToolSpec("calculate", "Calculate.", '{"type":"object"}', False)]
    started = time.monotonic()
    with harness.episode("tau2/retail", 200, 10, env_view=lambda n, a: asked.append(n) or "0", tools=tools) as ep:
        answer = ep.realize(CALL)
    assert time.monotonic() - started < 20
    assert isinstance(answer, Block), answer
    assert f"arguments are {size} bytes, over the env view's cap of 65536" in answer.text, answer.text
    assert asked == []
    positive_control(fixtures)


@pytest.mark.parametrize(
    "feature,hook",
    [
        ("inflate-prompt", "contract"),
        ("inflate-guidance", "skills"),
        ("inflate-block", "realize"),
        ("inflate-inject", "regulate"),
        ("inflate-annotate", "regulate"),
    ],
)
def test_a_harness_that_inflates_the_models_input_is_stopped_at_the_episode_budget(fixtures, feature, hook):
    from ecdysis_harness import ContractInput, StepKind, StepReport, TaskView

    harness = Harness.load(fixtures / "hostile" / f"{feature}.wasm", limits=LIMITS)
    budget = harness.limits.max_added_bytes
    calls = {
        "contract": lambda ep: ep.contract(
            ContractInput("tau2/retail", "You are a customer service agent.", sample_tools())
        ),
        "skills": lambda ep: ep.skills(TaskView("tau2/retail", "I want to cancel order #W1.")),
        "realize": lambda ep: ep.realize(CALL),
        "regulate": lambda ep: ep.regulate(StepReport(1, 199, 10, StepKind.AGENT_MESSAGE, "Let me check.", [])),
    }
    with harness.episode("tau2/retail", 200, 10, env_view=lambda n, a: "{}", tools=sample_tools()) as ep:
        with pytest.raises(ContractViolation) as err:
            for _ in range(64):
                calls[hook](ep)
                assert ep.added_bytes <= budget
        assert err.value.violation == "added_text_over_budget"
        assert err.value.hook == hook
        assert ep.added_bytes > budget
        with pytest.raises(Poisoned):
            ep.realize(CALL)
    positive_control(fixtures)
