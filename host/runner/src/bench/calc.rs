//! `bench --calc`: how long `calculate` takes on the worst inputs an
//! env-view call can carry ([`MAX_TOOL_ARGUMENT_BYTES`]), next to an
//! expression a model writes, and how fast the work budget's units run.

use std::time::{Duration, Instant};

use ecdysis_pyemu::calc::{Meter, TOO_EXPENSIVE, TOO_LARGE, WORK_BUDGET, calculate_metered};
use ecdysis_sandbox::sandbox::MAX_TOOL_ARGUMENT_BYTES;

/// One timed input.
#[derive(Clone, Debug)]
pub struct CalcTiming {
    /// What the input is.
    pub name: &'static str,
    /// Its length in bytes.
    pub bytes: usize,
    /// Median wall time of one call.
    pub median: Duration,
    /// Work units the call charged.
    pub units: u64,
    /// The answer, shortened: the result, an exception class, or
    /// `refused` for an emulation limit.
    pub outcome: String,
}

/// `(t op t op ... t)+(t op ...)+...` filling `len` bytes, 50 terms a
/// group (shallow enough for CPython's compiler).
fn grouped(term: &str, op: &str, len: usize) -> String {
    let group = format!("({})", vec![term; 50].join(op));
    vec![group.as_str(); len / (group.len() + 1)].join("+")
}

/// `unit` repeated to fill `len` bytes.
fn fill(unit: &str, len: usize) -> String {
    unit.repeat(len / unit.len())
}

/// The inputs: a model's expression, then the worst shapes found for each
/// part of the emulation at the size cap, then the issue's original 1.2 MB
/// input (which only the model-facing path could carry).
pub fn inputs() -> Vec<(&'static str, String)> {
    let n = MAX_TOOL_ARGUMENT_BYTES - r#"{"expression": ""}"#.len();
    let factor = "9".repeat(n / 2880 - 1);
    let nest =
        |open: &str, k: usize, inner: &str| format!("{}{inner}{}", open.repeat(k), ")".repeat(k));
    vec![
        (
            "model-sized expression",
            "(1299.99 - 1249.99) * 2 + 0.15 * (500 + 250)".into(),
        ),
        (
            "running product, 2880 factors",
            vec![factor.as_str(); 2880].join("*"),
        ),
        (
            "product of 4300-digit literals",
            vec!["9".repeat(4300); n / 4301].join("*"),
        ),
        ("powers 3**700000, multiplied", grouped("3**700000", "*", n)),
        (
            "near-equal true divisions",
            grouped("(3**200000)/(3**199999)", "+", n),
        ),
        (
            "floor divisions of big powers",
            grouped("(7**300000)//(3**500000)", "+", n),
        ),
        (
            "2**(2**21)+1, multiplied",
            grouped("(2**(2**21)+1)", "*", n),
        ),
        ("juxtaposed literals (2 passes)", fill("1 ", n)),
        ("juxtaposed groups (2 passes)", fill("(1 ", n)),
        (
            "199 brackets, then starred groups",
            format!("{}{}", "(".repeat(199), fill("(*1)", n - 199)),
        ),
        (
            "200 brackets, 375 unary minus",
            nest("(", 200, &format!("{}1", "-".repeat(375))),
        ),
        ("sum as deep as allowed", vec!["1"; 2880].join("+")),
        ("sum filling the cap", fill("1+", n - 1) + "1"),
        (
            "issue #12's input (1.2 MB)",
            vec!["9".repeat(4000); 300].join("*"),
        ),
    ]
}

fn outcome(r: &Result<String, ecdysis_pyemu::PyErr>) -> String {
    match r {
        Ok(s) => s.chars().take(12).collect(),
        Err(e) if e.msg == TOO_EXPENSIVE => "refused: budget".into(),
        Err(e) if e.msg == TOO_LARGE => "refused: int size".into(),
        Err(e) => e.kind.to_string(),
    }
}

/// Times every input `runs` times (median).
pub fn run(runs: usize) -> Vec<CalcTiming> {
    inputs()
        .into_iter()
        .map(|(name, e)| {
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..runs.max(1) {
                let mut meter = Meter::default();
                let t = Instant::now();
                let r = calculate_metered(&e, &mut meter);
                times.push(t.elapsed());
                last = Some((r, meter.spent()));
            }
            times.sort();
            let (r, units) = last.unwrap_or((Ok(String::new()), 0));
            CalcTiming {
                name,
                bytes: e.len(),
                median: times[times.len() / 2],
                units,
                outcome: outcome(&r),
            }
        })
        .collect()
}

/// The bench's text: one line per input with its ratio to the model-sized
/// expression, then the worst case at the cap and the budget's time.
pub fn report(runs: usize) -> String {
    let timings = run(runs);
    let base = timings[0].median.as_secs_f64().max(1e-9);
    let mut out = format!(
        "calculate, median of {runs} runs; inputs at the env-view cap of {MAX_TOOL_ARGUMENT_BYTES} bytes; \
         work budget {WORK_BUDGET} units\n"
    );
    for t in &timings {
        out.push_str(&format!(
            "{:<34} {:>9} B {:>10.3} ms {:>9.0}x {:>10} units {:>6.2} ns/unit  {}\n",
            t.name,
            t.bytes,
            t.median.as_secs_f64() * 1e3,
            t.median.as_secs_f64() / base,
            t.units,
            t.median.as_secs_f64() * 1e9 / t.units.max(1) as f64,
            t.outcome
        ));
    }
    let at_cap = timings
        .iter()
        .filter(|t| t.bytes <= MAX_TOOL_ARGUMENT_BYTES)
        .max_by_key(|t| t.median);
    if let Some(w) = at_cap {
        out.push_str(&format!(
            "worst at the cap: {} — {:.1} ms, {:.0}x the model-sized expression\n",
            w.name,
            w.median.as_secs_f64() * 1e3,
            w.median.as_secs_f64() / base
        ));
    }
    let slowest_unit = timings
        .iter()
        .filter(|t| t.units > WORK_BUDGET / 10)
        .map(|t| t.median.as_secs_f64() / t.units as f64)
        .fold(0.0, f64::max);
    if slowest_unit > 0.0 {
        out.push_str(&format!(
            "the whole budget at the slowest measured rate ({:.2} ns/unit): {:.0} ms\n",
            slowest_unit * 1e9,
            slowest_unit * WORK_BUDGET as f64 * 1e3
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_inputs_fit_the_cap_and_answer_as_expected() {
        let inputs = inputs();
        let last = inputs.len() - 1;
        for (i, (name, e)) in inputs.iter().enumerate() {
            // All but the issue's own input fit an env-view call.
            let json = serde_json::json!({"expression": e}).to_string();
            assert_eq!(json.len() <= MAX_TOOL_ARGUMENT_BYTES, i != last, "{name}");
        }
        let t = run(1);
        assert_eq!(t[0].outcome, "212.5");
        assert!(t.iter().any(|t| t.outcome == "refused: budget"));
    }
}
