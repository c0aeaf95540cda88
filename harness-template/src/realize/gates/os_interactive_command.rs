//! Why: the shell is a terminal, so a script that starts an editor, a
//! pager or a full-screen program waits for keys that never come; the
//! command hangs until the timeout interrupts it, and one of the task's
//! few turns is gone with nothing learned. Such a script is blocked with
//! what to use instead. Programs are listed in
//! `tables::INTERACTIVE_PROGRAMS`, with the option that makes each print
//! and exit and whether a pipe after it makes it harmless.

use serde_json::{Map, Value};

use super::{Cx, Verdict};
use crate::shell::simple_commands;
use crate::tables::{INTERACTIVE_PROGRAMS, InteractiveProgram};
use crate::text::{domain_matches, say, str_of};

pub fn check(_tool: &str, args: &Map<String, Value>, cx: &mut Cx) -> Verdict {
    let Some(script) = str_of(args.get("script")) else {
        return Verdict::Pass;
    };
    for command in simple_commands(script) {
        let Some(program) = command.program() else {
            continue;
        };
        let hit = INTERACTIVE_PROGRAMS.iter().find(|p| {
            domain_matches(p.domain, cx.domain)
                && p.program == program
                && !(p.piped_ok && command.piped)
                && !has_flag(command.arguments(), p)
        });
        if let Some(p) = hit {
            return Verdict::Block(say(
                "interactive_command",
                &[
                    ("program", p.program.to_string()),
                    ("instead", p.instead.to_string()),
                ],
            ));
        }
    }
    Verdict::Pass
}

/// Whether the arguments carry the program's batch option (a short one
/// also inside a group such as `-bn1`).
fn has_flag(args: &[String], p: &InteractiveProgram) -> bool {
    let flag = p.batch_flag;
    if flag.is_empty() {
        return false;
    }
    let short = flag.len() == 2 && flag.starts_with('-');
    args.iter().any(|a| {
        a == flag
            || (short
                && a.starts_with('-')
                && !a.starts_with("--")
                && a[1..].starts_with(|c: char| c.is_ascii_alphabetic())
                && a[1..].contains(&flag[1..]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::mock::MockView;
    use crate::view::{Reads, Tools};
    use serde_json::json;

    fn run(tool: &str, args: Value) -> Verdict {
        let mut view = MockView::new();
        let tools = Tools::new(vec![]);
        let mut cx = Cx {
            domain: "os",
            reads: Reads::new(&mut view, &tools),
            now: None,
            authenticated: &[],
            changed: &[],
        };
        check(tool, args.as_object().unwrap(), &mut cx)
    }

    fn verdict(script: &str) -> Verdict {
        run("bash_action", json!({ "script": script }))
    }

    fn blocked(script: &str) -> bool {
        matches!(verdict(script), Verdict::Block(_))
    }

    #[test]
    fn blocks_programs_that_wait_for_the_keyboard() {
        for s in [
            "vi /etc/hosts",
            "cd /tmp && nano notes.txt",
            "cat big.log | less",
            "more /var/log/syslog",
            "man find",
            "top",
            "top -n 1",
            "sudo /usr/bin/vim f",
            "echo $(top -n 1)",
            "watch -n 1 ls",
        ] {
            assert!(blocked(s), "{s}");
        }
        match verdict("less f") {
            Verdict::Block(text) => {
                assert!(text.contains("`less`") && text.contains("cat"), "{text}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn passes_batch_forms_pipes_and_words_that_are_no_commands() {
        for s in [
            "top -b -n 1 | head -20",
            "top -bn1",
            "man ls | cat",
            "less f | wc -l",
            "emacs --batch -l x.el",
            "echo 'less is more'",
            "grep -c more /usr/share/dict/words",
            "find / -name vi",
            "python3 - <<'EOF'\nless = 1\nprint(less)\nEOF",
            "ls # then more",
            "wc -l < more.txt",
        ] {
            assert_eq!(verdict(s), Verdict::Pass, "{s}");
        }
        assert_eq!(run("execute_sql", json!({"query": "vi"})), Verdict::Pass);
    }
}
