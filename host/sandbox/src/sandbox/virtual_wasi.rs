//! Virtual, deterministic WASI: the clocks, randomness, filesystem and
//! sockets that language runtimes (CPython from `componentize-py`,
//! StarlingMonkey from `componentize-js`) import whether or not the harness
//! uses them, implemented so that they give nothing away and answer the same
//! on every run.
//!
//! - clocks: frozen at [`VIRTUAL_EPOCH_SECONDS`] (wall) and 0 (monotonic);
//!   they advance only when the guest sleeps, by exactly the time it asked
//!   for, and the sleep returns at once (a sleeping guest never holds a host
//!   thread, and its deadline keeps counting);
//! - randomness: SplitMix64 seeded from the episode's info ([`episode_seed`]),
//!   so the same episode gets the same bytes in every runtime;
//! - filesystem: no preopened directory, so no descriptor can ever exist;
//! - sockets and name lookup: every socket creation and lookup is refused
//!   with `access-denied` before anything touches the host's network stack.
//!
//! `wasi:io` and `wasi:cli` stay in [`super::sync_io`] and `engine`.
//! Why not wasmtime-wasi's own clocks and random with custom sources: its
//! sleeps are Tokio timers on the real clock, which would let a guest block
//! a host thread past its deadline (the epoch only interrupts wasm code).

use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::clocks::{monotonic_clock, wall_clock};
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::random::{insecure, insecure_seed, random};
use wasmtime_wasi::p2::bindings::sockets::network::{self, ErrorCode, IpAddress};
use wasmtime_wasi::p2::bindings::sockets::{ip_name_lookup, tcp_create_socket};
use wasmtime_wasi::p2::bindings::sync::sockets::udp_create_socket;
use wasmtime_wasi::p2::{
    DynPollable, Network, Pollable, SocketError, SocketResult, TcpSocket, UdpSocket,
};

/// Seconds since the Unix epoch that the virtual wall clock starts at
/// (2026-01-01T00:00:00Z): a plausible date, so date code in a guest does
/// not meet 1970 edge cases, and the same in every runtime.
pub const VIRTUAL_EPOCH_SECONDS: u64 = 1_767_225_600;

/// Most bytes one `get-random-bytes` call may ask for; more is a trap, not
/// a host allocation of the guest's choosing.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// Which WASI a harness is granted beyond `wasi:io` and `wasi:cli`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WasiProfile {
    /// Only `wasi:io` and `wasi:cli` (what a Rust guest's `std` needs); a
    /// component importing clocks, random, filesystem or sockets is refused
    /// at link time, naming the import.
    Minimal,
    /// Also the virtual clocks, randomness, filesystem and sockets of this
    /// module, which interpreted harnesses (Python, JavaScript) import. They
    /// grant no real capability, so this is the default.
    #[default]
    Virtual,
}

impl WasiProfile {
    /// The interface prefixes a component may import under this profile
    /// (besides the harness's own package).
    pub fn granted_prefixes(self) -> &'static [&'static str] {
        match self {
            WasiProfile::Minimal => &["wasi:io/", "wasi:cli/"],
            WasiProfile::Virtual => &[
                "wasi:io/",
                "wasi:cli/",
                "wasi:clocks/",
                "wasi:random/",
                "wasi:filesystem/",
                "wasi:sockets/",
            ],
        }
    }

    /// Whether an import named `name` (e.g. `wasi:clocks/wall-clock@0.2.9`)
    /// is granted; the harness package's own imports always are.
    pub fn grants(self, name: &str) -> bool {
        name.starts_with("ecdysis:harness/")
            || self.granted_prefixes().iter().any(|p| name.starts_with(p))
    }
}

impl std::fmt::Display for WasiProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WasiProfile::Minimal => "minimal",
            WasiProfile::Virtual => "virtual",
        })
    }
}

impl std::str::FromStr for WasiProfile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "minimal" => Ok(WasiProfile::Minimal),
            "virtual" => Ok(WasiProfile::Virtual),
            other => Err(format!(
                "unknown WASI profile `{other}` (expected `minimal` or `virtual`)"
            )),
        }
    }
}

/// The seed of an episode's virtual randomness: FNV-1a (64-bit) of
/// `domain`, a zero byte, and the decimal `max_steps` and `max_errors`
/// joined by a zero byte. Deliberately simple, so the Python and JS runtimes
/// compute the same value from the same episode info.
pub fn episode_seed(domain: &str, max_steps: u32, max_errors: u32) -> u64 {
    let text = format!("{domain}\0{max_steps}\0{max_errors}");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The per-episode state of the virtual interfaces.
#[derive(Debug, Clone)]
pub(crate) struct VirtualWasi {
    /// Nanoseconds the guest has slept; both clocks read it.
    elapsed_ns: u64,
    rng: ecdysis_sys::rng::SplitMix64,
    seed: u64,
}

impl VirtualWasi {
    pub(crate) fn new(seed: u64) -> Self {
        VirtualWasi {
            elapsed_ns: 0,
            rng: ecdysis_sys::rng::SplitMix64::new(seed),
            seed,
        }
    }

    fn bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        if len > MAX_RANDOM_BYTES {
            wasmtime::bail!(
                "the guest asked for {len} random bytes in one call (at most {MAX_RANDOM_BYTES})"
            );
        }
        let mut out = Vec::with_capacity(len as usize);
        while (out.len() as u64) < len {
            let word = self.rng.next_u64().to_le_bytes();
            let take = ((len as usize) - out.len()).min(8);
            out.extend_from_slice(&word[..take]);
        }
        Ok(out)
    }
}

/// The guest's view of the virtual interfaces: its state and its table.
pub(crate) struct Virt<'a> {
    pub(crate) state: &'a mut VirtualWasi,
    pub(crate) table: &'a mut ResourceTable,
}

/// [`HasData`] marker for linking [`Virt`].
pub(crate) struct HasVirt;

impl HasData for HasVirt {
    type Data<'a> = Virt<'a>;
}

/// A sleep that has already ended: the virtual clock moved when it was made.
struct Elapsed;

#[wasmtime_wasi::async_trait]
impl Pollable for Elapsed {
    async fn ready(&mut self) {}
}

impl Virt<'_> {
    fn sleep(&mut self, ns: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.state.elapsed_ns = self.state.elapsed_ns.saturating_add(ns);
        let done = self.table.push(Elapsed)?;
        wasmtime_wasi::p2::subscribe(self.table, done)
    }
}

impl monotonic_clock::Host for Virt<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(self.state.elapsed_ns)
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(1)
    }

    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let wait = when.saturating_sub(self.state.elapsed_ns);
        self.sleep(wait)
    }

    fn subscribe_duration(
        &mut self,
        duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.sleep(duration)
    }
}

impl wall_clock::Host for Virt<'_> {
    fn now(&mut self) -> wasmtime::Result<wall_clock::Datetime> {
        let ns = self.state.elapsed_ns;
        Ok(wall_clock::Datetime {
            seconds: VIRTUAL_EPOCH_SECONDS + ns / 1_000_000_000,
            nanoseconds: (ns % 1_000_000_000) as u32,
        })
    }

    fn resolution(&mut self) -> wasmtime::Result<wall_clock::Datetime> {
        Ok(wall_clock::Datetime {
            seconds: 0,
            nanoseconds: 1,
        })
    }
}

impl random::Host for Virt<'_> {
    fn get_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.state.bytes(len)
    }

    fn get_random_u64(&mut self) -> wasmtime::Result<u64> {
        Ok(self.state.rng.next_u64())
    }
}

impl insecure::Host for Virt<'_> {
    fn get_insecure_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.state.bytes(len)
    }

    fn get_insecure_random_u64(&mut self) -> wasmtime::Result<u64> {
        Ok(self.state.rng.next_u64())
    }
}

impl insecure_seed::Host for Virt<'_> {
    fn insecure_seed(&mut self) -> wasmtime::Result<(u64, u64)> {
        Ok((self.state.seed, ecdysis_sys::rng::mix(self.state.seed)))
    }
}

impl preopens::Host for Virt<'_> {
    fn get_directories(
        &mut self,
    ) -> wasmtime::Result<Vec<(Resource<wasmtime_wasi::filesystem::Descriptor>, String)>> {
        Ok(Vec::new())
    }
}

// Needed as the socket interfaces' supertrait; the linked `network` is
// wasmtime-wasi's, so these only convert the refusals above.
impl network::Host for Virt<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        error.downcast()
    }

    fn network_error_code(
        &mut self,
        _err: Resource<wasmtime_wasi::p2::bindings::io::error::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        Ok(None)
    }
}

impl network::HostNetwork for Virt<'_> {
    fn drop(&mut self, this: Resource<Network>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl tcp_create_socket::Host for Virt<'_> {
    fn create_tcp_socket(
        &mut self,
        _family: wasmtime_wasi::p2::bindings::sockets::network::IpAddressFamily,
    ) -> SocketResult<Resource<TcpSocket>> {
        Err(ErrorCode::AccessDenied.into())
    }
}

impl udp_create_socket::Host for Virt<'_> {
    fn create_udp_socket(
        &mut self,
        _family: wasmtime_wasi::p2::bindings::sockets::network::IpAddressFamily,
    ) -> SocketResult<Resource<UdpSocket>> {
        Err(ErrorCode::AccessDenied.into())
    }
}

impl ip_name_lookup::Host for Virt<'_> {
    fn resolve_addresses(
        &mut self,
        _network: Resource<Network>,
        _name: String,
    ) -> SocketResult<Resource<ip_name_lookup::ResolveAddressStream>> {
        Err(ErrorCode::AccessDenied.into())
    }
}

// No lookup is ever started, so no stream exists for these to act on; a
// forged handle fails the table lookup before any of them runs.
impl ip_name_lookup::HostResolveAddressStream for Virt<'_> {
    fn resolve_next_address(
        &mut self,
        _stream: Resource<ip_name_lookup::ResolveAddressStream>,
    ) -> SocketResult<Option<IpAddress>> {
        Err(ErrorCode::AccessDenied.into())
    }

    fn subscribe(
        &mut self,
        _stream: Resource<ip_name_lookup::ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        wasmtime::bail!("no name lookup is granted")
    }

    fn drop(
        &mut self,
        stream: Resource<ip_name_lookup::ResolveAddressStream>,
    ) -> wasmtime::Result<()> {
        self.table.delete(stream)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_fnv1a_of_the_episode_info() {
        // "a" is FNV-1a's first published test vector.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in b"a" {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        assert_eq!(h, 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            episode_seed("tau2/retail", 30, 10),
            episode_seed("tau2/retail", 30, 10)
        );
        assert_ne!(
            episode_seed("tau2/retail", 30, 10),
            episode_seed("tau2/retail", 31, 10)
        );
    }

    /// The values the Python and JS runtimes' tests assert too
    /// (`runtimes/python/tests/test_virtual_wasi.py`,
    /// `runtimes/js/test/virtual-wasi.test.mjs`): the three agree.
    #[test]
    fn the_cross_runtime_vector_holds() {
        let seed = episode_seed("tau2/retail", 30, 10);
        assert_eq!(seed, 0xb8c0_dfcb_e7b3_0f65);
        let bytes = VirtualWasi::new(seed).bytes(12).unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "387d7f4dfd5fcadefaaddb5c");
    }

    #[test]
    fn random_bytes_are_the_seeded_stream_and_capped() {
        let mut a = VirtualWasi::new(7);
        let mut b = VirtualWasi::new(7);
        assert_eq!(a.bytes(13).unwrap(), b.bytes(13).unwrap());
        assert_eq!(a.bytes(0).unwrap(), Vec::<u8>::new());
        assert_ne!(
            VirtualWasi::new(8).bytes(8).unwrap(),
            VirtualWasi::new(7).bytes(8).unwrap()
        );
        assert!(a.bytes(MAX_RANDOM_BYTES + 1).is_err());
        assert_eq!(
            a.bytes(MAX_RANDOM_BYTES).unwrap().len() as u64,
            MAX_RANDOM_BYTES
        );
    }

    #[test]
    fn profiles_grant_by_prefix() {
        assert!(WasiProfile::Minimal.grants("wasi:cli/stderr@0.2.9"));
        assert!(!WasiProfile::Minimal.grants("wasi:clocks/wall-clock@0.2.9"));
        assert!(WasiProfile::Virtual.grants("wasi:sockets/tcp@0.2.9"));
        assert!(!WasiProfile::Virtual.grants("wasi:http/outgoing-handler@0.2.9"));
        assert!(WasiProfile::Minimal.grants("ecdysis:harness/env-view@0.1.0"));
        assert_eq!("virtual".parse::<WasiProfile>(), Ok(WasiProfile::Virtual));
        assert!(
            "full"
                .parse::<WasiProfile>()
                .unwrap_err()
                .contains("`full`")
        );
    }
}
