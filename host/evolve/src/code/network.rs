//! Which network a jailed external coder gets.
//!
//! The coder is untrusted: on the host's network it could reach every
//! local service (a database, another tenant's server, the cloud metadata
//! address) and any host on the internet. So the default is the narrowest
//! network that still lets it work:
//!
//! - its model endpoint only, when the endpoint is known: given with
//!   `--coder-endpoint`, else derived from a base URL the operator gave for
//!   it (`--coder-base-url`, a `*_BASE_URL`/`*_API_BASE` variable passed
//!   with `--coder-env`, else the roles' base URL): the egress proxy
//!   ([`ecdysis_sys::egress`]) forwards TCP to it and nothing else;
//! - otherwise no network at all.
//!
//! Sharing the host's network is an explicit opt-in (`--coder-network
//! host`), recorded in `config.json` like every other mode.

use serde::{Deserialize, Serialize};

use ecdysis_sys::egress::{BadEndpoint, Endpoint};

/// What the operator asked for (`--coder-network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkChoice {
    /// Its endpoint when known, else none.
    #[default]
    Auto,
    /// No network.
    None,
    /// Its endpoint, which must be known.
    Endpoint,
    /// The host's whole network (unsafe: every local service and host).
    Host,
}

impl NetworkChoice {
    /// The flag value that names it.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkChoice::Auto => "auto",
            NetworkChoice::None => "none",
            NetworkChoice::Endpoint => "endpoint",
            NetworkChoice::Host => "host",
        }
    }
}

impl std::str::FromStr for NetworkChoice {
    type Err = NetworkError;

    fn from_str(s: &str) -> Result<Self, NetworkError> {
        Ok(match s {
            "auto" => NetworkChoice::Auto,
            "none" => NetworkChoice::None,
            "endpoint" => NetworkChoice::Endpoint,
            "host" => NetworkChoice::Host,
            other => return Err(NetworkError::UnknownMode(other.to_string())),
        })
    }
}

/// The network a coder's jail gets. Recorded in `config.json` as text:
/// `none`, `endpoint HOST:PORT[,…]` or `host`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum CoderNetwork {
    /// A loopback of its own, nothing else.
    #[default]
    None,
    /// A network of its own reaching these endpoints only, through the
    /// egress proxy.
    Endpoints(Vec<Endpoint>),
    /// The host's network (the operator's explicit `--coder-network host`).
    Host,
}

impl CoderNetwork {
    /// A network reaching these endpoints (`HOST:PORT` or `http(s)://`
    /// URLs), refusing the first that is neither.
    pub fn endpoints<S: AsRef<str>>(
        texts: impl IntoIterator<Item = S>,
    ) -> Result<Self, BadEndpoint> {
        let list = texts
            .into_iter()
            .map(|t| t.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(CoderNetwork::Endpoints(list))
    }
}

impl std::fmt::Display for CoderNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoderNetwork::None => f.write_str("none"),
            CoderNetwork::Host => f.write_str("host"),
            CoderNetwork::Endpoints(list) => {
                f.write_str("endpoint ")?;
                for (i, e) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
        }
    }
}

/// A recorded network text that is none of the three forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("coder network `{0}`: expected `none`, `host` or `endpoint HOST:PORT[,...]`")]
pub struct BadCoderNetwork(pub String);

impl std::str::FromStr for CoderNetwork {
    type Err = BadCoderNetwork;

    fn from_str(text: &str) -> Result<Self, BadCoderNetwork> {
        let bad = || BadCoderNetwork(text.to_string());
        match text {
            "none" => Ok(CoderNetwork::None),
            "host" => Ok(CoderNetwork::Host),
            _ => {
                let list = text.strip_prefix("endpoint ").ok_or_else(bad)?;
                CoderNetwork::endpoints(list.split(',')).map_err(|_| bad())
            }
        }
    }
}

impl From<CoderNetwork> for String {
    fn from(network: CoderNetwork) -> String {
        network.to_string()
    }
}

impl TryFrom<String> for CoderNetwork {
    type Error = BadCoderNetwork;

    fn try_from(text: String) -> Result<Self, BadCoderNetwork> {
        text.parse()
    }
}

/// A network configuration that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// `--coder-network` has another value.
    #[error("--coder-network `{0}`: expected auto, none, endpoint or host")]
    UnknownMode(String),
    /// Endpoints were given together with a mode that contradicts them.
    #[error(
        "--coder-endpoint {endpoints} limits the coder to its endpoint, but --coder-network {mode} \
         asks for {what}: give one of them"
    )]
    Contradiction {
        /// The endpoints given.
        endpoints: String,
        /// The mode given.
        mode: &'static str,
        /// What that mode means.
        what: &'static str,
    },
    /// `--coder-network endpoint` without any known endpoint.
    #[error(
        "--coder-network endpoint: the coder's endpoint is not known: give --coder-endpoint \
         HOST:PORT|URL or --coder-base-url URL"
    )]
    NoEndpoint,
    /// An endpoint text is not `HOST:PORT` nor a URL.
    #[error("{flag}: {source}")]
    Bad {
        /// Where it came from (a flag or a variable).
        flag: String,
        /// Why it is not an endpoint.
        source: BadEndpoint,
    },
}

/// Where the coder's endpoint may be learnt from, most specific first.
#[derive(Debug, Clone, Default)]
pub struct EndpointSources<'a> {
    /// `--coder-endpoint` values.
    pub explicit: &'a [String],
    /// `--coder-base-url`.
    pub coder_base_url: Option<&'a str>,
    /// The variables passed to the coder (`--coder-env`).
    pub coder_env: Vec<(&'a str, &'a str)>,
    /// The roles' base URL (`--roles-base-url`, else the agent's).
    pub roles_base_url: Option<&'a str>,
}

impl EndpointSources<'_> {
    /// The endpoints these sources name (and where they came from), the
    /// first source that names any.
    fn known(&self) -> Result<Vec<Endpoint>, NetworkError> {
        let check = |flag: String, text: &str| -> Result<Endpoint, NetworkError> {
            text.parse::<Endpoint>()
                .map_err(|source| NetworkError::Bad { flag, source })
        };
        if !self.explicit.is_empty() {
            return self
                .explicit
                .iter()
                .map(|t| check("--coder-endpoint".into(), t))
                .collect();
        }
        if let Some(url) = self.coder_base_url {
            return Ok(vec![check("--coder-base-url".into(), url)?]);
        }
        let from_env: Vec<Endpoint> = self
            .coder_env
            .iter()
            .filter(|(k, v)| {
                (k.ends_with("_BASE_URL") || k.ends_with("_API_BASE"))
                    && (v.starts_with("http://") || v.starts_with("https://"))
            })
            .map(|(k, v)| check(format!("--coder-env {k}"), v))
            .collect::<Result<_, _>>()?;
        if !from_env.is_empty() {
            return Ok(from_env);
        }
        match self.roles_base_url {
            Some(url) => Ok(vec![check("the roles' base URL".into(), url)?]),
            None => Ok(Vec::new()),
        }
    }
}

/// The network a coder gets for the operator's `choice`, refusing
/// contradictions by flag name.
pub fn resolve(
    choice: NetworkChoice,
    sources: &EndpointSources<'_>,
) -> Result<CoderNetwork, NetworkError> {
    let contradiction = |mode: NetworkChoice, what| NetworkError::Contradiction {
        endpoints: sources.explicit.join(" "),
        mode: mode.as_str(),
        what,
    };
    match choice {
        NetworkChoice::Host if !sources.explicit.is_empty() => {
            Err(contradiction(choice, "the host's whole network"))
        }
        NetworkChoice::None if !sources.explicit.is_empty() => {
            Err(contradiction(choice, "no network at all"))
        }
        NetworkChoice::Host => Ok(CoderNetwork::Host),
        NetworkChoice::None => Ok(CoderNetwork::None),
        NetworkChoice::Endpoint => match sources.known()? {
            list if list.is_empty() => Err(NetworkError::NoEndpoint),
            list => Ok(CoderNetwork::Endpoints(list)),
        },
        NetworkChoice::Auto => match sources.known()? {
            list if list.is_empty() => Ok(CoderNetwork::None),
            list => Ok(CoderNetwork::Endpoints(list)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_known_endpoint_else_nothing() {
        let none = EndpointSources::default();
        assert_eq!(
            resolve(NetworkChoice::Auto, &none).unwrap(),
            CoderNetwork::None
        );
        let roles = EndpointSources {
            roles_base_url: Some("http://127.0.0.1:8080/v1"),
            ..EndpointSources::default()
        };
        let net = resolve(NetworkChoice::Auto, &roles).unwrap();
        assert_eq!(net.to_string(), "endpoint 127.0.0.1:8080");
        // The coder's own URL wins over the roles'; its variables too.
        let env = EndpointSources {
            coder_env: vec![
                ("OPENAI_API_KEY", "sk-x"),
                ("OPENAI_BASE_URL", "https://api.example.com/v1"),
            ],
            ..roles.clone()
        };
        assert_eq!(
            resolve(NetworkChoice::Auto, &env).unwrap().to_string(),
            "endpoint api.example.com:443"
        );
        let coder = EndpointSources {
            coder_base_url: Some("http://model.lan:9000"),
            ..env.clone()
        };
        assert_eq!(
            resolve(NetworkChoice::Endpoint, &coder)
                .unwrap()
                .to_string(),
            "endpoint model.lan:9000"
        );
        // Host only on request.
        assert_eq!(
            resolve(NetworkChoice::Host, &coder).unwrap(),
            CoderNetwork::Host
        );
        assert_eq!(
            resolve(NetworkChoice::None, &coder).unwrap(),
            CoderNetwork::None
        );
    }

    #[test]
    fn contradictions_and_bad_endpoints_name_the_flag() {
        let explicit = vec!["localhost:8080".to_string()];
        let given = EndpointSources {
            explicit: &explicit,
            ..EndpointSources::default()
        };
        for mode in [NetworkChoice::Host, NetworkChoice::None] {
            let err = resolve(mode, &given).unwrap_err().to_string();
            assert!(
                err.contains("--coder-endpoint localhost:8080")
                    && err.contains(&format!("--coder-network {}", mode.as_str())),
                "{err}"
            );
        }
        let err = resolve(NetworkChoice::Endpoint, &EndpointSources::default()).unwrap_err();
        assert_eq!(err, NetworkError::NoEndpoint);
        assert!(err.to_string().contains("--coder-endpoint"));
        let bad = EndpointSources {
            coder_base_url: Some("ftp://x"),
            ..EndpointSources::default()
        };
        let err = resolve(NetworkChoice::Auto, &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("--coder-base-url: endpoint `ftp://x`"),
            "{err}"
        );
        assert!("wide".parse::<NetworkChoice>().is_err());
    }

    #[test]
    fn the_recorded_text_reads_back_as_the_same_network() {
        let net = CoderNetwork::endpoints(["http://model.lan:9000/v1", "localhost:8080"]).unwrap();
        let json = serde_json::to_string(&net).unwrap();
        assert_eq!(json, r#""endpoint model.lan:9000,localhost:8080""#);
        assert_eq!(serde_json::from_str::<CoderNetwork>(&json).unwrap(), net);
        for net in [CoderNetwork::None, CoderNetwork::Host] {
            let json = serde_json::to_string(&net).unwrap();
            assert_eq!(serde_json::from_str::<CoderNetwork>(&json).unwrap(), net);
        }
        for bad in ["", "wide", "endpoint ", "endpoint ftp://x", "endpoints a:1"] {
            let err = serde_json::from_str::<CoderNetwork>(&format!("{bad:?}")).unwrap_err();
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        }
        let err = CoderNetwork::endpoints(["a:1", "not an endpoint"]).unwrap_err();
        assert!(err.to_string().contains("`not an endpoint`"), "{err}");
    }
}
