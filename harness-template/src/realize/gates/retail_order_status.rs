//! Why: each order tool applies to one status (cancel/modify: 'pending';
//! exchange/return: 'delivered'). After an item modification the policy
//! forbids any further change, which the address and payment APIs do not
//! check (blocked); other wrong statuses are rejected by the API, and the
//! gate explains what is possible instead.

use serde_json::{Map, Value};

use super::facts::order;
use super::{Cx, Verdict};
use crate::text::{message, say, str_of};

/// (tool, the status it needs, whether the API itself checks it exactly).
const NEEDS: &[(&str, &str, bool)] = &[
    ("cancel_pending_order", "pending", true),
    ("modify_pending_order_items", "pending", true),
    ("modify_pending_order_address", "pending", false),
    ("modify_pending_order_payment", "pending", false),
    ("exchange_delivered_order_items", "delivered", true),
    ("return_delivered_order_items", "delivered", true),
];

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    let Some((_, needed, api_exact)) = NEEDS.iter().find(|(t, _, _)| *t == tool) else {
        return Verdict::Pass;
    };
    let Some(id) = str_of(args.get("order_id")) else {
        return Verdict::Pass;
    };
    let Some(o) = order(cx, id) else {
        return Verdict::Pass;
    };
    let Some(status) = str_of(o.get("status")) else {
        return Verdict::Pass;
    };
    if status == *needed {
        return Verdict::Pass;
    }
    let modified = *needed == "pending" && status.contains("pending");
    let advice = if modified {
        message("order_status_advice_modified")
    } else if *needed == "delivered" {
        message("order_status_advice_delivered")
    } else {
        message("order_status_advice_pending")
    };
    let text = say(
        "order_status",
        &[
            ("order_id", id.to_string()),
            ("status", status.to_string()),
            ("tool", tool.to_string()),
            ("allowed", needed.to_string()),
            ("advice", advice.to_string()),
        ],
    );
    if modified && !api_exact {
        // The API would accept it: the policy says no.
        Verdict::Block(text)
    } else {
        Verdict::Explain(text)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    fn with_status(status: &str, tool: &str) -> Verdict {
        let mut v = MockView::new().on_json(
            "get_order_details",
            json!({"order_id": "#W1"}),
            json!({"order_id": "#W1", "status": status}),
        );
        run(check, &mut v, tool, json!({"order_id": "#W1"}), None, &[])
    }

    #[test]
    fn status_rules() {
        assert_eq!(
            with_status("pending", "cancel_pending_order"),
            Verdict::Pass
        );
        assert_eq!(
            with_status("delivered", "return_delivered_order_items"),
            Verdict::Pass
        );
        let v = with_status("pending", "exchange_delivered_order_items");
        assert!(
            is_explain(&v) && text(&v).contains("modify_pending_order_items"),
            "{v:?}"
        );
        let v = with_status("processed", "cancel_pending_order");
        assert!(
            is_explain(&v) && text(&v).contains("status 'processed'"),
            "{v:?}"
        );
        let v = with_status("pending (item modified)", "modify_pending_order_address");
        assert!(is_block(&v) && text(&v).contains("not allow"), "{v:?}");
        assert!(is_explain(&with_status(
            "pending (item modified)",
            "cancel_pending_order"
        )));
        assert_eq!(with_status("x", "get_order_details"), Verdict::Pass);
    }
}
