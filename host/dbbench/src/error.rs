//! Errors of the DBBench database layer.

/// Why the database could not be set up or used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DbError {
    /// The MariaDB server binaries are not installed.
    #[error(
        "DBBench needs a MariaDB server: {} not found in $PATH or /usr/sbin. Install it (Debian/Ubuntu: `apt-get install mariadb-server`), or pass --mysql-url mysql://user:password@host:port to use an existing MySQL/MariaDB server",
        missing.join(" and ")
    )]
    ServerMissing {
        /// The binaries that were not found.
        missing: Vec<String>,
    },
    /// The private server could not be installed or started.
    #[error("starting the private MariaDB server: {0}")]
    Start(String),
    /// `--mysql-url` is not a valid MySQL URL.
    #[error("--mysql-url `{url}`: {reason}")]
    BadUrl {
        /// The URL given (password masked).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Connecting to the server, or a statement of the set-up, failed.
    #[error("MySQL server at {server}: {reason}")]
    Server {
        /// Which server.
        server: String,
        /// What failed.
        reason: String,
    },
    /// The task's table could not be created (the original ends such a
    /// task as a task error, scored 0, before the agent acts).
    #[error("the task's table could not be created: {0}")]
    TaskSetup(String),
    /// The SQL worker thread is gone.
    #[error("the SQL worker thread stopped")]
    WorkerGone,
}
