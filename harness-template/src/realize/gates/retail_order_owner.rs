//! Why: the agent may only act for the one user it authenticated; the
//! order APIs accept any order id, so a change to another user's order is
//! blocked.

use serde_json::{Map, Value};

use super::facts::order;
use super::{Cx, Verdict};
use crate::text::{say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    let writes_order = matches!(
        tool,
        "cancel_pending_order"
            | "modify_pending_order_items"
            | "modify_pending_order_address"
            | "modify_pending_order_payment"
            | "exchange_delivered_order_items"
            | "return_delivered_order_items"
    );
    if !writes_order || cx.authenticated.is_empty() {
        return Verdict::Pass;
    }
    let Some(id) = str_of(args.get("order_id")) else {
        return Verdict::Pass;
    };
    let Some(owner) = order(cx, id).and_then(|o| str_of(o.get("user_id")).map(str::to_string))
    else {
        return Verdict::Pass;
    };
    if cx.authenticated.contains(&owner) {
        return Verdict::Pass;
    }
    Verdict::Block(say(
        "order_other_user",
        &[
            ("order_id", id.to_string()),
            ("owner", owner),
            ("users", cx.authenticated.join(", ")),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    #[test]
    fn only_the_authenticated_users_orders() {
        let mut v = MockView::new().on_json(
            "get_order_details",
            json!({"order_id": "#W1"}),
            json!({"user_id": "alice_1"}),
        );
        let args = json!({"order_id": "#W1", "reason": "ordered by mistake"});
        assert_eq!(
            run(
                check,
                &mut v,
                "cancel_pending_order",
                args.clone(),
                None,
                &["alice_1".into()]
            ),
            Verdict::Pass
        );
        assert!(is_block(&run(
            check,
            &mut v,
            "cancel_pending_order",
            args.clone(),
            None,
            &["bob_2".into()]
        )));
        // Nobody authenticated yet: nothing to compare with.
        assert_eq!(
            run(check, &mut v, "cancel_pending_order", args, None, &[]),
            Verdict::Pass
        );
    }
}
