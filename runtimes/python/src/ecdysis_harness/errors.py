"""Typed errors, one class per kind of the Rust host's `SandboxError`.

`kind` is the same string the Rust host records (`out_of_fuel`, `deadline`,
`memory_limit`, `stack_overflow`, `trap`, `contract_violation`, `poisoned`,
...), so trajectories and conformance vectors compare across runtimes.
"""

from __future__ import annotations

from typing import Optional


class HarnessError(Exception):
    """Base class of everything this package raises about a harness."""

    kind = "harness"

    def __init__(self, message: str, hook: Optional[str] = None):
        super().__init__(message)
        self.hook = hook


# --- loading -----------------------------------------------------------------


class LoadError(HarnessError):
    """The harness could not be loaded (nothing ran)."""

    kind = "load"


class HashMismatch(LoadError):
    """harness.wasm does not hash to the blake3 digest of harness.json."""

    kind = "hash_mismatch"


class UnsupportedWorld(LoadError):
    """The component implements a WIT world this runtime does not."""

    kind = "unsupported_world"


class CompileError(LoadError):
    kind = "compile"


class LinkError(LoadError):
    """The component imports something the sandbox does not grant."""

    kind = "link"


class InstantiateError(HarnessError):
    kind = "instantiate"


# --- hook failures -------------------------------------------------------------


class HookError(HarnessError):
    """A hook call failed; the episode's instance is not called again."""


class OutOfFuel(HookError):
    kind = "out_of_fuel"


class DeadlineExceeded(HookError):
    kind = "deadline"


class MemoryLimit(HookError):
    kind = "memory_limit"


class StackOverflow(HookError):
    kind = "stack_overflow"


class Trap(HookError):
    """The guest trapped (a panic, an `unreachable`); the message carries the
    guest's captured stderr (a Rust panic message) and the trap."""

    kind = "trap"


class Poisoned(HookError):
    """The episode's instance already failed and cannot be called again."""

    kind = "poisoned"


class ContractViolation(HookError):
    """The hook answered something the runtime contract forbids.

    `violation` is the Rust host's violation kind: `unknown_tool`,
    `arguments_not_object`, `arguments_too_large`, `empty_call_id`, `output_too_large`,
    `unknown_tool_description`, `decision_for_wrong_action`,
    `mutating_via_env_view`, `env_view_quota`, `empty_realization`,
    `too_many_items`.
    """

    kind = "contract_violation"

    def __init__(self, violation: str, message: str, hook: Optional[str] = None):
        super().__init__(message, hook)
        self.violation = violation


class VectorMismatch(AssertionError):
    """A replayed hook call did not reproduce its recorded line."""
