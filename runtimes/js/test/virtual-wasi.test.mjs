// The virtual WASI's seed and random stream equal the Rust host's
// (virtual_wasi::tests::the_cross_runtime_vector_holds) and the Python
// runtime's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MAX_RANDOM_BYTES, SplitMix64, VirtualWasi, episodeSeed } from "../dist/virtual-wasi.js";

test("the cross-runtime vector holds", () => {
  const seed = episodeSeed("tau2/retail", 30, 10);
  assert.equal(seed, 0xb8c0dfcbe7b30f65n);
  assert.equal(Buffer.from(new VirtualWasi(seed).bytes(12n)).toString("hex"), "387d7f4dfd5fcadefaaddb5c");
  // Vigna's reference splitmix64 for seed 0.
  assert.equal(new SplitMix64(0n).next(), 0xe220a8397b1dcdafn);
});

test("random bytes are capped and the clock is frozen until the guest sleeps", () => {
  const v = new VirtualWasi(7n);
  assert.throws(() => v.bytes(MAX_RANDOM_BYTES + 1n), /random bytes/);
  class Pollable {}
  const imports = v.imports(Pollable);
  const mono = imports["wasi:clocks/monotonic-clock"];
  const wall = imports["wasi:clocks/wall-clock"];
  assert.equal(mono.now(), 0n);
  assert.deepEqual(wall.now(), { seconds: 1767225600n, nanoseconds: 0 });
  assert.ok(mono.subscribeDuration(3_600_000_000_000n) instanceof Pollable);
  assert.equal(mono.now(), 3_600_000_000_000n);
  assert.deepEqual(wall.now(), { seconds: 1767225600n + 3600n, nanoseconds: 0 });
  assert.throws(() => imports["wasi:sockets/tcp-create-socket"].createTcpSocket("ipv4"), (e) => e === "access-denied");
  assert.deepEqual(imports["wasi:filesystem/preopens"].getDirectories(), []);
});
