//! The settings that make MariaDB behave like the MySQL 8 the original runs
//! (`mysql:8`, default configuration).
//!
//! The private server gets them on its command line; every episode
//! session sets the session-level ones again, so an existing server given
//! with `--mysql-url` behaves the same.

/// MySQL 8's default `sql_mode` (MariaDB 10.11's lacks `ONLY_FULL_GROUP_BY`,
/// `NO_ZERO_IN_DATE` and `NO_ZERO_DATE`, and adds `NO_AUTO_CREATE_USER`).
pub const SQL_MODE: &str = "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

/// MySQL 8's default without `STRICT_TRANS_TABLES`: how the labels of
/// `standard-278` and `standard-295` were made (their gold UPDATE compares a
/// TEXT column with a bare number, which strict mode refuses with error 1292
/// in a data-changing statement).
pub const LENIENT_SQL_MODE: &str = "ONLY_FULL_GROUP_BY,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

/// The `sql_mode` episode sessions run with (the contract's, so that the
/// options reach an isolated worker without naming this crate).
pub use ecdysis_env::{SqlMode, UnknownSqlMode};

/// The server's `sql_mode` value for `mode`: MySQL 8's default
/// ([`SQL_MODE`]), or the same without strict mode ([`LENIENT_SQL_MODE`]).
pub fn sql_mode_value(mode: SqlMode) -> &'static str {
    match mode {
        SqlMode::Mysql8 => SQL_MODE,
        SqlMode::Lenient => LENIENT_SQL_MODE,
    }
}

/// MySQL's default `group_concat_max_len` (MariaDB's is 1 MiB). The table
/// hash concatenates 5-character row hashes, so for tables of more than 170
/// rows this cut decides the hash the labels were made with.
pub const GROUP_CONCAT_MAX_LEN: u32 = 1024;

/// Collations like MySQL 8's default `utf8mb4_0900_ai_ci` (UCA 9.0.0, NO
/// PAD, accent- and case-insensitive), best first: MySQL's own, then
/// MariaDB's UCA 14.0.0 NO PAD accent- and case-insensitive one (MariaDB
/// 10.10 and later), then older accent- and case-insensitive ones (which
/// pad trailing spaces, unlike MySQL 8).
pub const COLLATIONS: &[&str] = &[
    "utf8mb4_0900_ai_ci",
    "utf8mb4_uca1400_nopad_ai_ci",
    "utf8mb4_unicode_520_nopad_ci",
    "utf8mb4_unicode_520_ci",
];

/// The private server's collation: MariaDB 10.11 (Debian 12) has
/// `utf8mb4_uca1400_nopad_ai_ci`.
pub const SERVER_COLLATION: &str = "utf8mb4_uca1400_nopad_ai_ci";

/// `mariadb-install-db` options (a small redo log installs faster).
pub const INSTALL_ARGS: &[&str] = &[
    "--innodb-log-file-size=16M",
    "--innodb-buffer-pool-size=64M",
];

/// `mariadbd` options besides paths.
pub const SERVER_ARGS: &[&str] = &[
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_uca1400_nopad_ai_ci",
    "--sql-mode=ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
    "--group-concat-max-len=1024",
    // MySQL 8's default (MariaDB's is 16 MiB).
    "--max-allowed-packet=64M",
    "--explicit-defaults-for-timestamp=ON",
    "--lower-case-table-names=0",
    // As the original's container: durability is not needed.
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=16M",
    "--skip-log-bin",
    "--local-infile=0",
    "--performance-schema=OFF",
    "--skip-name-resolve",
    "--max-connections=400",
];
