//! `TelecomUserTools`: the user's phone, step for step as the reference
//! simulates it. Tools answer in text; the phone's state is the user DB.
//!
//! Two reference behaviours are kept on purpose: an assignment the tools
//! make without validation stores the value as given (a non-str network
//! mode, a non-dict APN setting), and later reads of it fail as Python's
//! attribute lookups do; and the default VPN details are one object shared
//! by every connection (`default_vpn_details`, a class attribute), so once
//! `break_vpn` degrades it, later connections in the episode are degraded
//! too (see [`TelecomState`]'s `vpn_default_poor`).

use ecdysis_pyemu::ops;
use ecdysis_pyemu::pydantic::{self, Input};
use ecdysis_pyemu::{Dict, PyErr, PyResult, Val};

use super::super::db::{Fields, FieldsMut};
use super::super::tools::Kind;
use super::models::{APN_SETTINGS, NETWORK_MODE};
use super::{Arg, Func, Kit, Ret, TelecomState};

/// The user's toolkit.
pub static TOOLKIT: Kit = Kit {
    class: "TelecomUserTools",
    funcs: &[
        Func::tool("check_status_bar", &[], Kind::Read, check_status_bar),
        Func::tool(
            "check_network_status",
            &[],
            Kind::Read,
            check_network_status,
        ),
        Func::tool(
            "check_network_mode_preference",
            &[],
            Kind::Read,
            check_network_mode_preference,
        ),
        Func::tool(
            "set_network_mode_preference",
            &["mode"],
            Kind::Write,
            set_network_mode_preference,
        ),
        Func::tool("run_speed_test", &[], Kind::Read, run_speed_test),
        Func::tool(
            "toggle_airplane_mode",
            &[],
            Kind::Write,
            toggle_airplane_mode,
        ),
        Func::tool("check_sim_status", &[], Kind::Read, check_sim_status),
        Func::tool("reseat_sim_card", &[], Kind::Write, reseat_sim_card),
        Func::tool("toggle_data", &[], Kind::Write, toggle_data),
        Func::tool("toggle_roaming", &[], Kind::Write, toggle_roaming),
        Func::tool(
            "check_data_restriction_status",
            &[],
            Kind::Read,
            check_data_restriction_status,
        ),
        Func::tool(
            "toggle_data_saver_mode",
            &[],
            Kind::Write,
            toggle_data_saver_mode,
        ),
        Func::tool("check_apn_settings", &[], Kind::Read, check_apn_settings),
        Func::tool(
            "set_apn_settings",
            &["apn_settings"],
            Kind::Write,
            set_apn_settings,
        ),
        Func::tool("reset_apn_settings", &[], Kind::Write, reset_apn_settings),
        Func::tool("check_wifi_status", &[], Kind::Read, check_wifi_status),
        Func::tool("toggle_wifi", &[], Kind::Write, toggle_wifi),
        Func::tool(
            "check_wifi_calling_status",
            &[],
            Kind::Read,
            check_wifi_calling_status,
        ),
        Func::tool("toggle_wifi_calling", &[], Kind::Write, toggle_wifi_calling),
        Func::tool("check_vpn_status", &[], Kind::Read, check_vpn_status),
        Func::tool("connect_vpn", &[], Kind::Write, connect_vpn),
        Func::tool("disconnect_vpn", &[], Kind::Write, disconnect_vpn),
        Func::tool(
            "check_installed_apps",
            &[],
            Kind::Read,
            check_installed_apps,
        ),
        Func::tool(
            "check_app_status",
            &["app_name"],
            Kind::Read,
            check_app_status,
        ),
        Func::tool(
            "check_app_permissions",
            &["app_name"],
            Kind::Read,
            check_app_permissions,
        ),
        Func::tool(
            "grant_app_permission",
            &["app_name", "permission"],
            Kind::Write,
            grant_app_permission,
        ),
        Func::tool("can_send_mms", &[], Kind::Read, can_send_mms),
        Func::tool("reboot_device", &[], Kind::Write, reboot_device),
        Func::tool(
            "check_payment_request",
            &[],
            Kind::Read,
            check_payment_request,
        ),
        Func::tool("make_payment", &[], Kind::Write, make_payment),
        // Plain methods: task set-up and assertions.
        Func::method(
            "set_user_info",
            &["name", "phone_number"],
            &[],
            set_user_info,
        ),
        Func::method("set_user_location", &["abroad"], &[], set_user_location),
        Func::method("turn_airplane_mode_on", &[], &[], turn_airplane_mode_on),
        Func::method("turn_airplane_mode_off", &[], &[], turn_airplane_mode_off),
        Func::method("unseat_sim_card", &[], &[], unseat_sim_card),
        Func::method("lock_sim_card", &["mode"], &[], lock_sim_card),
        Func::method("turn_data_on", &[], &[], turn_data_on),
        Func::method("turn_data_off", &[], &[], turn_data_off),
        Func::method("turn_roaming_on", &[], &[], turn_roaming_on),
        Func::method("turn_roaming_off", &[], &[], turn_roaming_off),
        Func::method("turn_data_saver_mode_on", &[], &[], turn_data_saver_mode_on),
        Func::method(
            "turn_data_saver_mode_off",
            &[],
            &[],
            turn_data_saver_mode_off,
        ),
        Func::method("break_apn_settings", &[], &[], break_apn_settings),
        Func::method("break_apn_mms_setting", &[], &[], break_apn_mms_setting),
        Func::method(
            "set_wifi_calling",
            &["enabled", "mms_over_wifi"],
            &[Arg::None],
            set_wifi_calling,
        ),
        Func::method("break_vpn", &[], &[], break_vpn),
        Func::method(
            "remove_app_permission",
            &["app_name", "permission"],
            &[],
            remove_app_permission,
        ),
        Func::method(
            "simulate_network_search",
            &[],
            &[],
            simulate_network_search_fn,
        ),
        Func::method(
            "assert_airplane_mode_status",
            &["expected_status"],
            &[],
            assert_airplane_mode_status,
        ),
        Func::method(
            "assert_service_status",
            &["expected_status"],
            &[],
            assert_service_status,
        ),
        Func::method(
            "assert_mobile_data_status",
            &["expected_status"],
            &[],
            assert_mobile_data_status,
        ),
        Func::method(
            "assert_mobile_roaming_status",
            &["expected_status"],
            &[],
            assert_mobile_roaming_status,
        ),
        Func::method(
            "assert_mobile_data_saver_mode_status",
            &["expected_status"],
            &[],
            assert_mobile_data_saver_mode_status,
        ),
        Func::method(
            "assert_internet_speed",
            &["expected_speed", "expected_desc"],
            &[Arg::None],
            assert_internet_speed,
        ),
        Func::method(
            "assert_internet_not_excellent",
            &[],
            &[],
            assert_internet_not_excellent,
        ),
        Func::method(
            "assert_can_send_mms",
            &["expected_status"],
            &[],
            assert_can_send_mms,
        ),
        Func::method(
            "assert_mobile_data_usage_exceeded",
            &["expected_status"],
            &[],
            assert_mobile_data_usage_exceeded,
        ),
    ],
};

// ------------------------------------------------------------- state

fn dev(st: &TelecomState) -> PyResult<&Dict> {
    st.user.root().d("device")
}

fn dev_mut(st: &mut TelecomState) -> PyResult<&mut Dict> {
    st.user.root_mut().dm("device")
}

fn sur(st: &TelecomState) -> PyResult<&Dict> {
    st.user.root().d("surroundings")
}

fn sur_mut(st: &mut TelecomState) -> PyResult<&mut Dict> {
    st.user.root_mut().dm("surroundings")
}

/// Truthiness of a device field.
fn flag(st: &TelecomState, field: &str) -> PyResult<bool> {
    Ok(ops::truthy(dev(st)?.f(field)?))
}

fn set(st: &mut TelecomState, field: &str, v: Val) -> PyResult<()> {
    dev_mut(st)?.insert(field, v);
    Ok(())
}

/// Whether a device field equals an enum member (held as its value).
fn is(st: &TelecomState, field: &str, value: &str) -> PyResult<bool> {
    Ok(ops::eq(dev(st)?.f(field)?, &Val::str(value)))
}

/// `member.value` of an enum field; a raw non-enum value (assigned
/// unvalidated) has no `.value`.
fn value_of(v: &Val) -> PyResult<String> {
    match v {
        Val::Str(s) => Ok(s.to_string()),
        other => Err(PyErr::attribute(other, "value")),
    }
}

/// `obj.attr` where `obj` should be a model instance.
fn attr<'a>(obj: &'a Val, name: &str) -> PyResult<&'a Val> {
    match obj {
        Val::Dict(d) => d.f(name),
        other => Err(PyErr::attribute(other, name)),
    }
}

/// `device.active_apn_settings.<name>`.
fn apn_attr(st: &TelecomState, name: &str) -> PyResult<Val> {
    Ok(attr(dev(st)?.f("active_apn_settings")?, name)?.clone())
}

fn set_apn_attr(st: &mut TelecomState, name: &str, v: Val) -> PyResult<()> {
    match dev_mut(st)?.fm("active_apn_settings")? {
        Val::Dict(_) => {}
        other => return Err(PyErr::attribute(other, name)),
    }
    let apn = dev_mut(st)?.dm("active_apn_settings")?;
    apn.insert(name, v);
    Ok(())
}

const NO_SERVICE: &str = "no_service";

// ------------------------------------------------- the phone's logic

/// `_check_sim_status`.
fn sim_status(st: &TelecomState) -> PyResult<Val> {
    if flag(st, "sim_card_missing")? {
        return Ok(Val::str("missing"));
    }
    Ok(dev(st)?.f("sim_card_status")?.clone())
}

fn no_service(st: &mut TelecomState) -> PyResult<()> {
    set(st, "network_connection_status", Val::str(NO_SERVICE))?;
    set(st, "network_technology_connected", Val::str("none"))?;
    set(st, "network_signal_strength", Val::str("none"))
}

/// `surroundings.signal_strength.get(technology, SignalStrength.NONE)`.
fn signal_for(st: &TelecomState, technology: &str) -> PyResult<Val> {
    let table = sur(st)?.f("signal_strength")?;
    Ok(match table {
        Val::Dict(d) => d.get(technology).cloned().unwrap_or(Val::str("none")),
        other => return Err(PyErr::attribute(other, "get")),
    })
}

/// `simulate_network_search`.
fn network_search(st: &mut TelecomState) -> PyResult<()> {
    let sim = sim_status(st)?;
    if ops::eq(&sim, &Val::str("active")) {
        set(st, "network_connection_status", Val::str("connected"))?;
        let pref = dev(st)?.f("network_mode_preference")?.clone();
        let technology = if ops::eq(&pref, &Val::str("4g_5g_preferred")) {
            if ops::eq(&signal_for(st, "5G")?, &Val::str("none")) {
                "4G"
            } else {
                "5G"
            }
        } else if ops::eq(&pref, &Val::str("4g_only")) {
            "4G"
        } else if ops::eq(&pref, &Val::str("3g_only")) {
            "3G"
        } else if ops::eq(&pref, &Val::str("2g_only")) {
            "2G"
        } else {
            "4G"
        };
        let signal = signal_for(st, technology)?;
        set(st, "network_technology_connected", Val::str(technology))?;
        set(st, "network_signal_strength", signal)?;
    } else {
        no_service(st)?;
    }
    if flag(st, "airplane_mode")? {
        no_service(st)?;
    }
    if ops::eq(&apn_attr(st, "apn_name")?, &Val::str("broken")) {
        no_service(st)?;
    }
    if !ops::truthy(sur(st)?.f("line_active")?) {
        no_service(st)?;
    }
    Ok(())
}

/// `_check_status_bar`.
fn status_bar(st: &TelecomState) -> PyResult<String> {
    let d = dev(st)?;
    let mut parts: Vec<String> = Vec::new();
    if ops::truthy(d.f("airplane_mode")?) {
        parts.push("\u{2708}\u{fe0f} Airplane Mode".into());
    } else {
        let signal = d.f("network_signal_strength")?;
        parts.push(
            match signal.as_str() {
                Some("poor") => "\u{1f4f6}\u{b9} Poor",
                Some("fair") => "\u{1f4f6}\u{b2} Fair",
                Some("good") => "\u{1f4f6}\u{b3} Good",
                Some("excellent") => "\u{1f4f6}\u{2074} Excellent",
                _ => "\u{1f4f5} No Signal",
            }
            .into(),
        );
        let technology = d.f("network_technology_connected")?;
        let has_network = !ops::eq(technology, &Val::str("none"));
        if has_network {
            parts.push(value_of(technology)?);
        }
        if ops::truthy(d.f("data_enabled")?) && has_network {
            parts.push("\u{1f4f1} Data Enabled".into());
            if ops::truthy(d.f("data_saver_mode")?) {
                parts.push("\u{1f53d} Data Saver".into());
            }
        } else {
            parts.push("\u{1f4f5} Data Disabled".into());
        }
    }
    if ops::truthy(d.f("wifi_enabled")?) && ops::truthy(d.f("wifi_connected")?) {
        let ssid = d.f("wifi_ssid")?;
        if ops::truthy(ssid) {
            parts.push(format!("\u{1f4e1} Connected to {}", ops::s(ssid)));
        } else {
            parts.push("\u{1f4e1} Enabled".into());
        }
    }
    if ops::truthy(d.f("vpn_connected")?) {
        parts.push("\u{1f512} VPN Connected".into());
    }
    parts.push(format!("\u{1f50b} {}%", ops::s(d.f("battery_level")?)));
    Ok(parts.join(" | "))
}

fn with_bar(st: &TelecomState, update: &str) -> PyResult<Ret> {
    Ok(Ret::text(format!(
        "{update}\nStatus Bar: {}",
        status_bar(st)?
    )))
}

fn on_off(b: bool) -> &'static str {
    if b { "ON" } else { "OFF" }
}

/// `_get_mobile_data_working`.
fn mobile_data_working(st: &TelecomState) -> PyResult<bool> {
    if flag(st, "airplane_mode")? || is(st, "network_signal_strength", "none")? {
        return Ok(false);
    }
    if is(st, "network_connection_status", NO_SERVICE)? {
        return Ok(false);
    }
    if ops::truthy(sur(st)?.f("is_abroad")?)
        && (!flag(st, "roaming_enabled")? || !ops::truthy(sur(st)?.f("roaming_allowed")?))
    {
        return Ok(false);
    }
    if !flag(st, "data_enabled")? {
        return Ok(false);
    }
    if ops::truthy(sur(st)?.f("mobile_data_usage_exceeded")?) {
        return Ok(false);
    }
    Ok(true)
}

/// `_run_speed_test`: the speed in Mbps (rounded to 2 places) and its
/// description, or `None` and "No Connection".
fn speed_test(st: &TelecomState) -> PyResult<(Option<f64>, &'static str)> {
    if !mobile_data_working(st)? {
        return Ok((None, "No Connection"));
    }
    let d = dev(st)?;
    let vpn_poor = ops::truthy(d.f("vpn_connected")?)
        && ops::truthy(d.f("vpn_details")?)
        && ops::eq(
            attr(d.f("vpn_details")?, "server_performance")?,
            &Val::str("poor"),
        );
    let mut factor = if vpn_poor { 0.1 } else { 1.0 };
    if ops::truthy(d.f("data_saver_mode")?) {
        factor *= 0.2;
    }
    let (lo, hi) = match d.f("network_technology_connected")?.as_str() {
        Some("2G") => (0.1, 0.4),
        Some("3G") => (1.0, 5.0),
        Some("4G") => (10.0, 100.0),
        Some("5G") => (50.0, 500.0),
        _ => (0.0, 0.0),
    };
    let signal = match d.f("network_signal_strength")?.as_str() {
        Some("poor") => 0.2,
        Some("fair") => 0.5,
        Some("good") => 0.8,
        Some("excellent") => 1.0,
        _ => 0.0,
    };
    let speed = ops::round_f64((lo + hi) / 2.0 * signal * factor, 2);
    let desc = if speed < 1.0 {
        "Very Poor"
    } else if speed < 5.0 {
        "Poor"
    } else if speed < 25.0 {
        "Fair"
    } else if speed < 100.0 {
        "Good"
    } else {
        "Excellent"
    };
    Ok((Some(speed), desc))
}

/// `_can_send_mms`.
fn mms_ok(st: &TelecomState) -> PyResult<bool> {
    if !mobile_data_working(st)? {
        return Ok(false);
    }
    if is(st, "network_technology_connected", "2G")? {
        return Ok(false);
    }
    if flag(st, "wifi_calling_enabled")? && flag(st, "wifi_calling_mms_over_wifi")? {
        return Ok(false);
    }
    if matches!(apn_attr(st, "mmsc_url")?, Val::None) {
        return Ok(false);
    }
    let apps = dev(st)?.f("app_statuses")?;
    let Some(messaging) = apps.as_dict().and_then(|a| a.get("messaging")) else {
        return Ok(false);
    };
    let perms = attr(messaging, "permissions")?;
    let storage = attr(perms, "storage")?;
    // `storage and sms`: the first falsy operand, or the last.
    let ok = if ops::truthy(storage) {
        ops::truthy(attr(perms, "sms")?)
    } else {
        false
    };
    Ok(ok)
}

/// `_toggle_airplane_mode`: the new state.
fn toggle_airplane(st: &mut TelecomState) -> PyResult<bool> {
    let was_on = flag(st, "airplane_mode")?;
    set(st, "airplane_mode", Val::Bool(!was_on))?;
    let drop_wifi = |st: &mut TelecomState| -> PyResult<()> {
        set(st, "wifi_connected", Val::Bool(false))?;
        set(st, "wifi_ssid", Val::None)?;
        set(st, "wifi_signal_strength", Val::str("none"))
    };
    if was_on {
        set(st, "network_connection_status", Val::str("searching"))?;
        if flag(st, "wifi_enabled")? {
            drop_wifi(st)?;
        }
    } else {
        drop_wifi(st)?;
        if flag(st, "vpn_connected")? {
            vpn_disconnect(st)?;
        }
    }
    network_search(st)?;
    flag(st, "airplane_mode")
}

/// Flips a boolean device field and returns its new value.
fn toggle_field(st: &mut TelecomState, field: &str, search: bool) -> PyResult<bool> {
    let new = !flag(st, field)?;
    set(st, field, Val::Bool(new))?;
    if search {
        network_search(st)?;
    }
    Ok(new)
}

/// τ²'s `turn_*_on/off` set-up helpers: toggle, and toggle back when the
/// toggle went the wrong way (each toggle with its side effects, as there).
fn toggle_to(st: &mut TelecomState, field: &str, search: bool, want: bool) -> PyResult<()> {
    if toggle_field(st, field, search)? != want {
        toggle_field(st, field, search)?;
    }
    Ok(())
}

/// `_disconnect_vpn`.
fn vpn_disconnect(st: &mut TelecomState) -> PyResult<bool> {
    if !flag(st, "vpn_connected")? {
        return Ok(false);
    }
    set(st, "vpn_connected", Val::Bool(false))?;
    set(st, "vpn_details", Val::None)?;
    st.vpn_details_shared = false;
    Ok(true)
}

/// `_connect_vpn`: `None` when already connected.
fn vpn_connect(st: &mut TelecomState) -> PyResult<Option<bool>> {
    if flag(st, "vpn_connected")? {
        return Ok(None);
    }
    set(st, "vpn_connected", Val::Bool(true))?;
    let performance = if st.vpn_default_poor {
        "poor"
    } else {
        "excellent"
    };
    let details = Val::dict(Dict::from_pairs([
        ("server_address", Val::str("192.168.1.1")),
        ("protocol", Val::str("OpenVPN")),
        ("server_performance", Val::str(performance)),
    ]));
    set(st, "vpn_details", details)?;
    st.vpn_details_shared = true;
    Ok(Some(true))
}

/// `app_statuses.get(app_name)`: the app's status model, if installed.
fn app_status(st: &TelecomState, app_name: &Val) -> PyResult<Option<Val>> {
    let apps = dev(st)?.f("app_statuses")?;
    let Val::Dict(apps) = apps else {
        return Err(PyErr::attribute(apps, "get"));
    };
    Ok(match ops::as_key(app_name)? {
        Some(k) => apps.get(k).cloned(),
        None => None,
    })
}

/// The permissions a status grants, by field name, in declaration order.
fn granted(perms: &Val) -> PyResult<Vec<String>> {
    let Val::Dict(p) = perms else {
        return Err(PyErr::attribute(perms, "model_dump"));
    };
    Ok(p.iter()
        .filter(|(_, v)| ops::truthy(v))
        .map(|(k, _)| k.replace('_', " ").to_lowercase())
        .collect())
}

/// `str.lower()` of a value that must be a `str`.
fn lower(v: &Val) -> PyResult<String> {
    match v {
        Val::Str(s) => Ok(s.to_lowercase()),
        other => Err(PyErr::attribute(other, "lower")),
    }
}

/// `setattr(app_statuses[app].permissions, permission, value)`.
fn set_permission(st: &mut TelecomState, app: &str, permission: &str, value: bool) -> PyResult<()> {
    let apps = dev_mut(st)?.dm("app_statuses")?;
    let status = apps
        .get_mut(app)
        .and_then(Val::as_dict_mut)
        .ok_or_else(|| PyErr::internal("app status is not a model"))?;
    status
        .dm("permissions")?
        .insert(permission, Val::Bool(value));
    Ok(())
}

const PERMISSIONS: [&str; 4] = ["sms", "storage", "phone", "network"];

fn assertion_error() -> PyErr {
    PyErr::other("AssertionError", "")
}

// --------------------------------------------------------------- tools

fn check_status_bar(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    Ok(Ret::text(format!("Status Bar: {}", status_bar(st)?)))
}

fn yes_no(b: bool) -> &'static str {
    if b { "Yes" } else { "No" }
}

fn check_network_status(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let sim = value_of(&sim_status(st)?)?;
    let d = dev(st)?;
    let mut lines = vec![
        format!(
            "Airplane Mode: {}",
            on_off(ops::truthy(d.f("airplane_mode")?))
        ),
        format!("SIM Card Status: {sim}"),
        format!(
            "Cellular Connection: {}",
            value_of(d.f("network_connection_status")?)?
        ),
        format!(
            "Cellular Signal: {}",
            value_of(d.f("network_signal_strength")?)?
        ),
        format!(
            "Cellular Network Type: {}",
            value_of(d.f("network_technology_connected")?)?
        ),
        format!(
            "Mobile Data Enabled: {}",
            yes_no(ops::truthy(d.f("data_enabled")?))
        ),
        format!(
            "Data Roaming Enabled: {}",
            yes_no(ops::truthy(d.f("roaming_enabled")?))
        ),
        format!("Wi-Fi Radio: {}", on_off(ops::truthy(d.f("wifi_enabled")?))),
        format!(
            "Wi-Fi Connected: {}",
            yes_no(ops::truthy(d.f("wifi_connected")?))
        ),
    ];
    if ops::truthy(d.f("wifi_connected")?) {
        lines.push(format!(
            "Connected Wi-Fi Network: {}",
            ops::s(d.f("wifi_ssid")?)
        ));
    }
    Ok(Ret::text(lines.join("\n")))
}

fn check_network_mode_preference(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    Ok(Ret::text(format!(
        "Network Mode Preference: {}",
        value_of(dev(st)?.f("network_mode_preference")?)?
    )))
}

fn set_network_mode_preference(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let mode = &a[0];
    // A str must name a member (else nothing changes); anything else is
    // stored as given.
    let valid = match mode {
        Val::Str(s) if !NETWORK_MODE.contains(&&**s) => None,
        other => {
            set(st, "network_mode_preference", other.clone())?;
            network_search(st)?;
            Some(other.clone())
        }
    };
    match valid {
        None | Some(Val::None) => with_bar(
            st,
            &format!(
                "Failed to set network mode: '{}' is not a valid option. Please use one of: {}",
                ops::s(mode),
                NETWORK_MODE.join(", ")
            ),
        ),
        Some(v) => {
            let update = format!("Preferred Network Mode set to: {}", value_of(&v)?);
            with_bar(st, &update)
        }
    }
}

fn run_speed_test(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let (speed, desc) = speed_test(st)?;
    let Some(speed) = speed else {
        return Ok(Ret::text(format!("Speed test failed: {desc}.")));
    };
    let advice = match desc {
        "Very Poor" => "Connection is very slow. Basic web browsing might be difficult.",
        "Poor" => "Connection is slow. Web browsing may be sluggish, streaming difficult.",
        "Fair" => "Connection is okay for web browsing and some standard definition streaming.",
        "Good" => "Connection is good for most activities, including HD streaming.",
        _ => "Connection is very fast.",
    };
    Ok(Ret::text(format!(
        "Speed Test Result: {speed:.2} Mbps ({desc}). {advice}"
    )))
}

fn toggle_airplane_mode(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let on = toggle_airplane(st)?;
    with_bar(st, &format!("Airplane Mode is now {}.", on_off(on)))
}

fn check_sim_status(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let status = sim_status(st)?;
    Ok(Ret::text(match status.as_str() {
        Some("active") => "Your SIM card is active and working.".to_string(),
        Some("missing") => "No SIM card detected in the phone.".to_string(),
        Some("locked_pin") => "The SIM card is locked with a PIN code.".to_string(),
        Some("locked_puk") => "The SIM card is locked with a PUK code.".to_string(),
        _ => format!("Unknown SIM status: {}", value_of(&status)?),
    }))
}

fn reseat_sim_card(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    set(st, "sim_card_missing", Val::Bool(false))?;
    network_search(st)?;
    with_bar(st, "SIM card re-seated successfully.")
}

fn toggle_data(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let on = toggle_field(st, "data_enabled", true)?;
    with_bar(st, &format!("Mobile Data is now {}.", on_off(on)))
}

fn toggle_roaming(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let on = toggle_field(st, "roaming_enabled", true)?;
    with_bar(st, &format!("Data Roaming is now {}.", on_off(on)))
}

fn check_data_restriction_status(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    Ok(Ret::text(if flag(st, "data_saver_mode")? {
        "Data Saver mode is ON (limits data usage)."
    } else {
        "Data Saver mode is OFF."
    }))
}

fn toggle_data_saver_mode(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let on = toggle_field(st, "data_saver_mode", false)?;
    with_bar(st, &format!("Data Saver Mode is now {}.", on_off(on)))
}

fn check_apn_settings(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    // `active_apn_settings.model_copy(deep=True)` first.
    let settings = dev(st)?.f("active_apn_settings")?;
    if !matches!(settings, Val::Dict(_)) {
        return Err(PyErr::attribute(settings, "model_copy"));
    }
    let name = value_of(&apn_attr(st, "apn_name")?)?;
    let name = if name.is_empty() {
        "Not Set".to_string()
    } else {
        name
    };
    let url = apn_attr(st, "mmsc_url")?;
    let url = if ops::truthy(&url) {
        ops::s(&url)
    } else {
        "Not Set".to_string()
    };
    Ok(Ret::text(format!(
        "Current APN Name: {name}\nMMSC URL (for picture messages): {url}\n(These are technical settings, usually best left unchanged.)"
    )))
}

fn set_apn_settings(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let settings = match &a[0] {
        Val::Dict(d) => pydantic::construct(
            &APN_SETTINGS,
            d.iter().map(|(k, v)| (k, Input::Raw(v.clone()))).collect(),
        )?,
        other => other.clone(),
    };
    set(st, "active_apn_settings", settings.clone())?;
    let update = format!(
        "APN settings set to: {}",
        value_of(attr(&settings, "apn_name")?)?
    );
    network_search(st)?;
    with_bar(st, &update)
}

fn reset_apn_settings(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    set_apn_attr(st, "reset_at_reboot", Val::Bool(true))?;
    network_search(st)?;
    with_bar(st, "APN settings will reset at reboot.")
}

fn check_wifi_status(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let d = dev(st)?;
    if !ops::truthy(d.f("wifi_enabled")?) {
        return Ok(Ret::text("Wi-Fi is turned OFF."));
    }
    if ops::truthy(d.f("wifi_connected")?) {
        return Ok(Ret::text(format!(
            "Wi-Fi is ON and connected to '{}'. Signal strength: {}.",
            ops::s(d.f("wifi_ssid")?),
            value_of(d.f("wifi_signal_strength")?)?
        )));
    }
    Ok(Ret::text("Wi-Fi is ON but not connected to any network."))
}

fn toggle_wifi(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    if flag(st, "airplane_mode")? {
        return with_bar(
            st,
            "Cannot change Wi-Fi settings while Airplane Mode is ON.",
        );
    }
    let on = toggle_field(st, "wifi_enabled", false)?;
    if !on {
        set(st, "wifi_connected", Val::Bool(false))?;
        set(st, "wifi_ssid", Val::None)?;
        set(st, "wifi_signal_strength", Val::str("none"))?;
    }
    with_bar(st, &format!("Wi-Fi is now {}.", on_off(on)))
}

fn check_wifi_calling_status(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    Ok(Ret::text(format!(
        "Wi-Fi Calling is currently turned {}.",
        on_off(flag(st, "wifi_calling_enabled")?)
    )))
}

fn toggle_wifi_calling(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let on = toggle_field(st, "wifi_calling_enabled", false)?;
    with_bar(st, &format!("Wi-Fi Calling is now {}.", on_off(on)))
}

/// `str(vpn_details.model_dump())`: a dict repr whose enum shows as
/// `<PerformanceLevel.NAME: 'value'>`.
fn vpn_details_text(details: &Val) -> PyResult<String> {
    let d = details
        .as_dict()
        .ok_or_else(|| PyErr::attribute(details, "model_dump"))?;
    let perf = d.f("server_performance")?;
    let perf_text = match perf {
        Val::Str(v) => format!(
            "<PerformanceLevel.{}: {}>",
            v.to_uppercase(),
            ecdysis_pyemu::repr::repr(perf)
        ),
        other => ecdysis_pyemu::repr::repr(other),
    };
    Ok(format!(
        "{{'server_address': {}, 'protocol': {}, 'server_performance': {perf_text}}}",
        ecdysis_pyemu::repr::repr(d.f("server_address")?),
        ecdysis_pyemu::repr::repr(d.f("protocol")?),
    ))
}

fn check_vpn_status(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let d = dev(st)?;
    let connected = ops::truthy(d.f("vpn_connected")?);
    if connected {
        let details = d.f("vpn_details")?;
        if ops::truthy(details) {
            return Ok(Ret::text(format!(
                "VPN is ON and connected. Details: {}",
                vpn_details_text(details)?
            )));
        }
        return Ok(Ret::text(
            "VPN is ON and connected (no specific details available).",
        ));
    }
    if ops::truthy(d.f("vpn_enabled_setting")?) {
        return Ok(Ret::text(
            "VPN is turned ON in settings, but currently not connected.",
        ));
    }
    Ok(Ret::text("VPN is turned OFF."))
}

fn connect_vpn(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    match vpn_connect(st)? {
        None => Ok(Ret::text("VPN already connected.")),
        Some(_) => with_bar(st, "VPN connected successfully."),
    }
}

fn disconnect_vpn(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let done = vpn_disconnect(st)?;
    with_bar(
        st,
        if done {
            "VPN disconnected successfully."
        } else {
            "No active VPN connection to disconnect."
        },
    )
}

fn check_installed_apps(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let apps = dev(st)?.f("app_statuses")?;
    let names: Vec<&str> = match apps {
        Val::Dict(d) => d.keys().collect(),
        other => return Err(PyErr::attribute(other, "keys")),
    };
    Ok(Ret::text(format!(
        "The following apps are installed on the phone: {}",
        names.join(", ")
    )))
}

fn check_app_status(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let app_name = ops::s(&a[0]);
    let Some(status) = app_status(st, &a[0])? else {
        return Ok(Ret::text(format!(
            "App '{app_name}' not found on this phone."
        )));
    };
    let mut lines = vec![format!("Status for App: {app_name}")];
    let perms = granted(attr(&status, "permissions")?)?;
    if perms.is_empty() {
        lines.push(" - Permissions: None granted.".into());
    } else {
        lines.push(" - Permissions Granted:".into());
        lines.extend(perms.iter().map(|p| format!("   - {p}")));
    }
    Ok(Ret::text(lines.join("\n")))
}

fn check_app_permissions(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let app_name = ops::s(&a[0]);
    let Some(status) = app_status(st, &a[0])? else {
        return Ok(Ret::text(format!(
            "App '{app_name}' not found on this phone."
        )));
    };
    let perms = granted(attr(&status, "permissions")?)?;
    Ok(Ret::text(if perms.is_empty() {
        format!("App '{app_name}' currently has no permissions granted.")
    } else {
        format!("App '{app_name}' has permission for: {}.", perms.join(", "))
    }))
}

fn grant_app_permission(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let app_name = ops::s(&a[0]);
    let status = app_status(st, &a[0])?;
    let permission = lower(&a[1])?;
    let (ok, message) = match status {
        Some(_) if !PERMISSIONS.contains(&permission.as_str()) => (
            false,
            format!(
                "Permission '{permission}' not tracked for app '{app_name}', available permissions: ['sms', 'storage', 'phone', 'network']"
            ),
        ),
        Some(_) => {
            let key = a[0].as_str().unwrap_or_default().to_string();
            set_permission(st, &key, &permission, true)?;
            (
                true,
                format!("Permission '{permission}' granted to app '{app_name}'."),
            )
        }
        None => (
            false,
            format!("App '{app_name}' not found. Cannot grant permission."),
        ),
    };
    with_bar(
        st,
        &format!("{}{message}", if ok { "Success. " } else { "Error. " }),
    )
}

fn can_send_mms(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    Ok(Ret::text(if mms_ok(st)? {
        "Your messaging app can send MMS messages."
    } else {
        "Your messaging app cannot send MMS messages."
    }))
}

fn reboot_device(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let mut lines = Vec::new();
    if ops::truthy(&apn_attr(st, "reset_at_reboot")?) {
        lines.push("Resetting APN settings...");
        let fresh = pydantic::validate_model(&APN_SETTINGS, &Val::dict(Dict::new()))?;
        set(st, "active_apn_settings", fresh)?;
    }
    lines.push("Restarting network services...");
    set(st, "network_connection_status", Val::str("searching"))?;
    network_search(st)?;
    with_bar(st, &lines.join("\n"))
}

fn check_payment_request(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let req = sur(st)?.f("payment_request")?;
    if matches!(req, Val::None) {
        return Ok(Ret::text("No payment request has been made."));
    }
    Ok(Ret::text(format!(
        "You have a payment request for bill {} of {} USD.",
        ops::s(attr(req, "bill_id")?),
        ops::s(attr(req, "amount_due")?)
    )))
}

fn make_payment(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let req = sur(st)?.f("payment_request")?.clone();
    if matches!(req, Val::None) {
        return Ok(Ret::text("You do not have a payment request."));
    }
    let text = format!(
        "Payment of {} USD has been made for bill {}.",
        ops::s(attr(&req, "amount_due")?),
        ops::s(attr(&req, "bill_id")?)
    );
    sur_mut(st)?
        .dm("payment_request")?
        .insert("paid", Val::Bool(true));
    Ok(Ret::text(text))
}

// ------------------------------------------------------ plain methods

fn set_user_info(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let s = sur_mut(st)?;
    s.insert("name", a[0].clone());
    s.insert("phone_number", a[1].clone());
    Ok(Ret::None)
}

fn set_user_location(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    sur_mut(st)?.insert("is_abroad", a[0].clone());
    Ok(Ret::None)
}

fn turn_airplane_mode_on(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    if !toggle_airplane(st)? {
        toggle_airplane(st)?;
    }
    Ok(Ret::text("Airplane Mode is now ON."))
}

fn turn_airplane_mode_off(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    if toggle_airplane(st)? {
        toggle_airplane(st)?;
    }
    Ok(Ret::text("Airplane Mode is now OFF."))
}

fn unseat_sim_card(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    set(st, "sim_card_missing", Val::Bool(true))?;
    network_search(st)?;
    Ok(Ret::text("SIM card un-seated successfully."))
}

fn lock_sim_card(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let mode = &a[0];
    if ops::eq(mode, &Val::str("pin")) {
        set(st, "sim_card_status", Val::str("locked_pin"))?;
    } else if ops::eq(mode, &Val::str("puk")) {
        set(st, "sim_card_status", Val::str("locked_puk"))?;
    }
    network_search(st)?;
    Ok(Ret::text(format!(
        "SIM card locked successfully in {} mode.",
        ops::s(mode)
    )))
}

fn turn_data_on(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    set(st, "data_enabled", Val::Bool(true))?;
    Ok(Ret::text("Data connection restored."))
}

fn turn_data_off(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    toggle_to(st, "data_enabled", true, false)?;
    Ok(Ret::text("Data connection broken."))
}

fn turn_roaming_on(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    toggle_to(st, "roaming_enabled", true, true)?;
    Ok(Ret::text("Data Roaming is now ON."))
}

fn turn_roaming_off(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    toggle_to(st, "roaming_enabled", true, false)?;
    Ok(Ret::text("Data Roaming is now OFF."))
}

fn turn_data_saver_mode_on(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    toggle_to(st, "data_saver_mode", false, true)?;
    Ok(Ret::text("Data Saver Mode is now ON."))
}

fn turn_data_saver_mode_off(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    toggle_to(st, "data_saver_mode", false, false)?;
    Ok(Ret::text("Data Saver Mode is now OFF."))
}

fn break_apn_settings(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    set_apn_attr(st, "apn_name", Val::str("broken"))?;
    network_search(st)?;
    if !is(st, "network_connection_status", NO_SERVICE)? {
        return Err(assertion_error());
    }
    Ok(Ret::text(
        "APN settings broken. Please call reset_apn_settings() to fix.",
    ))
}

fn break_apn_mms_setting(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    set_apn_attr(st, "mmsc_url", Val::None)?;
    if mms_ok(st)? {
        return Err(assertion_error());
    }
    Ok(Ret::text(
        "APN MMS setting broken. Please call reset_apn_settings() to fix.",
    ))
}

fn set_wifi_calling(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let (enabled, mms) = (&a[0], &a[1]);
    if !ops::eq(dev(st)?.f("wifi_calling_enabled")?, enabled) {
        toggle_field(st, "wifi_calling_enabled", false)?;
    }
    let mut msg = format!("Wi-Fi Calling is now {}.", on_off(ops::truthy(enabled)));
    if !matches!(mms, Val::None) {
        set(st, "wifi_calling_mms_over_wifi", mms.clone())?;
        msg.push_str(&format!(
            "\nMMS over Wi-Fi is now {}.",
            on_off(ops::truthy(mms))
        ));
    }
    Ok(Ret::text(msg))
}

fn break_vpn(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    connect_vpn(st, &[])?;
    let details = dev(st)?.f("vpn_details")?.clone();
    if !matches!(details, Val::Dict(_)) {
        return Err(PyErr::attribute(&details, "server_performance"));
    }
    dev_mut(st)?
        .dm("vpn_details")?
        .insert("server_performance", Val::str("poor"));
    if st.vpn_details_shared {
        st.vpn_default_poor = true;
    }
    Ok(Ret::text("VPN connection broken."))
}

fn remove_app_permission(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let app_name = ops::s(&a[0]);
    let status = app_status(st, &a[0])?;
    let permission = lower(&a[1])?;
    let (ok, message) = match status {
        Some(_) if !PERMISSIONS.contains(&permission.as_str()) => (
            false,
            format!("Permission '{permission}' not tracked for app '{app_name}'."),
        ),
        Some(_) => {
            let key = a[0].as_str().unwrap_or_default().to_string();
            set_permission(st, &key, &permission, false)?;
            (
                true,
                format!("Permission '{permission}' removed from app '{app_name}'."),
            )
        }
        None => (
            false,
            format!("App '{app_name}' not found. Cannot remove permission."),
        ),
    };
    Ok(Ret::Scalar(Val::list(vec![
        Val::Bool(ok),
        Val::str(&message),
    ])))
}

fn simulate_network_search_fn(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    network_search(st)?;
    Ok(Ret::None)
}

fn equals(st: &TelecomState, field: &str, expected: &Val) -> PyResult<Ret> {
    Ok(Ret::Scalar(Val::Bool(ops::eq(
        dev(st)?.f(field)?,
        expected,
    ))))
}

fn assert_airplane_mode_status(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    equals(st, "airplane_mode", &a[0])
}

fn assert_service_status(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    // `NetworkStatus(expected_status)` raises for a non-member.
    let valid = matches!(a[0].as_str(), Some(s) if super::models::NETWORK_STATUS.contains(&s));
    if !valid {
        return Err(PyErr::value(format!(
            "{} is not a valid NetworkStatus",
            ecdysis_pyemu::repr::repr(&a[0])
        )));
    }
    equals(st, "network_connection_status", &a[0])
}

fn assert_mobile_data_status(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let working = Val::Bool(mobile_data_working(st)?);
    Ok(Ret::Scalar(Val::Bool(ops::eq(&working, &a[0]))))
}

fn assert_mobile_roaming_status(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    equals(st, "roaming_enabled", &a[0])
}

fn assert_mobile_data_saver_mode_status(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    equals(st, "data_saver_mode", &a[0])
}

fn assert_internet_speed(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let (speed, desc) = speed_test(st)?;
    // `speed or 0.0`
    let speed = Val::Float(speed.filter(|s| *s != 0.0).unwrap_or(0.0));
    let fast = ops::ge(&speed, &a[0])?;
    let ok = match &a[1] {
        Val::None => fast,
        expected => fast && desc.to_lowercase() == lower(expected)?,
    };
    Ok(Ret::Scalar(Val::Bool(ok)))
}

fn assert_internet_not_excellent(st: &mut TelecomState, _: &[Val]) -> PyResult<Ret> {
    let (_, desc) = speed_test(st)?;
    Ok(Ret::Scalar(Val::Bool(desc.to_lowercase() != "excellent")))
}

fn assert_can_send_mms(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let ok = Val::Bool(mms_ok(st)?);
    Ok(Ret::Scalar(Val::Bool(ops::eq(&ok, &a[0]))))
}

fn assert_mobile_data_usage_exceeded(st: &mut TelecomState, a: &[Val]) -> PyResult<Ret> {
    let v = sur(st)?.f("mobile_data_usage_exceeded")?.clone();
    Ok(Ret::Scalar(Val::Bool(ops::eq(&v, &a[0]))))
}
