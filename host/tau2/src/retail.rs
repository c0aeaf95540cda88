//! τ² retail domain: data models and the 15 tools of `RetailTools`, step
//! for step as the reference runs them.

use std::collections::HashMap;

use ecdysis_pyemu::ops::{self, Op};
use ecdysis_pyemu::pydantic::{self, Field, Input, Model, Ty};
use ecdysis_pyemu::{Dict, PyErr, PyResult, Val, json};

use super::db::{Db, Fields, FieldsMut};
use super::tools::{Kind, Out, ToolDef, Toolkit, calculate, s, transfer_to_human_agents};

static VARIANT: Model = Model {
    name: "Variant",
    extra_forbid: false,
    fields: &[
        Field::req("item_id", Ty::Str),
        Field::req("options", Ty::Dict(&Ty::Str)),
        Field::req("available", Ty::Bool),
        Field::req("price", Ty::Float),
    ],
};
static PRODUCT: Model = Model {
    name: "Product",
    extra_forbid: false,
    fields: &[
        Field::req("name", Ty::Str),
        Field::req("product_id", Ty::Str),
        Field::req("variants", Ty::Dict(&Ty::Model(&VARIANT))),
    ],
};
static USER_NAME: Model = Model {
    name: "UserName",
    extra_forbid: false,
    fields: &[
        Field::req("first_name", Ty::Str),
        Field::req("last_name", Ty::Str),
    ],
};
/// `UserAddress`.
pub static USER_ADDRESS: Model = Model {
    name: "UserAddress",
    extra_forbid: false,
    fields: &[
        Field::req("address1", Ty::Str),
        Field::req("address2", Ty::Str),
        Field::req("city", Ty::Str),
        Field::req("country", Ty::Str),
        Field::req("state", Ty::Str),
        Field::req("zip", Ty::Str),
    ],
};
static CREDIT_CARD: Model = Model {
    name: "CreditCard",
    extra_forbid: false,
    fields: &[
        Field::req("source", Ty::Lit(&["credit_card"])),
        Field::req("id", Ty::Str),
        Field::req("brand", Ty::Str),
        Field::req("last_four", Ty::Str),
    ],
};
static PAYPAL: Model = Model {
    name: "Paypal",
    extra_forbid: false,
    fields: &[
        Field::req("source", Ty::Lit(&["paypal"])),
        Field::req("id", Ty::Str),
    ],
};
static GIFT_CARD: Model = Model {
    name: "GiftCard",
    extra_forbid: false,
    fields: &[
        Field::req("source", Ty::Lit(&["gift_card"])),
        Field::req("id", Ty::Str),
        Field::req("balance", Ty::Float),
    ],
};
static USER: Model = Model {
    name: "User",
    extra_forbid: false,
    fields: &[
        Field::req("user_id", Ty::Str),
        Field::req("name", Ty::Model(&USER_NAME)),
        Field::req("address", Ty::Model(&USER_ADDRESS)),
        Field::req("email", Ty::Str),
        Field::req(
            "payment_methods",
            Ty::Dict(&Ty::Tagged("source", &[&CREDIT_CARD, &GIFT_CARD, &PAYPAL])),
        ),
        Field::req("orders", Ty::List(&Ty::Str)),
    ],
};
static FULFILMENT: Model = Model {
    name: "OrderFullfilment",
    extra_forbid: false,
    fields: &[
        Field::req("tracking_id", Ty::List(&Ty::Str)),
        Field::req("item_ids", Ty::List(&Ty::Str)),
    ],
};
static ORDER_ITEM: Model = Model {
    name: "OrderItem",
    extra_forbid: false,
    fields: &[
        Field::req("name", Ty::Str),
        Field::req("product_id", Ty::Str),
        Field::req("item_id", Ty::Str),
        Field::req("price", Ty::Float),
        Field::req("options", Ty::Dict(&Ty::Str)),
    ],
};
static ORDER_PAYMENT: Model = Model {
    name: "OrderPayment",
    extra_forbid: false,
    fields: &[
        Field::req("transaction_type", Ty::Lit(&["payment", "refund"])),
        Field::req("amount", Ty::Float),
        Field::req("payment_method_id", Ty::Str),
    ],
};
static ORDER: Model = Model {
    name: "Order",
    extra_forbid: false,
    fields: &[
        Field::req("order_id", Ty::Str),
        Field::req("user_id", Ty::Str),
        Field::req("address", Ty::Model(&USER_ADDRESS)),
        Field::req("items", Ty::List(&Ty::Model(&ORDER_ITEM))),
        Field::req(
            "status",
            Ty::Lit(&[
                "processed",
                "pending",
                "pending (item modified)",
                "delivered",
                "cancelled",
                "exchange requested",
                "return requested",
            ]),
        ),
        Field::req("fulfillments", Ty::List(&Ty::Model(&FULFILMENT))),
        Field::req("payment_history", Ty::List(&Ty::Model(&ORDER_PAYMENT))),
        Field::opt(
            "cancel_reason",
            Ty::Opt(&Ty::Lit(&["no longer needed", "ordered by mistake"])),
        ),
        Field::opt("exchange_items", Ty::Opt(&Ty::List(&Ty::Str))),
        Field::opt("exchange_new_items", Ty::Opt(&Ty::List(&Ty::Str))),
        Field::opt("exchange_payment_method_id", Ty::Opt(&Ty::Str)),
        Field::opt("exchange_price_difference", Ty::Opt(&Ty::Float)),
        Field::opt("return_items", Ty::Opt(&Ty::List(&Ty::Str))),
        Field::opt("return_payment_method_id", Ty::Opt(&Ty::Str)),
    ],
};
/// `RetailDB`, the root of `db.json`.
pub static RETAIL_DB: Model = Model {
    name: "RetailDB",
    extra_forbid: false,
    fields: &[
        Field::req("products", Ty::Dict(&Ty::Model(&PRODUCT))),
        Field::req("users", Ty::Dict(&Ty::Model(&USER))),
        Field::req("orders", Ty::Dict(&Ty::Model(&ORDER))),
    ],
};

/// The retail toolkit.
pub static TOOLKIT: Toolkit = Toolkit {
    class: "RetailTools",
    tools: &[
        ToolDef {
            name: "calculate",
            params: &["expression"],
            kind: Kind::Generic,
            run: calculate,
        },
        ToolDef {
            name: "cancel_pending_order",
            params: &["order_id", "reason"],
            kind: Kind::Write,
            run: cancel_pending_order,
        },
        ToolDef {
            name: "exchange_delivered_order_items",
            params: &["order_id", "item_ids", "new_item_ids", "payment_method_id"],
            kind: Kind::Write,
            run: exchange_delivered_order_items,
        },
        ToolDef {
            name: "find_user_id_by_name_zip",
            params: &["first_name", "last_name", "zip"],
            kind: Kind::Read,
            run: find_user_id_by_name_zip,
        },
        ToolDef {
            name: "find_user_id_by_email",
            params: &["email"],
            kind: Kind::Read,
            run: find_user_id_by_email,
        },
        ToolDef {
            name: "get_order_details",
            params: &["order_id"],
            kind: Kind::Read,
            run: get_order_details,
        },
        ToolDef {
            name: "get_product_details",
            params: &["product_id"],
            kind: Kind::Read,
            run: get_product_details,
        },
        ToolDef {
            name: "get_user_details",
            params: &["user_id"],
            kind: Kind::Read,
            run: get_user_details,
        },
        ToolDef {
            name: "list_all_product_types",
            params: &[],
            kind: Kind::Read,
            run: list_all_product_types,
        },
        ToolDef {
            name: "modify_pending_order_address",
            params: &[
                "order_id", "address1", "address2", "city", "state", "country", "zip",
            ],
            kind: Kind::Write,
            run: modify_pending_order_address,
        },
        ToolDef {
            name: "modify_pending_order_items",
            params: &["order_id", "item_ids", "new_item_ids", "payment_method_id"],
            kind: Kind::Write,
            run: modify_pending_order_items,
        },
        ToolDef {
            name: "modify_pending_order_payment",
            params: &["order_id", "payment_method_id"],
            kind: Kind::Write,
            run: modify_pending_order_payment,
        },
        ToolDef {
            name: "modify_user_address",
            params: &[
                "user_id", "address1", "address2", "city", "state", "country", "zip",
            ],
            kind: Kind::Write,
            run: modify_user_address,
        },
        ToolDef {
            name: "return_delivered_order_items",
            params: &["order_id", "item_ids", "payment_method_id"],
            kind: Kind::Write,
            run: return_delivered_order_items,
        },
        ToolDef {
            name: "transfer_to_human_agents",
            params: &["summary"],
            kind: Kind::Generic,
            run: transfer_to_human_agents,
        },
    ],
};

// ------------------------------------------------------------ lookups

fn lookup<'a>(db: &Db, coll: &str, id: &'a Val, missing: &str) -> PyResult<&'a str> {
    if !ops::in_dict(id, db.coll(coll)?)? {
        return Err(PyErr::value(missing));
    }
    id.as_str().ok_or_else(|| PyErr::internal("non-str key"))
}

/// `_get_order`.
fn order_key<'a>(db: &Db, id: &'a Val) -> PyResult<&'a str> {
    lookup(db, "orders", id, "Order not found")
}

/// `_get_user`.
fn user_key<'a>(db: &Db, id: &'a Val) -> PyResult<&'a str> {
    lookup(db, "users", id, "User not found")
}

/// `_get_variant(product_id, variant_id)`.
fn variant<'a>(db: &'a Db, product_id: &Val, variant_id: &Val) -> PyResult<&'a Dict> {
    let pid = lookup(db, "products", product_id, "Product not found")?;
    let variants = db.entity("products", pid)?.d("variants")?;
    if !ops::in_dict(variant_id, variants)? {
        return Err(PyErr::value("Variant not found"));
    }
    variants.d(variant_id.as_str().unwrap_or_default())
}

/// `_get_payment_method(user_id, payment_method_id)`: the method's key.
fn payment_method_key<'a>(db: &Db, user_id: &Val, pm: &'a Val) -> PyResult<&'a str> {
    let user = user_key(db, user_id)?;
    if !ops::in_dict(pm, db.entity("users", user)?.d("payment_methods")?)? {
        return Err(PyErr::value("Payment method not found"));
    }
    pm.as_str().ok_or_else(|| PyErr::internal("non-str key"))
}

fn payment_method<'a>(db: &'a Db, user: &str, key: &str) -> PyResult<&'a Dict> {
    db.entity("users", user)?.d("payment_methods")?.d(key)
}

/// Applies `balance = round(balance <op> amount, 2)` to a gift card.
fn adjust_balance(db: &mut Db, user: &str, key: &str, op: Op, amount: &Val) -> PyResult<()> {
    let m = db
        .entity_mut("users", user)?
        .dm("payment_methods")?
        .get_mut(key)
        .and_then(Val::as_dict_mut)
        .ok_or_else(|| PyErr::internal("payment method vanished"))?;
    let v = ops::binop(op, m.f("balance")?, amount, true)?;
    m.insert("balance", v);
    let rounded = ops::round2(m.f("balance")?)?;
    m.insert("balance", rounded);
    Ok(())
}

fn is_gift_card(m: &Dict) -> PyResult<bool> {
    Ok(m.s("source")? == "gift_card")
}

/// The check shared by the exchange, modify and return tools: every id
/// must occur in `item_ids` at most as often as in the order.
fn check_items(order: &Dict, item_ids: &Val, missing: impl Fn(&Val) -> String) -> PyResult<()> {
    let all_item_ids = Val::list(
        order
            .l("items")?
            .iter()
            .map(|i| {
                i.as_dict()
                    .map_or(Ok(Val::None), |i| i.f("item_id").cloned())
            })
            .collect::<PyResult<_>>()?,
    );
    for item_id in ops::iterate(item_ids)? {
        if ops::count(item_ids, &item_id)? > ops::count(&all_item_ids, &item_id)? {
            return Err(PyErr::value(missing(&item_id)));
        }
    }
    Ok(())
}

/// `next((item for item in order.items if item.item_id == item_id), None)`.
fn find_item(order: &Dict, item_id: &Val) -> PyResult<Option<usize>> {
    for (i, item) in order.l("items")?.iter().enumerate() {
        let item = item.as_dict().ok_or_else(|| PyErr::internal("OrderItem"))?;
        if ops::eq(item.f("item_id")?, item_id) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// `zip(a, b)` over two iterables.
fn zip(a: &Val, b: &Val) -> PyResult<Vec<(Val, Val)>> {
    Ok(ops::iterate(a)?.into_iter().zip(ops::iterate(b)?).collect())
}

fn order_payment(kind: &str, amount: Val, pm: &Val) -> PyResult<Val> {
    Ok(pydantic::construct(
        &ORDER_PAYMENT,
        vec![
            ("transaction_type", Input::Raw(Val::str(kind))),
            ("amount", Input::Raw(amount)),
            ("payment_method_id", Input::Raw(pm.clone())),
        ],
    )?)
}

fn address(a: &[Val]) -> PyResult<Val> {
    let names = ["address1", "address2", "city", "state", "country", "zip"];
    Ok(pydantic::construct(
        &USER_ADDRESS,
        names
            .iter()
            .zip(a)
            .map(|(n, v)| (*n, Input::Raw(v.clone())))
            .collect(),
    )?)
}

// ------------------------------------------------------------ read tools

/// The users collection indexed for the two find tools: the same answers
/// as τ²'s scans (the first user in order whose lower-cased names, or
/// email, equal the arguments'), without lower-casing 500 users per call
/// (the largest part of the host's tool-call CPU in `bench --runner`).
/// Kept as the collection's [`Dict::memo`], so episodes that have not
/// changed a user share one index.
struct UserIndex {
    /// (first name, last name), lower-cased → (user id, zip) in order.
    by_name: HashMap<(String, String), Vec<(String, Val)>>,
    /// Lower-cased email → the first user id.
    by_email: HashMap<String, String>,
}

impl UserIndex {
    /// `None` for a collection with a malformed user: the scans report
    /// that user's error at its place, so they run instead.
    fn build(users: &Dict) -> Option<UserIndex> {
        let mut ix = UserIndex {
            by_name: HashMap::new(),
            by_email: HashMap::new(),
        };
        for (user_id, user) in users.iter() {
            let user = user.as_dict()?;
            let name = user.d("name").ok()?;
            let first = name.s("first_name").ok()?.to_lowercase();
            let last = name.s("last_name").ok()?.to_lowercase();
            let zip = user.d("address").ok()?.f("zip").ok()?.clone();
            ix.by_name
                .entry((first, last))
                .or_default()
                .push((user_id.to_string(), zip));
            ix.by_email
                .entry(user.s("email").ok()?.to_lowercase())
                .or_insert_with(|| user_id.to_string());
        }
        Some(ix)
    }
}

fn user_index(db: &Db) -> PyResult<Option<std::sync::Arc<UserIndex>>> {
    Ok(db.coll("users")?.memo(UserIndex::build))
}

fn find_user_id_by_name_zip(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let (first, last, zip) = (&a[0], &a[1], &a[2]);
    // Non-string names raise at a place the scan decides.
    if let (Val::Str(f), Val::Str(l)) = (first, last)
        && let Some(ix) = user_index(db)?
    {
        let found = ix
            .by_name
            .get(&(f.to_lowercase(), l.to_lowercase()))
            .and_then(|users| users.iter().find(|(_, z)| ops::eq(z, zip)));
        return match found {
            Some((user_id, _)) => Ok(Out::Text(user_id.clone())),
            None => Err(PyErr::value("User not found")),
        };
    }
    let lower = |v: &Val| match v {
        Val::Str(s) => Ok(s.to_lowercase()),
        other => Err(PyErr::attribute(other, "lower")),
    };
    for (user_id, user) in db.coll("users")?.iter() {
        let user = user.as_dict().ok_or_else(|| PyErr::internal("User"))?;
        let name = user.d("name")?;
        // The `and` chain short-circuits in this order.
        if name.s("first_name")?.to_lowercase() != lower(first)? {
            continue;
        }
        if name.s("last_name")?.to_lowercase() != lower(last)? {
            continue;
        }
        if ops::eq(user.d("address")?.f("zip")?, zip) {
            return Ok(Out::Text(user_id.to_string()));
        }
    }
    Err(PyErr::value("User not found"))
}

fn find_user_id_by_email(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    if let Val::Str(email) = &a[0]
        && let Some(ix) = user_index(db)?
    {
        return match ix.by_email.get(&email.to_lowercase()) {
            Some(user_id) => Ok(Out::Text(user_id.clone())),
            None => Err(PyErr::value("User not found")),
        };
    }
    for (user_id, user) in db.coll("users")?.iter() {
        let user = user.as_dict().ok_or_else(|| PyErr::internal("User"))?;
        let wanted = match &a[0] {
            Val::Str(s) => s.to_lowercase(),
            other => return Err(PyErr::attribute(other, "lower")),
        };
        if user.s("email")?.to_lowercase() == wanted {
            return Ok(Out::Text(user_id.to_string()));
        }
    }
    Err(PyErr::value("User not found"))
}

fn get_order_details(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let key = order_key(db, &a[0])?;
    Ok(Out::Json(db.coll("orders")?.f(key)?.clone()))
}

fn get_product_details(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let key = lookup(db, "products", &a[0], "Product not found")?;
    Ok(Out::Json(db.coll("products")?.f(key)?.clone()))
}

fn get_user_details(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let key = user_key(db, &a[0])?;
    Ok(Out::Json(db.coll("users")?.f(key)?.clone()))
}

fn list_all_product_types(db: &mut Db, _: &[Val]) -> PyResult<Out> {
    let mut names = Dict::new();
    for p in db.coll("products")?.values() {
        let p = p.as_dict().ok_or_else(|| PyErr::internal("Product"))?;
        names.insert(p.s("name")?, p.f("product_id")?.clone());
    }
    Ok(Out::Text(json::dumps_sorted(&Val::dict(names))))
}

// ------------------------------------------------------------ write tools

fn cancel_pending_order(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let (order_id, reason) = (&a[0], &a[1]);
    let key = order_key(db, order_id)?.to_string();
    let order = db.entity("orders", &key)?;
    if order.s("status")? != "pending" {
        return Err(PyErr::value("Non-pending order cannot be cancelled"));
    }
    if !ops::in_str_set(reason, &["no longer needed", "ordered by mistake"])? {
        return Err(PyErr::value("Invalid reason"));
    }
    let user_id = order.f("user_id")?.clone();
    let payments: Vec<Val> = order.l("payment_history")?.to_vec();
    let mut refunds = Vec::new();
    for p in &payments {
        let p = p.as_dict().ok_or_else(|| PyErr::internal("OrderPayment"))?;
        let pm = p.f("payment_method_id")?;
        let amount = p.f("amount")?;
        refunds.push(order_payment("refund", amount.clone(), pm)?);
        let user = user_key(db, &user_id)?.to_string();
        let pm_key = payment_method_key(db, &Val::str(&user), pm)?;
        if is_gift_card(payment_method(db, &user, pm_key)?)? {
            adjust_balance(db, &user, pm_key, Op::Add, amount)?;
        }
    }
    let order = db.entity_mut("orders", &key)?;
    order.insert("status", Val::str("cancelled"));
    order.insert("cancel_reason", reason.clone());
    order.lm("payment_history")?.extend(refunds);
    Ok(Out::Json(Val::dict(order.clone())))
}

fn exchange_delivered_order_items(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let [order_id, item_ids, new_item_ids, payment_method_id] = a else {
        return Err(PyErr::internal("arity"));
    };
    let key = order_key(db, order_id)?.to_string();
    let order = db.entity("orders", &key)?;
    if order.s("status")? != "delivered" {
        return Err(PyErr::value("Non-delivered order cannot be exchanged"));
    }
    check_items(order, item_ids, |id| {
        format!("Number of {} not found.", s(id))
    })?;
    if ops::len(item_ids)? != ops::len(new_item_ids)? {
        return Err(PyErr::value(
            "The number of items to be exchanged should match.",
        ));
    }
    let mut diff_price = Val::Int(0);
    for (item_id, new_item_id) in zip(item_ids, new_item_ids)? {
        let Some(i) = find_item(order, &item_id)? else {
            return Err(PyErr::value(format!("Item {} not found", s(&item_id))));
        };
        let item = order.l("items")?[i]
            .as_dict()
            .ok_or_else(|| PyErr::internal("OrderItem"))?;
        let v = variant(db, item.f("product_id")?, &new_item_id)?;
        if !ops::truthy(v.f("available")?) {
            return Err(PyErr::value(format!(
                "New item {} not found or available",
                s(&new_item_id)
            )));
        }
        let delta = ops::binop(Op::Sub, v.f("price")?, item.f("price")?, false)?;
        diff_price = ops::binop(Op::Add, &diff_price, &delta, true)?;
    }
    let diff_price = ops::round2(&diff_price)?;
    let user_id = order.f("user_id")?.clone();
    let pm_key = payment_method_key(db, &user_id, payment_method_id)?;
    let user = user_id.as_str().unwrap_or_default();
    let pm = payment_method(db, user, pm_key)?;
    if is_gift_card(pm)? && ops::lt(pm.f("balance")?, &diff_price)? {
        return Err(PyErr::value(
            "Insufficient gift card balance to pay for the price difference",
        ));
    }
    let order = db.entity_mut("orders", &key)?;
    order.insert("status", Val::str("exchange requested"));
    order.insert("exchange_items", Val::list(ops::sorted(item_ids)?));
    order.insert("exchange_new_items", Val::list(ops::sorted(new_item_ids)?));
    order.insert("exchange_payment_method_id", payment_method_id.clone());
    order.insert("exchange_price_difference", diff_price);
    Ok(Out::Json(Val::dict(order.clone())))
}

fn modify_pending_order_address(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let key = order_key(db, &a[0])?.to_string();
    if !db.entity("orders", &key)?.s("status")?.contains("pending") {
        return Err(PyErr::value("Non-pending order cannot be modified"));
    }
    let new_address = address(&a[1..])?;
    let order = db.entity_mut("orders", &key)?;
    order.insert("address", new_address);
    Ok(Out::Json(Val::dict(order.clone())))
}

fn modify_pending_order_items(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let [order_id, item_ids, new_item_ids, payment_method_id] = a else {
        return Err(PyErr::internal("arity"));
    };
    let key = order_key(db, order_id)?.to_string();
    let order = db.entity("orders", &key)?;
    if order.s("status")? != "pending" {
        return Err(PyErr::value("Non-pending order cannot be modified"));
    }
    check_items(order, item_ids, |id| format!("{} not found", s(id)))?;
    if ops::len(item_ids)? != ops::len(new_item_ids)? {
        return Err(PyErr::value(
            "The number of items to be exchanged should match",
        ));
    }
    let pairs = zip(item_ids, new_item_ids)?;
    let mut diff_price = Val::Int(0);
    // `variant` outlives the loop in the reference, and the second loop
    // below prices *every* modified item with the last one.
    let mut last_variant: Option<Dict> = None;
    for (item_id, new_item_id) in &pairs {
        if ops::eq(item_id, new_item_id) {
            return Err(PyErr::value(
                "The new item id should be different from the old item id",
            ));
        }
        let Some(i) = find_item(order, item_id)? else {
            return Err(PyErr::value(format!("Item {} not found", s(item_id))));
        };
        let item = order.l("items")?[i]
            .as_dict()
            .ok_or_else(|| PyErr::internal("OrderItem"))?;
        let v = variant(db, item.f("product_id")?, new_item_id)?;
        if !ops::truthy(v.f("available")?) {
            return Err(PyErr::value(format!(
                "New item {} not found or available",
                s(new_item_id)
            )));
        }
        let delta = ops::binop(Op::Sub, v.f("price")?, item.f("price")?, false)?;
        diff_price = ops::binop(Op::Add, &diff_price, &delta, true)?;
        last_variant = Some(v.clone());
    }
    let user_id = order.f("user_id")?.clone();
    let pm_key = payment_method_key(db, &user_id, payment_method_id)?.to_string();
    let user = user_id.as_str().unwrap_or_default().to_string();
    let gift = is_gift_card(payment_method(db, &user, &pm_key)?)?;
    if gift
        && ops::lt(
            payment_method(db, &user, &pm_key)?.f("balance")?,
            &diff_price,
        )?
    {
        return Err(PyErr::value(
            "Insufficient gift card balance to pay for the new item",
        ));
    }
    let kind = if ops::gt(&diff_price, &Val::Int(0))? {
        "payment"
    } else {
        "refund"
    };
    let payment = order_payment(kind, ops::abs(&diff_price)?, payment_method_id)?;
    db.entity_mut("orders", &key)?
        .lm("payment_history")?
        .push(payment);
    if gift {
        adjust_balance(db, &user, &pm_key, Op::Sub, &diff_price)?;
    }
    let order = db.entity_mut("orders", &key)?;
    for (item_id, new_item_id) in &pairs {
        let Some(i) = find_item(order, item_id)? else {
            return Err(PyErr::value(format!("Item {} not found", s(item_id))));
        };
        let v = last_variant
            .as_ref()
            .ok_or_else(|| PyErr::internal("no variant"))?;
        let item = order.lm("items")?[i]
            .as_dict_mut()
            .ok_or_else(|| PyErr::internal("OrderItem"))?;
        item.insert("item_id", new_item_id.clone());
        item.insert("price", v.f("price")?.clone());
        item.insert("options", v.f("options")?.clone());
    }
    order.insert("status", Val::str("pending (item modified)"));
    Ok(Out::Json(Val::dict(order.clone())))
}

fn modify_pending_order_payment(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let (order_id, payment_method_id) = (&a[0], &a[1]);
    let key = order_key(db, order_id)?.to_string();
    let order = db.entity("orders", &key)?;
    if !order.s("status")?.contains("pending") {
        return Err(PyErr::value("Non-pending order cannot be modified"));
    }
    let user_id = order.f("user_id")?.clone();
    let pm_key = payment_method_key(db, &user_id, payment_method_id)?.to_string();
    let user = user_id.as_str().unwrap_or_default().to_string();
    let history = order.l("payment_history")?;
    let first = history.first().and_then(Val::as_dict);
    let Some(first) = first.filter(|f| {
        history.len() == 1 && f.get("transaction_type").and_then(Val::as_str) == Some("payment")
    }) else {
        return Err(PyErr::value(
            "There should be exactly one payment for a pending order",
        ));
    };
    let old_pm = first.f("payment_method_id")?.clone();
    if ops::eq(&old_pm, payment_method_id) {
        return Err(PyErr::value(
            "The new payment method should be different from the current one",
        ));
    }
    let amount = first.f("amount")?.clone();
    let gift = is_gift_card(payment_method(db, &user, &pm_key)?)?;
    if gift && ops::lt(payment_method(db, &user, &pm_key)?.f("balance")?, &amount)? {
        return Err(PyErr::value(
            "Insufficient gift card balance to pay for the order",
        ));
    }
    let new_payments = [
        order_payment("payment", amount.clone(), payment_method_id)?,
        order_payment("refund", amount.clone(), &old_pm)?,
    ];
    db.entity_mut("orders", &key)?
        .lm("payment_history")?
        .extend(new_payments);
    if gift {
        adjust_balance(db, &user, &pm_key, Op::Sub, &amount)?;
    }
    let old_key = payment_method_key(db, &user_id, &old_pm)?.to_string();
    if is_gift_card(payment_method(db, &user, &old_key)?)? {
        adjust_balance(db, &user, &old_key, Op::Add, &amount)?;
    }
    Ok(Out::Json(Val::dict(db.entity("orders", &key)?.clone())))
}

fn modify_user_address(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let key = user_key(db, &a[0])?.to_string();
    let new_address = address(&a[1..])?;
    let user = db.entity_mut("users", &key)?;
    user.insert("address", new_address);
    Ok(Out::Json(Val::dict(user.clone())))
}

fn return_delivered_order_items(db: &mut Db, a: &[Val]) -> PyResult<Out> {
    let (order_id, item_ids, payment_method_id) = (&a[0], &a[1], &a[2]);
    let key = order_key(db, order_id)?.to_string();
    let order = db.entity("orders", &key)?;
    if order.s("status")? != "delivered" {
        return Err(PyErr::value("Non-delivered order cannot be returned"));
    }
    let user = user_key(db, order.f("user_id")?)?.to_string();
    let pm_key = payment_method_key(db, &Val::str(&user), payment_method_id)?;
    if !is_gift_card(payment_method(db, &user, pm_key)?)? {
        let Some(first) = order.l("payment_history")?.first() else {
            return Err(PyErr::other("IndexError", "list index out of range"));
        };
        let original = first
            .as_dict()
            .ok_or_else(|| PyErr::internal("OrderPayment"))?
            .f("payment_method_id")?;
        if !ops::eq(payment_method_id, original) {
            return Err(PyErr::value(
                "Payment method should be the original payment method",
            ));
        }
    }
    check_items(order, item_ids, |_| "Some item not found".to_string())?;
    let order = db.entity_mut("orders", &key)?;
    order.insert("status", Val::str("return requested"));
    order.insert("return_items", Val::list(ops::sorted(item_ids)?));
    order.insert("return_payment_method_id", payment_method_id.clone());
    Ok(Out::Json(Val::dict(order.clone())))
}
