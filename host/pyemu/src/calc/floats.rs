//! Float and complex arithmetic as CPython does it (`float_floor_div`,
//! `float_pow`, `_Py_c_quot`, `_Py_c_pow`), errors included.

use super::super::{PyErr, PyResult};
use super::eval::V;

/// CPython's `float_floor_div` (via `float_divmod`).
pub(super) fn float_floordiv(vx: f64, wx: f64) -> PyResult<f64> {
    if wx == 0.0 {
        return Err(PyErr::other(
            "ZeroDivisionError",
            "float floor division by zero",
        ));
    }
    let mut m = vx % wx;
    let mut div = (vx - m) / wx;
    if m != 0.0 {
        if (wx < 0.0) != (m < 0.0) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = 0.0f64.copysign(wx);
    }
    let _ = m;
    if div != 0.0 {
        let mut floordiv = div.floor();
        if div - floordiv > 0.5 {
            floordiv += 1.0;
        }
        Ok(floordiv)
    } else {
        Ok(0.0f64.copysign(vx / wx))
    }
}

fn is_odd_integer(x: f64) -> bool {
    x.is_finite() && x.fract() == 0.0 && (x % 2.0).abs() == 1.0
}

/// CPython's `float_pow`.
pub(super) fn float_pow(iv: f64, iw: f64) -> PyResult<V> {
    if iw == 0.0 {
        return Ok(V::Float(1.0));
    }
    if iv.is_nan() {
        return Ok(V::Float(iv));
    }
    if iw.is_nan() {
        return Ok(V::Float(if iv == 1.0 { 1.0 } else { iw }));
    }
    if iw.is_infinite() {
        let a = iv.abs();
        return Ok(V::Float(if a == 1.0 {
            1.0
        } else if (iw > 0.0) == (a > 1.0) {
            iw.abs()
        } else {
            0.0
        }));
    }
    if iv.is_infinite() {
        let odd = is_odd_integer(iw);
        return Ok(V::Float(if iw > 0.0 {
            if odd { iv } else { iv.abs() }
        } else if odd {
            0.0f64.copysign(iv)
        } else {
            0.0
        }));
    }
    if iv == 0.0 {
        let odd = is_odd_integer(iw);
        if iw < 0.0 {
            return Err(PyErr::other(
                "ZeroDivisionError",
                "0.0 cannot be raised to a negative power",
            ));
        }
        return Ok(V::Float(if odd { iv } else { 0.0 }));
    }
    let mut base = iv;
    let mut negate = false;
    if iv < 0.0 {
        if iw != iw.floor() {
            return complex_pow(iv, 0.0, iw, 0.0);
        }
        base = -iv;
        negate = is_odd_integer(iw);
    }
    if base == 1.0 {
        return Ok(V::Float(if negate { -1.0 } else { 1.0 }));
    }
    let mut ix = base.powf(iw);
    if ix.is_infinite() {
        return Err(PyErr::other(
            "OverflowError",
            "(34, 'Numerical result out of range')",
        ));
    }
    if negate {
        ix = -ix;
    }
    Ok(V::Float(ix))
}

pub(super) fn complex_div(ar: f64, ai: f64, br: f64, bi: f64) -> PyResult<V> {
    if br == 0.0 && bi == 0.0 {
        return Err(PyErr::other(
            "ZeroDivisionError",
            "complex division by zero",
        ));
    }
    // CPython's _Py_c_quot (Smith's algorithm).
    let (abs_br, abs_bi) = (br.abs(), bi.abs());
    if abs_br >= abs_bi {
        let ratio = bi / br;
        let denom = br + bi * ratio;
        Ok(V::Complex(
            (ar + ai * ratio) / denom,
            (ai - ar * ratio) / denom,
        ))
    } else {
        let ratio = br / bi;
        let denom = br * ratio + bi;
        Ok(V::Complex(
            (ar * ratio + ai) / denom,
            (ai * ratio - ar) / denom,
        ))
    }
}

/// CPython's `_Py_c_pow` (the exponent is never an exact small integer
/// here for the cases that reach it from `float_pow`).
pub(super) fn complex_pow(ar: f64, ai: f64, br: f64, bi: f64) -> PyResult<V> {
    if br == 0.0 && bi == 0.0 {
        return Ok(V::Complex(1.0, 0.0));
    }
    if ar == 0.0 && ai == 0.0 {
        if bi != 0.0 || br < 0.0 {
            return Err(PyErr::other(
                "ZeroDivisionError",
                "0.0 to a negative or complex power",
            ));
        }
        return Ok(V::Complex(0.0, 0.0));
    }
    let vabs = ar.hypot(ai);
    let mut len = vabs.powf(br);
    let at = ai.atan2(ar);
    let mut phase = at * br;
    if bi != 0.0 {
        len /= (at * bi).exp();
        phase += bi * vabs.ln();
    }
    Ok(V::Complex(len * phase.cos(), len * phase.sin()))
}
