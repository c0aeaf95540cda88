"""Virtual, deterministic WASI, answering as the Rust host's
`host/sandbox/src/sandbox/virtual_wasi.rs` does: the clocks and randomness
that language runtimes compiled into a harness (CPython, SpiderMonkey)
import, frozen and seeded so that they give nothing away and answer the same
on every run and in every runtime.

wasmtime-py grants WASI only as a whole (`Linker.add_wasip2`); this module
shadows its clocks, randomness and socket creation with these answers, and
the store's `WasiConfig` grants no directory, variable or argument.

One difference from the host, forced by wasmtime-py: a pollable can only
come from its own WASI, so a guest that sleeps (`subscribe-duration` /
`subscribe-instant`) traps here instead of returning at once.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import wasmtime.component as wc

VIRTUAL_EPOCH_SECONDS = 1_767_225_600
MAX_RANDOM_BYTES = 1 << 20
_MASK = (1 << 64) - 1

#: Interfaces shadowed here, by their name without the version.
SHADOWED = (
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp-create-socket",
)


def episode_seed(domain: str, max_steps: int, max_errors: int) -> int:
    """FNV-1a (64-bit) of `domain \\0 max_steps \\0 max_errors`, as the host."""
    h = 0xCBF29CE484222325
    for byte in f"{domain}\0{max_steps}\0{max_errors}".encode():
        h = ((h ^ byte) * 0x100000001B3) & _MASK
    return h


class SplitMix64:
    """The host's SplitMix64 (`host/sys/src/rng.rs`)."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)


class VirtualWasi:
    """One episode's virtual clocks and randomness."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = SplitMix64(seed)
        self.elapsed_ns = 0

    def bytes(self, length: int) -> bytes:
        if length > MAX_RANDOM_BYTES:
            raise ValueError(f"the guest asked for {length} random bytes in one call (at most {MAX_RANDOM_BYTES})")
        out = bytearray()
        while len(out) < length:
            out += self.rng.next().to_bytes(8, "little")[: length - len(out)]
        return bytes(out)

    def wall_now(self) -> Any:
        rec = wc.Record()
        rec.seconds = VIRTUAL_EPOCH_SECONDS + self.elapsed_ns // 1_000_000_000
        rec.nanoseconds = self.elapsed_ns % 1_000_000_000
        return rec


def _resolution() -> Any:
    rec = wc.Record()
    rec.seconds = 0
    rec.nanoseconds = 1
    return rec


def _no_sleep(*_: Any) -> Any:
    raise RuntimeError(
        "the guest slept: the Python runtime's virtual clock cannot hand out a pollable (the Rust host and the "
        "JavaScript runtime return at once)"
    )


def define(root: Any, imports: Iterable[str], current: Callable[[], VirtualWasi]) -> None:
    """Shadow, in `root` (a linker's root instance, shadowing allowed), every
    interface of `imports` that this module implements. `current()` is the
    running episode's state."""
    funcs = {
        "wasi:clocks/wall-clock": {
            "now": lambda store: current().wall_now(),
            "resolution": lambda store: _resolution(),
        },
        "wasi:clocks/monotonic-clock": {
            "now": lambda store: current().elapsed_ns,
            "resolution": lambda store: 1,
            "subscribe-instant": _no_sleep,
            "subscribe-duration": _no_sleep,
        },
        "wasi:random/random": {
            "get-random-bytes": lambda store, n: current().bytes(n),
            "get-random-u64": lambda store: current().rng.next(),
        },
        "wasi:random/insecure": {
            "get-insecure-random-bytes": lambda store, n: current().bytes(n),
            "get-insecure-random-u64": lambda store: current().rng.next(),
        },
        "wasi:random/insecure-seed": {
            "insecure-seed": lambda store: (current().seed, SplitMix64(current().seed).next()),
        },
        # result<socket, error-code> is an untagged union in wasmtime-py: the
        # enum case's name is the `err`.
        "wasi:sockets/tcp-create-socket": {"create-tcp-socket": lambda store, family: "access-denied"},
        "wasi:sockets/udp-create-socket": {"create-udp-socket": lambda store, family: "access-denied"},
    }
    for name in imports:
        base = name.split("@")[0]
        if base in funcs:
            with root.add_instance(name) as inst:
                for fname, fn in funcs[base].items():
                    inst.add_func(fname, fn)
