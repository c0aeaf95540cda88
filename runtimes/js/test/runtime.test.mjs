import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ContractViolation, Harness, HashMismatch, LoadError, Poisoned, Trap, UnsupportedWorld } from "../dist/index.js";
import { JS, TOOLS } from "./helpers.mjs";

const CALL = { tag: "call", val: { id: "c1", name: "get_order_details", arguments: '{"order_id":"#W1"}' } };

test("load verifies the hash and refuses an unknown world", async () => {
  const good = await Harness.load(join(JS, "template"));
  const manifest = JSON.parse(readFileSync(join(JS, "template", "harness.json"), "utf8"));
  assert.equal(good.hash, manifest.hash);
  assert.equal(good.limits.deadline_ms, manifest.limits.deadline_ms);
  const tmp = mkdtempSync(join(tmpdir(), "ecdysis-js-"));
  cpSync(join(JS, "template"), join(tmp, "t"), { recursive: true });
  const wasm = readFileSync(join(tmp, "t", "harness.wasm"));
  wasm[wasm.length - 1] ^= 0xff;
  writeFileSync(join(tmp, "t", "harness.wasm"), wasm);
  await assert.rejects(Harness.load(join(tmp, "t")), HashMismatch);
  cpSync(join(JS, "template"), join(tmp, "w"), { recursive: true });
  writeFileSync(join(tmp, "w", "harness.json"), JSON.stringify({ ...manifest, world: "ecdysis:harness/harness@0.2.0" }));
  await assert.rejects(Harness.load(join(tmp, "w")), (e) => e instanceof UnsupportedWorld && /0\.2\.0/.test(e.message));
});

test("the template answers every hook within the contract", async () => {
  const h = await Harness.load(join(JS, "template"));
  const ep = await h.episode("tau2/retail", 200, 10);
  try {
    const out = await ep.contract({ domain: "tau2/retail", systemPrompt: "You are a retail agent.", tools: TOOLS });
    assert.ok(out.systemPrompt.startsWith("You are a retail agent."));
    assert.ok(Array.isArray(await ep.skills({ domain: "tau2/retail", firstUserMessage: "Cancel order #W1." })));
    assert.deepEqual(await ep.realize(CALL), { tag: "proceed" });
    const rescued = await ep.realize({
      tag: "text",
      val: '```json\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n```',
    });
    assert.equal(rescued.tag, "realize");
    assert.equal(rescued.val[0].name, "get_order_details");
    const reg = await ep.regulate({ step: 3, stepsLeft: 197, errorsLeft: 10, kind: "user-message", text: "thanks", outcomes: [] });
    assert.deepEqual(reg, { tag: "continue" });
    assert.deepEqual(ep.records.map((r) => r.hook), ["constructor", "contract", "skills", "realize", "realize", "regulate"]);
  } finally {
    await ep.close();
  }
});

test("switched-off layers are not called", async () => {
  // harness.json `layers` from `export --layers contract,skills`.
  const two = await Harness.load(join(JS, "template-two-layers"));
  assert.deepEqual([...two.layers], ["contract", "skills"]);
  const rescue = { tag: "text", val: '```json\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n```' };
  const input = { domain: "tau2/retail", systemPrompt: "You are a retail agent.", tools: TOOLS };
  const ep = await two.episode("tau2/retail", 200, 10);
  try {
    assert.ok((await ep.contract(input)).systemPrompt.startsWith("You are a retail agent."));
    await ep.skills({ domain: "tau2/retail", firstUserMessage: "Cancel order #W1." });
    // The template would rescue this text as a call (see above).
    assert.deepEqual(await ep.realize(rescue), { tag: "proceed" });
    const reg = await ep.regulate({ step: 3, stepsLeft: 197, errorsLeft: 10, kind: "user-message", text: "thanks", outcomes: [] });
    assert.deepEqual(reg, { tag: "continue" });
    assert.deepEqual(ep.records.map((r) => r.hook), ["constructor", "contract", "skills"]);
  } finally {
    await ep.close();
  }
  // A caller's override wins over the manifest (the template learns the
  // episode's tools in its contract hook, so realize needs it on).
  const override = await Harness.load(join(JS, "template-two-layers"), { layers: ["contract", "realize"] });
  const ep2 = await override.episode("tau2/retail", 200, 10);
  try {
    await ep2.contract(input);
    assert.deepEqual(await ep2.skills({ domain: "tau2/retail", firstUserMessage: "Cancel order #W1." }), []);
    assert.equal((await ep2.realize(rescue)).tag, "realize");
    assert.deepEqual(ep2.records.map((r) => r.hook), ["constructor", "contract", "realize"]);
  } finally {
    await ep2.close();
  }
  const none = await Harness.load(join(JS, "template-two-layers"), { layers: [] });
  const ep3 = await none.episode("tau2/retail", 200, 10);
  try {
    assert.deepEqual(await ep3.contract(input), { systemPrompt: "You are a retail agent.", toolDescriptions: [] });
  } finally {
    await ep3.close();
  }
  const tmp = mkdtempSync(join(tmpdir(), "ecdysis-js-"));
  cpSync(join(JS, "template-two-layers"), join(tmp, "b"), { recursive: true });
  const manifest = JSON.parse(readFileSync(join(tmp, "b", "harness.json"), "utf8"));
  writeFileSync(join(tmp, "b", "harness.json"), JSON.stringify({ ...manifest, layers: ["contract", "regulation"] }));
  await assert.rejects(Harness.load(join(tmp, "b")), (e) => e instanceof LoadError && /"regulation"/.test(e.message));
  writeFileSync(join(tmp, "b", "harness.json"), JSON.stringify({ ...manifest, layers: "contract" }));
  await assert.rejects(Harness.load(join(tmp, "b")), (e) => e instanceof LoadError && /list of layer names/.test(e.message));
});

test("the env view answers reads and refuses mutating tools", async () => {
  const seen = [];
  const envView = (name, args) => {
    seen.push([name, args]);
    return '{"order_id": "#W1", "status": "pending"}';
  };
  const good = await Harness.load(join(JS, "hostile", "good"));
  const ep = await good.episode("tau2/retail", 200, 10, { envView, tools: TOOLS });
  assert.deepEqual(await ep.realize({ tag: "text", val: "#W1" }), { tag: "block", val: '{"order_id": "#W1", "status": "pending"}' });
  assert.deepEqual(seen, [["get_order_details", { order_id: "#W1" }]]);
  await ep.close();
  seen.length = 0;
  const hostile = await Harness.load(join(JS, "hostile", "mutating-env-view"));
  const bad = await hostile.episode("tau2/retail", 200, 10, { envView, tools: TOOLS });
  await assert.rejects(bad.realize(CALL), (e) => e instanceof ContractViolation && e.violation === "mutating_via_env_view");
  assert.deepEqual(seen, [], "a mutating tool must never reach the environment");
});

test("fail-open proceeds neutrally, fail-closed rejects", async () => {
  const open = await Harness.load(join(JS, "hostile", "panic"), { policy: "fail-open" });
  const ep = await open.episode("d", 10, 10, { tools: TOOLS });
  assert.deepEqual(await ep.realize(CALL), { tag: "proceed" });
  assert.ok(ep.records.at(-1).error instanceof Trap);
  assert.deepEqual(await ep.realize(CALL), { tag: "proceed" });
  assert.ok(ep.records.at(-1).error instanceof Poisoned);
  const closed = await Harness.load(join(JS, "hostile", "panic"));
  const ep2 = await closed.episode("d", 10, 10, { tools: TOOLS });
  await assert.rejects(ep2.realize(CALL), (e) => e instanceof Trap && /panicked on purpose/.test(e.message));
});
