//! Why: a refund goes to the original payment method or an existing gift
//! card, and a gift card must cover what it pays; the API rejects these
//! with terse errors, so the gate explains which method works.

use serde_json::{Map, Value};

use super::facts::{order, product, user};
use super::{Cx, Verdict};
use crate::text::{dollars, num, say, str_list, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if !matches!(
        tool,
        "return_delivered_order_items"
            | "exchange_delivered_order_items"
            | "modify_pending_order_items"
            | "modify_pending_order_payment"
    ) {
        return Verdict::Pass;
    }
    let (Some(id), Some(pid)) = (
        str_of(args.get("order_id")),
        str_of(args.get("payment_method_id")),
    ) else {
        return Verdict::Pass;
    };
    let Some(o) = order(cx, id) else {
        return Verdict::Pass;
    };
    let Some(owner) = str_of(o.get("user_id")).map(str::to_string) else {
        return Verdict::Pass;
    };
    let Some(profile) = user(cx, &owner) else {
        return Verdict::Pass;
    };
    let method = profile.get("payment_methods").and_then(|m| m.get(pid));
    let is_gift = method.and_then(|m| str_of(m.get("source"))) == Some("gift_card");
    let balance = method.and_then(|m| num(m.get("balance")));
    let history = o.get("payment_history").and_then(Value::as_array);
    let first = history.and_then(|h| h.first());
    match tool {
        "return_delivered_order_items" => {
            let original = first.and_then(|p| str_of(p.get("payment_method_id")));
            if method.is_some() && !is_gift && original.is_some_and(|o| o != pid) {
                return Verdict::Explain(say(
                    "refund_method",
                    &[
                        ("payment_id", pid.to_string()),
                        ("original", original.unwrap_or("").to_string()),
                    ],
                ));
            }
            Verdict::Pass
        }
        "modify_pending_order_payment" => {
            let amount = first.and_then(|p| num(p.get("amount")));
            gift_check(pid, is_gift, balance, amount)
        }
        _ => {
            // Price difference of the exchange / modification.
            let items = o
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut diff = 0.0;
            for (old, new) in str_list(args.get("item_ids"))
                .iter()
                .zip(str_list(args.get("new_item_ids")).iter())
            {
                let Some(item) = items.iter().find(|i| str_of(i.get("item_id")) == Some(old))
                else {
                    return Verdict::Pass;
                };
                let Some(pid_) = str_of(item.get("product_id")) else {
                    return Verdict::Pass;
                };
                let new_price =
                    product(cx, pid_).and_then(|p| num(p.get("variants")?.get(new)?.get("price")));
                let (Some(new_price), Some(old_price)) = (new_price, num(item.get("price"))) else {
                    return Verdict::Pass;
                };
                diff += new_price - old_price;
            }
            gift_check(pid, is_gift, balance, Some(diff))
        }
    }
}

fn gift_check(pid: &str, is_gift: bool, balance: Option<f64>, amount: Option<f64>) -> Verdict {
    match (is_gift, balance, amount) {
        (true, Some(b), Some(a)) if b + 1e-9 < a => Verdict::Explain(say(
            "gift_card_balance",
            &[
                ("payment_id", pid.to_string()),
                ("balance", dollars(b)),
                ("amount", dollars(a)),
            ],
        )),
        _ => Verdict::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    fn view() -> MockView {
        MockView::new()
            .on_json("get_order_details", json!({"order_id": "#W1"}), json!({"user_id": "u1",
                "items": [{"item_id": "111", "product_id": "P1", "price": 100.0}],
                "payment_history": [{"transaction_type": "payment", "amount": 100.0, "payment_method_id": "credit_card_1"}]}))
            .on_json("get_user_details", json!({"user_id": "u1"}), json!({"payment_methods": {
                "credit_card_1": {"source": "credit_card"}, "paypal_1": {"source": "paypal"},
                "gift_card_1": {"source": "gift_card", "balance": 20.0}}}))
            .on_json("get_product_details", json!({"product_id": "P1"}), json!({"variants": {
                "112": {"available": true, "price": 150.0}, "113": {"available": true, "price": 110.0}}}))
    }

    #[test]
    fn refunds_and_gift_card_balances() {
        let ret =
            |pid: &str| json!({"order_id": "#W1", "item_ids": ["111"], "payment_method_id": pid});
        assert_eq!(
            run(
                check,
                &mut view(),
                "return_delivered_order_items",
                ret("credit_card_1"),
                None,
                &[]
            ),
            Verdict::Pass
        );
        assert_eq!(
            run(
                check,
                &mut view(),
                "return_delivered_order_items",
                ret("gift_card_1"),
                None,
                &[]
            ),
            Verdict::Pass
        );
        assert!(is_explain(&run(
            check,
            &mut view(),
            "return_delivered_order_items",
            ret("paypal_1"),
            None,
            &[]
        )));
        let ex = |new: &str| json!({"order_id": "#W1", "item_ids": ["111"], "new_item_ids": [new], "payment_method_id": "gift_card_1"});
        assert!(is_explain(&run(
            check,
            &mut view(),
            "exchange_delivered_order_items",
            ex("112"),
            None,
            &[]
        )));
        assert_eq!(
            run(
                check,
                &mut view(),
                "exchange_delivered_order_items",
                ex("113"),
                None,
                &[]
            ),
            Verdict::Pass
        );
        let pay = json!({"order_id": "#W1", "payment_method_id": "gift_card_1"});
        assert!(is_explain(&run(
            check,
            &mut view(),
            "modify_pending_order_payment",
            pay,
            None,
            &[]
        )));
    }
}
