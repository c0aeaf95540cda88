import { test } from "node:test";
import assert from "node:assert/strict";
import { canonicalDumps, toCanonical, TYPES } from "../dist/index.js";
import { argumentsObject } from "../dist/checks.js";
import { capMemories } from "../dist/wasm-limits.js";

test("canonical JSON is byte-identical to the Rust host's", () => {
  const report = {
    step: 3, stepsLeft: 7, errorsLeft: 2, kind: "tool-results", text: undefined,
    outcomes: [{ call: { id: "c1", name: "get", arguments: '{"a":1}' }, content: "é\u0001\n\t\u007f\u2028\"\\/", error: false, blocked: true }],
  };
  // The same string host/sandbox/src/sandbox/recorder.rs asserts for this value.
  assert.equal(
    canonicalDumps(toCanonical(TYPES.stepReport, report)),
    '{"step":3,"steps-left":7,"errors-left":2,"kind":"tool-results","text":null,' +
      '"outcomes":[{"call":{"id":"c1","name":"get","arguments":"{\\"a\\":1}"},' +
      '"content":"é\\u0001\\n\\t\u007f\u2028\\"\\\\/","error":false,"blocked":true}]}',
  );
});

test("arguments are JSON objects exactly when serde_json says so", () => {
  const cases = [
    ['{"a":1}', true], [' {"a":1,"a":2} \n', true], ['{"a":NaN}', false], ['{"a":1e400}', false],
    ['{"a":"\\ud800"}', false], ['{"a":"\\ud83d\\ude00"}', true],
    ['{"a":' + "[".repeat(126) + "]".repeat(126) + "}", true], ['{"a":' + "[".repeat(127) + "]".repeat(127) + "}", false],
    ["[1]", false], ['{"a":1}x', false], ["\ufeff{}", false],
  ];
  for (const [text, ok] of cases) assert.equal(argumentsObject(text)[0] !== null, ok, text.slice(0, 30));
});

test("memory declarations get the cap as their maximum", () => {
  // (module (memory 1)) and (module (memory 2 10000))
  const one = Uint8Array.from([0, 97, 115, 109, 1, 0, 0, 0, 5, 3, 1, 0, 1]);
  const capped = capMemories(one, 4 << 16);
  assert.deepEqual([...capped.subarray(8)], [5, 4, 1, 1, 1, 4]);
  assert.ok(new WebAssembly.Module(capped));
  const big = Uint8Array.from([0, 97, 115, 109, 1, 0, 0, 0, 5, 5, 1, 1, 2, 0x90, 0x4e]);
  assert.deepEqual([...capMemories(big, 4 << 16).subarray(8)], [5, 4, 1, 1, 2, 4]);
});
