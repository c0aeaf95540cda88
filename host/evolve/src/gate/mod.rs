//! The gate stage: whether a built candidate replaces the incumbent. The
//! gold-free [`screen`] can only reject; the acceptance rule ([`accept`])
//! compares the candidate's training result with the incumbent's; the
//! racing gate ([`race`]) stops an evaluation once that decision cannot
//! change; [`power`] says beforehand what gain the gate could detect.

pub mod accept;
pub mod power;
pub mod race;
pub mod screen;
