//! Why: the booking API charges whatever `nonfree_baggages` says; the free
//! allowance depends on membership and cabin, and charging for free bags
//! (or not charging extra ones) breaks the policy silently.

use serde_json::{Map, Value};

use super::facts::{free_bags, int, user};
use super::{Cx, Verdict};
use crate::text::{say, str_of};

pub fn check(tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    if tool != "book_reservation" {
        return Verdict::Pass;
    }
    let (Some(user_id), Some(cabin)) = (str_of(args.get("user_id")), str_of(args.get("cabin")))
    else {
        return Verdict::Pass;
    };
    let (Some(total), Some(given)) = (
        int(args.get("total_baggages")),
        int(args.get("nonfree_baggages")),
    ) else {
        return Verdict::Pass;
    };
    let Some(passengers) = args
        .get("passengers")
        .and_then(Value::as_array)
        .map(Vec::len)
    else {
        return Verdict::Pass;
    };
    let Some(membership) =
        user(cx, user_id).and_then(|u| str_of(u.get("membership")).map(str::to_string))
    else {
        return Verdict::Pass;
    };
    let Some(free) = free_bags(&membership, cabin) else {
        return Verdict::Pass;
    };
    let free_total = free * passengers as i64;
    let expected = (total - free_total).max(0);
    if given == expected {
        return Verdict::Pass;
    }
    Verdict::Block(say(
        "booking_nonfree_bags",
        &[
            ("given", given.to_string()),
            ("expected", expected.to_string()),
            ("total", total.to_string()),
            ("free", free.to_string()),
            ("free_total", free_total.to_string()),
            ("membership", membership),
            ("cabin", cabin.replace('_', " ")),
            ("passengers", passengers.to_string()),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::view::mock::MockView;
    use serde_json::json;

    fn book(membership: &str, cabin: &str, total: i64, nonfree: i64) -> Verdict {
        let mut v = MockView::new().on_json(
            "get_user_details",
            json!({"user_id": "u1"}),
            json!({"membership": membership}),
        );
        run(
            check,
            &mut v,
            "book_reservation",
            json!({"user_id": "u1", "cabin": cabin, "passengers": [{}, {}],
                   "total_baggages": total, "nonfree_baggages": nonfree}),
            None,
            &[],
        )
    }

    #[test]
    fn nonfree_bags_follow_the_allowance() {
        assert_eq!(book("regular", "economy", 3, 1), Verdict::Pass);
        assert_eq!(book("gold", "business", 3, 0), Verdict::Pass);
        assert_eq!(book("regular", "basic_economy", 1, 1), Verdict::Pass);
        let v = book("silver", "economy", 4, 2);
        assert!(
            is_block(&v) && text(&v).contains("should be 0, not 2"),
            "{v:?}"
        );
        assert!(is_block(&book("regular", "economy", 3, 0)));
    }
}
