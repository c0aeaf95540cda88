//! Why: bags can be added but never removed, and bags already paid for
//! stay paid; the update API stores whatever it is given. (The free
//! allowance is not enforced here: τ²'s reference solutions charge added
//! bags regardless of it.)

use serde_json::{Map, Value};

use super::facts::{int, reservation};
use super::{Cx, Verdict};
use crate::text::{say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if tool != "update_reservation_baggages" {
        return Verdict::Pass;
    }
    let Some(id) = str_of(args.get("reservation_id")) else {
        return Verdict::Pass;
    };
    let (Some(total), Some(nonfree)) = (
        int(args.get("total_baggages")),
        int(args.get("nonfree_baggages")),
    ) else {
        return Verdict::Pass;
    };
    let values = |current: i64| {
        vec![
            ("reservation_id", id.to_string()),
            ("current", current.to_string()),
            ("given", total.to_string()),
            ("current_nonfree", current.to_string()),
            ("nonfree", nonfree.to_string()),
        ]
    };
    if nonfree > total {
        return Verdict::Block(say("nonfree_over_total", &values(total)));
    }
    let Some(r) = reservation(cx, id) else {
        return Verdict::Pass;
    };
    let (Some(current), Some(current_nonfree)) =
        (int(r.get("total_baggages")), int(r.get("nonfree_baggages")))
    else {
        return Verdict::Pass;
    };
    if total < current {
        return Verdict::Block(say("bags_removed", &values(current)));
    }
    if nonfree < current_nonfree {
        return Verdict::Block(say("paid_bags_removed", &values(current_nonfree)));
    }
    Verdict::Pass
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    fn update(total: i64, nonfree: i64) -> Verdict {
        let mut v = MockView::new().on_json(
            "get_reservation_details",
            json!({"reservation_id": "R1"}),
            json!({"user_id": "u1", "cabin": "economy", "passengers": [{}],
                   "total_baggages": 2, "nonfree_baggages": 1}),
        );
        run(
            check,
            &mut v,
            "update_reservation_baggages",
            json!({"reservation_id": "R1", "total_baggages": total, "nonfree_baggages": nonfree,
                   "payment_id": "credit_card_1"}),
            None,
            &[],
        )
    }

    #[test]
    fn bags_are_only_added() {
        assert_eq!(update(2, 1), Verdict::Pass);
        assert_eq!(update(4, 3), Verdict::Pass);
        let v = update(1, 1);
        assert!(
            is_block(&v) && text(&v).contains("has 2 bag(s) and the call sets 1"),
            "{v:?}"
        );
        assert!(is_block(&update(3, 0)));
        assert!(is_block(&update(3, 4)));
    }
}
