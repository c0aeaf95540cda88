//! How quirks change a planned call.

use serde_json::{Map, Value};

/// Plausible wrong names per domain (`tau2/retail` and `retail` both work).
const RETAIL_ALIASES: &[(&str, &str)] = &[
    ("get_order_details", "get_order_info"),
    ("get_user_details", "get_user_info"),
    ("get_product_details", "get_product_info"),
    ("cancel_pending_order", "cancel_order"),
    ("modify_pending_order_items", "modify_order_items"),
    ("modify_pending_order_address", "modify_order_address"),
    ("modify_pending_order_payment", "modify_order_payment"),
    ("exchange_delivered_order_items", "exchange_order_items"),
    ("return_delivered_order_items", "return_order_items"),
    ("find_user_id_by_email", "find_user_by_email"),
    ("find_user_id_by_name_zip", "find_user_by_name_zip"),
    ("modify_user_address", "update_user_address"),
    ("list_all_product_types", "list_product_types"),
];

const AIRLINE_ALIASES: &[(&str, &str)] = &[
    ("get_reservation_details", "get_reservation_info"),
    ("get_user_details", "get_user_info"),
    ("cancel_reservation", "cancel_booking"),
    ("book_reservation", "create_reservation"),
    ("search_direct_flight", "search_flights"),
    ("search_onestop_flight", "search_connecting_flights"),
    ("update_reservation_flights", "change_reservation_flights"),
    ("update_reservation_baggages", "update_baggage"),
    ("update_reservation_passengers", "update_passengers"),
    ("send_certificate", "issue_certificate"),
    ("get_flight_status", "check_flight_status"),
    ("list_all_airports", "list_airports"),
];

const DBBENCH_ALIASES: &[(&str, &str)] = &[
    ("execute_sql", "run_sql"),
    ("commit_final_answer", "submit_answer"),
];

/// AgentBench OS: names that share a word with the real tool (so a
/// diagnoser can tell which one is meant) but that no harness knows yet.
const OS_ALIASES: &[(&str, &str)] = &[
    ("bash_action", "bash_command"),
    ("answer_action", "provide_answer"),
    ("finish_action", "finish_task"),
];

/// For any other domain.
const COMMON_ALIASES: &[(&str, &str)] = &[
    ("get_user_details", "get_user_info"),
    ("transfer_to_human_agents", "transfer_to_human"),
];

/// The alias a confused model would use for `tool` in `domain`.
pub(crate) fn alias_for(domain: &str, tool: &str) -> Option<&'static str> {
    let short = domain.rsplit('/').next().unwrap_or(domain);
    let table = match short {
        "retail" => RETAIL_ALIASES,
        "airline" => AIRLINE_ALIASES,
        "dbbench" => DBBENCH_ALIASES,
        "os" => OS_ALIASES,
        _ => COMMON_ALIASES,
    };
    table
        .iter()
        .chain(COMMON_ALIASES)
        .find(|(name, _)| *name == tool)
        .map(|(_, alias)| *alias)
}

fn any_value(value: &Value, pred: &dyn Fn(&Value) -> bool) -> bool {
    pred(value)
        || match value {
            Value::Array(items) => items.iter().any(|v| any_value(v, pred)),
            Value::Object(map) => map.values().any(|v| any_value(v, pred)),
            _ => false,
        }
}

fn map_values(value: &mut Value, f: &dyn Fn(&mut Value)) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| map_values(v, f)),
        Value::Object(map) => map.values_mut().for_each(|v| map_values(v, f)),
        _ => f(value),
    }
}

fn hashed(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() > 1 && s.starts_with('#'))
}

pub(crate) fn has_hash_id(args: &Map<String, Value>) -> bool {
    args.values().any(|v| any_value(v, &hashed))
}

pub(crate) fn drop_hash(args: &mut Map<String, Value>) {
    for v in args.values_mut() {
        map_values(v, &|v| {
            if hashed(v)
                && let Some(s) = v.as_str()
            {
                *v = Value::String(s[1..].to_owned());
            }
        });
    }
}

pub(crate) fn has_number(args: &Map<String, Value>) -> bool {
    args.values().any(|v| any_value(v, &Value::is_number))
}

pub(crate) fn numbers_as_strings(args: &mut Map<String, Value>) {
    for v in args.values_mut() {
        map_values(v, &|v| {
            if let Value::Number(n) = v {
                *v = Value::String(n.to_string());
            }
        });
    }
}

const VARIANT_KEYS: [&str; 2] = ["new_item_ids", "item_ids"];

pub(crate) fn has_item_ids(args: &Map<String, Value>) -> bool {
    VARIANT_KEYS.iter().any(|k| {
        args.get(*k)
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(Value::is_string))
    })
}

/// Replaces one entry of `new_item_ids` (or else `item_ids`) with another
/// item id: one of `candidates` (ids seen in tool results) not already in
/// the list, chosen by `pick`, or the entry with its last digit changed.
pub(crate) fn wrong_variant(
    args: &mut Map<String, Value>,
    candidates: &[String],
    pick: &dyn Fn(usize) -> usize,
) {
    let Some(list) = VARIANT_KEYS
        .iter()
        .find_map(|k| {
            args.get(*k)
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
        })
        .cloned()
    else {
        return;
    };
    let key = VARIANT_KEYS
        .iter()
        .find(|k| args.get(**k).and_then(Value::as_array) == Some(&list))
        .copied()
        .unwrap_or("item_ids");
    let index = pick(list.len());
    let Some(original) = list[index].as_str().map(str::to_owned) else {
        return;
    };
    let pool: Vec<&String> = candidates
        .iter()
        .filter(|c| !list.iter().any(|v| v.as_str() == Some(c.as_str())))
        .collect();
    let replacement = if pool.is_empty() {
        perturb_last_digit(&original)
    } else {
        pool[pick(pool.len())].clone()
    };
    let mut list = list;
    list[index] = Value::String(replacement);
    args.insert(key.to_owned(), Value::Array(list));
}

fn perturb_last_digit(id: &str) -> String {
    let mut chars: Vec<char> = id.chars().collect();
    match chars.last_mut() {
        Some(c) if c.is_ascii_digit() => {
            let d = c.to_digit(10).unwrap_or(0);
            *c = char::from_digit((d + 1) % 10, 10).unwrap_or('0');
            chars.into_iter().collect()
        }
        _ => format!("{id}1"),
    }
}

/// Whether a key names an amount-like number.
fn amount_key(key: &str) -> bool {
    let key = key.to_lowercase();
    [
        "amount", "total", "count", "quantity", "price", "baggages", "balance",
    ]
    .iter()
    .any(|k| key.contains(k))
}

fn find_amount<'v>(value: &'v mut Value, key: Option<&str>) -> Option<&'v mut Value> {
    match value {
        Value::Number(_) if key.is_some_and(amount_key) => Some(value),
        Value::Array(items) => items.iter_mut().find_map(|v| find_amount(v, key)),
        Value::Object(map) => map
            .iter_mut()
            .find_map(|(k, v)| find_amount(v, Some(k.as_str()))),
        _ => None,
    }
}

pub(crate) fn has_amount(args: &Map<String, Value>) -> bool {
    let mut value = Value::Object(args.clone());
    find_amount(&mut value, None).is_some()
}

/// Adds or subtracts 1 (never below 0) to the first amount-like number.
pub(crate) fn miscount(args: &mut Map<String, Value>, up: bool) {
    let mut value = Value::Object(std::mem::take(args));
    if let Some(slot) = find_amount(&mut value, None) {
        let changed = if let Some(n) = slot.as_i64() {
            let m = if up || n < 1 { n + 1 } else { n - 1 };
            Value::from(m)
        } else if let Some(x) = slot.as_f64() {
            let y = if up || x < 1.0 { x + 1.0 } else { x - 1.0 };
            serde_json::Number::from_f64(y).map_or(Value::from(x), Value::Number)
        } else {
            slot.clone()
        };
        *slot = changed;
    }
    if let Value::Object(map) = value {
        *args = map;
    }
}

/// Item ids seen in a tool result (JSON): values of `item_id` keys and keys
/// of `variants` objects, in order of appearance.
pub(crate) fn item_ids_in(text: &str, out: &mut Vec<String>) {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "item_id"
                        && let Some(s) = v.as_str()
                        && !out.iter().any(|o| o == s)
                    {
                        out.push(s.to_owned());
                    }
                    if k == "variants"
                        && let Some(variants) = v.as_object()
                    {
                        for id in variants.keys() {
                            if !out.iter().any(|o| o == id) {
                                out.push(id.clone());
                            }
                        }
                    }
                    walk(v, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        walk(&value, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn argument_mutations() {
        let mut a = obj(json!({"order_id": "#W1", "ids": ["#A", "B"], "n": 3}));
        assert!(has_hash_id(&a) && has_number(&a));
        drop_hash(&mut a);
        assert_eq!(a["order_id"], "W1");
        assert_eq!(a["ids"], json!(["A", "B"]));
        numbers_as_strings(&mut a);
        assert_eq!(a["n"], "3");

        let mut p = obj(
            json!({"payment_methods": [{"payment_id": "x", "amount": 120}], "total_baggages": 2}),
        );
        assert!(has_amount(&p));
        miscount(&mut p, true);
        assert_eq!(p["payment_methods"][0]["amount"], 121);
        assert_eq!(p["total_baggages"], 2);
        let mut f = obj(json!({"amount": 10.5}));
        miscount(&mut f, false);
        assert_eq!(f["amount"], 9.5);
        assert!(!has_amount(&obj(json!({"user_id": "u", "zip": 12345}))));

        let mut v = obj(json!({"item_ids": ["1", "2"], "new_item_ids": ["3", "4"]}));
        wrong_variant(&mut v, &["3".into(), "9".into()], &|_| 0);
        assert_eq!(v["new_item_ids"], json!(["9", "4"]));
        assert_eq!(v["item_ids"], json!(["1", "2"]));
        let mut w = obj(json!({"item_ids": ["1000000009"]}));
        wrong_variant(&mut w, &[], &|_| 0);
        assert_eq!(w["item_ids"], json!(["1000000000"]));
    }

    #[test]
    fn aliases_and_item_ids() {
        assert_eq!(
            alias_for("tau2/retail", "cancel_pending_order"),
            Some("cancel_order")
        );
        assert_eq!(
            alias_for("airline", "get_user_details"),
            Some("get_user_info")
        );
        assert_eq!(alias_for("tau2/retail", "calculate"), None);
        let mut ids = Vec::new();
        item_ids_in(
            r#"{"items": [{"item_id": "111", "name": "x"}], "variants": {"222": {}, "111": {}}}"#,
            &mut ids,
        );
        assert_eq!(ids, vec!["111", "222"]);
    }
}
