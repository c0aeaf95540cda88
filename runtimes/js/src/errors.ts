/**
 * Typed errors, one class per kind of the Rust host's `SandboxError`; `kind`
 * is the same string the Rust host records.
 */

export class HarnessError extends Error {
  kind = "harness";
  hook?: string;
  constructor(message: string, hook?: string) {
    super(message);
    this.name = new.target.name;
    this.hook = hook;
  }
}

/** The harness could not be loaded (nothing ran). */
export class LoadError extends HarnessError {
  kind = "load";
}
/** harness.wasm does not hash to harness.json's blake3, or the transpiled
 * code was made from another component. */
export class HashMismatch extends LoadError {
  kind = "hash_mismatch";
}
/** The component implements a WIT world this runtime does not. */
export class UnsupportedWorld extends LoadError {
  kind = "unsupported_world";
}
/** The component imports something the sandbox does not grant. */
export class LinkError extends LoadError {
  kind = "link";
}
export class CompileError extends LoadError {
  kind = "compile";
}

/** A hook call failed; the episode's worker is not called again. */
export class HookError extends HarnessError {}
/** The hook passed its deadline; its worker was terminated. jco runs the
 * guest on V8, which has no fuel metering: a guest that loops forever is
 * stopped by this deadline, not by fuel. */
export class DeadlineExceeded extends HookError {
  kind = "deadline";
}
export class MemoryLimit extends HookError {
  kind = "memory_limit";
}
export class StackOverflow extends HookError {
  kind = "stack_overflow";
}
/** The guest trapped (a panic, an `unreachable`); the message carries its
 * captured stderr (a Rust panic message). */
export class Trap extends HookError {
  kind = "trap";
}
export class InstantiateError extends HookError {
  kind = "instantiate";
}
/** The episode already failed and cannot be called again. */
export class Poisoned extends HookError {
  kind = "poisoned";
}
/** The hook answered something the runtime contract forbids; `violation`
 * is the Rust host's violation kind (`unknown_tool`, `arguments_too_large`, `output_too_large`,
 * `mutating_via_env_view`, ...). */
export class ContractViolation extends HookError {
  kind = "contract_violation";
  violation: string;
  constructor(violation: string, message: string, hook?: string) {
    super(message, hook);
    this.violation = violation;
  }
}

/** A replayed hook call did not reproduce its recorded line. */
export class VectorMismatch extends Error {
  constructor(message: string) {
    super(message);
    this.name = "VectorMismatch";
  }
}

const BY_KIND: Record<string, new (message: string, hook?: string) => HookError> = {
  deadline: DeadlineExceeded,
  memory_limit: MemoryLimit,
  stack_overflow: StackOverflow,
  trap: Trap,
  instantiate: InstantiateError,
  poisoned: Poisoned,
};

/** Rebuild a typed error from what a worker reported. */
export function hookError(e: { kind: string; message: string; violation?: string }, hook: string): HookError {
  if (e.kind === "contract_violation") return new ContractViolation(e.violation ?? "", e.message, hook);
  const Cls = BY_KIND[e.kind] ?? Trap;
  return new Cls(e.message, hook);
}
