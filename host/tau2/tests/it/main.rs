//! Integration tests of the environments through their public API (one
//! test binary; each module is one area).

mod telecom;
