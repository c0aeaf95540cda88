//! Why: only flights with status 'available' can be booked; the API
//! rejects others with a terse "not available", so the gate explains the
//! status and points to the searches (which list only bookable flights).

use serde_json::{Map, Value};

use super::facts::{flight_keys, flight_status, reservation};
use super::{Cx, Verdict};
use crate::tables::AIRLINE_POLICY;
use crate::text::{say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    let mut wanted = flight_keys(args.get("flights"));
    match tool {
        "book_reservation" => {}
        "update_reservation_flights" => {
            // Segments kept unchanged (same flight, date and cabin) are not
            // re-booked.
            let Some(id) = str_of(args.get("reservation_id")) else {
                return Verdict::Pass;
            };
            let Some(r) = reservation(cx, id) else {
                return Verdict::Pass;
            };
            if str_of(args.get("cabin")) == str_of(r.get("cabin")) {
                let kept = flight_keys(r.get("flights"));
                wanted.retain(|f| !kept.contains(f));
            }
        }
        _ => return Verdict::Pass,
    }
    let bad: Vec<String> = wanted
        .iter()
        .filter_map(|(n, d)| {
            let s = flight_status(cx, n, d)?;
            (s != AIRLINE_POLICY.bookable_status).then(|| format!("{n} on {d} is '{s}'"))
        })
        .collect();
    if bad.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Explain(say("flight_not_bookable", &[("flights", bad.join(", "))]))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    #[test]
    fn explains_unbookable_new_flights_only() {
        let mut v = MockView::new()
            .on("get_flight_status", json!({"flight_number": "HAT001", "date": "2024-05-20"}), "delayed")
            .on("get_flight_status", json!({"flight_number": "HAT002", "date": "2024-05-20"}), "available")
            .on_json(
                "get_reservation_details",
                json!({"reservation_id": "R1"}),
                json!({"cabin": "economy", "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}]}),
            );
        let book = |f: &str| json!({"flights": [{"flight_number": f, "date": "2024-05-20"}]});
        let r = run(check, &mut v, "book_reservation", book("HAT001"), None, &[]);
        assert!(
            is_explain(&r) && text(&r).contains("HAT001 on 2024-05-20 is 'delayed'"),
            "{r:?}"
        );
        assert_eq!(
            run(check, &mut v, "book_reservation", book("HAT002"), None, &[]),
            Verdict::Pass
        );
        // A delayed segment kept in the same cabin is fine.
        let keep = json!({"reservation_id": "R1", "cabin": "economy",
            "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}]});
        assert_eq!(
            run(check, &mut v, "update_reservation_flights", keep, None, &[]),
            Verdict::Pass
        );
    }
}
