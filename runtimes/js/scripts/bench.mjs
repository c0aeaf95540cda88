// Per-hook time of the JS runtime replaying a vector file: prints JSON
// {hook: [seconds...]} (used by runtimes/bench.py).
import { Harness } from "../dist/index.js";
import { replay } from "../dist/vectors.js";

const [dir, vectors, rounds = "3"] = process.argv.slice(2);
const harness = await Harness.load(dir);
const timings = {};
for (let i = 0; i < Number(rounds); i++) await replay(harness, vectors, timings);
console.log(JSON.stringify(timings));
