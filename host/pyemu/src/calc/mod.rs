//! τ²'s `calculate` tool:
//!
//! ```text
//! if not all(char in "0123456789+-*/(). " for char in expression): raise ValueError(...)
//! return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
//! ```
//!
//! With that alphabet `eval` still reaches a surprising part of Python: big
//! ints (`2**100`), `//` and `**`, `...` (Ellipsis), `()` (the empty
//! tuple), calls (`2(3)`, `2(*())`), complex numbers (`(-8)**0.5`) and the
//! CPython 3.11 parser's syntax-error messages. This module reproduces
//! them: a tokenizer with CPython's number rules (`lex`), a parser that
//! fetches tokens in the same order as CPython's PEG parser, with the
//! second "error pass" (`parse`), and an evaluator with CPython's numeric
//! semantics (`eval`, `floats`).
//!
//! # Limits
//!
//! The reference accepts any expression and computes for as long as it
//! takes; the emulation runs inside the host, so it is bounded — linear in
//! the input, and at most [`WORK_BUDGET`] units of work per call. Where
//! CPython itself has a limit that answers instantly, the emulation answers
//! the same (all checked against CPython 3.11 in
//! `tests/conformance/vectors/calc.jsonl`):
//!
//! * a literal of more than 4300 digits is a `SyntaxError`, and `str()` of
//!   such an int (in a call's error message) a `ValueError`;
//! * more than 200 nested brackets: `too many nested parentheses`;
//! * CPython's parser stack (6000 rule levels) raises `MemoryError`;
//! * an AST deeper than CPython's compiler allows raises `RecursionError`
//!   ("maximum recursion depth exceeded during compilation"). CPython's
//!   limit is `3000 − 3 × (Python frames on the stack at the call)`, so it
//!   depends on how the reference was called: at least 6 frames (τ²'s
//!   `get_response` → ... → `calculate`), so depth > 2982 always fails;
//!   depth ≤ 2880 works for any caller up to 40 frames deep. In between
//!   the emulation answers an emulation-limit error.
//!
//! Where the emulation refuses what CPython would compute, it answers an
//! emulation-limit error (`InternalError`, logged as a warning): an int
//! above [`MAX_INT_BITS`], or more work than [`WORK_BUDGET`] — both far
//! beyond any expression a model writes, and slow in CPython too.

mod budget;
mod eval;
mod floats;
mod lex;
#[cfg(test)]
mod limit_tests;
mod parse;

pub use budget::{MAX_INT_BITS, Meter, TOO_EXPENSIVE, TOO_LARGE, WORK_BUDGET};

use super::ops::round_f64;
use super::repr::float_repr;
use super::{PyErr, PyResult};

/// Characters `calculate` accepts.
pub const ALPHABET: &str = "0123456789+-*/(). ";

/// AST depths whose outcome in CPython depends on the caller's stack
/// depth (see the module documentation).
const SURE_TO_COMPILE: u64 = 2880;
const SURE_TO_FAIL: u64 = 2982;

/// Message of the emulation-limit error for the ambiguous depths.
pub const TOO_DEEP: &str =
    "expression too deeply nested to emulate (CPython's limit here depends on its stack depth)";

/// Runs `calculate(expression)` on a string expression, within
/// [`WORK_BUDGET`].
pub fn calculate(expression: &str) -> PyResult<String> {
    calculate_metered(expression, &mut Meter::default())
}

/// [`calculate`] charging its work to `meter` (tests and the bench read
/// how much an input costs).
pub fn calculate_metered(expression: &str, meter: &mut Meter) -> PyResult<String> {
    if !expression.chars().all(|c| ALPHABET.contains(c)) {
        return Err(PyErr::value("Invalid characters in expression"));
    }
    // `eval` strips leading spaces and tabs from string input.
    let src = expression.trim_start_matches([' ', '\t']);
    let expr = parse::parse(src, meter)?;
    let depth = parse::ast_depth(&expr);
    if depth > SURE_TO_FAIL {
        return Err(PyErr::other(
            "RecursionError",
            "maximum recursion depth exceeded during compilation",
        ));
    }
    if depth > SURE_TO_COMPILE {
        return Err(PyErr::internal(TOO_DEEP));
    }
    let v = eval::eval(&expr, meter)?;
    let f = eval::to_float(&v, meter)?;
    Ok(float_repr(round_f64(f, 2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(e: &str) -> String {
        match calculate(e) {
            Ok(s) => s,
            Err(e) => e.msg,
        }
    }

    #[test]
    fn matches_cpython_results() {
        let cases = [
            ("2+2", "4.0"),
            ("1/3", "0.33"),
            ("-2**2", "-4.0"),
            ("2**-1", "0.5"),
            ("-7//2", "-4.0"),
            ("-7.5//2", "-4.0"),
            ("99999999999999999999*99999999999999999999", "1e+40"),
            ("2**1100/2**1000", "1.2676506002282294e+30"),
            ("2.675", "2.67"),
            ("1/0", "division by zero"),
            ("1.0/0", "float division by zero"),
            ("1//0", "integer division or modulo by zero"),
            ("1.0//0", "float floor division by zero"),
            ("0**-1", "0.0 cannot be raised to a negative power"),
            ("10**400", "int too large to convert to float"),
            ("10.0**400", "(34, 'Numerical result out of range')"),
            (
                "(-8)**0.5",
                "float() argument must be a string or a real number, not 'complex'",
            ),
            (
                "(-8)**0.5//2",
                "unsupported operand type(s) for //: 'complex' and 'int'",
            ),
            ("(-8)**0.5/0", "complex division by zero"),
            (
                "()",
                "float() argument must be a string or a real number, not 'tuple'",
            ),
            (
                "() - ()",
                "unsupported operand type(s) for -: 'tuple' and 'tuple'",
            ),
            (
                "...",
                "float() argument must be a string or a real number, not 'ellipsis'",
            ),
            ("2(*2)", "2 argument after * must be an iterable, not int"),
            (
                "2(**())",
                "2 argument after ** must be a mapping, not tuple",
            ),
            ("(1)(2)", "'int' object is not callable"),
            ("abc", "Invalid characters in expression"),
        ];
        for (e, want) in cases {
            assert_eq!(run(e), want, "{e}");
        }
    }

    #[test]
    fn syntax_errors_match_cpython_311() {
        let cases = [
            ("", "invalid syntax (<string>, line 0)"),
            ("  ", "invalid syntax (<string>, line 0)"),
            ("(", "'(' was never closed (<string>, line 1)"),
            (")", "unmatched ')' (<string>, line 1)"),
            ("2 3", "invalid syntax (<string>, line 1)"),
            ("2 +", "invalid syntax (<string>, line 1)"),
            (
                "007",
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)",
            ),
            ("(1 2", "'(' was never closed (<string>, line 1)"),
            (
                "(1 2)",
                "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)",
            ),
            (
                "1 (2 3)",
                "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)",
            ),
            (
                "(1 2 07)",
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)",
            ),
            (
                "2 3 07",
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)",
            ),
            (
                "(*2)",
                "cannot use starred expression here (<string>, line 1)",
            ),
            (
                "(**2)",
                "cannot use double starred expression here (<string>, line 1)",
            ),
            ("*2", "invalid syntax (<string>, line 1)"),
            ("1..", "invalid syntax (<string>, line 1)"),
            ("5..5", "invalid syntax (<string>, line 1)"),
            (
                "(1.2.3)",
                "invalid syntax. Perhaps you forgot a comma? (<string>, line 1)",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(run(e), want, "{e:?}");
        }
    }
}
