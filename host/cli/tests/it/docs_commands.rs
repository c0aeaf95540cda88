//! Every `ecdysis-host` command the README and the book show — in a shell
//! block, or in inline code in the prose — names subcommands that exist and
//! only flags that their `--help` lists, so a reader who copies one gets the
//! command, not `error: unexpected argument`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::docs::{help, markdown_files, nested, subcommands, try_help};
use crate::support::repo_root;

/// A fenced block's language that holds shell commands (untagged blocks
/// too: several pages show commands in them).
fn is_shell(lang: &str) -> bool {
    matches!(lang, "" | "sh" | "bash" | "shell" | "console")
}

/// `(line, text)` of every shell line of `markdown`'s fenced shell blocks,
/// a line continued with `\` joined to the next, a `$ ` prompt removed.
pub(crate) fn shell_lines(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut block: Option<bool> = None; // Some(is_shell) inside a block
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            block = match block {
                None => Some(is_shell(lang.trim())),
                Some(_) => None,
            };
            out.extend(pending.take());
            continue;
        }
        if block != Some(true) {
            continue;
        }
        let (start, mut text) = pending.take().unwrap_or((i + 1, String::new()));
        let part = line.trim();
        let part = part.strip_prefix("$ ").unwrap_or(part);
        match part.strip_suffix('\\') {
            Some(head) => {
                text.push_str(head);
                text.push(' ');
                pending = Some((start, text));
            }
            None => {
                text.push_str(part);
                out.push((start, text));
            }
        }
    }
    out.extend(pending);
    out
}

/// `(line, text)` of every inline code span of `markdown`'s prose that
/// starts with `ecdysis-host `; a span may wrap onto the next line.
fn inline_commands(markdown: &str) -> Vec<(usize, String)> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push('\n');
            continue;
        }
        // Lines of a fence are blanked, not dropped: line numbers hold.
        prose.push_str(if fenced { "" } else { line });
        prose.push('\n');
    }
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(at) = prose[rest..].find("`ecdysis-host ") {
        let start = rest + at + 1;
        let Some(len) = prose[start..].find('`') else {
            break;
        };
        let span = &prose[start..start + len];
        // A span does not cross a paragraph.
        if !span.contains("\n\n") {
            let line = prose[..start].matches('\n').count() + 1;
            // A table cell escapes its `|`.
            out.push((line, span.replace("\\|", "|").replace('\n', " ")));
        }
        rest = start + len + 1;
    }
    out
}

/// The arguments after the binary of every `ecdysis-host` invocation in a
/// shell line: the binary by name or path, or `cargo run -p ecdysis-host --`.
fn invocations(line: &str) -> Vec<Vec<String>> {
    // A comment starts at a word that starts with `#`.
    let mut words: Vec<&str> = Vec::new();
    for word in shell_words(line)
        .into_iter()
        .take_while(|w| !w.starts_with('#'))
    {
        match word.strip_suffix(';') {
            Some(head) => words.extend([head, ";"]),
            None => words.push(word),
        }
    }
    let mut out = Vec::new();
    for command in words.split(|w| matches!(*w, "&&" | "||" | "|" | ";" | "&")) {
        let mut command: Vec<&str> = command
            .iter()
            .copied()
            .skip_while(|w| is_assignment(w) || matches!(*w, "do" | "then" | "else" | "time"))
            .collect();
        // A redirection and its file are not arguments.
        if let Some(at) = command.iter().position(|w| is_redirection(w)) {
            command.truncate(at);
        }
        let Some((program, args)) = command.split_first() else {
            continue;
        };
        if Path::new(program)
            .file_name()
            .is_some_and(|n| n == "ecdysis-host")
        {
            out.push(args.iter().map(|a| a.to_string()).collect());
        } else if *program == "cargo"
            && args.first() == Some(&"run")
            && args
                .windows(2)
                .any(|w| matches!(w[0], "-p" | "--package") && w[1] == "ecdysis-host")
            && let Some(dashes) = args.iter().position(|a| *a == "--")
        {
            out.push(args[dashes + 1..].iter().map(|a| a.to_string()).collect());
        }
    }
    out
}

/// `line` split at whitespace outside quotes: a quoted argument (`--coder-command
/// "aider --yes ..."`) is one word, its quotes kept, so the flags of
/// another program inside it are not taken for `ecdysis-host`'s.
fn shell_words(line: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = None;
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some('"') | None, '\\') => escaped = true,
            (Some(_), _) => {}
            (None, '\'' | '"') => {
                quote = Some(c);
                start.get_or_insert(i);
            }
            (None, c) if c.is_whitespace() => {
                if let Some(s) = start.take() {
                    words.push(&line[s..i]);
                }
            }
            (None, _) => {
                start.get_or_insert(i);
            }
        }
        if escaped {
            start.get_or_insert(i);
        }
    }
    if let Some(s) = start {
        words.push(&line[s..]);
    }
    words
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn is_redirection(word: &str) -> bool {
    word.starts_with('>') || word.starts_with("2>") || word == "<"
}

/// The flag a word of a documented command names (`--name` of
/// `[--name=value]`, `-q`), if it is one.
fn flag_name(word: &str) -> Option<&str> {
    let word = word
        .trim_start_matches(['[', '('])
        .trim_end_matches([']', ')', ',']);
    if let Some(long) = word.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or_default();
        return (!name.is_empty()).then_some(&word[..2 + name.len()]);
    }
    let mut chars = word.chars();
    match (chars.next(), chars.next(), chars.next()) {
        (Some('-'), Some(c), None) if c.is_ascii_alphabetic() => Some(word),
        _ => None,
    }
}

/// The options a `--help` lists, each with whether it takes a value.
fn options(help: &str) -> HashMap<String, bool> {
    let mut out = HashMap::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let line = line.trim_start();
        // Option lines are indented two or six columns; their wrapped
        // descriptions further.
        if indent > 6 || !line.starts_with('-') {
            continue;
        }
        let spec = line.split("  ").next().unwrap_or_default();
        for part in spec.split(", ") {
            let (name, value) = part.split_once(' ').unwrap_or((part, ""));
            out.insert(
                name.trim_end_matches("...").to_string(),
                value.starts_with('<'),
            );
        }
    }
    out
}

/// The binary's commands and options, from its `--help`, asked once each.
#[derive(Default)]
struct Cli {
    helps: HashMap<Vec<String>, HashMap<String, bool>>,
    commands: HashMap<Vec<String>, Vec<String>>,
}

impl Cli {
    fn options(&mut self, path: &[String]) -> &HashMap<String, bool> {
        self.helps.entry(path.to_vec()).or_insert_with(|| {
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push("--help");
            options(&help(&args))
        })
    }

    fn commands(&mut self, path: &[String]) -> &[String] {
        self.commands
            .entry(path.to_vec())
            .or_insert_with(|| match path {
                [] => subcommands(),
                [command] => nested(command),
                _ => Vec::new(),
            })
    }

    /// Whether `name` is a subcommand of `path` that `--help` does not
    /// list (an internal one, such as the compile child's), but runs.
    fn is_hidden(&self, path: &[String], name: &str) -> bool {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.extend([name, "--help"]);
        !name.starts_with('-') && try_help(&args).is_some()
    }

    /// Check one invocation's arguments; the error names the word.
    fn check(&mut self, args: &[String]) -> Result<(), String> {
        let mut path: Vec<String> = Vec::new();
        let mut words = args.iter();
        while let Some(word) = words.next() {
            if word == "--" {
                break;
            }
            if let Some(flag) = flag_name(word) {
                let Some(&takes_value) = self.options(&path).get(flag) else {
                    return Err(format!(
                        "`{flag}` is not a flag of `{}` (see its --help)",
                        shown(&path)
                    ));
                };
                if takes_value && !word.contains('=') {
                    words.next();
                }
                continue;
            }
            let commands = self.commands(&path).to_vec();
            if commands.is_empty() {
                continue; // a positional argument
            }
            if word.starts_with('<') {
                return Ok(()); // a placeholder for any command
            }
            // `tenant add|list` documents several at once: each must exist,
            // and what follows can belong to none of them in particular.
            let alternatives: Vec<&str> = word.split('|').collect();
            for name in &alternatives {
                if !commands.iter().any(|c| c == name) && !self.is_hidden(&path, name) {
                    return Err(format!(
                        "`{name}` is not a subcommand of `{}` (it has: {})",
                        shown(&path),
                        commands.join(", ")
                    ));
                }
            }
            if alternatives.len() > 1 {
                return Ok(());
            }
            path.push(word.clone());
        }
        Ok(())
    }
}

fn shown(path: &[String]) -> String {
    let mut s = String::from("ecdysis-host");
    for p in path {
        s.push(' ');
        s.push_str(p);
    }
    s
}

/// The README, CONTRIBUTING and the book's pages but the generated CLI
/// reference (the binary's own help) and the results' raw files.
fn documented_pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut book = Vec::new();
    markdown_files(&root.join("docs/src"), &mut book);
    let skip = [
        root.join("docs/src/reference/cli"),
        root.join("docs/src/results/data"),
    ];
    pages.extend(
        book.into_iter()
            .filter(|p| !skip.iter().any(|s| p.starts_with(s))),
    );
    pages
}

/// Every problem of the commands in `markdown`, as `place:line: …`, and
/// how many commands were checked.
fn check_page(cli: &mut Cli, place: &str, markdown: &str) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    let lines = shell_lines(markdown)
        .into_iter()
        .chain(inline_commands(markdown));
    for (line, text) in lines {
        for args in invocations(&text) {
            checked += 1;
            if let Err(e) = cli.check(&args) {
                problems.push(format!("{place}:{line}: {e}\n    {text}"));
            }
        }
    }
    (problems, checked)
}

#[test]
fn every_documented_command_names_subcommands_and_flags_that_exist() {
    let root = repo_root();
    let mut cli = Cli::default();
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in documented_pages() {
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let place = page
            .strip_prefix(&root)
            .unwrap_or(&page)
            .display()
            .to_string();
        let (found, count) = check_page(&mut cli, &place, &text);
        problems.extend(found);
        checked += count;
    }
    // The extraction itself must keep working: the pages show dozens.
    assert!(checked > 50, "only {checked} commands found in the pages");
    eprintln!("{checked} documented commands checked against --help");
    assert!(
        problems.is_empty(),
        "{} documented command(s) the binary would refuse:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn a_wrong_flag_or_subcommand_is_reported_with_its_line() {
    let page = "# Page\n\nRun `ecdysis-host run --trials 3\n--no-such-flag`.\n\n```sh\n\
        ecdysis-host --quiet run --harness none --trials 3   # fine\n\
        ecdysis-host tasks --domain tau2/retail \\\n  --bogus x\n\
        ecdysis-host nosuch\n\
        cargo run --release -p ecdysis-host -- tenant list --wrong\n\
        ecdysis-host tenant add|remove\n\
        ```\n";
    let mut cli = Cli::default();
    let (problems, checked) = check_page(&mut cli, "page.md", page);
    assert_eq!(checked, 6, "{problems:#?}");
    let expected = [
        "page.md:8: `--bogus` is not a flag of `ecdysis-host tasks`",
        "page.md:10: `nosuch` is not a subcommand of `ecdysis-host`",
        "page.md:11: `--wrong` is not a flag of `ecdysis-host tenant list`",
        "page.md:12: `remove` is not a subcommand of `ecdysis-host tenant`",
        "page.md:3: `--no-such-flag` is not a flag of `ecdysis-host run`",
    ];
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for (problem, want) in problems.iter().zip(expected) {
        assert!(problem.starts_with(want), "{problem}\nwant: {want}");
    }
}

#[test]
fn commands_are_taken_from_shell_blocks_and_inline_code_only() {
    let page = "`ecdysis-host run` in prose, ecdysis-host bare\n\
        ```text\necdysis-host output --not-checked\n```\n\
        ```sh\nFOO=1 ./target/release/ecdysis-host run --trials 2 > out.txt && cargo test -p ecdysis-host\n\
        for d in a b; do ecdysis-host check $d; done\n```\n\
        ```json\n{\"ecdysis-host\": 1}\n```\n";
    let mut found: Vec<(usize, Vec<String>)> = Vec::new();
    for (line, text) in shell_lines(page).into_iter().chain(inline_commands(page)) {
        for args in invocations(&text) {
            found.push((line, args));
        }
    }
    let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        found,
        vec![
            (6, words("run --trials 2")),
            (7, words("check $d")),
            (1, words("run")),
        ]
    );
    // Another program's flags inside a quoted argument are not checked.
    assert_eq!(
        invocations(
            r#"ecdysis-host train --coder-command "aider --yes \"x\" {prompt_file}" --rounds 1 # it's"#
        ),
        vec![vec![
            "train".to_string(),
            "--coder-command".into(),
            r#""aider --yes \"x\" {prompt_file}""#.into(),
            "--rounds".into(),
            "1".into(),
        ]]
    );
    assert_eq!(flag_name("[--json]"), Some("--json"));
    assert_eq!(flag_name("--out=dir"), Some("--out"));
    assert_eq!(flag_name("-q"), Some("-q"));
    assert_eq!(flag_name("-1"), None);
    assert_eq!(flag_name("runs/x"), None);
}
