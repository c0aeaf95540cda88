/**
 * Virtual, deterministic WASI, answering as the Rust host's
 * `host/sandbox/src/sandbox/virtual_wasi.rs` does: the clocks, randomness,
 * filesystem and sockets that language runtimes compiled into a harness
 * (CPython, SpiderMonkey) import, implemented so that they give nothing away
 * and answer the same on every run and in every runtime.
 *
 * - clocks: frozen at VIRTUAL_EPOCH_SECONDS (wall) and 0 (monotonic); they
 *   advance only when the guest sleeps, by what it asked for, at once;
 * - randomness: SplitMix64 seeded with FNV-1a of the episode info;
 * - filesystem: no preopened directory;
 * - sockets and name lookup: refused with `access-denied`.
 */

export const VIRTUAL_EPOCH_SECONDS = 1_767_225_600n;
export const MAX_RANDOM_BYTES = 1n << 20n;
const MASK = (1n << 64n) - 1n;

/** The one network resource class (`instance-network` hands out one). */
class Network {}

/** FNV-1a (64-bit) of `domain \0 max_steps \0 max_errors`, as the host. */
export function episodeSeed(domain: string, maxSteps: number, maxErrors: number): bigint {
  let hash = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(`${domain}\0${maxSteps}\0${maxErrors}`, "utf8")) {
    hash ^= BigInt(byte);
    hash = (hash * 0x100000001b3n) & MASK;
  }
  return hash;
}

/** The host's SplitMix64 (`host/sys/src/rng.rs`). */
export class SplitMix64 {
  constructor(private state: bigint) {}
  next(): bigint {
    this.state = (this.state + 0x9e3779b97f4a7c15n) & MASK;
    let z = this.state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
    return z ^ (z >> 31n);
  }
}

/** One episode's virtual interfaces, as a jco import object; `Pollable` is
 * the runtime's always-ready pollable class. */
export class VirtualWasi {
  private elapsedNs = 0n;
  private rng: SplitMix64;

  constructor(private readonly seed: bigint) {
    this.rng = new SplitMix64(seed);
  }

  bytes(len: bigint): Uint8Array {
    if (len > MAX_RANDOM_BYTES) {
      throw new Error(`the guest asked for ${len} random bytes in one call (at most ${MAX_RANDOM_BYTES})`);
    }
    const out = new Uint8Array(Number(len));
    for (let i = 0; i < out.length; i += 8) {
      let word = this.rng.next();
      for (let j = i; j < Math.min(i + 8, out.length); j++) {
        out[j] = Number(word & 0xffn);
        word >>= 8n;
      }
    }
    return out;
  }

  imports(Pollable: new () => unknown): Record<string, Record<string, unknown>> {
    const sleep = (ns: bigint) => {
      this.elapsedNs += ns;
      return new Pollable();
    };
    const denied = (): never => {
      throw "access-denied"; // jco turns a thrown payload into `err`
    };
    class Unreachable {
      constructor() {
        throw new Error("no such resource can exist under the virtual WASI");
      }
    }
    return {
      "wasi:clocks/monotonic-clock": {
        now: () => this.elapsedNs,
        resolution: () => 1n,
        subscribeInstant: (when: bigint) => sleep(when > this.elapsedNs ? when - this.elapsedNs : 0n),
        subscribeDuration: (ns: bigint) => sleep(ns),
      },
      "wasi:clocks/wall-clock": {
        now: () => ({
          seconds: VIRTUAL_EPOCH_SECONDS + this.elapsedNs / 1_000_000_000n,
          nanoseconds: Number(this.elapsedNs % 1_000_000_000n),
        }),
        resolution: () => ({ seconds: 0n, nanoseconds: 1 }),
      },
      "wasi:random/random": { getRandomBytes: (len: bigint) => this.bytes(len), getRandomU64: () => this.rng.next() },
      "wasi:random/insecure": {
        getInsecureRandomBytes: (len: bigint) => this.bytes(len),
        getInsecureRandomU64: () => this.rng.next(),
      },
      "wasi:random/insecure-seed": { insecureSeed: () => [this.seed, new SplitMix64(this.seed).next()] },
      "wasi:filesystem/types": {
        Descriptor: Unreachable,
        DirectoryEntryStream: Unreachable,
        filesystemErrorCode: () => undefined,
      },
      "wasi:filesystem/preopens": { getDirectories: () => [] },
      "wasi:sockets/network": { Network, networkErrorCode: () => undefined },
      "wasi:sockets/instance-network": { instanceNetwork: () => new Network() },
      "wasi:sockets/tcp": { TcpSocket: Unreachable },
      "wasi:sockets/tcp-create-socket": { createTcpSocket: denied },
      "wasi:sockets/udp": {
        UdpSocket: Unreachable,
        IncomingDatagramStream: Unreachable,
        OutgoingDatagramStream: Unreachable,
      },
      "wasi:sockets/udp-create-socket": { createUdpSocket: denied },
      "wasi:sockets/ip-name-lookup": { ResolveAddressStream: Unreachable, resolveAddresses: denied },
    };
  }
}
