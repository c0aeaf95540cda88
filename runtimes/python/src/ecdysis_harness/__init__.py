"""Run a trained Ecdysis runtime harness in a Python agent.

    from ecdysis_harness import Harness, ContractInput, CallAction, ToolCall
    harness = Harness.load("dist/harness")          # harness.wasm + harness.json
    with harness.episode("tau2/retail", 200, 10, env_view=my_read_only_tools) as ep:
        out = ep.contract(ContractInput(domain, system_prompt, tools))
        decision = ep.realize(CallAction(ToolCall(id, name, arguments)))

Same sandbox as the Rust host: fuel per hook, an epoch deadline, a memory
limit, deny-by-default imports, the same answer checks, typed errors and the
fail-closed / fail-open policy.
"""

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
    VectorMismatch,
)
from .runtime import (
    LAYERS,
    SUPPORTED_WORLDS,
    WORLD_VERSION,
    Episode,
    FailurePolicy,
    Harness,
    HookRecord,
    Limits,
)
from .types import (
    ActionDecision,
    AgentAction,
    Annotate,
    Block,
    CallAction,
    ContractInput,
    ContractOutput,
    Continue,
    EpisodeInfo,
    Execute,
    ForceCall,
    Guidance,
    Inject,
    Proceed,
    Realize,
    Regulation,
    StepKind,
    StepReport,
    Stop,
    TaskView,
    TextAction,
    ToolCall,
    ToolDescription,
    ToolOutcome,
    ToolSpec,
    ViewOutput,
    canonical_dumps,
    from_canonical,
    to_canonical,
)

__all__ = [name for name in dir() if not name.startswith("_")]
