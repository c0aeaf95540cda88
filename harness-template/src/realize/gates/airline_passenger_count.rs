//! Why: a reservation has at most five passengers (the booking API does
//! not check it) and its passenger count can never change (the update API
//! rejects it tersely).

use serde_json::{Map, Value};

use super::facts::reservation;
use super::{Cx, Verdict};
use crate::tables::AIRLINE_POLICY;
use crate::text::{say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    let given = args
        .get("passengers")
        .and_then(Value::as_array)
        .map(Vec::len);
    match (tool, given) {
        ("book_reservation", Some(n)) if n > AIRLINE_POLICY.max_passengers => Verdict::Block(say(
            "too_many_passengers",
            &[
                ("count", n.to_string()),
                ("max", AIRLINE_POLICY.max_passengers.to_string()),
            ],
        )),
        ("update_reservation_passengers", Some(n)) => {
            let Some(id) = str_of(args.get("reservation_id")) else {
                return Verdict::Pass;
            };
            let current = reservation(cx, id)
                .and_then(|r| r.get("passengers").and_then(Value::as_array).map(Vec::len));
            match current {
                Some(c) if c != n => Verdict::Explain(say(
                    "passenger_count_change",
                    &[("current", c.to_string()), ("given", n.to_string())],
                )),
                _ => Verdict::Pass,
            }
        }
        _ => Verdict::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    #[test]
    fn limits_and_fixed_count() {
        let six: Vec<Value> = (0..6)
            .map(|i| json!({"first_name": format!("P{i}")}))
            .collect();
        let v = run(
            check,
            &mut MockView::new(),
            "book_reservation",
            json!({"passengers": six}),
            None,
            &[],
        );
        assert!(is_block(&v));
        let mut view = MockView::new().on_json(
            "get_reservation_details",
            json!({"reservation_id": "R1"}),
            json!({"passengers": [{}, {}]}),
        );
        let v = run(
            check,
            &mut view,
            "update_reservation_passengers",
            json!({"reservation_id": "R1", "passengers": [{}]}),
            None,
            &[],
        );
        assert!(is_explain(&v));
        let v = run(
            check,
            &mut view,
            "update_reservation_passengers",
            json!({"reservation_id": "R1", "passengers": [{}, {}]}),
            None,
            &[],
        );
        assert_eq!(v, Verdict::Pass);
    }
}
