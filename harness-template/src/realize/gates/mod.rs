//! Policy gates before write tools. Each reads the state it needs through
//! the env view's read-only tools and returns a [`Verdict`]:
//!
//! - `Block`: the environment would accept the call although the policy
//!   forbids it (its API "does not check these"): the call must not run.
//! - `Explain`: the environment will reject the call anyway; the call runs
//!   so the model sees the environment's own error, and regulation appends
//!   this explanation of what is wrong and what to do instead.
//! - `Pass`: nothing found (also whenever a lookup fails: a gate never
//!   blocks on missing information).
//!
//! Gates can be switched off in `tables::GATES`.

pub mod airline_baggage_update;
pub mod airline_basic_economy_change;
pub mod airline_booking_baggage;
pub mod airline_booking_payment;
pub mod airline_cancel_eligibility;
pub mod airline_flight_bookable;
pub mod airline_passenger_count;
pub mod airline_update_payment;
pub mod facts;
pub mod os_interactive_command;
pub mod retail_order_items;
pub mod retail_order_owner;
pub mod retail_order_status;
pub mod retail_payment_method;

use serde_json::{Map, Value};

use crate::tables::GATES;
use crate::view::Reads;

/// What a gate found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Pass,
    Block(String),
    Explain(String),
}

/// What a gate may read.
pub struct Cx<'a> {
    /// The short domain name.
    pub domain: &'a str,
    pub reads: Reads<'a>,
    /// "Now" from the policy, in minutes.
    pub now: Option<i64>,
    /// User ids the agent authenticated in this episode.
    pub authenticated: &'a [String],
    /// Ids of records the agent changed successfully in this episode.
    pub changed: &'a [String],
}

/// A gate: the tool name, its (normalised) arguments, what it may read.
pub type GateFn = fn(&str, &Map<String, Value>, &mut Cx) -> Verdict;

/// Every gate: (name in `tables::GATES`, domain, function). Order matters
/// only for which block message wins.
pub static ALL: &[(&str, &str, GateFn)] = &[
    (
        "airline_cancel_eligibility",
        "airline",
        airline_cancel_eligibility::check,
    ),
    (
        "airline_basic_economy_change",
        "airline",
        airline_basic_economy_change::check,
    ),
    (
        "airline_passenger_count",
        "airline",
        airline_passenger_count::check,
    ),
    (
        "airline_booking_payment",
        "airline",
        airline_booking_payment::check,
    ),
    (
        "airline_booking_baggage",
        "airline",
        airline_booking_baggage::check,
    ),
    (
        "airline_baggage_update",
        "airline",
        airline_baggage_update::check,
    ),
    (
        "airline_flight_bookable",
        "airline",
        airline_flight_bookable::check,
    ),
    (
        "airline_update_payment",
        "airline",
        airline_update_payment::check,
    ),
    ("retail_order_owner", "retail", retail_order_owner::check),
    ("retail_order_status", "retail", retail_order_status::check),
    ("retail_order_items", "retail", retail_order_items::check),
    (
        "retail_payment_method",
        "retail",
        retail_payment_method::check,
    ),
    (
        "os_interactive_command",
        "os",
        os_interactive_command::check,
    ),
];

/// Whether a gate is switched on (gates missing from the table are on).
pub fn enabled(gate: &str) -> bool {
    GATES
        .iter()
        .find(|g| g.gate == gate)
        .is_none_or(|g| g.enabled)
}

/// Run the domain's gates: the first block wins; explanations add up.
pub fn check(domain: &str, tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    let mut explanations: Vec<String> = Vec::new();
    for (name, gate_domain, gate) in ALL {
        if *gate_domain != domain || !enabled(name) {
            continue;
        }
        match gate(tool, args, cx) {
            Verdict::Block(message) => return Verdict::Block(message),
            Verdict::Explain(message) => {
                if !explanations.contains(&message) {
                    explanations.push(message);
                }
            }
            Verdict::Pass => {}
        }
    }
    if explanations.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Explain(explanations.join(" "))
    }
}

#[cfg(test)]
pub mod testing {
    //! Helpers for the gates' unit tests.

    use super::*;
    use crate::types::ToolSpec;
    use crate::view::{EnvView, Tools};

    /// The τ² read-only tools of both domains, declared read-only.
    pub fn tools() -> Tools {
        let read = [
            "get_order_details",
            "get_product_details",
            "get_user_details",
            "get_reservation_details",
            "get_flight_status",
            "search_direct_flight",
            "search_onestop_flight",
        ];
        Tools::new(
            read.iter()
                .map(|n| ToolSpec {
                    name: n.to_string(),
                    description: String::new(),
                    parameters: "{}".into(),
                    mutates: false,
                })
                .collect(),
        )
    }

    /// Run one gate with a view and optional clock / authenticated users.
    pub fn run(
        gate: GateFn,
        view: &mut dyn EnvView,
        tool: &str,
        args: Value,
        now: Option<i64>,
        authenticated: &[String],
    ) -> Verdict {
        run_changed(gate, view, tool, args, now, authenticated, &[])
    }

    /// [`run`] with records already changed in the episode.
    pub fn run_changed(
        gate: GateFn,
        view: &mut dyn EnvView,
        tool: &str,
        args: Value,
        now: Option<i64>,
        authenticated: &[String],
        changed: &[String],
    ) -> Verdict {
        let tools = tools();
        let mut cx = Cx {
            domain: "retail",
            reads: Reads::new(view, &tools),
            now,
            authenticated,
            changed,
        };
        gate(tool, args.as_object().expect("object"), &mut cx)
    }

    pub fn is_block(v: &Verdict) -> bool {
        matches!(v, Verdict::Block(_))
    }

    pub fn is_explain(v: &Verdict) -> bool {
        matches!(v, Verdict::Explain(_))
    }

    pub fn text(v: &Verdict) -> &str {
        match v {
            Verdict::Block(t) | Verdict::Explain(t) => t,
            Verdict::Pass => "",
        }
    }
}
