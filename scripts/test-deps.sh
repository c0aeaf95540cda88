#!/usr/bin/env bash
# What the tests need beyond the Rust toolchain, installed when missing and
# then checked. scripts/test.sh (the README's test command) runs it first and
# .ci/run runs it beside the build, so this file is the one list. What is
# already there is left alone; what is installed is printed first.
#
#   chromium             the report's browser tests (host/cli/tests/it/report.rs)
#   bubblewrap           jailed candidate builds and coders (host/cli/tests/it/contain.rs)
#   python3              agentbench/os checkers, the Python tools, the data download
#   mariadb-server       agentbench/dbbench's private SQL server
#   postgresql-15        the service on Postgres (host/cli/tests/it/serve.rs)
#   slurm-wlm, munge     a one-node cluster for workers under sbatch (serve.rs)
#   util-linux           `script` and `setpriv` for the OS-interaction machines
#   jq                   the service guide's curl steps (host/cli/tests/it/docs_serve_example.rs)
#   mdbook               the book's build and its link check (host/cli/tests/it/docs_book.rs)
#   wasm32-wasip2        the guests and harnesses the tests build
#   .ecdysis/python-tools  componentize-py and pytest (scripts/python-tools.sh)
#   .ecdysis/aider       aider, the training guide's coder CLI (scripts/aider.sh)
#
# Node.js (at least 20, runtimes/js/package.json) is only checked: Debian 12
# ships 18.
#
# Debian packages are pinned to a version pattern of Debian 12 (bookworm)
# and installed at the mirror's version only when it matches. A pattern, not
# one exact version: the mirror keeps only each package's newest security or
# point release, so an exact pin would stop installing at the next update.
# Chromium's upstream version moves with every security update, so its pin
# is Debian 12's build of it (`~deb12u`).
#
# As root it installs with apt-get; as another user it prints the apt-get
# command to run and fails.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly MDBOOK_VERSION=0.5.4

# `package|version pattern|present when this shell test passes`
readonly DEBIAN_PACKAGES=(
  "chromium|*~deb12u*|command -v chromium"
  "bubblewrap|0.8.*|command -v bwrap"
  "python3|3.11.*|[ -x /usr/bin/python3 ]"
  "mariadb-server|1:10.11.*|command -v mariadbd || [ -x /usr/sbin/mariadbd ]"
  "postgresql-15|15.*|ls /usr/lib/postgresql/*/bin/initdb"
  "slurm-wlm|22.05.*|command -v slurmctld || [ -x /usr/sbin/slurmctld ]"
  "munge|0.5.*|command -v munged || [ -x /usr/sbin/munged ]"
  "util-linux|2.38.*|command -v script && command -v setpriv"
  "jq|1.6*|command -v jq"
)

fail() { echo "test-deps: $*" >&2; exit 1; }

debian_packages() {
  local entry name pattern present missing=()
  for entry in "${DEBIAN_PACKAGES[@]}"; do
    IFS='|' read -r name pattern present <<<"$entry"
    bash -c "$present" >/dev/null 2>&1 || missing+=("$name|$pattern")
  done
  [ "${#missing[@]}" -eq 0 ] && return
  local names=()
  for entry in "${missing[@]}"; do names+=("${entry%%|*}"); done
  if [ "$(id -u)" != 0 ]; then
    fail "missing Debian packages: ${names[*]}; as root, run:
  apt-get update && apt-get install -y --no-install-recommends ${names[*]}
then run this again (it checks the versions)"
  fi
  echo "test-deps: installing Debian packages: ${names[*]}"
  apt-get update -qq
  local pinned=() version
  for entry in "${missing[@]}"; do
    IFS='|' read -r name pattern <<<"$entry"
    version=$(apt-cache policy "$name" | sed -n 's/^ *Candidate: //p')
    [ -n "$version" ] && [ "$version" != "(none)" ] \
      || fail "Debian offers no $name here (is this Debian 12?)"
    # shellcheck disable=SC2053 # the pattern is a glob on purpose
    [[ $version == $pattern ]] \
      || fail "Debian offers $name $version, but it is pinned to $pattern: update the pin in scripts/test-deps.sh after checking the tests with it"
    echo "test-deps:   $name=$version"
    pinned+=("$name=$version")
  done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pinned[@]}"
}

mdbook_tool() {
  local have
  have=$(mdbook --version 2>/dev/null || true)
  [ "$have" = "mdbook v$MDBOOK_VERSION" ] && return
  # Without the `serve` and `watch` features: the tests only build the book,
  # and those two features are most of mdbook's compile time.
  echo "test-deps: installing mdbook $MDBOOK_VERSION (cargo install; found: ${have:-none})"
  # Not linted: .ci/run's clippy wrapper is for this workspace's crates.
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
    cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION" \
    --no-default-features --features search
  have=$(mdbook --version 2>/dev/null || true)
  [ "$have" = "mdbook v$MDBOOK_VERSION" ] \
    || fail "installed mdbook $MDBOOK_VERSION, but \`mdbook --version\` says ${have:-nothing} (is \$CARGO_HOME/bin on PATH, before any other mdbook?)"
}

wasm_target() {
  rustup target list --installed | grep -qx wasm32-wasip2 && return
  echo "test-deps: installing the wasm32-wasip2 target (rustup)"
  rustup target add wasm32-wasip2
}

node_version() {
  local version
  version=$(node --version 2>/dev/null) \
    || fail "Node.js is missing: the JavaScript runtime's suite needs Node.js 20 or later and npm (Debian 12 ships 18)"
  local major=${version#v}
  major=${major%%.*}
  [ "$major" -ge 20 ] || fail "Node.js $version is too old: runtimes/js needs 20 or later"
  command -v npm >/dev/null || fail "npm is missing (Node.js $version is here)"
}

# What installing cannot fix: whether this machine lets the jails work.
jails_work() {
  bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin \
    --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev -- true \
    || fail "bubblewrap cannot make a jail on this machine (user namespaces?)"
  # As root a jail's task count is a pids cgroup (RLIMIT_NPROC does not hold
  # for root): without one, jails are unavailable and the containment tests
  # fail.
  if [ "$(id -u)" = 0 ] && ! grep -qw pids /proc/self/mounts \
    && ! grep -qw pids /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    fail "no pids cgroup (v1 hierarchy or v2 controller): jails cannot limit their processes"
  fi
}

debian_packages
mdbook_tool
wasm_target
node_version
jails_work
bash scripts/python-tools.sh
bash scripts/aider.sh
echo "test-deps: all present ($(mdbook --version), node $(node --version), $(/usr/bin/python3 --version))"
