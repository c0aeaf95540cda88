//! `proxy`: the harness in front of any agent's model, as an
//! OpenAI-compatible endpoint (the library is `ecdysis-proxy`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_proxy::records::{ConversationLog, Records};
use ecdysis_proxy::{DEFAULT_DOMAIN, Proxy, ProxySettings};
use ecdysis_sandbox::sandbox::{FailurePolicy, LoadedHarness, Sandbox};
use ecdysis_sandbox::store::ComponentStore;

use super::limits::LimitArgs;
use super::run::clip;

/// The flags of `proxy`.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// The harness: a stored hash (or a unique prefix of one), a .wasm
    /// file, a guest crate directory or an exported harness directory.
    #[arg(long)]
    pub harness: String,
    /// The upstream's OpenAI-compatible base URL, e.g.
    /// `http://127.0.0.1:8080/v1` (the proxy posts to
    /// `<upstream>/chat/completions` and forwards `GET <upstream>/models`).
    #[arg(long)]
    pub upstream: String,
    /// The address to listen on. Port 0 picks a free port (printed on
    /// stderr).
    #[arg(long, default_value = "127.0.0.1:8788")]
    pub listen: SocketAddr,
    /// The episodes' domain, as the harness is told it; the default names
    /// no benchmark, so only the harness's generic rules apply.
    #[arg(long, default_value = DEFAULT_DOMAIN)]
    pub domain: String,
    /// The environment variable holding the upstream's API key, sent as
    /// `Authorization: Bearer`. A client's own key is never forwarded.
    #[arg(long, value_name = "VAR")]
    pub upstream_api_key_env: Option<String>,
    /// A file of client keys, one a line (blank lines and lines starting
    /// with `#` are skipped): a client must send one as `Authorization:
    /// Bearer <key>` (else 401, type `invalid_api_key`). Without it every
    /// client that can reach the address is served.
    #[arg(long, value_name = "FILE")]
    pub api_keys: Option<std::path::PathBuf>,
    /// Append each answered request (the hook calls of its live turn,
    /// retried replies, upstream tokens) as a JSON line to
    /// DIR/<conversation>.jsonl, which outlives the process. Without it the
    /// records live in memory only (GET /ecdysis/conversations/<id>).
    #[arg(long, value_name = "DIR")]
    pub records: Option<std::path::PathBuf>,
    /// A JSON price table (USD per million tokens, by the requests'
    /// `model`) merged over the embedded one (`sim:*` at zero, no vendor
    /// prices), for the usage ledger (GET /ecdysis/usage; with --records,
    /// DIR/calls.ledger.jsonl).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<std::path::PathBuf>,
    /// Stop asking the upstream once its calls would cost more than USD in
    /// total (with --records, earlier processes' calls on DIR count): a
    /// request that could cross it is answered 429 `insufficient_quota`
    /// before it is sent, and one naming a model the price table does not
    /// price, 400 `model_not_priced`.
    #[arg(long, value_name = "USD")]
    pub max_usd: Option<f64>,
    /// Largest request body a client may send, in KiB (larger: 413).
    #[arg(long, default_value_t = 8192)]
    pub max_request_kib: usize,
    /// Requests served at once (more: 429 with type `proxy_busy`).
    #[arg(long, default_value_t = 64)]
    pub max_conversations: usize,
    /// Conversations whose episode is kept warm in memory (least recently
    /// used dropped first); a conversation that is not warm is rebuilt by
    /// replaying the hooks over its history.
    #[arg(long, default_value_t = 256)]
    pub warm_episodes: usize,
    /// Times one request asks the upstream again after the harness blocked
    /// its reply.
    #[arg(long, default_value_t = 3)]
    pub max_retries: u32,
    /// Seconds a connection may take to send each request's head (longer:
    /// the connection is closed).
    #[arg(long, default_value_t = 30)]
    pub header_timeout_secs: u64,
    /// Connections open at once; more are closed as they arrive.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds one upstream request may take (longer: 504).
    #[arg(long, default_value_t = 300)]
    pub upstream_timeout_secs: u64,
    /// The episodes' step limit, as the harness is told it.
    #[arg(long, default_value_t = 200)]
    pub max_steps: u32,
    /// The episodes' tool-error limit, as the harness is told it.
    #[arg(long, default_value_t = 50)]
    pub max_errors: u32,
    /// What a failing hook does: fail-closed (the request is answered 500
    /// with type `harness_error`) or fail-open (the hook's neutral answer:
    /// the reply goes through unchanged).
    #[arg(long, default_value = "fail-closed")]
    pub policy: FailurePolicy,
    /// Grant the harness's env view an environment: per conversation, a
    /// mirror of --domain's environment (a benchmark domain: tau2/retail,
    /// …, opened with --data) started from its pristine state, on which
    /// the proxy runs every call the client's history shows answered, in
    /// order. The view reads the mirror, so a gate can check facts (an
    /// order's status). The first result the mirror does not reproduce
    /// (the client's environment started elsewhere) detaches it for the
    /// rest of the conversation; the records name the message. Without
    /// it, no environment is attached.
    #[arg(long)]
    pub env_mirror: bool,
    #[command(flatten)]
    pub data: super::env::DataArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// Load `harness` as `proxy --harness` names it (a stored hash or prefix, a
/// .wasm file, a guest crate directory or an exported harness directory),
/// for a proxy: also what `bench --proxy` measures.
pub fn load_harness(
    harness: &str,
    store: &ComponentStore,
    limits: ecdysis_sandbox::sandbox::Limits,
    quiet: bool,
) -> Result<(ecdysis_sandbox::store::Manifest, LoadedHarness)> {
    let source = match super::export::exported(harness)? {
        Some((wasm, _)) => wasm.to_string_lossy().into_owned(),
        None => harness.to_string(),
    };
    let manifest = store
        .obtain(&source, quiet)
        .with_context(|| format!("loading harness `{harness}`"))?;
    // Warm episodes hold their instances between requests, so a fixed pool
    // sized by the requests in flight could run dry: instances are
    // allocated on demand.
    let sandbox = Sandbox::new(limits)?;
    let (loaded, _) = store.load(&sandbox, &manifest.hash)?;
    Ok((manifest, loaded))
}

/// Load the harness, bind, and serve until Ctrl-C.
pub async fn proxy(args: ProxyArgs, store: &ComponentStore, quiet: bool) -> Result<()> {
    if args.max_connections == 0 || args.header_timeout_secs == 0 {
        bail!("--max-connections and --header-timeout-secs must be at least 1");
    }
    if args.max_conversations == 0 {
        bail!("--max-conversations 0 would refuse every request; give at least 1");
    }
    if let Some(m) = args.max_usd
        && !(m.is_finite() && m > 0.0)
    {
        bail!("--max-usd must be a positive number of dollars, got {m}");
    }
    let mut prices = ecdysis_model::PriceTable::embedded_default();
    if let Some(path) = &args.prices {
        prices = prices.merged(
            ecdysis_model::PriceTable::load(path)
                .with_context(|| format!("--prices {}", path.display()))?,
        );
    }
    let env_mirror = if args.env_mirror {
        if args.domain == DEFAULT_DOMAIN {
            bail!(
                "--env-mirror needs --domain naming a benchmark domain (tau2/retail, tau2/airline, …) whose environment the proxy mirrors"
            );
        }
        let domain = args
            .data
            .open(&args.domain)
            .with_context(|| format!("--env-mirror: opening --domain {}", args.domain))?;
        Some(ecdysis_proxy::EnvGrant(domain))
    } else {
        None
    };
    let (manifest, loaded) = load_harness(&args.harness, store, args.limits.limits()?, quiet)?;
    let upstream_api_key = match &args.upstream_api_key_env {
        Some(var) => Some(
            std::env::var(var)
                .with_context(|| format!("--upstream-api-key-env: ${var} is not set"))?,
        ),
        None => None,
    };
    let api_keys = match &args.api_keys {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --api-keys {}", path.display()))?;
            let keys: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect();
            if keys.is_empty() {
                bail!("--api-keys {} holds no key", path.display());
            }
            Some(keys)
        }
        None => None,
    };
    let settings = ProxySettings {
        upstream: args.upstream.clone(),
        upstream_api_key,
        domain: args.domain.clone(),
        max_steps: args.max_steps,
        max_errors: args.max_errors,
        max_request_bytes: args.max_request_kib << 10,
        max_conversations: args.max_conversations,
        warm_episodes: args.warm_episodes,
        max_retries: args.max_retries,
        upstream_timeout: Duration::from_secs(args.upstream_timeout_secs),
        policy: args.policy,
        api_keys,
        header_timeout: Duration::from_secs(args.header_timeout_secs),
        max_connections: args.max_connections,
        records_dir: args.records.clone(),
        harness: Some(manifest.hash.to_string()),
        prices,
        max_usd: args.max_usd,
        env_mirror,
    };
    let proxy = Proxy::new(loaded, settings)?;
    let ledger_view = proxy.clone();
    let hash = manifest.hash.short().to_string();
    let upstream = args.upstream.clone();
    ecdysis_proxy::listen(
        proxy,
        args.listen,
        move |addr| {
            // Always printed, even under --quiet: a caller that asked for
            // port 0 reads the address here.
            eprintln!("proxy listening on http://{addr}/v1 (harness {hash}, upstream {upstream})");
        },
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    )
    .await
    .with_context(|| format!("serving on {}", args.listen))?;
    if !quiet {
        eprintln!(
            "proxy stopped: {}",
            ecdysis_proxy::ledger::spend_sentence(&ledger_view.usage())
        );
    }
    Ok(())
}

/// `show <records-dir>`: the proxy's conversations, or with `conversation`
/// (an id or a unique prefix of one) that conversation's requests and hook
/// calls, `>>` marking interventions.
pub fn show_records(dir: &std::path::Path, conversation: Option<&str>) -> Result<()> {
    let records = ecdysis_proxy::records::read_dir(dir)
        .with_context(|| format!("reading the proxy's records {}", dir.display()))?;
    match conversation {
        None => print!("{}", render_records(&records)),
        Some(id) => {
            let matching: Vec<&ConversationLog> = records
                .conversations
                .iter()
                .filter(|c| c.id.starts_with(id))
                .collect();
            match matching.as_slice() {
                [c] => print!("{}", render_conversation(c)),
                [] => bail!("no conversation `{id}` in {}", dir.display()),
                many => bail!(
                    "`{id}` is the start of {} conversations in {}; give more of it",
                    many.len(),
                    dir.display()
                ),
            }
        }
    }
    Ok(())
}

/// The records' totals and one line per conversation.
pub fn render_records(records: &Records) -> String {
    let m = &records.manifest;
    let t = records.totals();
    let mut out = format!(
        "proxy records {}: harness {}, domain {}, upstream {}\n",
        records.dir.display(),
        m.harness.as_deref().unwrap_or("(not recorded)"),
        m.domain,
        m.upstream
    );
    let limit = m
        .max_usd
        .map_or_else(String::new, |l| format!(" (limit ${l:.4})"));
    out += &format!(
        "ledger: {}{limit}\n",
        ecdysis_proxy::ledger::spend_sentence(&records.ledger())
    );
    out += &format!(
        "{} conversations, {} requests ({} replayed), {} refused replies asked again ({} requests out of tries), {} upstream completions, {} prompt + {} completion tokens, {} hook calls, replays included ({} interventions)\n",
        t.conversations,
        t.requests,
        t.replayed,
        t.refused,
        t.exhausted,
        t.upstream,
        t.prompt_tokens,
        t.completion_tokens,
        t.hooks,
        t.interventions,
    );
    out += "\nconversation                      requests  replayed  refused  upstream  hooks  interventions\n";
    for c in &records.conversations {
        let n = c.counts();
        out += &format!(
            "{:<33} {:>8}  {:>8}  {:>7}  {:>8}  {:>5}  {:>13}\n",
            c.id, n.requests, n.replayed, n.refused, n.upstream, n.hooks, n.interventions
        );
    }
    out
}

/// One conversation: each request, the replies refused in it, and the hook
/// calls of its live turn (`>>`: the hook intervened).
pub fn render_conversation(c: &ConversationLog) -> String {
    let mut out = format!(
        "conversation {} ({}): {} requests, {} interventions\n",
        c.id,
        c.file.display(),
        c.requests.len(),
        c.counts().interventions
    );
    for (line, r) in c.requests.iter().enumerate() {
        out += &format!(
            "request {} (line {}){}: {} upstream completions, {} + {} tokens{}{}\n",
            r.request,
            line + 1,
            if r.replayed {
                format!(
                    ", replayed (its first {} hook calls rebuilt the episode)",
                    r.replayed_hooks
                )
            } else {
                String::new()
            },
            r.upstream_requests,
            r.prompt_tokens,
            r.completion_tokens,
            r.usd.map_or_else(String::new, |usd| format!(", ${usd:.4}")),
            if r.exhausted { ", out of tries" } else { "" }
        );
        for (k, retry) in r.retries.iter().enumerate() {
            out += &format!(
                "    >> refused reply {}: {}\n",
                k + 1,
                clip(&retry.feedback.join(" | "), 300)
            );
        }
        for h in &r.hooks {
            let mark = if h.intervened { ">>" } else { "  " };
            let failed = h
                .error
                .as_ref()
                .map(|e| format!(" (failed, {}: {})", e.kind, clip(&e.message, 120)))
                .unwrap_or_default();
            out += &format!(
                "  {mark} step {:>3} {:<9} {}{failed}\n",
                h.step,
                h.hook,
                clip(&h.decision.to_string(), 200)
            );
        }
    }
    out
}
