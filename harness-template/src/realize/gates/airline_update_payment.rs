//! Why: changes to a reservation must be paid with one gift card or credit
//! card from the profile (never a certificate), and a gift card must cover
//! the fee; the API rejects these tersely, so the gate explains them.

use serde_json::{Map, Value};

use super::facts::{int, reservation, user};
use super::{Cx, Verdict};
use crate::tables::AIRLINE_POLICY;
use crate::text::{dollars, num, say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if !matches!(
        tool,
        "update_reservation_flights" | "update_reservation_baggages"
    ) {
        return Verdict::Pass;
    }
    let (Some(id), Some(pid)) = (
        str_of(args.get("reservation_id")),
        str_of(args.get("payment_id")),
    ) else {
        return Verdict::Pass;
    };
    let Some(r) = reservation(cx, id) else {
        return Verdict::Pass;
    };
    let Some(owner) = str_of(r.get("user_id")) else {
        return Verdict::Pass;
    };
    let Some(profile) = user(cx, owner) else {
        return Verdict::Pass;
    };
    let Some(method) = profile.get("payment_methods").and_then(|m| m.get(pid)) else {
        return Verdict::Explain(say(
            "payment_not_in_profile",
            &[("payment_id", pid.to_string())],
        ));
    };
    match str_of(method.get("source")) {
        Some("certificate") => Verdict::Explain(say(
            "certificate_for_update",
            &[("payment_id", pid.to_string())],
        )),
        Some("gift_card") if tool == "update_reservation_baggages" => {
            let added = int(args.get("nonfree_baggages")).unwrap_or(0)
                - int(r.get("nonfree_baggages")).unwrap_or(0);
            let fee = (added.max(0) * AIRLINE_POLICY.bag_fee) as f64;
            match num(method.get("amount")) {
                Some(balance) if balance < fee => Verdict::Explain(say(
                    "gift_card_balance",
                    &[
                        ("payment_id", pid.to_string()),
                        ("balance", dollars(balance)),
                        ("amount", dollars(fee)),
                    ],
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
    fn certificates_and_foreign_methods_are_explained() {
        let mut v = MockView::new()
            .on_json(
                "get_reservation_details",
                json!({"reservation_id": "R1"}),
                json!({"user_id": "u1", "nonfree_baggages": 0}),
            )
            .on_json(
                "get_user_details",
                json!({"user_id": "u1"}),
                json!({"payment_methods": {
                "certificate_1": {"source": "certificate", "amount": 100},
                "gift_card_1": {"source": "gift_card", "amount": 40},
                "credit_card_1": {"source": "credit_card"}}}),
            );
        let call = |pid: &str, nonfree: i64| {
            json!({"reservation_id": "R1", "payment_id": pid,
            "total_baggages": 3, "nonfree_baggages": nonfree})
        };
        assert!(is_explain(&run(
            check,
            &mut v,
            "update_reservation_baggages",
            call("certificate_1", 1),
            None,
            &[]
        )));
        assert!(is_explain(&run(
            check,
            &mut v,
            "update_reservation_baggages",
            call("paypal_1", 1),
            None,
            &[]
        )));
        assert!(is_explain(&run(
            check,
            &mut v,
            "update_reservation_baggages",
            call("gift_card_1", 1),
            None,
            &[]
        )));
        assert_eq!(
            run(
                check,
                &mut v,
                "update_reservation_baggages",
                call("gift_card_1", 0),
                None,
                &[]
            ),
            Verdict::Pass
        );
        assert_eq!(
            run(
                check,
                &mut v,
                "update_reservation_baggages",
                call("credit_card_1", 1),
                None,
                &[]
            ),
            Verdict::Pass
        );
    }
}
