//! `TelecomTools`: the carrier's side, step for step as the reference runs
//! it, and `TelecomEnvironment.sync_tools`.

use sha2::{Digest, Sha256};

use ecdysis_pyemu::ops::{self, Num, Op};
use ecdysis_pyemu::pydantic::{self, Input};
use ecdysis_pyemu::{Dict, PyErr, PyResult, Val};

use super::super::db::{Fields, FieldsMut};
use super::super::tools::Kind;
use super::models::{BILL, LINE_ITEM, PAYMENT_REQUEST};
use super::{Arg, Func, Kit, Ret, TelecomState};

/// `get_today()`: τ²'s telecom world is fixed at this date.
pub const TODAY: &str = "2025-02-25";

/// The agent's toolkit.
pub static TOOLKIT: Kit = Kit {
    class: "TelecomTools",
    funcs: &[
        Func::tool(
            "get_customer_by_phone",
            &["phone_number"],
            Kind::Read,
            get_customer_by_phone,
        ),
        Func::tool(
            "get_customer_by_id",
            &["customer_id"],
            Kind::Read,
            get_customer_by_id,
        ),
        Func::tool(
            "get_customer_by_name",
            &["full_name", "dob"],
            Kind::Read,
            get_customer_by_name,
        ),
        Func::tool("get_details_by_id", &["id"], Kind::Read, get_details_by_id),
        Func::tool(
            "suspend_line",
            &["customer_id", "line_id", "reason"],
            Kind::Write,
            suspend_line,
        ),
        Func::tool(
            "resume_line",
            &["customer_id", "line_id"],
            Kind::Write,
            resume_line,
        ),
        Func {
            name: "get_bills_for_customer",
            params: &["customer_id", "limit"],
            defaults: &[Arg::Int(12)],
            tool: Some(Kind::Read),
            run: get_bills_for_customer,
        },
        Func::tool(
            "send_payment_request",
            &["customer_id", "bill_id"],
            Kind::Write,
            send_payment_request,
        ),
        Func::tool(
            "get_data_usage",
            &["customer_id", "line_id"],
            Kind::Read,
            get_data_usage,
        ),
        Func::tool(
            "enable_roaming",
            &["customer_id", "line_id"],
            Kind::Write,
            enable_roaming,
        ),
        Func::tool(
            "disable_roaming",
            &["customer_id", "line_id"],
            Kind::Write,
            disable_roaming,
        ),
        Func::tool(
            "transfer_to_human_agents",
            &["summary"],
            Kind::Generic,
            transfer_to_human_agents,
        ),
        Func::tool(
            "refuel_data",
            &["customer_id", "line_id", "gb_amount"],
            Kind::Write,
            refuel_data,
        ),
        // Plain methods: task set-up and assertions.
        Func::method(
            "set_data_usage",
            &["customer_id", "line_id", "data_used_gb"],
            &[],
            set_data_usage,
        ),
        Func::method(
            "suspend_line_for_overdue_bill",
            &["customer_id", "line_id", "new_bill_id", "contract_ended"],
            &[],
            suspend_line_for_overdue_bill,
        ),
        Func::method(
            "assert_data_refueling_amount",
            &["customer_id", "line_id", "expected_amount"],
            &[],
            assert_data_refueling_amount,
        ),
        Func::method(
            "assert_line_status",
            &["customer_id", "line_id", "expected_status"],
            &[],
            assert_line_status,
        ),
        Func::method(
            "assert_overdue_bill_exists",
            &["customer_id", "overdue_bill_id"],
            &[],
            assert_overdue_bill_exists,
        ),
        Func::method(
            "assert_no_overdue_bill",
            &["overdue_bill_id"],
            &[],
            assert_no_overdue_bill,
        ),
    ],
};

// ------------------------------------------------------------- lookups

fn coll<'a>(st: &'a TelecomState, name: &str) -> PyResult<&'a [Val]> {
    st.db.root().l(name)
}

fn item<'a>(st: &'a TelecomState, name: &str, i: usize) -> PyResult<&'a Dict> {
    coll(st, name)?
        .get(i)
        .and_then(Val::as_dict)
        .ok_or_else(|| PyErr::internal(format!("{name}[{i}] is not a model")))
}

fn item_mut<'a>(st: &'a mut TelecomState, name: &str, i: usize) -> PyResult<&'a mut Dict> {
    st.db
        .root_mut()
        .lm(name)?
        .get_mut(i)
        .and_then(Val::as_dict_mut)
        .ok_or_else(|| PyErr::internal(format!("{name}[{i}] is not a model")))
}

/// The first entity of `name` whose `field == want` (Python equality).
fn position(st: &TelecomState, name: &str, field: &str, want: &Val) -> PyResult<Option<usize>> {
    for (i, v) in coll(st, name)?.iter().enumerate() {
        let d = v
            .as_dict()
            .ok_or_else(|| PyErr::internal(format!("{name}[{i}] is not a model")))?;
        if ops::eq(d.f(field)?, want) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn s(v: &Val) -> String {
    ops::s(v)
}

/// The position of the entity of `coll` whose `field == id`, or the
/// reference's `ValueError("<what> with ID <id> not found")`.
fn by_id(st: &TelecomState, coll: &str, field: &str, what: &str, id: &Val) -> PyResult<usize> {
    position(st, coll, field, id)?
        .ok_or_else(|| PyErr::value(format!("{what} with ID {} not found", s(id))))
}

/// `_get_line_by_id`.
fn line_by_id(st: &TelecomState, line_id: &Val) -> PyResult<usize> {
    by_id(st, "lines", "line_id", "Line", line_id)
}

/// `_get_line_by_phone`.
pub(super) fn line_by_phone(st: &TelecomState, phone: &Val) -> PyResult<usize> {
    position(st, "lines", "phone_number", phone)?
        .ok_or_else(|| PyErr::value(format!("Line with phone number {} not found", s(phone))))
}

/// `_get_plan_by_id`.
fn plan_by_id(st: &TelecomState, plan_id: &Val) -> PyResult<usize> {
    by_id(st, "plans", "plan_id", "Plan", plan_id)
}

/// `_get_device_by_id`.
fn device_by_id(st: &TelecomState, device_id: &Val) -> PyResult<usize> {
    by_id(st, "devices", "device_id", "Device", device_id)
}

/// `_get_bill_by_id`.
fn bill_by_id(st: &TelecomState, bill_id: &Val) -> PyResult<usize> {
    by_id(st, "bills", "bill_id", "Bill", bill_id)
}

/// `get_customer_by_id`.
fn customer_by_id(st: &TelecomState, customer_id: &Val) -> PyResult<usize> {
    by_id(st, "customers", "customer_id", "Customer", customer_id)
}

/// `get_customer_by_phone`.
pub(super) fn customer_by_phone(st: &TelecomState, phone: &Val) -> PyResult<usize> {
    for (i, c) in coll(st, "customers")?.iter().enumerate() {
        let c = c
            .as_dict()
            .ok_or_else(|| PyErr::internal("customer is not a model"))?;
        if ops::eq(c.f("phone_number")?, phone) {
            return Ok(i);
        }
        for line_id in c.l("line_ids")? {
            let line = item(st, "lines", line_by_id(st, line_id)?)?;
            if ops::eq(line.f("phone_number")?, phone) {
                return Ok(i);
            }
        }
    }
    Err(PyErr::value(format!(
        "Customer with phone number {} not found",
        s(phone)
    )))
}

/// `_get_target_line(customer_id, line_id)`.
fn target_line(st: &TelecomState, customer_id: &Val, line_id: &Val) -> PyResult<usize> {
    let customer = item(st, "customers", customer_by_id(st, customer_id)?)?;
    if !customer.l("line_ids")?.iter().any(|l| ops::eq(l, line_id)) {
        return Err(PyErr::value(format!(
            "Line {} not found for customer {}",
            s(line_id),
            s(customer_id)
        )));
    }
    line_by_id(st, line_id)
}

/// `_get_bills_awaiting_payment(customer)`: bill positions.
pub(super) fn bills_awaiting_payment(st: &TelecomState, customer: usize) -> PyResult<Vec<usize>> {
    let mut out = Vec::new();
    for bill_id in item(st, "customers", customer)?.l("bill_ids")? {
        let b = bill_by_id(st, bill_id)?;
        if item(st, "bills", b)?.s("status")? == "Awaiting Payment" {
            out.push(b);
        }
    }
    Ok(out)
}

fn model(st: &TelecomState, name: &str, i: usize) -> PyResult<Ret> {
    Ok(Ret::Model(Val::dict(item(st, name, i)?.clone())))
}

// --------------------------------------------------------------- tools

fn get_customer_by_phone(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let i = customer_by_phone(st, &a[0])?;
    model(st, "customers", i)
}

fn get_customer_by_id(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let i = customer_by_id(st, &a[0])?;
    model(st, "customers", i)
}

/// `str.lower()` on a value that must be a `str`.
fn lower(v: &Val) -> PyResult<String> {
    match v {
        Val::Str(x) => Ok(x.to_lowercase()),
        other => Err(PyErr::attribute(other, "lower")),
    }
}

fn get_customer_by_name(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let mut out = Vec::new();
    for c in coll(st, "customers")? {
        let d = c
            .as_dict()
            .ok_or_else(|| PyErr::internal("customer is not a model"))?;
        if lower(d.f("full_name")?)? == lower(&a[0])? && ops::eq(d.f("date_of_birth")?, &a[1]) {
            out.push(c.clone());
        }
    }
    Ok(Ret::Models(out))
}

fn get_details_by_id(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let id = match &a[0] {
        Val::Str(x) => x.clone(),
        other => return Err(PyErr::attribute(other, "startswith")),
    };
    let (coll_name, i) = if id.starts_with('L') {
        ("lines", line_by_id(st, &a[0])?)
    } else if id.starts_with('D') {
        ("devices", device_by_id(st, &a[0])?)
    } else if id.starts_with('B') {
        ("bills", bill_by_id(st, &a[0])?)
    } else if id.starts_with('C') {
        ("customers", customer_by_id(st, &a[0])?)
    } else if id.starts_with('P') {
        ("plans", plan_by_id(st, &a[0])?)
    } else {
        return Err(PyErr::value(format!("Unknown ID format or type: {id}")));
    };
    model(st, coll_name, i)
}

fn suspend_line(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    if item(st, "lines", l)?.s("status")? != "Active" {
        return Err(PyErr::value("Line must be active to suspend"));
    }
    let line = item_mut(st, "lines", l)?;
    line.insert("status", Val::str("Suspended"));
    line.insert("suspension_start_date", Val::str(TODAY));
    Ok(Ret::Dict(vec![
        (
            "message",
            Ret::text("Line suspended successfully. $5/month holding fee will apply."),
        ),
        ("line", model(st, "lines", l)?),
    ]))
}

fn resume_line(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    if !matches!(
        item(st, "lines", l)?.s("status")?,
        "Suspended" | "Pending Activation"
    ) {
        return Err(PyErr::value("Line must be suspended to resume"));
    }
    let line = item_mut(st, "lines", l)?;
    line.insert("status", Val::str("Active"));
    line.insert("suspension_start_date", Val::None);
    Ok(Ret::Dict(vec![
        ("message", Ret::text("Line resumed successfully")),
        ("line", model(st, "lines", l)?),
    ]))
}

/// `seq[:limit]` for a sequence of `len` items: the kept length.
fn slice_end(len: usize, limit: &Val) -> PyResult<usize> {
    let n = match limit {
        Val::None => return Ok(len),
        Val::Bool(b) => i128::from(*b),
        Val::Int(i) => *i,
        _ => {
            return Err(PyErr::type_error(
                "slice indices must be integers or None or have an __index__ method",
            ));
        }
    };
    let len_i = len as i128;
    let end = if n < 0 {
        (len_i + n).max(0)
    } else {
        n.min(len_i)
    };
    Ok(end as usize)
}

fn get_bills_for_customer(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let c = customer_by_id(st, &a[0])?;
    let mut bills = Vec::new();
    for bill_id in item(st, "customers", c)?.l("bill_ids")? {
        let b = bill_by_id(st, bill_id)?;
        bills.push(item(st, "bills", b)?.clone());
    }
    // `sorted(..., key=issue_date, reverse=True)`: stable, so equal dates
    // keep their order. Dates are held as ISO text, which sorts as dates.
    let mut keyed = Vec::with_capacity(bills.len());
    for b in bills {
        keyed.push((b.s("issue_date")?.to_string(), b));
    }
    keyed.sort_by(|x, y| y.0.cmp(&x.0));
    let end = slice_end(keyed.len(), &a[1])?;
    Ok(Ret::Models(
        keyed
            .into_iter()
            .take(end)
            .map(|(_, b)| Val::dict(b))
            .collect(),
    ))
}

fn send_payment_request(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let c = customer_by_id(st, &a[0])?;
    if !bills_awaiting_payment(st, c)?.is_empty() {
        return Err(PyErr::value(
            "A bill is already awaiting payment for this customer",
        ));
    }
    if !item(st, "customers", c)?
        .l("bill_ids")?
        .iter()
        .any(|b| ops::eq(b, &a[1]))
    {
        return Err(PyErr::value(format!(
            "Bill {} not found for customer {}",
            s(&a[1]),
            s(&a[0])
        )));
    }
    let b = bill_by_id(st, &a[1])?;
    let bill = item_mut(st, "bills", b)?;
    bill.insert("status", Val::str("Awaiting Payment"));
    Ok(Ret::text(format!(
        "Payment request sent to the customer for bill {}",
        bill.s("bill_id")?
    )))
}

fn get_data_usage(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    let line = item(st, "lines", l)?;
    let p = plan_by_id(st, line.f("plan_id")?)?;
    let plan = item(st, "plans", p)?;
    // The last day of the current month.
    let cycle_end = "2025-02-28";
    Ok(Ret::Dict(vec![
        ("line_id", ret_of(&a[1])),
        ("data_used_gb", ret_of(line.f("data_used_gb")?)),
        ("data_limit_gb", ret_of(plan.f("data_limit_gb")?)),
        ("data_refueling_gb", ret_of(line.f("data_refueling_gb")?)),
        ("cycle_end_date", Ret::Date(cycle_end.to_string())),
    ]))
}

/// A plain value inside a returned dict, as `_process` sees it.
fn ret_of(v: &Val) -> Ret {
    match v {
        Val::Str(x) => Ret::Str(x.to_string()),
        Val::None => Ret::None,
        Val::Bool(_) | Val::Int(_) | Val::Float(_) => Ret::Scalar(v.clone()),
        // A model, or a plain container: neither reaches a dict here.
        other => Ret::Model(other.clone()),
    }
}

fn set_roaming(st: &mut TelecomState, a: &[Val], on: bool) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    let enabled = ops::truthy(item(st, "lines", l)?.f("roaming_enabled")?);
    if enabled == on {
        return Ok(Ret::text(if on {
            "Roaming was already enabled"
        } else {
            "Roaming was already disabled"
        }));
    }
    item_mut(st, "lines", l)?.insert("roaming_enabled", Val::Bool(on));
    Ok(Ret::text(if on {
        "Roaming enabled successfully"
    } else {
        "Roaming disabled successfully"
    }))
}

fn enable_roaming(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    set_roaming(st, a, true)
}

fn disable_roaming(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    set_roaming(st, a, false)
}

fn transfer_to_human_agents(_: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    Ok(Ret::text("Transfer successful"))
}

/// `f"{x:.2f}"` for a number.
fn fixed2(v: &Val) -> PyResult<String> {
    match Num::of(v) {
        Some(n) => Ok(format!("{:.2}", n.to_f64())),
        None => Err(PyErr::type_error(format!(
            "unsupported format string passed to {}.__format__",
            v.type_name()
        ))),
    }
}

fn refuel_data(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    let gb = &a[2];
    if ops::le(gb, &Val::Int(0))? {
        return Err(PyErr::value("Refuel amount must be positive"));
    }
    let p = plan_by_id(st, item(st, "lines", l)?.f("plan_id")?)?;
    let price = item(st, "plans", p)?
        .f("data_refueling_price_per_gb")?
        .clone();
    let charge = ops::binop(Op::Mul, gb, &price, false)?;
    let line = item_mut(st, "lines", l)?;
    let refuelled = ops::binop(Op::Add, line.f("data_refueling_gb")?, gb, true)?;
    line.insert("data_refueling_gb", refuelled.clone());
    apply_one_time_charge(
        st,
        &a[0],
        &charge,
        &format!("Data refueling: {} GB at ${}/GB", s(gb), s(&price)),
    )?;
    Ok(Ret::Dict(vec![
        (
            "message",
            Ret::text(format!(
                "Successfully added {} GB of data for line {} for ${}",
                s(gb),
                s(&a[1]),
                fixed2(&charge)?
            )),
        ),
        ("new_data_refueling_gb", ret_of(&refuelled)),
        ("charge", ret_of(&charge)),
    ]))
}

/// The id of the n-th draft bill an episode creates (τ²: `uuid4`).
pub fn new_bill_id(n: u32) -> String {
    let digest = Sha256::digest(format!("ecdysis-telecom-bill-{n}").as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("B{hex}")
}

/// `_apply_one_time_charge(customer_id, amount, description)`.
fn apply_one_time_charge(
    st: &mut TelecomState,
    customer_id: &Val,
    amount: &Val,
    description: &str,
) -> PyResult<()> {
    let c = customer_by_id(st, customer_id)?;
    let mut draft = None;
    for bill_id in item(st, "customers", c)?.l("bill_ids")? {
        let b = bill_by_id(st, bill_id)?;
        if item(st, "bills", b)?.s("status")? == "Draft" {
            draft = Some(b);
            break;
        }
    }
    let draft = match draft {
        Some(b) => b,
        None => {
            st.bills_made += 1;
            let id = new_bill_id(st.bills_made);
            // The first of next month, its month, due 14 days later.
            let bill = pydantic::construct(
                &BILL,
                vec![
                    ("bill_id", Input::Raw(Val::str(&id))),
                    ("customer_id", Input::Raw(customer_id.clone())),
                    ("period_start", Input::Raw(Val::str("2025-03-01"))),
                    ("period_end", Input::Raw(Val::str("2025-03-31"))),
                    ("issue_date", Input::Raw(Val::str("2025-03-01"))),
                    ("total_due", Input::Raw(Val::Int(0))),
                    ("due_date", Input::Raw(Val::str("2025-03-15"))),
                    ("status", Input::Raw(Val::str("Draft"))),
                ],
            )?;
            let bills = st.db.root_mut().lm("bills")?;
            bills.push(bill);
            let pos = bills.len() - 1;
            item_mut(st, "customers", c)?
                .lm("bill_ids")?
                .push(Val::str(&id));
            pos
        }
    };
    let item_type = if ops::lt(amount, &Val::Int(0))? {
        "Credit"
    } else {
        "Charge"
    };
    let line_item = pydantic::construct(
        &LINE_ITEM,
        vec![
            ("description", Input::Raw(Val::str(description))),
            ("amount", Input::Raw(amount.clone())),
            ("date", Input::Raw(Val::str(TODAY))),
            ("item_type", Input::Raw(Val::str(item_type))),
        ],
    )?;
    let bill = item_mut(st, "bills", draft)?;
    bill.lm("line_items")?.push(line_item);
    let total = ops::binop(Op::Add, bill.f("total_due")?, amount, true)?;
    bill.insert("total_due", total);
    Ok(())
}

// ------------------------------------------------------ plain methods

fn set_data_usage(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    item_mut(st, "lines", l)?.insert("data_used_gb", a[2].clone());
    Ok(Ret::text(format!(
        "Data usage set to {} GB for line {}",
        s(&a[2]),
        s(&a[1])
    )))
}

fn suspend_line_for_overdue_bill(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let (customer_id, line_id, new_bill_id, contract_ended) = (&a[0], &a[1], &a[2], &a[3]);
    let l = line_by_id(st, line_id)?;
    if item(st, "lines", l)?.s("status")? != "Active" {
        return Err(PyErr::value(
            "Line must be active to suspend for unpaid bill",
        ));
    }
    let p = plan_by_id(st, item(st, "lines", l)?.f("plan_id")?)?;
    let amount = item(st, "plans", p)?.f("price_per_month")?.clone();
    let description = format!("Charge for line {}", item(st, "lines", l)?.s("line_id")?);
    if ops::le(&amount, &Val::Int(0))? {
        return Err(PyErr::value("Amount must be positive for overdue bill"));
    }
    let c = customer_by_id(st, customer_id)?;
    for bill_id in item(st, "customers", c)?.l("bill_ids")? {
        let b = bill_by_id(st, bill_id)?;
        if item(st, "bills", b)?.s("status")? == "Overdue" {
            return Err(PyErr::value("Customer already has an overdue bill"));
        }
    }
    // Last month: 2025-01-01 to 2025-01-31, due 14 days after it began.
    let mut bill = pydantic::construct(
        &BILL,
        vec![
            ("bill_id", Input::Raw(new_bill_id.clone())),
            ("customer_id", Input::Raw(customer_id.clone())),
            ("period_start", Input::Raw(Val::str("2025-01-01"))),
            ("period_end", Input::Raw(Val::str("2025-01-31"))),
            ("issue_date", Input::Raw(Val::str("2025-01-01"))),
            ("total_due", Input::Raw(Val::Int(0))),
            ("due_date", Input::Raw(Val::str("2025-01-15"))),
            ("status", Input::Raw(Val::str("Overdue"))),
        ],
    )?;
    let item_type = if ops::gt(&amount, &Val::Int(0))? {
        "Charge"
    } else {
        "Credit"
    };
    let line_item = pydantic::construct(
        &LINE_ITEM,
        vec![
            ("description", Input::Raw(Val::str(&description))),
            ("amount", Input::Raw(amount.clone())),
            ("date", Input::Raw(Val::str(TODAY))),
            ("item_type", Input::Raw(Val::str(item_type))),
        ],
    )?;
    {
        let b = bill
            .as_dict_mut()
            .ok_or_else(|| PyErr::internal("a bill is a model"))?;
        b.lm("line_items")?.push(line_item);
        let total = ops::binop(Op::Add, b.f("total_due")?, &amount, true)?;
        b.insert("total_due", total);
    }
    st.db.root_mut().lm("bills")?.push(bill);
    item_mut(st, "customers", c)?
        .lm("bill_ids")?
        .push(new_bill_id.clone());
    let line = item_mut(st, "lines", l)?;
    line.insert("status", Val::str("Suspended"));
    line.insert("suspension_start_date", Val::str(TODAY));
    if ops::truthy(contract_ended) {
        line.insert("contract_end_date", Val::str("2025-01-31"));
    }
    Ok(Ret::text(format!(
        "Line {} suspended for unpaid bill {}. Contract ended: {}",
        s(line_id),
        s(new_bill_id),
        s(contract_ended)
    )))
}

fn assert_data_refueling_amount(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    let diff = ops::binop(
        Op::Sub,
        item(st, "lines", l)?.f("data_refueling_gb")?,
        &a[2],
        false,
    )?;
    let small = ops::lt(&ops::abs(&diff)?, &Val::Float(1e-6))?;
    Ok(Ret::Scalar(Val::Bool(small)))
}

fn assert_line_status(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let l = target_line(st, &a[0], &a[1])?;
    let same = ops::eq(item(st, "lines", l)?.f("status")?, &a[2]);
    Ok(Ret::Scalar(Val::Bool(same)))
}

fn assert_overdue_bill_exists(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let c = customer_by_id(st, &a[0])?;
    if !item(st, "customers", c)?
        .l("bill_ids")?
        .iter()
        .any(|b| ops::eq(b, &a[1]))
    {
        return Err(PyErr::value(format!("Overdue bill {} not found", s(&a[1]))));
    }
    let b = bill_by_id(st, &a[1])?;
    if item(st, "bills", b)?.s("status")? != "Overdue" {
        return Err(PyErr::value(format!(
            "Overdue bill {} is not overdue",
            s(&a[1])
        )));
    }
    Ok(Ret::Scalar(Val::Bool(true)))
}

fn assert_no_overdue_bill(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let paid_or_gone = match bill_by_id(st, &a[0]) {
        Ok(b) => item(st, "bills", b)?.s("status")? == "Paid",
        Err(e) if e.kind == "ValueError" => true,
        Err(e) => return Err(e),
    };
    Ok(Ret::Scalar(Val::Bool(paid_or_gone)))
}

// ------------------------------------------------------- synchronising

/// `TelecomEnvironment.sync_tools`: what the carrier's side decides about
/// the user's surroundings, and a paid payment request back to its bill.
pub fn sync_tools(st: &mut TelecomState) -> PyResult<()> {
    let phone = st.user.root().d("surroundings")?.f("phone_number")?.clone();
    if matches!(phone, Val::None) {
        return Ok(());
    }
    let l = line_by_phone(st, &phone)?;
    let line = item(st, "lines", l)?.clone();
    let line_active = line.s("status")? == "Active";
    let roaming_allowed = ops::truthy(line.f("roaming_enabled")?);
    let p = plan_by_id(st, line.f("plan_id")?)?;
    let limit = ops::binop(
        Op::Add,
        item(st, "plans", p)?.f("data_limit_gb")?,
        line.f("data_refueling_gb")?,
        false,
    )?;
    let exceeded = ops::ge(line.f("data_used_gb")?, &limit)?;
    {
        let sur = st.user.root_mut().dm("surroundings")?;
        sur.insert("line_active", Val::Bool(line_active));
        sur.insert("roaming_allowed", Val::Bool(roaming_allowed));
        sur.insert("mobile_data_usage_exceeded", Val::Bool(exceeded));
    }
    let request = st
        .user
        .root()
        .d("surroundings")?
        .f("payment_request")?
        .clone();
    if let Val::Dict(req) = &request
        && ops::truthy(req.f("paid")?)
    {
        let b = bill_by_id(st, req.f("bill_id")?)?;
        item_mut(st, "bills", b)?.insert("status", Val::str("Paid"));
        st.user
            .root_mut()
            .dm("surroundings")?
            .insert("payment_request", Val::None);
    }
    let request = st.user.root().d("surroundings")?.f("payment_request")?;
    if matches!(request, Val::None) {
        let c = customer_by_phone(st, &phone)?;
        if let Some(&b) = bills_awaiting_payment(st, c)?.first() {
            let bill = item(st, "bills", b)?;
            let req = pydantic::construct(
                &PAYMENT_REQUEST,
                vec![
                    ("bill_id", Input::Raw(bill.f("bill_id")?.clone())),
                    ("amount_due", Input::Raw(bill.f("total_due")?.clone())),
                ],
            )?;
            st.user
                .root_mut()
                .dm("surroundings")?
                .insert("payment_request", req);
        }
    }
    Ok(())
}
