//! How τ² calls a tool: `Environment.make_tool_call(name, requestor=...,
//! **arguments)` → `ToolKitBase.use_tool(name, **kwargs)` →
//! `bound_method(**kwargs)`. Each step has its own argument-binding
//! `TypeError`s, which the model sees verbatim.

use super::{PyErr, Val};

/// A tool's Python signature: `Class.method(self, params...)`.
#[derive(Clone, Copy, Debug)]
pub struct Signature {
    /// The class, e.g. `AirlineTools` (CPython names the function
    /// `Class.method` in binding errors).
    pub class: &'static str,
    /// The method name.
    pub name: &'static str,
    /// Parameter names after `self`, in order; all are required.
    pub params: &'static [&'static str],
}

/// The arguments bound to a tool's parameters, in parameter order.
pub type Bound = Vec<Val>;

/// The checks `make_tool_call(tool_name, requestor=..., **arguments)`
/// makes before any tool is looked up.
pub fn check_dispatch(arguments: &[(&str, Val)]) -> Result<(), PyErr> {
    // A duplicate keyword is detected while building the call, before the
    // function binds its positional parameters.
    if arguments.iter().any(|(k, _)| *k == "requestor") {
        return Err(PyErr::type_error(
            "tau2.environment.environment.Environment.make_tool_call() got multiple values for keyword argument \
             'requestor'",
        ));
    }
    if let Some((k, _)) = arguments
        .iter()
        .find(|(k, _)| *k == "self" || *k == "tool_name")
    {
        return Err(PyErr::type_error(format!(
            "Environment.make_tool_call() got multiple values for argument '{k}'"
        )));
    }
    Ok(())
}

/// Binds keyword arguments to `sig` like CPython: the first unexpected
/// keyword (in call order) fails, then missing parameters are listed.
pub fn bind(sig: &Signature, arguments: &[(&str, Val)]) -> Result<Bound, PyErr> {
    if let Some((k, _)) = arguments.iter().find(|(k, _)| !sig.params.contains(k)) {
        return Err(PyErr::type_error(format!(
            "{}.{}() got an unexpected keyword argument '{k}'",
            sig.class, sig.name
        )));
    }
    let missing: Vec<&str> = sig
        .params
        .iter()
        .copied()
        .filter(|p| !arguments.iter().any(|(k, _)| k == p))
        .collect();
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|m| format!("'{m}'")).collect();
        let list = match names.len() {
            1 => names[0].clone(),
            2 => format!("{} and {}", names[0], names[1]),
            n => format!("{}, and {}", names[..n - 1].join(", "), names[n - 1]),
        };
        return Err(PyErr::type_error(format!(
            "{}.{}() missing {} required positional argument{}: {list}",
            sig.class,
            sig.name,
            missing.len(),
            if missing.len() == 1 { "" } else { "s" }
        )));
    }
    Ok(sig
        .params
        .iter()
        .map(|p| {
            arguments
                .iter()
                .find(|(k, _)| k == p)
                .map(|(_, v)| v.clone())
                .unwrap_or(Val::None)
        })
        .collect())
}

/// [`bind`] for a signature whose last parameters have defaults
/// (`defaults`, one per trailing parameter): those may be left out, and
/// only the required ones are listed as missing.
pub fn bind_with_defaults(
    sig: &Signature,
    defaults: &[Val],
    arguments: &[(&str, Val)],
) -> Result<Bound, PyErr> {
    let required = sig.params.len().saturating_sub(defaults.len());
    let head = Signature {
        params: &sig.params[..required.min(sig.params.len())],
        ..*sig
    };
    // Unexpected keywords are judged against the whole signature first.
    if let Some((k, _)) = arguments.iter().find(|(k, _)| !sig.params.contains(k)) {
        return Err(PyErr::type_error(format!(
            "{}.{}() got an unexpected keyword argument '{k}'",
            sig.class, sig.name
        )));
    }
    let required_args: Vec<(&str, Val)> = arguments
        .iter()
        .filter(|(k, _)| head.params.contains(k))
        .cloned()
        .collect();
    bind(&head, &required_args)?;
    Ok(sig
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            arguments
                .iter()
                .find(|(k, _)| k == p)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| {
                    defaults
                        .get(i.wrapping_sub(required))
                        .cloned()
                        .unwrap_or(Val::None)
                })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: Signature = Signature {
        class: "AirlineTools",
        name: "book",
        params: &["a", "b", "c"],
    };

    #[test]
    fn defaults_may_be_left_out_and_only_required_ones_are_missing() {
        let sig = Signature {
            class: "TelecomTools",
            name: "get_bills_for_customer",
            params: &["customer_id", "limit"],
        };
        let bound =
            bind_with_defaults(&sig, &[Val::Int(12)], &[("customer_id", Val::str("C1"))]).unwrap();
        assert!(matches!(bound[1], Val::Int(12)));
        let bound = bind_with_defaults(
            &sig,
            &[Val::Int(12)],
            &[("customer_id", Val::str("C1")), ("limit", Val::None)],
        )
        .unwrap();
        assert!(matches!(bound[1], Val::None), "an explicit None is kept");
        assert_eq!(
            bind_with_defaults(&sig, &[Val::Int(12)], &[("limit", Val::Int(1))])
                .unwrap_err()
                .msg,
            "TelecomTools.get_bills_for_customer() missing 1 required positional argument: 'customer_id'"
        );
        assert_eq!(
            bind_with_defaults(&sig, &[Val::Int(12)], &[("x", Val::Int(1))])
                .unwrap_err()
                .msg,
            "TelecomTools.get_bills_for_customer() got an unexpected keyword argument 'x'"
        );
    }

    #[test]
    fn binding_errors_match_cpython() {
        assert_eq!(
            bind(&SIG, &[]).unwrap_err().msg,
            "AirlineTools.book() missing 3 required positional arguments: 'a', 'b', and 'c'"
        );
        assert_eq!(
            bind(&SIG, &[("a", Val::None)]).unwrap_err().msg,
            "AirlineTools.book() missing 2 required positional arguments: 'b' and 'c'"
        );
        assert_eq!(
            bind(&SIG, &[("x", Val::None), ("y", Val::None)])
                .unwrap_err()
                .msg,
            "AirlineTools.book() got an unexpected keyword argument 'x'"
        );
        assert!(
            check_dispatch(&[("requestor", Val::None), ("self", Val::None)])
                .unwrap_err()
                .msg
                .contains("requestor")
        );
    }
}
