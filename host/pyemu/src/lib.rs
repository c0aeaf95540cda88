//! Just enough of Python's object model to run τ²'s tools with the same
//! observable behaviour as the reference.
//!
//! τ²'s tools are plain Python methods called with the model's JSON
//! arguments *without* validation (`tool(**arguments)`), so a wrong-typed
//! argument flows into ordinary Python operations (`in`, `-`, `sorted`,
//! f-strings, pydantic constructors...) and the exception text becomes the
//! tool result. Reproducing those texts byte for byte means reproducing the
//! operations: this module is a small dynamic value type ([`Val`]) with
//! Python's semantics for the handful of operations the tools use. The
//! same type holds DBBench's rows and its checker's `eval`ed literals
//! (tuples, sets, bytes, `Decimal`s, dates), which are only rendered with
//! [`repr`] and compared.
//!
//! Known limits, all far from what a model sends (each yields an
//! `Error: ...` result, never a panic, and a `tracing` warning when it is an
//! emulation limit rather than Python's own error):
//!
//! * τ²'s operations work on 128-bit ints (JSON arguments carry at most 64
//!   bits; a 39+-digit numeric *string* given to an int field is an
//!   emulation limit; only `eval` of a literal and `calculate` keep larger
//!   ints exact), and serde_json reads integers beyond 64 bits as floats
//!   where Python keeps them ints;
//! * `calculate` refuses ints above 2^22 bits and work beyond a fixed
//!   budget per call, and its answer for ASTs nested 2881–2982 deep
//!   (where CPython's own limit depends on its stack depth) is an
//!   emulation-limit error — see [`calc`]; `str()` of a complex number,
//!   shown only in a call-with-`*`-argument error, is approximate;
//! * `repr()` of strings treats unassigned code points as printable (CPython
//!   escapes them); lower-casing uses Rust's Unicode tables;
//! * `sorted()` of a mixed-type list of 64+ items may name a different pair
//!   of types in its `TypeError` (CPython's merge phase is not reproduced).
//!
//! It uses no other crate of the workspace: the benchmarks use it, and it
//! knows none of them.

mod bigint;
pub mod calc;
pub mod call;
pub mod json;
pub mod ops;
pub mod pydantic;
pub mod pyval;
pub mod repr;
mod unicode;
mod value;

pub use value::{Dict, Object, Val};

/// A Python exception, reduced to what τ² shows the model: `str(exc)`.
///
/// τ²'s `Environment.get_response` catches every exception and returns
/// `f"Error: {e}"`, so only the message matters; `kind` names the Python
/// exception class for diagnostics and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyErr {
    /// Python exception class, e.g. `ValueError`.
    pub kind: &'static str,
    /// `str(exc)`.
    pub msg: String,
}

impl PyErr {
    /// A `ValueError` with this message.
    pub fn value(msg: impl Into<String>) -> Self {
        Self {
            kind: "ValueError",
            msg: msg.into(),
        }
    }

    /// A `TypeError` with this message.
    pub fn type_error(msg: impl Into<String>) -> Self {
        Self {
            kind: "TypeError",
            msg: msg.into(),
        }
    }

    /// A `KeyError`: `str(KeyError(k))` is `repr(k)`.
    pub fn key(key: &Val) -> Self {
        Self {
            kind: "KeyError",
            msg: repr::repr(key),
        }
    }

    /// An `AttributeError` for `obj.name` on a value without that attribute.
    pub fn attribute(obj: &Val, name: &str) -> Self {
        Self {
            kind: "AttributeError",
            msg: format!("'{}' object has no attribute '{name}'", obj.type_name()),
        }
    }

    /// An exception of another class.
    pub fn other(kind: &'static str, msg: impl Into<String>) -> Self {
        Self {
            kind,
            msg: msg.into(),
        }
    }

    /// A state the reference can never reach (for instance a database field
    /// of the wrong type that no tool can write). Reported as an error
    /// result instead of a panic, so a rollout never crashes.
    pub fn internal(msg: impl Into<String>) -> Self {
        Self {
            kind: "InternalError",
            msg: msg.into(),
        }
    }
}

/// Result of an emulated Python operation.
pub type PyResult<T> = Result<T, PyErr>;
