//! The documentation checks itself against the code: the CLI reference
//! pages are the binary's own `--help` (regenerated with
//! `ECDYSIS_UPDATE_DOCS=1`), every relative link of the README and the book
//! resolves, and the README's two commands are the ones CI runs. The
//! commands in the pages (`docs_commands`), the built book
//! (`docs_book`) and the shipped `serve.toml` (`docs_serve_example`) have
//! modules of their own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::{self, repo_root};

/// The subcommands `ecdysis-host --help` lists (hidden ones are not listed).
pub(crate) fn subcommands() -> Vec<String> {
    let out = help(&["--help"]);
    out.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Nested subcommands of `cmd`, if it has any.
pub(crate) fn nested(cmd: &str) -> Vec<String> {
    let out = help(&[cmd, "--help"]);
    if !out.contains("\nCommands:") {
        return vec![];
    }
    out.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// What `ecdysis-host ARGS` prints (its help), whatever the terminal and
/// the caller's environment.
pub(crate) fn help(args: &[&str]) -> String {
    let out = help_output(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The help `ecdysis-host ARGS` prints, or `None` when it refuses them.
pub(crate) fn try_help(args: &[&str]) -> Option<String> {
    let out = help_output(args);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn help_output(args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(support::host_bin());
    // The help text must not depend on the terminal it is printed to, nor
    // on the caller's environment: clap shows a set variable's value beside
    // its flag (CI sets some of ours).
    cmd.args(args).env("COLUMNS", "100");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ECDYSIS_") {
            cmd.env_remove(name);
        }
    }
    cmd.output().expect("run ecdysis-host")
}

/// The reference page of `cmd`: its help, and each nested command's.
fn page(cmd: &str) -> String {
    let mut out = format!(
        "# `ecdysis-host {cmd}`\n\n<!-- Generated from `ecdysis-host {cmd} --help` by the docs test \
         (ECDYSIS_UPDATE_DOCS=1 cargo test -p ecdysis-host --test it docs); do not edit. -->\n\n\
         ```text\n{}```\n",
        help(&[cmd, "--help"])
    );
    for sub in nested(cmd) {
        out += &format!(
            "\n## `ecdysis-host {cmd} {sub}`\n\n```text\n{}```\n",
            help(&[cmd, &sub, "--help"])
        );
    }
    out
}

fn cli_dir() -> PathBuf {
    repo_root().join("docs/src/reference/cli")
}

#[test]
fn every_subcommand_has_a_reference_page_equal_to_its_help() {
    let update = std::env::var_os("ECDYSIS_UPDATE_DOCS").is_some();
    let commands = subcommands();
    assert!(commands.len() >= 15, "{commands:?}");
    let mut stale = Vec::new();
    for cmd in &commands {
        let path = cli_dir().join(format!("{cmd}.md"));
        let want = page(cmd);
        if update {
            std::fs::create_dir_all(cli_dir()).unwrap();
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{} differs from `{cmd} --help`", path.display())),
            Err(_) => stale.push(format!("{} is missing", path.display())),
        }
    }
    // No page for a command that is gone.
    let known: BTreeSet<String> = commands.iter().map(|c| format!("{c}.md")).collect();
    for entry in std::fs::read_dir(cli_dir()).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !known.contains(&name) {
            stale.push(format!("{name} documents no subcommand"));
        }
    }
    assert!(
        stale.is_empty(),
        "regenerate with ECDYSIS_UPDATE_DOCS=1 cargo test -p ecdysis-host --test it docs:\n{}",
        stale.join("\n")
    );
}

/// `(target, line)` of every relative markdown link `[..](target)` and
/// image in `text`, code spans and fenced blocks left out.
fn relative_links(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code cannot hold links.
        let mut plain = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            let target = target.split_whitespace().next().unwrap_or_default();
            if !target.is_empty()
                && !target.contains("://")
                && !target.starts_with('#')
                && !target.starts_with("mailto:")
            {
                out.push((target.to_string(), i + 1));
            }
            rest = &after[end..];
        }
    }
    out
}

pub(crate) fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

#[test]
fn every_relative_link_of_the_readme_and_the_book_resolves() {
    let root = repo_root();
    let mut files = vec![
        root.join("README.md"),
        root.join("CONTRIBUTING.md"),
        root.join("CHANGELOG.md"),
    ];
    markdown_files(&root.join("docs/src"), &mut files);
    assert!(
        root.join("docs/book.toml").is_file() && root.join("docs/src/SUMMARY.md").is_file(),
        "the book's layout: docs/book.toml and docs/src/SUMMARY.md"
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in files.iter().filter(|f| f.is_file()) {
        let text = std::fs::read_to_string(file).unwrap();
        for (target, line) in relative_links(&text) {
            let path = target.split('#').next().unwrap_or_default();
            if path.is_empty() {
                continue;
            }
            checked += 1;
            let resolved = file.parent().unwrap().join(path);
            if !resolved.exists() {
                broken.push(format!("{}:{line}: {target}", file.display()));
            }
        }
    }
    assert!(checked > 30, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // Every page of the book is in its table of contents.
    let summary = std::fs::read_to_string(root.join("docs/src/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = relative_links(&summary)
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    let mut pages = Vec::new();
    markdown_files(&root.join("docs/src"), &mut pages);
    let missing: Vec<String> = pages
        .iter()
        .map(|p| {
            p.strip_prefix(root.join("docs/src"))
                .unwrap()
                .to_string_lossy()
                .to_string()
        })
        .filter(|p| p != "SUMMARY.md" && !p.starts_with("results/data/"))
        .filter(|p| !listed.contains(p))
        .collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
}

/// The shell command of the README's fenced block that follows `marker`.
fn readme_command(readme: &str, marker: &str) -> String {
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README lacks {marker:?}"));
    let block = &readme[at..];
    let start = block.find("```sh\n").expect("a sh block") + 6;
    let end = block[start..].find("```").expect("closed block") + start;
    block[start..end].trim().to_string()
}

#[test]
fn the_readme_commands_are_the_ones_ci_runs() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.lines().count() <= 250,
        "README.md has {} lines",
        readme.lines().count()
    );
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let test = readme_command(&readme, "Run the tests");
    assert!(
        ci.lines().any(|l| l.trim() == test),
        "CI does not run the README's test command `{test}`"
    );
    // CI runs the set-up step's parts (not `run` itself: its tests do).
    let setup = readme_command(&readme, "Set up and run the main job");
    for part in setup.split("&&").map(str::trim) {
        if part.starts_with("cargo run") {
            continue;
        }
        let words: Vec<&str> = part
            .split_whitespace()
            .filter(|w| *w != "--quiet")
            .collect();
        let found = ci.lines().any(|l| {
            let lw: Vec<&str> = l.split_whitespace().filter(|w| *w != "--quiet").collect();
            lw == words
        });
        assert!(found, "CI does not run the set-up step `{part}`");
    }
}

#[test]
fn links_are_found_outside_code_only() {
    let text = "see [a](guides/a.md) and `[b](no.md)`\n```\n[c](no.md)\n```\n![img](images/x.png) [web](https://x.org) [anchor](#top)";
    let links: Vec<String> = relative_links(text).into_iter().map(|(t, _)| t).collect();
    assert_eq!(links, vec!["guides/a.md", "images/x.png"]);
}
