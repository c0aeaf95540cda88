//! Why: the cancellation API "does not check that cancellation rules are
//! met"; cancelling an ineligible reservation is an irreversible policy
//! breach, so the call is blocked with each condition listed as met / not
//! met. Read as τ²'s reference solutions apply the policy: flown segments
//! are not a block reason (they cancel eligible reservations whose segments
//! show as landed), and a reservation changed in this conversation (e.g. a
//! cabin upgrade just paid for) counts as booked within the last 24 hours.

use serde_json::{Map, Value};

use super::facts::{flight_keys, flight_status, reservation};
use super::{Cx, Verdict};
use crate::contract::clock::minutes;
use crate::tables::AIRLINE_POLICY;
use crate::text::{say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if tool != "cancel_reservation" {
        return Verdict::Pass;
    }
    let Some(id) = str_of(args.get("reservation_id")) else {
        return Verdict::Pass;
    };
    let Some(r) = reservation(cx, id) else {
        return Verdict::Pass;
    };
    let rid = ("reservation_id", id.to_string());
    if str_of(r.get("status")) == Some("cancelled") {
        return Verdict::Block(say("cancel_already", &[rid]));
    }
    let flights = flight_keys(r.get("flights"));
    let statuses: Vec<Option<String>> = flights
        .iter()
        .map(|(n, d)| flight_status(cx, n, d))
        .collect();
    // Each condition: Some(true) met, Some(false) not met, None unknown.
    let created = str_of(r.get("created_at")).unwrap_or("");
    let recent = match (cx.now, minutes(created)) {
        _ if cx.changed.iter().any(|c| c == id) => Some(true),
        (Some(now), Some(at)) => Some(now - at <= AIRLINE_POLICY.free_cancel_hours * 60),
        _ => None,
    };
    let airline_cancelled = if statuses.iter().any(|s| s.as_deref() == Some("cancelled")) {
        Some(true)
    } else if statuses.iter().all(Option::is_some) {
        Some(false)
    } else {
        None
    };
    let cabin = str_of(r.get("cabin")).unwrap_or("");
    let business = Some(cabin == "business");
    let insured = Some(str_of(r.get("insurance")) == Some("yes"));
    let conditions = [recent, airline_cancelled, business, insured];
    if conditions.iter().any(|c| *c != Some(false)) {
        // Met, or cannot be ruled out (the insurance reason is the user's).
        return Verdict::Pass;
    }
    let checks = [
        format!(
            "booked (or changed in this conversation) within the last {} hours: not met (booked {created})",
            AIRLINE_POLICY.free_cancel_hours
        ),
        "a flight cancelled by the airline: not met".to_string(),
        format!("business cabin: not met (cabin {cabin})"),
        "travel insurance (health or weather reasons): not met (no insurance)".to_string(),
    ];
    Verdict::Block(say(
        "cancel_not_eligible",
        &[rid, ("checks", checks.join("; "))],
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::contract::clock::minutes;
    use crate::view::mock::MockView;
    use serde_json::json;

    fn view(cabin: &str, insurance: &str, created: &str, status: &str) -> MockView {
        MockView::new()
            .on_json(
                "get_reservation_details",
                json!({"reservation_id": "ABC123"}),
                json!({"reservation_id": "ABC123", "cabin": cabin, "insurance": insurance,
                       "created_at": created, "status": null,
                       "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}]}),
            )
            .on(
                "get_flight_status",
                json!({"flight_number": "HAT001", "date": "2024-05-20"}),
                status,
            )
    }

    fn verdict(v: &mut MockView) -> Verdict {
        run(
            check,
            v,
            "cancel_reservation",
            json!({"reservation_id": "ABC123"}),
            minutes("2024-05-15 15:00:00"),
            &[],
        )
    }

    #[test]
    fn blocks_an_ineligible_cancellation_listing_each_condition() {
        let v = verdict(&mut view(
            "economy",
            "no",
            "2024-05-01T10:00:00",
            "available",
        ));
        assert!(is_block(&v), "{v:?}");
        let t = text(&v);
        assert!(t.contains("not met (booked 2024-05-01T10:00:00)"), "{t}");
        assert!(t.contains("business cabin: not met (cabin economy)"));
    }

    #[test]
    fn passes_when_any_condition_holds() {
        for (cabin, ins, created, status) in [
            ("business", "no", "2024-05-01T10:00:00", "available"),
            ("economy", "yes", "2024-05-01T10:00:00", "available"),
            ("economy", "no", "2024-05-14T16:00:00", "available"),
            ("economy", "no", "2024-05-01T10:00:00", "cancelled"),
        ] {
            let v = verdict(&mut view(cabin, ins, created, status));
            assert_eq!(v, Verdict::Pass, "{cabin} {ins} {created} {status}");
        }
    }

    #[test]
    fn passes_on_missing_data_and_for_eligible_landed_trips() {
        let v = verdict(&mut MockView::new());
        assert_eq!(v, Verdict::Pass);
        // τ² gold cancels an eligible (business) reservation with landed
        // segments: not a block reason.
        let v = verdict(&mut view("business", "no", "2024-05-01T10:00:00", "landed"));
        assert_eq!(v, Verdict::Pass);
        let v = verdict(&mut view("economy", "no", "2024-05-01T10:00:00", "landed"));
        assert!(is_block(&v));
    }

    #[test]
    fn a_reservation_changed_in_this_conversation_counts_as_recent() {
        let v = run_changed(
            check,
            &mut view("economy", "no", "2024-05-01T10:00:00", "available"),
            "cancel_reservation",
            json!({"reservation_id": "ABC123"}),
            minutes("2024-05-15 15:00:00"),
            &[],
            &["ABC123".to_string()],
        );
        assert_eq!(v, Verdict::Pass);
    }
}
