//! CPython's limits as `calculate` meets them, and the emulation's own.
//!
//! Every expected text below was printed by CPython 3.11.7 running the
//! reference's `calculate` (the same cases, and thousands more, are in
//! `tests/conformance/vectors/calc.jsonl`, written by
//! `tests/conformance/calc_vectors.py`).

use super::*;

fn outcome(e: &str) -> (String, String) {
    match calculate(e) {
        Ok(s) => ("ok".into(), s),
        Err(e) => (e.kind.into(), e.msg),
    }
}

fn digits_error(n: usize) -> String {
    format!(
        "Exceeds the limit (4300 digits) for integer string conversion: value has {n} digits; \
         use sys.set_int_max_str_digits() to increase the limit - Consider hexadecimal for huge \
         integer literals to avoid decimal conversion limits. (<string>, line 1)"
    )
}

const STR_LIMIT: &str = "Exceeds the limit (4300 digits) for integer string conversion; use \
                         sys.set_int_max_str_digits() to increase the limit";

#[test]
fn int_digit_limits_match_cpython() {
    let d4300 = "7".repeat(4300);
    let d4301 = "1".repeat(4301);
    let cases: Vec<(String, &str, String)> = vec![
        (
            d4300.clone(),
            "OverflowError",
            "int too large to convert to float".into(),
        ),
        (d4301.clone(), "SyntaxError", digits_error(4301)),
        (format!("({d4301}"), "SyntaxError", digits_error(4301)),
        (format!("2 {d4301}"), "SyntaxError", digits_error(4301)),
        ("1".repeat(5000), "SyntaxError", digits_error(5000)),
        // A tokenizer error anywhere after the literal wins...
        (
            format!("{d4301})"),
            "SyntaxError",
            "unmatched ')' (<string>, line 1)".into(),
        ),
        (
            format!("{d4301}+{}", "(".repeat(201)),
            "SyntaxError",
            "too many nested parentheses (<string>, line 1)".into(),
        ),
        // ... but a parser error before the literal is reached does not.
        (
            format!("2 3 {d4301}"),
            "SyntaxError",
            "invalid syntax (<string>, line 1)".into(),
        ),
        // Zeros and float literals have no digit limit.
        ("0".repeat(5000), "ok", "0.0".into()),
        (format!("{d4301}.0"), "ok", "inf".into()),
        (format!(".{d4301}"), "ok", "0.11".into()),
        // str() of an int in a call's error message.
        ("(10**4300)(*2)".into(), "ValueError", STR_LIMIT.into()),
        ("(-10**4300)(*2)".into(), "ValueError", STR_LIMIT.into()),
        ("(10**5000)(**())".into(), "ValueError", STR_LIMIT.into()),
        (
            "(10**5000)(*())".into(),
            "TypeError",
            "'int' object is not callable".into(),
        ),
        (
            "(10**4299)(*2)".into(),
            "TypeError",
            format!(
                "1{} argument after * must be an iterable, not int",
                "0".repeat(4299)
            ),
        ),
    ];
    for (e, kind, msg) in cases {
        let shown: String = e.chars().take(40).collect();
        assert_eq!(outcome(&e), (kind.to_string(), msg), "{shown}");
    }
}

#[test]
fn overflow_texts_match_cpython() {
    let cases = [
        (
            "10**309/1",
            "OverflowError",
            "integer division result too large for a float",
        ),
        (
            "10**400/3",
            "OverflowError",
            "integer division result too large for a float",
        ),
        ("10**400/10**399", "ok", "10.0"),
        (
            "10**400//1",
            "OverflowError",
            "int too large to convert to float",
        ),
        (
            "2**1024*1.0",
            "OverflowError",
            "int too large to convert to float",
        ),
        (
            "(2**1024-2**970)/1",
            "OverflowError",
            "integer division result too large for a float",
        ),
        ("(2**1024-2**971)/1", "ok", "1.7976931348623157e+308"),
        ("1/10**400", "ok", "0.0"),
        (
            "2**-10**400",
            "OverflowError",
            "int too large to convert to float",
        ),
        (
            "()*10**100",
            "OverflowError",
            "cannot fit 'int' into an index-sized integer",
        ),
        (
            "()*(2**63)",
            "OverflowError",
            "cannot fit 'int' into an index-sized integer",
        ),
        (
            "()*(2**63-1)",
            "TypeError",
            "float() argument must be a string or a real number, not 'tuple'",
        ),
    ];
    for (e, kind, msg) in cases {
        assert_eq!(outcome(e), (kind.to_string(), msg.to_string()), "{e}");
    }
}

#[test]
fn nesting_limits_match_cpython() {
    let nest = |open: &str, n: usize, inner: &str, close: usize| {
        format!("{}{inner}{}", open.repeat(n), ")".repeat(close))
    };
    let memory = ("MemoryError".to_string(), String::new());
    let recursion = (
        "RecursionError".to_string(),
        "maximum recursion depth exceeded during compilation".to_string(),
    );
    let ok = |s: &str| ("ok".to_string(), s.to_string());
    // The tokenizer's 200 brackets.
    assert_eq!(outcome(&nest("(", 200, "1", 200)), ok("1.0"));
    assert_eq!(
        outcome(&nest("(", 201, "1", 201)).1,
        "too many nested parentheses (<string>, line 1)"
    );
    // The parser's 6000 levels: 28 per group, 24 per call, 1 per unary
    // minus, 2 per `**` (first pass); 30 per group in the second pass.
    let unary = |n: usize| format!("{}1", "-".repeat(n));
    assert_eq!(outcome(&nest("(", 200, &unary(375), 200)), ok("-1.0"));
    assert_eq!(outcome(&nest("(", 200, &unary(376), 200)), memory);
    assert_eq!(
        outcome(&nest("1(", 200, &unary(1175), 200)).1,
        "'int' object is not callable"
    );
    assert_eq!(outcome(&nest("1(", 200, &unary(1176), 200)), memory);
    assert_eq!(outcome(&nest("1**(", 199, "1", 199)), ok("1.0"));
    assert_eq!(outcome(&nest("1**(", 200, "1", 200)), memory);
    assert_eq!(
        outcome(&nest("(", 199, "1 2", 199)).1,
        "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)"
    );
    assert_eq!(outcome(&nest("(", 200, "1 2", 200)), memory);
    // The compiler's AST depth: fine up to 2880, RecursionError past 2982
    // for any caller at least as deep as τ²'s, ambiguous in between.
    assert_eq!(outcome(&unary(2879)), ok("-1.0"));
    assert_eq!(outcome(&unary(2990)), recursion);
    assert_eq!(outcome(&unary(5976)), memory);
    let sum = |n: usize| vec!["1"; n].join("+");
    assert_eq!(outcome(&sum(2880)), ok("2880.0"));
    assert_eq!(outcome(&sum(2990)), recursion);
    assert_eq!(outcome(&sum(100_000)), recursion);
    assert_eq!(
        outcome(&sum(2900)),
        ("InternalError".to_string(), TOO_DEEP.to_string())
    );
    assert_eq!(outcome(&format!("1{}", "()".repeat(2990))), recursion);
    assert_eq!(outcome(&format!("1{}", "**1".repeat(2987))), recursion);
    assert_eq!(outcome(&format!("1{}", "**1".repeat(2988))), memory);
    // Many operands but shallow: CPython answers, so must the emulation.
    let mut balanced = "1".to_string();
    for _ in 0..14 {
        balanced = format!("({balanced}+{balanced})");
    }
    assert_eq!(outcome(&balanced), ok("16384.0"));
}

#[test]
fn work_beyond_the_budget_is_refused_not_done() {
    // The issue's hook input: 300 factors of 4000 digits. CPython multiplies
    // them all out before answering "int too large to convert to float".
    let attack = vec!["9".repeat(4000); 300].join("*");
    let mut meter = Meter::default();
    let err = calculate_metered(&attack, &mut meter).unwrap_err();
    assert_eq!(
        (err.kind, err.msg.as_str()),
        ("InternalError", TOO_EXPENSIVE)
    );
    // Charges come before the work: what ran stayed within the budget.
    assert!(meter.spent() > WORK_BUDGET);
    // Powers beyond the int size cap are refused before any work.
    let mut meter = Meter::default();
    let err = calculate_metered("9**99999999", &mut meter).unwrap_err();
    assert_eq!(err.msg, TOO_LARGE);
    assert!(meter.spent() < 1000, "{}", meter.spent());
    // Positive control: big but cheap ints are computed exactly.
    assert_eq!(outcome("3**100000//3**99999").1, "3.0");
    assert_eq!(outcome("2**(2**20)/2**(2**20-1)").1, "2.0");
    assert_eq!(
        outcome(&vec!["9".repeat(4300); 15].join("*")).1,
        "int too large to convert to float"
    );
}

#[test]
fn a_model_sized_expression_costs_a_tiny_fraction_of_the_budget() {
    for e in [
        "129.99 * 3 + 45.5",
        "(1299.99 - 1249.99) * 2 + 0.15 * (500 + 250)",
        "2**64 // 3 + 10**20 / 7",
    ] {
        let mut meter = Meter::default();
        assert!(calculate_metered(e, &mut meter).is_ok(), "{e}");
        assert!(
            meter.spent() < WORK_BUDGET / 10_000,
            "{e}: {}",
            meter.spent()
        );
    }
}

/// The deepest inputs each construct allows, with the answers CPython
/// gives.
fn deepest_inputs() -> Vec<(String, &'static str)> {
    let nest =
        |open: &str, n: usize, inner: &str| format!("{}{inner}{}", open.repeat(n), ")".repeat(n));
    vec![
        (nest("(", 200, &format!("{}1", "-".repeat(375))), "-1.0"),
        (nest("1(", 200, "1"), "'int' object is not callable"),
        (nest("1**(", 199, "2"), "1.0"),
        (nest("(-", 200, "1"), "1.0"),
        (
            nest("(", 199, "1 2"),
            "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)",
        ),
        (nest("(", 200, "1"), "1.0"),
        (format!("2{}", "**1".repeat(2879)), "2.0"),
        (format!("{}1", "-".repeat(2879)), "-1.0"),
        (vec!["1"; 2880].join("+"), "2880.0"),
        (
            format!("1{}", "()".repeat(2879)),
            "'int' object is not callable",
        ),
    ]
}

#[test]
fn the_deepest_inputs_run_on_a_small_stack() {
    // Without the heap-grown stack segments a debug build runs out of stack
    // on deep bracket nesting and aborts the process; 128 KiB is less than
    // what is left to a host call under wasm frames.
    let answers = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(|| {
            deepest_inputs()
                .into_iter()
                .map(|(e, want)| (outcome(&e).1, want))
                .collect::<Vec<_>>()
        })
        .expect("spawn")
        .join()
        .expect("no stack overflow");
    for (got, want) in answers {
        assert_eq!(got, want);
    }
}

/// The longest expression an env-view call can carry: the sandbox's cap on
/// a harness's tool arguments minus `{"expression": ""}` (the alphabet
/// needs no JSON escaping).
fn at_cap() -> usize {
    ENV_VIEW_CAP - r#"{"expression": ""}"#.len()
}

/// `ecdysis_sandbox::sandbox::MAX_TOOL_ARGUMENT_BYTES`, which this crate
/// sits below; the runner's `bench --calc` test runs the same worst
/// inputs at the sandbox's own constant.
const ENV_VIEW_CAP: usize = 64 * 1024;

/// `unit` repeated to fill `len` bytes, then `tail`.
fn fill(unit: &str, len: usize, tail: &str) -> String {
    let mut s = unit.repeat((len - tail.len()) / unit.len());
    s.push_str(tail);
    s
}

#[test]
fn parsing_is_linear_at_the_argument_cap() {
    // Inputs that never reach evaluation: whatever their shape, the parser
    // (both passes, the juxtaposition checks, every backtrack) fetches a
    // bounded number of tokens per byte.
    let n = at_cap();
    let shallow_groups = "((((((((((1 2 3 4 5 6 7 8 9 0))))))))))";
    let families = [
        fill("1 ", n, "1"),
        fill("(1 ", n, "1"),
        fill("1(", n, ""),
        fill("(1)(", n, ""),
        fill("1+", n, "1"),
        fill("-", n, "1"),
        fill("**1", n, ""),
        fill("(*1)", n, ""),
        fill("1 (2) ", n, "3 07"),
        fill(shallow_groups, n, ")"),
        fill("((1)**", n, "1"),
        fill(". ", n, ""),
        fill("1..", n, ""),
        format!("{}{}", "(".repeat(199), fill("1 ", n - 199, "")),
        format!("{}{}", "(".repeat(199), fill("(*1)", n - 199, "")),
    ];
    for e in families {
        let mut meter = Meter::default();
        let r = calculate_metered(&e, &mut meter);
        let shown: String = e.chars().take(24).collect();
        assert!(
            meter.spent() <= 16 * e.len() as u64,
            "{shown}...: {} units for {} bytes ({r:?})",
            meter.spent(),
            e.len()
        );
    }
}

/// `(t op t op ... t)+(t op ...)+...` filling `len` bytes, 50 terms a
/// group: as much work as fits while the AST stays shallow enough for
/// CPython's compiler.
fn grouped(term: &str, op: &str, len: usize) -> String {
    let group = format!("({})", vec![term; 50].join(op));
    let mut groups = vec![group.as_str(); len / (group.len() + 1)].join("+");
    groups.push_str(&" ".repeat(len - groups.len()));
    groups
}

#[test]
fn evaluation_at_the_argument_cap_stays_within_the_budget() {
    let n = at_cap();
    let factor = "9".repeat(n / 2880 - 1);
    // (expression, whether the exact evaluation fits the budget)
    let families = [
        // Products of the largest literals that fit.
        (vec!["9".repeat(4300); n / 4301].join("*"), true),
        // A running product as long as CPython's compiler allows.
        (vec![factor.as_str(); 2880].join("*"), true),
        // Big powers and divisions, as many as fit: refused once spent.
        (grouped("3**700000", "*", n), false),
        (grouped("(7**300000)//(3**500000)", "+", n), false),
        (grouped("(3**200000)/(3**199999)", "+", n), false),
        (grouped("(2**(2**21)+1)", "*", n), false),
    ];
    for (e, fits) in families {
        assert!(e.len() <= n);
        let mut meter = Meter::default();
        let r = calculate_metered(&e, &mut meter);
        let shown: String = e.chars().take(24).collect();
        match &r {
            Err(err) if err.msg == TOO_EXPENSIVE || err.msg == TOO_LARGE => {
                assert!(!fits, "{shown}... refused after {} units", meter.spent())
            }
            _ => {
                assert!(fits, "{shown}... answered {r:?}");
                assert!(meter.spent() <= WORK_BUDGET);
            }
        }
    }
}
