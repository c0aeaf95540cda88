// Every hostile guest ends in its typed error; the caller survives and a
// good guest works right after (the positive control).
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  ContractViolation, DeadlineExceeded, Harness, LinkError, MemoryLimit, Poisoned, StackOverflow, Trap,
} from "../dist/index.js";
import { JS, TOOLS } from "./helpers.mjs";

const CALL = { tag: "call", val: { id: "call_7", name: "get_order_details", arguments: '{"order_id":"#W1"}' } };
const LIMITS = { deadline_ms: 3000, memory_bytes: 32 << 20 };

async function attack(feature, limits = LIMITS) {
  const h = await Harness.load(join(JS, "hostile", feature), { limits });
  const ep = await h.episode("tau2/retail", 200, 10, { envView: () => "{}", tools: TOOLS });
  let error;
  try {
    await ep.realize(CALL);
  } catch (e) {
    error = e;
  }
  assert.ok(error, `${feature} must be stopped`);
  await assert.rejects(ep.realize(CALL), Poisoned);
  await ep.close();
  await positiveControl();
  return error;
}

async function positiveControl() {
  const good = await Harness.load(join(JS, "hostile", "good"), { limits: LIMITS });
  const ep = await good.episode("tau2/retail", 200, 10, { tools: TOOLS });
  assert.deepEqual(await ep.realize(CALL), { tag: "execute", val: CALL.val });
  await ep.close();
}

const CASES = [
  // V8 has no fuel: the endless loop is stopped by the per-hook deadline,
  // which terminates the worker.
  ["infinite-loop", DeadlineExceeded],
  ["memory-bomb", MemoryLimit],
  ["deep-recursion", StackOverflow],
  ["panic", Trap],
  ["huge-output", ContractViolation, "output_too_large"],
  ["unknown-tool", ContractViolation, "unknown_tool"],
  ["bad-json-args", ContractViolation, "arguments_not_object"],
  ["huge-args", ContractViolation, "arguments_too_large"],
  ["mutating-env-view", ContractViolation, "mutating_via_env_view"],
  ["env-view-flood", ContractViolation, "env_view_quota"],
];

for (const [feature, Cls, violation] of CASES) {
  test(`${feature} ends in ${Cls.name}${violation ? ` (${violation})` : ""}`, async () => {
    const err = await attack(feature);
    assert.equal(err.constructor, Cls, `${feature}: ${err.constructor.name}: ${err.message}`);
    assert.equal(err.hook, "realize");
    if (violation) assert.equal(err.violation, violation);
  });
}

test("a guest importing a clock is refused under the minimal WASI profile", async () => {
  await assert.rejects(
    Harness.load(join(JS, "hostile", "wants-clock"), { wasi: "minimal" }),
    (e) => e instanceof LinkError && /wasi:clocks.*`minimal` WASI profile/.test(e.message),
  );
  await positiveControl();
});

test("a guest reading the clock sees the frozen virtual time", async () => {
  const h = await Harness.load(join(JS, "hostile", "wants-clock"), { limits: LIMITS });
  const readings = [];
  for (let i = 0; i < 2; i++) {
    const ep = await h.episode("tau2/retail", 200, 10, { tools: TOOLS });
    readings.push(await ep.realize(CALL));
    await ep.close();
  }
  assert.equal(readings[0].tag, "block");
  assert.match(readings[0].val, /tv_sec: 1767225600/);
  assert.deepEqual(readings[1], readings[0]);
  await positiveControl();
});

test("env-view arguments over the cap are refused before any work", async () => {
  // calc-bomb asks `calculate` 64 times for 300 factors of 4000 digits
  // (1.2 MB of arguments): each is refused at the 64 KiB cap with the Rust
  // host's error, and the environment is never called.
  const expression = Array(300).fill("9".repeat(4000)).join("*");
  const size = `{"expression":"${expression}"}`.length;
  const asked = [];
  const tools = [...TOOLS, { name: "calculate", description: "Calculate.", parameters: '{"type":"object"}', mutates: false }];
  const h = await Harness.load(join(JS, "hostile", "calc-bomb"), { limits: { ...LIMITS, deadline_ms: 20000 } });
  const started = Date.now();
  const ep = await h.episode("tau2/retail", 200, 10, { envView: (n) => (asked.push(n), "0"), tools });
  const answer = await ep.realize(CALL);
  await ep.close();
  assert.ok(Date.now() - started < 20000);
  assert.equal(answer.tag, "block");
  assert.ok(answer.val.includes(`arguments are ${size} bytes, over the env view's cap of 65536`), answer.val);
  assert.deepEqual(asked, []);
  await positiveControl();
});

// The episode's budget on text a harness adds to the model's input: each
// inflating build is stopped at the hook that crosses it, typed, and a good
// guest works right after.
for (const [feature, hook] of [
  ["inflate-prompt", "contract"],
  ["inflate-guidance", "skills"],
  ["inflate-block", "realize"],
  ["inflate-inject", "regulate"],
  ["inflate-annotate", "regulate"],
]) {
  test(`${feature} is stopped at the episode's added-text budget`, async () => {
    const h = await Harness.load(join(JS, "hostile", feature), { limits: LIMITS });
    const budget = h.limits.max_added_bytes;
    const ep = await h.episode("tau2/retail", 200, 10, { envView: () => "{}", tools: TOOLS });
    const call = {
      contract: () => ep.contract({ domain: "tau2/retail", systemPrompt: "You are a customer service agent.", tools: TOOLS }),
      skills: () => ep.skills({ domain: "tau2/retail", firstUserMessage: "I want to cancel order #W1." }),
      realize: () => ep.realize(CALL),
      regulate: () =>
        ep.regulate({ step: 1, stepsLeft: 199, errorsLeft: 10, kind: "agent-message", text: "Let me check.", outcomes: [] }),
    }[hook];
    let error;
    for (let i = 0; i < 64 && !error; i++) {
      try {
        await call();
        assert.ok(ep.addedBytes <= budget);
      } catch (e) {
        error = e;
      }
    }
    assert.ok(error instanceof ContractViolation, `${feature}: ${error}`);
    assert.equal(error.violation, "added_text_over_budget");
    assert.equal(error.hook, hook);
    assert.ok(ep.addedBytes > budget);
    await assert.rejects(ep.realize(CALL), Poisoned);
    await ep.close();
    await positiveControl();
  });
}
