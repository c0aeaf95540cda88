"""Load a harness component and run its episodes under wasmtime-py, with the
Rust host's safety: fuel per hook, an epoch deadline, a memory limit, a
deny-by-default linker, the same answer checks and the same failure policy.

One `wasmtime.Engine` per `Harness` (the stack cap is an engine setting),
one compiled `Component` and one `Linker`; one `Store` and instance per
`Episode`, never called again after a failure.
"""

from __future__ import annotations

import enum
import json
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import blake3
import wasmtime
import wasmtime.component as wc

from . import checks, virtual_wasi
from .errors import (
    CompileError,
    ContractViolation,
    DeadlineExceeded,
    HarnessError,
    HashMismatch,
    HookError,
    InstantiateError,
    LinkError,
    LoadError,
    MemoryLimit,
    OutOfFuel,
    Poisoned,
    StackOverflow,
    Trap,
    UnsupportedWorld,
)
from .types import (
    ActionDecision,
    AgentAction,
    ContractInput,
    ContractOutput,
    EpisodeInfo,
    Guidance,
    Regulation,
    StepReport,
    TaskView,
    ViewOutput,
    from_canonical,
    neutral_answer,
    to_canonical,
)

#: The world this runtime implements, and the interface a component of it
#: exports (refused otherwise, naming both).
WORLD_VERSION = "ecdysis:harness/harness@0.1.0"
HOOKS_EXPORT = "ecdysis:harness/hooks@0.1.0"
SUPPORTED_WORLDS = (WORLD_VERSION,)
ENV_VIEW_IMPORT = "ecdysis:harness/env-view@0.1.0"
HOST_LOG_IMPORT = "ecdysis:harness/host-log@0.1.0"
#: The `minimal` WASI profile: besides the harness imports, only what a Rust
#: guest's std needs to print a panic. wasmtime-py can only add all of WASI
#: p2, so a component importing anything else is refused before it is
#: linked, naming the import.
GRANTED_IMPORTS = ("wasi:io/", "wasi:cli/", "ecdysis:harness/types@0.1.0", ENV_VIEW_IMPORT, HOST_LOG_IMPORT)
#: What the `virtual` profile (the default) grants besides: frozen clocks
#: and seeded randomness (`virtual_wasi`), and wasmtime-py's filesystem and
#: sockets with no directory granted and socket creation refused.
VIRTUAL_IMPORTS = ("wasi:clocks/", "wasi:random/", "wasi:filesystem/", "wasi:sockets/")
WASI_PROFILES = ("minimal", "virtual")

#: The four layers, named by their hooks, in lifecycle order. A harness runs
#: the ones its harness.json `layers` lists (all four when absent); a
#: switched-off layer's hook is not called and answers neutrally.
LAYERS = ("contract", "skills", "realize", "regulate")


def parse_layers(value: Any, source: str) -> frozenset:
    """The layer set of a harness.json `layers` entry (or a caller's list),
    refusing anything that is not a list of layer names."""
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise LoadError(f"{source}: layers must be a list of layer names, not {value!r}")
    unknown = [v for v in value if v not in LAYERS]
    if unknown:
        raise LoadError(f"{source}: unknown layer {unknown[0]!r} (the layers are {', '.join(LAYERS)})")
    return frozenset(value)


_EPOCH_TICK_S = 0.002
_MAX_LOG_BYTES = 4096


class FailurePolicy(str, enum.Enum):
    """What a failing hook does (trap, fuel, deadline, contract violation)."""

    #: Raise the typed error: the caller ends the episode (`harness_error`).
    FAIL_CLOSED = "fail-closed"
    #: Proceed with the hook's neutral answer; the failure is recorded.
    FAIL_OPEN = "fail-open"


@dataclass(frozen=True)
class Limits:
    """Per-hook limits, the Rust host's defaults unless harness.json says
    otherwise (the limits the harness was trained under)."""

    fuel_per_hook: int = 20_000_000
    deadline_ms: int = 2_000
    memory_bytes: int = 64 << 20
    table_elements: int = 20_000
    instances: int = 16
    max_wasm_stack: int = 512 << 10
    max_output_bytes: int = 256 << 10
    max_list_items: int = checks.MAX_LIST_ITEMS
    env_view_calls_per_hook: int = 64
    log_lines_per_hook: int = 64
    stdio_bytes: int = 64 << 10
    #: Text the hooks of one episode may add to the model's input in all.
    max_added_bytes: int = 64 << 10

    #: The WASI profile: `virtual` (default) or `minimal` (see VIRTUAL_IMPORTS).
    wasi: str = "virtual"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Limits":
        known = {f.name for f in fields(cls)} - {"wasi"}
        wasi = str(data.get("wasi", "virtual"))
        if wasi not in WASI_PROFILES:
            raise ValueError(f"unknown WASI profile `{wasi}` (expected `minimal` or `virtual`)")
        return cls(wasi=wasi, **{k: int(v) for k, v in data.items() if k in known})


@dataclass
class HookRecord:
    """One hook call, as the Rust host's trajectories record it."""

    hook: str
    #: The answer in canonical JSON (the neutral one after a fail-open failure).
    answer: Any
    intervened: bool
    fuel: int
    micros: int
    env_view_calls: int = 0
    logs: List[Tuple[str, str]] = field(default_factory=list)
    error: Optional[HarnessError] = None
    #: Bytes of text the answer put in front of the model.
    added_bytes: int = 0


#: An env-view callable: `(tool_name, arguments) -> text | ViewOutput`.
EnvView = Callable[[str, Dict[str, Any]], Union[str, ViewOutput]]

_CURRENT = threading.local()


class _EpochTicker:
    """Advances the engine's epoch while some hook runs, so deadlines fire
    even in a guest that burns no fuel, without waking an idle process."""

    def __init__(self, engine: wasmtime.Engine):
        self._engine = engine
        self._active = 0
        self._cv = threading.Condition()
        threading.Thread(target=self._run, name="ecdysis-epoch", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._active == 0:
                    self._cv.wait()
            time.sleep(_EPOCH_TICK_S)
            self._engine.increment_epoch()

    def __enter__(self) -> None:
        with self._cv:
            self._active += 1
            self._cv.notify()

    def __exit__(self, *exc: Any) -> None:
        with self._cv:
            self._active -= 1


def _read_manifest(wasm: Path) -> Optional[dict]:
    path = wasm.with_name("harness.json")
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise LoadError(f"{path} is not a harness manifest: {e}") from None


class Harness:
    """A loaded harness component, ready to start episodes."""

    def __init__(
        self,
        wasm: bytes,
        *,
        manifest: Optional[dict] = None,
        limits: Optional[Limits] = None,
        policy: Union[FailurePolicy, str, None] = None,
        layers: Optional[Sequence[str]] = None,
        source: str = "<bytes>",
    ):
        self.source = source
        self.manifest = manifest
        self.hash = blake3.blake3(wasm).hexdigest()
        if manifest is not None:
            expected = str(manifest.get("hash", ""))
            if manifest.get("hash_algorithm", "blake3") != "blake3" or expected != self.hash:
                raise HashMismatch(
                    f"{source}: harness.wasm hashes to blake3 {self.hash}, but harness.json says {expected or '(nothing)'}"
                )
            world = manifest.get("world")
            if world not in SUPPORTED_WORLDS:
                raise UnsupportedWorld(
                    f"{source}: harness.json names world {world!r}; this runtime implements {', '.join(SUPPORTED_WORLDS)}"
                )
        if limits is None:
            limits = Limits.from_json(manifest.get("limits", {})) if manifest else Limits()
        self.limits = limits
        if policy is None:
            policy = (manifest or {}).get("failure_policy", FailurePolicy.FAIL_CLOSED)
        self.policy = FailurePolicy(policy)
        if layers is None:
            layers = (manifest or {}).get("layers", LAYERS)
        #: The layers whose hooks are called (harness.json `layers`).
        self.layers: frozenset = parse_layers(layers, source)

        config = wasmtime.Config()
        config.consume_fuel = True
        config.epoch_interruption = True
        config.max_wasm_stack = limits.max_wasm_stack
        config.wasm_component_model = True
        self._engine = wasmtime.Engine(config)
        try:
            self._component = wc.Component(self._engine, wasm)
        except wasmtime.WasmtimeError as e:
            raise CompileError(f"{source}: cannot compile component: {e}") from None
        self._check_world()
        self._linker = self._make_linker()
        self._ticker = _EpochTicker(self._engine)
        self._types: Dict[str, Tuple[Any, Any]] = {}

    @classmethod
    def load(
        cls,
        path: Union[str, Path],
        *,
        limits: Optional[Limits] = None,
        policy: Union[FailurePolicy, str, None] = None,
        layers: Optional[Sequence[str]] = None,
    ) -> "Harness":
        """Load an exported harness: a directory with harness.wasm and
        harness.json (`ecdysis-host export`), or a .wasm file (its sibling
        harness.json is read when present). The blake3 hash is verified and
        an unknown world refused before anything is compiled."""
        path = Path(path)
        wasm_path = path / "harness.wasm" if path.is_dir() else path
        try:
            wasm = wasm_path.read_bytes()
        except OSError as e:
            raise LoadError(f"cannot read {wasm_path}: {e}") from None
        return cls(
            wasm,
            manifest=_read_manifest(wasm_path),
            limits=limits,
            policy=policy,
            layers=layers,
            source=str(path),
        )

    # -- setup --------------------------------------------------------------

    def _check_world(self) -> None:
        ty = self._component.type
        exports = list(ty.exports(self._engine))
        if HOOKS_EXPORT not in exports:
            raise UnsupportedWorld(
                f"{self.source}: the component exports {exports or 'nothing'}; this runtime implements "
                f"{WORLD_VERSION} (export {HOOKS_EXPORT})"
            )
        granted = GRANTED_IMPORTS + (VIRTUAL_IMPORTS if self.limits.wasi == "virtual" else ())
        for name in ty.imports(self._engine):
            if not name.startswith(granted):
                raise LinkError(
                    f"{self.source}: the component imports `{name}`, which the `{self.limits.wasi}` WASI profile "
                    "does not grant (`virtual` grants frozen clocks, seeded randomness, an empty filesystem and "
                    "refused sockets; nothing grants more)"
                )

    def _make_linker(self) -> wc.Linker:
        linker = wc.Linker(self._engine)
        linker.add_wasip2()
        linker.allow_shadowing = True
        with linker.root() as root:
            virtual_wasi.define(root, self._component.type.imports(self._engine), lambda: _current()._virt)
            with root.add_instance(ENV_VIEW_IMPORT) as view:
                view.add_func("call-read-only", _host_call_read_only)
            with root.add_instance(HOST_LOG_IMPORT) as log:
                log.add_func("log", _host_log)
        return linker

    # -- episodes -----------------------------------------------------------

    def episode(
        self,
        domain: str,
        max_steps: int,
        max_errors: int,
        env_view: Optional[EnvView] = None,
        *,
        tools: Optional[Sequence[Any]] = None,
        policy: Union[FailurePolicy, str, None] = None,
    ) -> "Episode":
        """Start an episode. `env_view(name, arguments)` answers the
        harness's read-only calls (return the text, or a `ViewOutput` with
        `error=True`); mutating tools never reach it. `tools` (ToolSpecs) are
        the episode's tools; by default they are learned from `contract`."""
        ep = Episode(self, env_view, tools, FailurePolicy(policy or self.policy))
        ep._start(EpisodeInfo(domain=domain, max_steps=max_steps, max_errors=max_errors))
        return ep


def _current() -> "Episode":
    ep = getattr(_CURRENT, "episode", None)
    if ep is None:  # pragma: no cover - only reachable through a host bug
        raise RuntimeError("harness import called outside a hook")
    return ep


def _host_call_read_only(store: Any, name: str, arguments: str) -> Any:
    return _current()._call_read_only(name, arguments)


def _host_log(store: Any, level: Any, message: str) -> None:
    _current()._log(str(level), message)


# --- value conversion between canonical JSON and wasmtime-py -----------------


def _classes(ty: Any) -> tuple:
    s: set = set()
    ty.add_classes(s)
    return tuple(s)


def to_wasm(ty: Any, data: Any) -> Any:
    if isinstance(ty, wc.RecordType):
        rec = wc.Record()
        for name, fty in ty.fields:
            setattr(rec, name, to_wasm(fty, data[name]))
        return rec
    if isinstance(ty, wc.ListType):
        return [to_wasm(ty.element, x) for x in data]
    if isinstance(ty, wc.OptionType):
        return None if data is None else to_wasm(ty.payload, data)
    if isinstance(ty, (wc.VariantType, wc.ResultType)):
        for name, cty in ty._cases():
            if name == data["tag"]:
                payload = None if cty is None else to_wasm(cty, data["val"])
                return wc.Variant(name, payload) if ty._tagged() else payload
        raise ValueError(f"no case {data['tag']!r}")
    return data  # string, bool, integers, enum names, resources


def from_wasm(ty: Any, value: Any) -> Any:
    if isinstance(ty, wc.RecordType):
        return {name: from_wasm(fty, getattr(value, name)) for name, fty in ty.fields}
    if isinstance(ty, wc.ListType):
        return [from_wasm(ty.element, x) for x in value]
    if isinstance(ty, wc.OptionType):
        return None if value is None else from_wasm(ty.payload, value)
    if isinstance(ty, (wc.VariantType, wc.ResultType)):
        cases = ty._cases()
        if ty._tagged():
            tag, payload = value.tag, value.payload
        else:
            for tag, cty in cases:
                if cty is None and value is None:
                    break
                if cty is not None and isinstance(value, _classes(cty)):
                    break
            else:
                raise ValueError(f"value {value!r} fits no case")
            payload = value
        cty = dict(cases)[tag]
        return {"tag": tag} if cty is None else {"tag": tag, "val": from_wasm(cty, payload)}
    return value


# --- episodes ------------------------------------------------------------------

_RESULT_TYPES = {
    "contract": ContractOutput,
    "skills": List[Guidance],
    "realize": ActionDecision,
    "regulate": Regulation,
}


class Episode:
    """One episode's harness instance. Hook methods take and return the
    dataclasses of `ecdysis_harness.types`. Under `fail-closed` a failing
    hook raises its typed `HookError`; under `fail-open` it returns the
    neutral answer. Every call is in `records`; `last` has the last call's
    fuel, time, env-view calls and log lines."""

    def __init__(
        self,
        harness: Harness,
        env_view: Optional[EnvView],
        tools: Optional[Sequence[Any]],
        policy: FailurePolicy,
    ):
        self.harness = harness
        self.policy = policy
        self.records: List[HookRecord] = []
        self.last: Optional[HookRecord] = None
        self._env_view = env_view
        self._tools: Optional[Dict[str, bool]] = (
            {t.name: bool(t.mutates) for t in tools} if tools is not None else None
        )
        self._poisoned = False
        self._closed = False
        #: Bytes of text this episode's answers have added to the model's input.
        self.added_bytes = 0
        self._resource: Any = None
        self._stderr = bytearray()
        self._funcs: Dict[str, Any] = {}
        # Per-hook scratch, reset before every call.
        self._view_count = 0
        self._logs: List[Tuple[str, str]] = []
        self._violation: Optional[ContractViolation] = None
        #: Env-view calls of the last hook with their canonical answers.
        self.view_log: List[dict] = []

        limits = harness.limits
        self._store = wasmtime.Store(harness._engine)
        self._store.set_limits(
            memory_size=limits.memory_bytes,
            table_elements=limits.table_elements,
            instances=limits.instances,
            tables=limits.instances,
            memories=limits.instances,
        )
        wasi = wasmtime.WasiConfig()
        # No args, env vars or preopened directories; stdout is discarded,
        # stderr kept (capped) so a panic message can be reported.
        wasi.stdout_custom = lambda data: None
        wasi.stderr_custom = self._capture_stderr
        self._store.set_wasi(wasi)

    # -- plumbing -----------------------------------------------------------

    def _capture_stderr(self, data: bytes) -> None:
        room = self.harness.limits.stdio_bytes - len(self._stderr)
        if room > 0:
            self._stderr.extend(data[:room])

    def _arm(self) -> None:
        limits = self.harness.limits
        self._store.set_fuel(limits.fuel_per_hook)
        ticks = max(1, int(limits.deadline_ms / 1000 / _EPOCH_TICK_S))
        self._store.set_epoch_deadline(ticks)

    def _classify(self, hook: str, exc: BaseException) -> BaseException:
        limits = self.harness.limits
        if isinstance(exc, ContractViolation):
            exc.hook = hook
            return exc
        if self._violation is not None:
            self._violation.hook = hook
            return self._violation
        if not isinstance(exc, wasmtime.WasmtimeError):
            return exc  # the caller's own env-view callable raised
        message = str(exc)
        stderr = self._stderr.decode("utf-8", "replace").strip()
        if "memory allocation of" in stderr and "failed" in stderr:
            # A Rust guest whose allocation fails prints this and aborts:
            # the store's memory limit refused to grow its memory.
            return MemoryLimit(f"hook `{hook}` hit the memory limit of {limits.memory_bytes} bytes", hook)
        if "all fuel consumed" in message:
            return OutOfFuel(f"hook `{hook}` ran out of fuel (budget {limits.fuel_per_hook})", hook)
        if "wasm trap: interrupt" in message:
            return DeadlineExceeded(f"hook `{hook}` passed its deadline of {limits.deadline_ms} ms", hook)
        if "call stack exhausted" in message:
            return StackOverflow(f"hook `{hook}` overflowed the wasm stack", hook)
        trap = message.strip()
        return Trap(f"hook `{hook}` trapped: {stderr + chr(10) if stderr else ''}{trap}", hook)

    def _call(self, hook: str, *args: Any) -> Tuple[Any, Any, int, float]:
        """Call an export under fresh fuel and deadline; returns the raw
        result, its type, the fuel burned and the seconds taken."""
        if self._poisoned:
            raise Poisoned("the episode's harness instance already failed and cannot be called again", hook)
        self._view_count = 0
        self._logs = []
        self._violation = None
        self.view_log = []
        func, (param_ty, result_ty) = self._funcs[hook], self.harness._types[hook]
        store = self._store
        self._arm()
        previous = getattr(_CURRENT, "episode", None)
        _CURRENT.episode = self
        started = time.perf_counter()
        try:
            with self.harness._ticker:
                raw = func(store, *args[:-1], to_wasm(param_ty, args[-1]))
                func.post_return(store)
        except BaseException as e:  # noqa: BLE001 - classified and re-raised
            self._poisoned = True
            raise self._classify(hook, e) from None
        finally:
            _CURRENT.episode = previous
        elapsed = time.perf_counter() - started
        fuel = self.harness.limits.fuel_per_hook - store.get_fuel()
        return raw, result_ty, fuel, elapsed

    def _start(self, info: EpisodeInfo) -> None:
        """Instantiate and run the constructor (policy applied)."""
        try:
            self._start_canonical(to_canonical(info))
        except HookError as e:
            self._fail("constructor", e, None)
            if self.policy is FailurePolicy.FAIL_CLOSED:
                raise

    def _start_canonical(self, info: Any) -> None:
        harness = self.harness
        # Seeded from the episode info, as the host seeds it.
        self._virt = virtual_wasi.VirtualWasi(
            virtual_wasi.episode_seed(info["domain"], info["max-steps"], info["max-errors"])
        )
        self._arm()
        previous = getattr(_CURRENT, "episode", None)
        _CURRENT.episode = self
        try:
            with harness._ticker:
                instance = harness._linker.instantiate(self._store, harness._component)
        except BaseException as e:  # noqa: BLE001
            self._poisoned = True
            err = self._classify("instantiate", e)
            if isinstance(err, Trap):
                err = InstantiateError(f"cannot instantiate component: {e}", "instantiate")
            raise err from None
        finally:
            _CURRENT.episode = previous
        hooks = instance.get_export_index(self._store, HOOKS_EXPORT)
        names = {
            "constructor": "[constructor]episode",
            "contract": "[method]episode.contract",
            "skills": "[method]episode.skills",
            "realize": "[method]episode.realize",
            "regulate": "[method]episode.regulate",
        }
        for hook, export in names.items():
            func = instance.get_func(self._store, instance.get_export_index(self._store, export, hooks))
            if func is None:
                raise UnsupportedWorld(f"{harness.source}: the component lacks `{export}`")
            self._funcs[hook] = func
            if hook not in harness._types:
                fty = func.type(self._store)
                harness._types[hook] = (fty.params[-1][1], fty.result)
        raw, _, fuel, elapsed = self._call("constructor", info)
        self._resource = raw
        self._record("constructor", None, False, fuel, elapsed)

    def _record(self, hook: str, answer: Any, intervened: bool, fuel: int, elapsed: float) -> None:
        rec = HookRecord(
            hook=hook,
            answer=answer,
            intervened=intervened,
            fuel=fuel,
            micros=int(elapsed * 1e6),
            env_view_calls=self._view_count,
            logs=list(self._logs),
        )
        self.records.append(rec)
        self.last = rec

    def _fail(self, hook: str, error: HarnessError, neutral: Any) -> None:
        rec = HookRecord(hook=hook, answer=neutral, intervened=False, fuel=0, micros=0, error=error)
        self.records.append(rec)
        self.last = rec

    def invoke(self, hook: str, argument: Any) -> Any:
        """Call a hook with its argument in canonical JSON and return its
        checked answer in canonical JSON (raises the typed error; no
        policy). What conformance replays use."""
        if hook == "contract" and self._tools is None:
            self._tools = {t["name"]: bool(t["mutates"]) for t in argument["tools"]}
        raw, result_ty, fuel, elapsed = self._call(hook, self._resource, argument)
        answer = from_wasm(result_ty, raw)
        tools = set(self._tools or ())
        cap = self.harness.limits.max_output_bytes
        try:
            if hook == "contract":
                checks.check_contract(answer, tools, cap)
            elif hook == "skills":
                checks.check_skills(answer, cap)
            elif hook == "realize":
                checks.check_decision(argument, answer, tools, cap)
            elif hook == "regulate":
                checks.check_regulation(answer, tools, cap)
            added = checks.added_bytes(hook, argument, answer)
            self.added_bytes += added
            checks.check_added(self.added_bytes, self.harness.limits.max_added_bytes)
        except ContractViolation as v:
            # A contract breach is a failed call like a trap: the instance
            # is not trusted again this episode.
            self._poisoned = True
            v.hook = hook
            raise
        self._record(hook, answer, not _is_neutral(hook, argument, answer), fuel, elapsed)
        self.last.added_bytes = added
        return answer

    def _hook(self, hook: str, argument: Any) -> Any:
        if hook not in self.harness.layers:
            # Switched off: not called, not recorded; the episode's tools
            # are still learned from the contract's input.
            if hook == "contract" and self._tools is None:
                self._tools = {t.name: bool(t.mutates) for t in argument.tools}
            return neutral_answer(hook, argument)
        try:
            answer = self.invoke(hook, to_canonical(argument))
        except HookError as e:
            neutral = neutral_answer(hook, argument)
            self._fail(hook, e, to_canonical(neutral))
            if self.policy is FailurePolicy.FAIL_OPEN:
                return neutral
            raise
        return from_canonical(_RESULT_TYPES[hook], answer)

    # -- the four hooks -----------------------------------------------------

    def contract(self, input: ContractInput) -> ContractOutput:
        """Environment contract: system prompt and tool descriptions."""
        return self._hook("contract", input)

    def skills(self, view: TaskView) -> List[Guidance]:
        """Procedural skills: guidance blocks for the episode."""
        return self._hook("skills", view)

    def realize(self, action: AgentAction) -> ActionDecision:
        """Action realization: what happens to a proposed action."""
        return self._hook("realize", action)

    def regulate(self, report: StepReport) -> Regulation:
        """Trajectory regulation after a step."""
        return self._hook("regulate", report)

    @property
    def failed(self) -> bool:
        """True once a hook failed (the instance is not called again)."""
        return self._poisoned

    def close(self) -> None:
        """Run the guest's destructor (under the usual limits) and release
        the instance. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._resource is not None and not self._poisoned:
            try:
                self._arm()
                with self.harness._ticker:
                    self._resource.drop(self._store)
            except Exception:  # noqa: BLE001 - the episode is over anyway
                pass
        self._resource = None
        self._funcs = {}

    def __enter__(self) -> "Episode":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- host side of the imports -----------------------------------------

    def _violate(self, kind: str, message: str) -> ContractViolation:
        self._violation = ContractViolation(kind, message)
        return self._violation

    def _call_read_only(self, name: str, arguments: str) -> Any:
        answer = self._answer_read_only(name, arguments)
        self.view_log.append({"name": name, "arguments": checks.logged_arguments(arguments), "answer": answer})
        if answer["tag"] == "ok":
            return answer["val"]
        # result<string, view-error> is an untagged union in wasmtime-py:
        # `ok` is the bare string, `err` the view-error variant.
        err = answer["val"]
        return wc.Variant(err["tag"], err["val"])

    def _answer_read_only(self, name: str, arguments: str) -> dict:
        limits = self.harness.limits
        self._view_count += 1
        if self._view_count > limits.env_view_calls_per_hook:
            raise self._violate(
                "env_view_quota", f"made more than {limits.env_view_calls_per_hook} env-view calls in one hook"
            )
        # The host's work per call is bounded before anything is parsed
        # (host_state.rs, the same cap as a harness-written call's).
        size = checks.utf8_len(arguments)
        if size > checks.MAX_TOOL_ARGUMENT_BYTES:
            return _view_err(
                "invalid-arguments",
                f"arguments are {size} bytes, over the env view's cap of {checks.MAX_TOOL_ARGUMENT_BYTES}",
            )
        mutates = (self._tools or {}).get(name)
        if mutates is None:
            return _view_err("unknown-tool", name)
        if mutates:
            raise self._violate(
                "mutating_via_env_view", f"tried to call mutating tool `{name}` through the read-only env view"
            )
        try:
            parsed = checks.parse_json(arguments)
        except ValueError as e:
            return _view_err("invalid-arguments", str(e))
        if not isinstance(parsed, dict):
            return _view_err("invalid-arguments", f"expected a JSON object, got {checks.json_kind(parsed)}")
        if self._env_view is None:
            return _view_err("tool-error", "this runtime was given no environment view")
        out = self._env_view(name, parsed)
        if isinstance(out, ViewOutput):
            return _view_err("tool-error", out.content) if out.error else {"tag": "ok", "val": out.content}
        return {"tag": "ok", "val": str(out)}

    def _log(self, level: str, message: str) -> None:
        if len(self._logs) >= self.harness.limits.log_lines_per_hook:
            return
        raw = message.encode("utf-8")
        if len(raw) > _MAX_LOG_BYTES:
            message = raw[:_MAX_LOG_BYTES].decode("utf-8", "ignore") + "…"
        self._logs.append((level, message))


def _view_err(case: str, text: str) -> dict:
    return {"tag": "err", "val": {"tag": case, "val": text}}


def _is_neutral(hook: str, argument: Any, answer: Any) -> bool:
    if hook == "contract":
        return answer["system-prompt"] == argument["system-prompt"] and not answer["tool-descriptions"]
    if hook == "skills":
        return not answer
    if hook == "realize":
        return answer == {"tag": "proceed"}
    if hook == "regulate":
        return answer == {"tag": "continue"}
    return True
