//! τ² telecom's pydantic models: the agent's `TelecomDB` (plans, customers,
//! lines, bills, devices) and the user's `TelecomUserDB` (the phone and the
//! user's surroundings). Every model is a `BaseModelNoExtra`
//! (`extra="forbid"`); enums are held as their values, dates as `str()` of
//! the value (see [`Ty::Date`]).

use ecdysis_pyemu::pydantic::{Field, Model, Ty};
use ecdysis_pyemu::{Dict, Val};

fn f_false() -> Val {
    Val::Bool(false)
}
fn f_true() -> Val {
    Val::Bool(true)
}
fn f_zero() -> Val {
    Val::Float(0.0)
}
fn f_empty_list() -> Val {
    Val::list(Vec::new())
}

// ------------------------------------------------------------- agent side

/// `LineStatus` values.
pub const LINE_STATUS: &[&str] = &["Active", "Suspended", "Pending Activation", "Closed"];
/// `BillStatus` values.
pub const BILL_STATUS: &[&str] = &[
    "Draft",
    "Issued",
    "Awaiting Payment",
    "Paid",
    "Overdue",
    "Disputed",
];

static ADDRESS: Model = Model {
    name: "Address",
    extra_forbid: true,
    fields: &[
        Field::req("street", Ty::Str),
        Field::req("city", Ty::Str),
        Field::req("state", Ty::Str),
        Field::req("zip_code", Ty::Str),
    ],
};
static PLAN: Model = Model {
    name: "Plan",
    extra_forbid: true,
    fields: &[
        Field::req("plan_id", Ty::Str),
        Field::req("name", Ty::Str),
        Field::req("data_limit_gb", Ty::Float),
        Field::req("price_per_month", Ty::Float),
        Field::req("data_refueling_price_per_gb", Ty::Float),
    ],
};
static DEVICE: Model = Model {
    name: "Device",
    extra_forbid: true,
    fields: &[
        Field::req("device_id", Ty::Str),
        Field::req(
            "device_type",
            Ty::Enum(&["phone", "router", "tablet", "watch", "other"]),
        ),
        Field::req("model", Ty::Str),
        Field::opt("imei", Ty::Opt(&Ty::Str)),
        Field::req("is_esim_capable", Ty::Bool),
        Field::with("activated", Ty::Bool, f_false),
        Field::opt("activation_date", Ty::Opt(&Ty::DateTime)),
        Field::opt("last_esim_transfer_date", Ty::Opt(&Ty::DateTime)),
    ],
};
fn f_pending_activation() -> Val {
    Val::str("Pending Activation")
}
static LINE: Model = Model {
    name: "Line",
    extra_forbid: true,
    fields: &[
        Field::req("line_id", Ty::Str),
        Field::req("phone_number", Ty::Str),
        Field::with("status", Ty::Enum(LINE_STATUS), f_pending_activation),
        Field::req("plan_id", Ty::Str),
        Field::opt("device_id", Ty::Opt(&Ty::Str)),
        Field::with("data_used_gb", Ty::Float, f_zero),
        Field::with("data_refueling_gb", Ty::Float, f_zero),
        Field::with("roaming_enabled", Ty::Bool, f_false),
        Field::opt("contract_end_date", Ty::Opt(&Ty::Date)),
        Field::opt("last_plan_change_date", Ty::Opt(&Ty::Date)),
        Field::opt("last_sim_replacement_date", Ty::Opt(&Ty::Date)),
        Field::opt("suspension_start_date", Ty::Opt(&Ty::Date)),
    ],
};
/// `LineItem`.
pub static LINE_ITEM: Model = Model {
    name: "LineItem",
    extra_forbid: true,
    fields: &[
        Field::req("description", Ty::Str),
        Field::req("amount", Ty::Float),
        Field::req("date", Ty::Date),
        Field::req("item_type", Ty::Str),
    ],
};
fn f_draft() -> Val {
    Val::str("Draft")
}
/// `Bill`.
pub static BILL: Model = Model {
    name: "Bill",
    extra_forbid: true,
    fields: &[
        Field::req("bill_id", Ty::Str),
        Field::req("customer_id", Ty::Str),
        Field::req("period_start", Ty::Date),
        Field::req("period_end", Ty::Date),
        Field::req("issue_date", Ty::Date),
        Field::req("total_due", Ty::Float),
        Field::req("due_date", Ty::Date),
        Field::with("line_items", Ty::List(&Ty::Model(&LINE_ITEM)), f_empty_list),
        Field::with("status", Ty::Enum(BILL_STATUS), f_draft),
    ],
};
static PAYMENT_METHOD: Model = Model {
    name: "PaymentMethod",
    extra_forbid: true,
    fields: &[
        Field::req(
            "method_type",
            Ty::Enum(&["Credit Card", "Debit Card", "PayPal"]),
        ),
        Field::req("account_number_last_4", Ty::Str),
        Field::req("expiration_date", Ty::Str),
    ],
};
fn f_pending_verification() -> Val {
    Val::str("Pending Verification")
}
/// `DEFAULT_START_DATE`: a `date` where the field is a `datetime`
/// (pydantic does not validate defaults, so `str()` of it is the date's).
fn f_default_start() -> Val {
    Val::str("2025-01-01")
}
static CUSTOMER: Model = Model {
    name: "Customer",
    extra_forbid: true,
    fields: &[
        Field::req("customer_id", Ty::Str),
        Field::req("full_name", Ty::Str),
        Field::req("date_of_birth", Ty::Str),
        Field::req("email", Ty::Str),
        Field::req("phone_number", Ty::Str),
        Field::req("address", Ty::Model(&ADDRESS)),
        Field::with(
            "account_status",
            Ty::Enum(&["Active", "Suspended", "Pending Verification", "Closed"]),
            f_pending_verification,
        ),
        Field::with(
            "payment_methods",
            Ty::List(&Ty::Model(&PAYMENT_METHOD)),
            f_empty_list,
        ),
        Field::with("line_ids", Ty::List(&Ty::Str), f_empty_list),
        Field::with("bill_ids", Ty::List(&Ty::Str), f_empty_list),
        Field::with("created_at", Ty::DateTime, f_default_start),
        Field::opt("last_extension_date", Ty::Opt(&Ty::Date)),
        Field::with("goodwill_credit_used_this_year", Ty::Float, f_zero),
    ],
};
/// `TelecomDB`, the root of `db.toml`.
pub static TELECOM_DB: Model = Model {
    name: "TelecomDB",
    extra_forbid: true,
    fields: &[
        Field::with("plans", Ty::List(&Ty::Model(&PLAN)), f_empty_list),
        Field::with("customers", Ty::List(&Ty::Model(&CUSTOMER)), f_empty_list),
        Field::with("lines", Ty::List(&Ty::Model(&LINE)), f_empty_list),
        Field::with("bills", Ty::List(&Ty::Model(&BILL)), f_empty_list),
        Field::with("devices", Ty::List(&Ty::Model(&DEVICE)), f_empty_list),
    ],
};

// -------------------------------------------------------------- user side

/// `SimStatus` values.
pub const SIM_STATUS: &[&str] = &["active", "missing", "locked_pin", "locked_puk"];
/// `NetworkTechnology` values.
pub const NETWORK_TECHNOLOGY: &[&str] = &["none", "2G", "3G", "4G", "5G"];
/// `NetworkModePreference` values.
pub const NETWORK_MODE: &[&str] = &["4g_5g_preferred", "4g_only", "3g_only", "2g_only"];
/// `SignalStrength` values.
pub const SIGNAL_STRENGTH: &[&str] = &["none", "poor", "fair", "good", "excellent"];
/// `PerformanceLevel` values.
pub const PERFORMANCE_LEVEL: &[&str] = &["unknown", "poor", "fair", "good", "excellent"];
/// `NetworkStatus` values.
pub const NETWORK_STATUS: &[&str] = &["connected", "searching", "no_service", "emergency_only"];
/// `APNNames` values.
pub const APN_NAMES: &[&str] = &["internet", "broken"];

fn f_internet() -> Val {
    Val::str("internet")
}
fn f_mms() -> Val {
    Val::str("mms")
}
/// The MMSC URL of a fresh `APNSettings`.
pub const DEFAULT_MMSC_URL: &str = "http://mms.carrier.com/mms/wapenc";
fn f_mmsc_url() -> Val {
    Val::str(DEFAULT_MMSC_URL)
}
/// `APNSettings`.
pub static APN_SETTINGS: Model = Model {
    name: "APNSettings",
    extra_forbid: true,
    fields: &[
        Field::with("apn_name", Ty::Enum(APN_NAMES), f_internet),
        Field::with("reset_at_reboot", Ty::Bool, f_false),
        Field::with("mms_apn", Ty::Opt(&Ty::Str), f_mms),
        Field::with("mmsc_url", Ty::Opt(&Ty::Str), f_mmsc_url),
        Field::opt("mms_proxy", Ty::Opt(&Ty::Str)),
        Field::opt("mms_port", Ty::Opt(&Ty::Int)),
    ],
};
fn f_unknown() -> Val {
    Val::str("unknown")
}
/// `VpnDetails`.
pub static VPN_DETAILS: Model = Model {
    name: "VpnDetails",
    extra_forbid: true,
    fields: &[
        Field::opt("server_address", Ty::Opt(&Ty::Str)),
        Field::opt("protocol", Ty::Opt(&Ty::Str)),
        Field::with("server_performance", Ty::Enum(PERFORMANCE_LEVEL), f_unknown),
    ],
};
static APP_PERMISSIONS: Model = Model {
    name: "AppPermissions",
    extra_forbid: true,
    fields: &[
        Field::with("sms", Ty::Bool, f_false),
        Field::with("storage", Ty::Bool, f_false),
        Field::with("phone", Ty::Bool, f_false),
        Field::with("network", Ty::Bool, f_false),
    ],
};
fn permissions(sms: bool, storage: bool, phone: bool, network: bool) -> Val {
    Val::dict(Dict::from_pairs([
        ("sms", Val::Bool(sms)),
        ("storage", Val::Bool(storage)),
        ("phone", Val::Bool(phone)),
        ("network", Val::Bool(network)),
    ]))
}
fn f_no_permissions() -> Val {
    permissions(false, false, false, false)
}
static APP_STATUS: Model = Model {
    name: "AppStatus",
    extra_forbid: true,
    fields: &[
        Field::req("app_name", Ty::Str),
        Field::with("permissions", Ty::Model(&APP_PERMISSIONS), f_no_permissions),
    ],
};
fn app(name: &str, permissions: Val) -> Val {
    Val::dict(Dict::from_pairs([
        ("app_name", Val::str(name)),
        ("permissions", permissions),
    ]))
}
fn f_app_statuses() -> Val {
    Val::dict(Dict::from_pairs([
        (
            "messaging",
            app("messaging", permissions(true, true, true, false)),
        ),
        (
            "browser",
            app("browser", permissions(false, true, false, true)),
        ),
    ]))
}
fn f_fresh_apn() -> Val {
    Val::dict(Dict::from_pairs([
        ("apn_name", f_internet()),
        ("reset_at_reboot", f_false()),
        ("mms_apn", f_mms()),
        ("mmsc_url", f_mmsc_url()),
        ("mms_proxy", Val::None),
        ("mms_port", Val::None),
    ]))
}
fn f_active() -> Val {
    Val::str("active")
}
fn f_good() -> Val {
    Val::str("good")
}
fn f_five_g() -> Val {
    Val::str("5G")
}
fn f_connected() -> Val {
    Val::str("connected")
}
fn f_eighty() -> Val {
    Val::Int(80)
}
fn f_preferred() -> Val {
    Val::str("4g_5g_preferred")
}
fn f_none_signal() -> Val {
    Val::str("none")
}
/// `MockPhoneAttributes`, the phone.
pub static PHONE: Model = Model {
    name: "MockPhoneAttributes",
    extra_forbid: true,
    fields: &[
        Field::with("sim_card_status", Ty::Enum(SIM_STATUS), f_active),
        Field::with("sim_card_missing", Ty::Bool, f_false),
        Field::with("airplane_mode", Ty::Bool, f_false),
        Field::with("network_signal_strength", Ty::Enum(SIGNAL_STRENGTH), f_good),
        Field::with(
            "network_technology_connected",
            Ty::Enum(NETWORK_TECHNOLOGY),
            f_five_g,
        ),
        Field::with(
            "network_connection_status",
            Ty::Enum(NETWORK_STATUS),
            f_connected,
        ),
        Field::with("battery_level", Ty::Int, f_eighty),
        Field::with("data_enabled", Ty::Bool, f_true),
        Field::with("roaming_enabled", Ty::Bool, f_false),
        Field::with(
            "network_mode_preference",
            Ty::Enum(NETWORK_MODE),
            f_preferred,
        ),
        Field::with("active_apn_settings", Ty::Model(&APN_SETTINGS), f_fresh_apn),
        Field::with("wifi_enabled", Ty::Bool, f_false),
        Field::with("wifi_connected", Ty::Bool, f_false),
        Field::opt("wifi_ssid", Ty::Opt(&Ty::Str)),
        Field::with(
            "wifi_signal_strength",
            Ty::Enum(SIGNAL_STRENGTH),
            f_none_signal,
        ),
        Field::with("wifi_calling_enabled", Ty::Bool, f_false),
        Field::with("wifi_calling_mms_over_wifi", Ty::Bool, f_false),
        Field::with("data_saver_mode", Ty::Bool, f_false),
        Field::with("vpn_enabled_setting", Ty::Bool, f_false),
        Field::with("vpn_connected", Ty::Bool, f_false),
        Field::opt("vpn_details", Ty::Opt(&Ty::Model(&VPN_DETAILS))),
        Field::with(
            "app_statuses",
            Ty::Dict(&Ty::Model(&APP_STATUS)),
            f_app_statuses,
        ),
    ],
};
/// `PaymentRequest`.
pub static PAYMENT_REQUEST: Model = Model {
    name: "PaymentRequest",
    extra_forbid: true,
    fields: &[
        Field::req("bill_id", Ty::Str),
        Field::req("amount_due", Ty::Float),
        Field::with("paid", Ty::Bool, f_false),
    ],
};
/// Signal strength per network technology where the user is (keys are
/// `NetworkTechnology` members, held as their values).
fn f_signal_by_technology() -> Val {
    Val::dict(Dict::from_pairs([
        ("2G", Val::str("poor")),
        ("3G", Val::str("fair")),
        ("4G", Val::str("good")),
        ("5G", Val::str("excellent")),
    ]))
}
static SURROUNDINGS: Model = Model {
    name: "UserSurroundings",
    extra_forbid: true,
    fields: &[
        Field::opt("name", Ty::Opt(&Ty::Str)),
        Field::opt("phone_number", Ty::Opt(&Ty::Str)),
        Field::with("is_abroad", Ty::Bool, f_false),
        Field::with("roaming_allowed", Ty::Bool, f_false),
        Field::with(
            "signal_strength",
            Ty::Dict(&Ty::Enum(SIGNAL_STRENGTH)),
            f_signal_by_technology,
        ),
        Field::with("mobile_data_usage_exceeded", Ty::Bool, f_false),
        Field::with("line_active", Ty::Bool, f_true),
        Field::opt("payment_request", Ty::Opt(&Ty::Model(&PAYMENT_REQUEST))),
    ],
};
fn f_fresh_phone() -> Val {
    ecdysis_pyemu::pydantic::validate_model(&PHONE, &Val::dict(Dict::new()))
        .expect("a phone of defaults validates")
}
fn f_fresh_surroundings() -> Val {
    ecdysis_pyemu::pydantic::validate_model(&SURROUNDINGS, &Val::dict(Dict::new()))
        .expect("surroundings of defaults validate")
}
/// `TelecomUserDB`, the root of `user_db.toml`.
pub static TELECOM_USER_DB: Model = Model {
    name: "TelecomUserDB",
    extra_forbid: true,
    fields: &[
        Field::with("device", Ty::Model(&PHONE), f_fresh_phone),
        Field::with(
            "surroundings",
            Ty::Model(&SURROUNDINGS),
            f_fresh_surroundings,
        ),
    ],
};
