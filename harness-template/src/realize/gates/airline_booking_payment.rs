//! Why: a booking may use at most one certificate, one credit card and
//! three gift cards (the API does not check it: blocked); payments from
//! outside the profile, over a balance, or not adding up to the total are
//! rejected by the API with terse errors, so the gate explains them with
//! the price breakdown.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::facts::{flight_keys, int, user};
use super::{Cx, Verdict};
use crate::tables::{AIRLINE_POLICY, PAYMENT_LIMITS};
use crate::text::{dollars, num, say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if tool != "book_reservation" {
        return Verdict::Pass;
    }
    let Some(user_id) = str_of(args.get("user_id")) else {
        return Verdict::Pass;
    };
    let Some(profile) = user(cx, user_id) else {
        return Verdict::Pass;
    };
    let Some(payments) = args.get("payment_methods").and_then(Value::as_array) else {
        return Verdict::Pass;
    };
    let methods = profile
        .get("payment_methods")
        .cloned()
        .unwrap_or(Value::Null);
    let mut explain = Vec::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut paid = 0.0;
    for p in payments {
        let pid = str_of(p.get("payment_id")).unwrap_or("");
        let amount = num(p.get("amount")).unwrap_or(0.0);
        paid += amount;
        let Some(method) = methods.get(pid) else {
            explain.push(say(
                "payment_not_in_profile",
                &[("payment_id", pid.to_string())],
            ));
            continue;
        };
        let source = str_of(method.get("source")).unwrap_or("");
        *counts.entry(source.to_string()).or_default() += 1;
        if matches!(source, "gift_card" | "certificate")
            && let Some(balance) = num(method.get("amount"))
            && balance < amount
        {
            explain.push(say(
                "payment_balance",
                &[
                    ("payment_id", pid.to_string()),
                    ("balance", dollars(balance)),
                    ("amount", dollars(amount)),
                ],
            ));
        }
    }
    for limit in PAYMENT_LIMITS {
        let count = counts.get(limit.source).copied().unwrap_or(0);
        if count > limit.max {
            return Verdict::Block(say(
                "payment_limit",
                &[
                    ("label", limit.label.to_string()),
                    ("count", count.to_string()),
                    ("max", limit.max.to_string()),
                ],
            ));
        }
    }
    if let Some((total, breakdown)) = total_price(args, cx)
        && (total - paid).abs() > 1e-6
    {
        explain.push(say(
            "payment_total",
            &[
                ("total", dollars(total)),
                ("paid", dollars(paid)),
                ("breakdown", breakdown),
            ],
        ));
    }
    if explain.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Explain(explain.join(" "))
    }
}

/// The booking's price as the API computes it (cabin prices of the
/// flights times passengers, insurance, non-free bags), from direct-flight
/// searches of the trip's two directions; `None` if a flight is not found.
fn total_price(args: &Map<String, Value>, cx: &mut Cx) -> Option<(f64, String)> {
    let origin = str_of(args.get("origin"))?;
    let destination = str_of(args.get("destination"))?;
    let cabin = str_of(args.get("cabin"))?;
    let passengers = args.get("passengers")?.as_array()?.len() as f64;
    let flights = flight_keys(args.get("flights"));
    if flights.is_empty() {
        return None;
    }
    let mut prices = Vec::new();
    for (number, date) in &flights {
        let mut found = None;
        for (o, d) in [(origin, destination), (destination, origin)] {
            let results = cx.reads.json(
                "search_direct_flight",
                json!({"origin": o, "destination": d, "date": date}),
            );
            found = results
                .as_deref()
                .and_then(Value::as_array)
                .and_then(|list| {
                    list.iter()
                        .find(|f| str_of(f.get("flight_number")) == Some(number))
                })
                .and_then(|f| num(f.get("prices")?.get(cabin)));
            if found.is_some() {
                break;
            }
        }
        prices.push(found?);
    }
    let insurance = if str_of(args.get("insurance")) == Some("yes") {
        AIRLINE_POLICY.insurance_per_passenger as f64 * passengers
    } else {
        0.0
    };
    let bags =
        int(args.get("nonfree_baggages")).unwrap_or(0) as f64 * AIRLINE_POLICY.bag_fee as f64;
    let fares: f64 = prices.iter().sum::<f64>() * passengers;
    let total = fares + insurance + bags;
    let breakdown = format!(
        "{} passenger(s) x ({}) = {}, insurance {}, non-free bags {}",
        passengers,
        prices
            .iter()
            .map(|p| dollars(*p))
            .collect::<Vec<_>>()
            .join(" + "),
        dollars(fares),
        dollars(insurance),
        dollars(bags)
    );
    Some((total, breakdown))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;

    fn view() -> MockView {
        MockView::new()
            .on_json(
                "get_user_details",
                json!({"user_id": "u1"}),
                json!({"membership": "gold", "payment_methods": {
                    "gift_card_1": {"source": "gift_card", "amount": 100, "id": "gift_card_1"},
                    "gift_card_2": {"source": "gift_card", "amount": 100, "id": "gift_card_2"},
                    "credit_card_1": {"source": "credit_card", "id": "credit_card_1"},
                    "credit_card_2": {"source": "credit_card", "id": "credit_card_2"}}}),
            )
            .on_json(
                "search_direct_flight",
                json!({"origin": "JFK", "destination": "LAX", "date": "2024-05-20"}),
                json!([{"flight_number": "HAT001", "prices": {"economy": 200, "business": 500}}]),
            )
    }

    fn book(payments: Value) -> Value {
        json!({"user_id": "u1", "origin": "JFK", "destination": "LAX", "flight_type": "one_way",
               "cabin": "economy", "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}],
               "passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}],
               "payment_methods": payments, "total_baggages": 0, "nonfree_baggages": 0,
               "insurance": "yes"})
    }

    #[test]
    fn a_correct_split_passes() {
        let v = run(
            check,
            &mut view(),
            "book_reservation",
            book(
                json!([{"payment_id": "gift_card_1", "amount": 100}, {"payment_id": "credit_card_1", "amount": 130}]),
            ),
            None,
            &[],
        );
        assert_eq!(v, Verdict::Pass);
    }

    #[test]
    fn two_credit_cards_are_blocked() {
        let v = run(
            check,
            &mut view(),
            "book_reservation",
            book(
                json!([{"payment_id": "credit_card_2", "amount": 100}, {"payment_id": "credit_card_1", "amount": 130}]),
            ),
            None,
            &[],
        );
        assert!(
            is_block(&v) && text(&v).contains("at most 1 credit card"),
            "{v:?}"
        );
    }

    #[test]
    fn wrong_totals_and_balances_are_explained() {
        let v = run(
            check,
            &mut view(),
            "book_reservation",
            book(json!([{"payment_id": "credit_card_1", "amount": 229}])),
            None,
            &[],
        );
        assert!(
            is_explain(&v) && text(&v).contains("add up to $229, but the booking costs $230"),
            "{v:?}"
        );
        let v = run(
            check,
            &mut view(),
            "book_reservation",
            book(json!([{"payment_id": "gift_card_1", "amount": 230}])),
            None,
            &[],
        );
        assert!(
            is_explain(&v) && text(&v).contains("balance of $100"),
            "{v:?}"
        );
        let v = run(
            check,
            &mut view(),
            "book_reservation",
            book(json!([{"payment_id": "paypal_9", "amount": 230}])),
            None,
            &[],
        );
        assert!(
            is_explain(&v) && text(&v).contains("not in the user's profile"),
            "{v:?}"
        );
    }
}
