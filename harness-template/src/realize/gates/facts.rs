//! Typed lookups the gates share (all through read-only tools).

use std::rc::Rc;

use serde_json::{Value, json};

use super::Cx;
use crate::tables::BAG_ALLOWANCE;
use crate::text::str_of;

pub fn reservation(cx: &mut Cx, reservation_id: &str) -> Option<Rc<Value>> {
    cx.reads.json(
        "get_reservation_details",
        json!({ "reservation_id": reservation_id }),
    )
}

pub fn user(cx: &mut Cx, user_id: &str) -> Option<Rc<Value>> {
    cx.reads
        .json("get_user_details", json!({ "user_id": user_id }))
}

pub fn order(cx: &mut Cx, order_id: &str) -> Option<Rc<Value>> {
    cx.reads
        .json("get_order_details", json!({ "order_id": order_id }))
}

pub fn product(cx: &mut Cx, product_id: &str) -> Option<Rc<Value>> {
    cx.reads
        .json("get_product_details", json!({ "product_id": product_id }))
}

/// A flight's status on a date (`available`, `delayed`, `landed`...).
pub fn flight_status(cx: &mut Cx, flight_number: &str, date: &str) -> Option<String> {
    cx.reads
        .text(
            "get_flight_status",
            json!({ "flight_number": flight_number, "date": date }),
        )
        .map(|s| s.trim().trim_matches('"').to_string())
}

/// (flight_number, date) of each entry of a `flights` list.
pub fn flight_keys(flights: Option<&Value>) -> Vec<(String, String)> {
    flights
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| {
                    Some((
                        str_of(f.get("flight_number"))?.to_string(),
                        str_of(f.get("date"))?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Free bags per passenger for a membership and cabin.
pub fn free_bags(membership: &str, cabin: &str) -> Option<i64> {
    BAG_ALLOWANCE
        .iter()
        .find(|a| a.membership == membership && a.cabin == cabin)
        .map(|a| a.free_bags)
}

/// An integer argument (numbers only; realize already unquoted strings).
pub fn int(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
}
