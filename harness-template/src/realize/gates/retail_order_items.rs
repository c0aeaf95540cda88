//! Why: exchanges, modifications and returns must name item ids of the
//! order (not product ids) and new items that are available variants of
//! the same product; the API rejects others with "not found", so the gate
//! explains which id is wrong and where the right ones are.

use serde_json::{Map, Value};

use super::facts::{order, product};
use super::{Cx, Verdict};
use crate::text::{say, str_list, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if !matches!(
        tool,
        "exchange_delivered_order_items"
            | "modify_pending_order_items"
            | "return_delivered_order_items"
    ) {
        return Verdict::Pass;
    }
    let Some(id) = str_of(args.get("order_id")) else {
        return Verdict::Pass;
    };
    let Some(o) = order(cx, id) else {
        return Verdict::Pass;
    };
    let items: Vec<(String, String)> = o
        .get("items")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| {
                    Some((
                        str_of(i.get("item_id"))?.to_string(),
                        str_of(i.get("product_id"))?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let wanted = str_list(args.get("item_ids"));
    let mut missing: Vec<String> = Vec::new();
    for w in &wanted {
        let asked = wanted.iter().filter(|x| *x == w).count();
        let there = items.iter().filter(|(i, _)| i == w).count();
        if asked > there && !missing.contains(w) {
            missing.push(w.clone());
        }
    }
    if !missing.is_empty() {
        let order_items: Vec<String> = items.iter().map(|(i, _)| i.clone()).collect();
        return Verdict::Explain(say(
            "items_not_in_order",
            &[
                ("order_id", id.to_string()),
                ("items", missing.join(", ")),
                ("order_items", order_items.join(", ")),
            ],
        ));
    }
    if tool == "return_delivered_order_items" {
        return Verdict::Pass;
    }
    let new_ids = str_list(args.get("new_item_ids"));
    let mut problems = Vec::new();
    for (old, new) in wanted.iter().zip(&new_ids) {
        let Some((_, product_id)) = items.iter().find(|(i, _)| i == old) else {
            continue;
        };
        let reason = if old == new && tool == "modify_pending_order_items" {
            Some("it is the same item")
        } else {
            match product(cx, product_id) {
                None => None,
                Some(p) => match p.get("variants").and_then(|v| v.get(new)) {
                    None => Some("it is not a variant of this product"),
                    Some(variant) if variant.get("available") == Some(&Value::Bool(false)) => {
                        Some("it is not available")
                    }
                    Some(_) => None,
                },
            }
        };
        if let Some(reason) = reason {
            problems.push(say(
                "new_item_invalid",
                &[
                    ("item", new.clone()),
                    ("product", product_id.clone()),
                    ("reason", reason.to_string()),
                ],
            ));
        }
    }
    if problems.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Explain(problems.join(" "))
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
            .on_json("get_order_details", json!({"order_id": "#W1"}), json!({"status": "delivered",
                "items": [{"item_id": "111", "product_id": "P1"}, {"item_id": "222", "product_id": "P2"}]}))
            .on_json("get_product_details", json!({"product_id": "P1"}), json!({"variants": {
                "111": {"available": true}, "112": {"available": true}, "113": {"available": false}}}))
    }

    fn exchange(items: Value, new: Value) -> Verdict {
        run(
            check,
            &mut view(),
            "exchange_delivered_order_items",
            json!({"order_id": "#W1", "item_ids": items, "new_item_ids": new}),
            None,
            &[],
        )
    }

    #[test]
    fn items_must_belong_to_the_order_and_new_items_to_the_product() {
        assert_eq!(exchange(json!(["111"]), json!(["112"])), Verdict::Pass);
        let v = exchange(json!(["P1"]), json!(["112"]));
        assert!(
            is_explain(&v) && text(&v).contains("not product ids"),
            "{v:?}"
        );
        assert!(is_explain(&exchange(
            json!(["111", "111"]),
            json!(["112", "112"])
        )));
        let v = exchange(json!(["111"]), json!(["113"]));
        assert!(text(&v).contains("not available"), "{v:?}");
        let v = exchange(json!(["111"]), json!(["999"]));
        assert!(text(&v).contains("not a variant"), "{v:?}");
    }
}
