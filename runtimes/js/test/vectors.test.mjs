import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Harness, VectorMismatch } from "../dist/index.js";
import { replay } from "../dist/vectors.js";
import { FIX, JS } from "./helpers.mjs";

// The vectors compare answers, not speed: this runtime's only bound is the
// wall-clock deadline, and a componentize-py harness's first hook (its
// interpreter starting) passed the default 2 s on a loaded 2-core machine,
// turning `ok` into `deadline`. Replay with room; the deadline has its own
// hostile test.
for (const name of ["template", "evolved", "template-py", "evolved-py"]) {
  test(`replaying the ${name}'s vectors is byte-identical`, async () => {
    const h = await Harness.load(join(JS, name), { limits: { deadline_ms: 30_000 } });
    const report = await replay(h, join(FIX, `${name}.vectors.jsonl`));
    assert.equal(report.header.harness, h.hash);
    assert.ok(report.records > 20 && report.episodes >= 2);
  });
}

// huge-args writes a call with 100 kB of arguments (the host's violation
// arguments_too_large); calc-bomb sends 1.2 MB env-view arguments (refused
// unread, logged as a marker): this runtime must give the same lines.
// inflate-prompt ends each episode at its contract hook (two records an
// episode); the others run on.
for (const [feature, needle, minRecords] of [
  ["huge-args", '"violation":"arguments_too_large"', 8],
  ["calc-bomb", "over the env view's cap of 65536", 8],
  ["inflate-prompt", '"violation":"added_text_over_budget"', 4],
  ["inflate-inject", '"violation":"added_text_over_budget"', 8],
]) {
  test(`replaying the hostile ${feature}'s vectors is byte-identical`, async () => {
    const path = join(FIX, `hostile.${feature}.vectors.jsonl`);
    assert.ok(readFileSync(path, "utf8").includes(needle));
    // The vectors compare answers, not speed. This runtime has no fuel, so
    // its only bound is the wall-clock deadline; on a loaded 2-core machine
    // calc-bomb's 64 refused 1.2 MB view calls per hook can pass the
    // recorded 2 s (seen at load average 9), which would change the answer
    // to `deadline`. Replay with room; the deadline itself has its own
    // hostile test.
    const h = await Harness.load(join(JS, "hostile", feature), { limits: { deadline_ms: 30_000 } });
    const report = await replay(h, path);
    assert.equal(report.header.harness, h.hash);
    assert.ok(report.records >= minRecords && report.episodes === 2);
  });
}

test("a divergence names the first differing record", async () => {
  const lines = readFileSync(join(FIX, "template.vectors.jsonl"), "utf8").split("\n");
  const i = lines.findIndex((l, n) => n > 0 && l.includes('"hook":"realize"') && l.includes('"output":{"tag":"ok","val":{"tag":"proceed"}}'));
  lines[i] = lines[i].replace('"val":{"tag":"proceed"}', '"val":{"tag":"block","val":"x"}');
  const path = join(mkdtempSync(join(tmpdir(), "ecdysis-js-")), "tampered.jsonl");
  writeFileSync(path, lines.join("\n"));
  await assert.rejects(replay(await Harness.load(join(JS, "template")), path), (e) =>
    e instanceof VectorMismatch && e.message.includes(`tampered.jsonl:${i + 1}:`) && /recorded:.*\n.*replayed:/.test(e.message));
});
