//! Why: "basic economy flights cannot be modified" and the cabin cannot
//! change once a flight was flown, yet the API accepts both; the call is
//! blocked with what is still allowed (a cabin upgrade on the same
//! flights).

use serde_json::{Map, Value};

use super::facts::{flight_keys, flight_status, reservation};
use super::{Cx, Verdict};
use crate::tables::AIRLINE_POLICY;
use crate::text::{say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if tool != "update_reservation_flights" {
        return Verdict::Pass;
    }
    let Some(id) = str_of(args.get("reservation_id")) else {
        return Verdict::Pass;
    };
    let Some(r) = reservation(cx, id) else {
        return Verdict::Pass;
    };
    let rid = ("reservation_id", id.to_string());
    let current_cabin = str_of(r.get("cabin")).unwrap_or("");
    let mut current = flight_keys(r.get("flights"));
    let mut wanted = flight_keys(args.get("flights"));
    current.sort();
    wanted.sort();
    if current_cabin == "basic_economy" && !wanted.is_empty() && current != wanted {
        return Verdict::Block(say("basic_economy_change", &[rid]));
    }
    let new_cabin = str_of(args.get("cabin")).unwrap_or(current_cabin);
    if new_cabin != current_cabin {
        let flown: Vec<String> = current
            .iter()
            .filter_map(|(n, d)| {
                let s = flight_status(cx, n, d)?;
                AIRLINE_POLICY
                    .flown_statuses
                    .contains(&s.as_str())
                    .then(|| format!("{n} on {d}: {s}"))
            })
            .collect();
        if !flown.is_empty() {
            return Verdict::Block(say(
                "cabin_change_flown",
                &[rid, ("flights", flown.join(", "))],
            ));
        }
    }
    Verdict::Pass
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    fn view(cabin: &str) -> MockView {
        MockView::new()
            .on_json(
                "get_reservation_details",
                json!({"reservation_id": "R1"}),
                json!({"reservation_id": "R1", "cabin": cabin,
                       "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}]}),
            )
            .on(
                "get_flight_status",
                json!({"flight_number": "HAT001", "date": "2024-05-20"}),
                "available",
            )
    }

    fn update(v: &mut MockView, cabin: &str, flight: &str) -> Verdict {
        run(
            check,
            v,
            "update_reservation_flights",
            json!({"reservation_id": "R1", "cabin": cabin, "payment_id": "gift_card_1",
                   "flights": [{"flight_number": flight, "date": "2024-05-20"}]}),
            None,
            &[],
        )
    }

    #[test]
    fn basic_economy_flights_cannot_change_but_cabin_can() {
        assert!(is_block(&update(
            &mut view("basic_economy"),
            "basic_economy",
            "HAT002"
        )));
        assert_eq!(
            update(&mut view("basic_economy"), "economy", "HAT001"),
            Verdict::Pass
        );
        assert_eq!(
            update(&mut view("economy"), "economy", "HAT002"),
            Verdict::Pass
        );
    }

    #[test]
    fn no_cabin_change_after_a_flight_was_flown() {
        let mut v = MockView::new()
            .on_json(
                "get_reservation_details",
                json!({"reservation_id": "R1"}),
                json!({"reservation_id": "R1", "cabin": "economy",
                       "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}]}),
            )
            .on(
                "get_flight_status",
                json!({"flight_number": "HAT001", "date": "2024-05-20"}),
                "landed",
            );
        assert!(is_block(&update(&mut v, "business", "HAT001")));
    }
}
