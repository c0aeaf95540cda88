//! A small reader of bash scripts for the rules: the simple commands a
//! script starts, with their words unquoted. It knows quotes, escapes,
//! comments, `$( )`, backquotes, the control operators and here-documents
//! (whose bodies are data, not commands); it does not expand anything.

/// One simple command of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// Its words, quotes removed (redirections included as words).
    pub words: Vec<String>,
    /// Whether its output goes into a pipe (`cmd | ...`).
    pub piped: bool,
}

impl SimpleCommand {
    /// The program it starts (base name of the first word that is not a
    /// variable assignment, a keyword or a prefix such as `sudo`).
    pub fn program(&self) -> Option<&str> {
        let first = self.words.iter().position(|w| !is_prefix(w))?;
        let word = &self.words[first];
        Some(word.rsplit('/').next().unwrap_or(word))
    }

    /// The words after the program.
    pub fn arguments(&self) -> &[String] {
        match self.words.iter().position(|w| !is_prefix(w)) {
            Some(i) => &self.words[i + 1..],
            None => &[],
        }
    }
}

/// Words that come before the program of a simple command.
fn is_prefix(word: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "sudo", "exec", "time", "nohup", "env", "command", "builtin", "then", "do", "else", "elif",
        "if", "while", "until", "!", "{", "}",
    ];
    PREFIXES.contains(&word) || is_assignment(word)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// Every simple command of `script`, in order.
pub fn simple_commands(script: &str) -> Vec<SimpleCommand> {
    let mut reader = Reader::default();
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let (mut single, mut double) = (false, false);
    while i < chars.len() {
        let c = chars[i];
        if single {
            if c == '\'' {
                single = false;
            } else {
                reader.word.push(c);
            }
            i += 1;
            continue;
        }
        if c == '\\' {
            if let Some(&next) = chars.get(i + 1)
                && next != '\n'
            {
                reader.word.push(next);
            }
            reader.quoted = true;
            i += 2;
            continue;
        }
        if double {
            match c {
                '"' => double = false,
                _ => reader.word.push(c),
            }
            i += 1;
            continue;
        }
        match c {
            '\'' => {
                single = true;
                reader.quoted = true;
            }
            '"' => {
                double = true;
                reader.quoted = true;
            }
            '#' if reader.word.is_empty() && !reader.quoted => {
                while i + 1 < chars.len() && chars[i + 1] != '\n' {
                    i += 1;
                }
            }
            ' ' | '\t' => reader.end_word(),
            '<' if chars.get(i + 1) == Some(&'<') && chars.get(i + 2) == Some(&'<') => {
                // A here-string: its word is data on this line.
                reader.word.push_str("<<<");
                i += 3;
                continue;
            }
            '<' if chars.get(i + 1) == Some(&'<') => {
                reader.end_word();
                i += 2;
                i = reader.here_document(&chars, i);
                continue;
            }
            '|' if chars.get(i + 1) == Some(&'|') => {
                reader.end_command(false);
                i += 1;
            }
            '|' => reader.end_command(true),
            '\n' => {
                reader.end_command(false);
                i = reader.skip_bodies(&chars, i + 1);
                continue;
            }
            ';' | '&' | '`' | ')' => reader.end_command(false),
            '(' => {
                // `$(` and `<(` open a command; so does a subshell `(`.
                if matches!(reader.word.chars().last(), Some('$' | '<' | '>')) {
                    reader.word.pop();
                }
                reader.end_command(false);
            }
            _ => reader.word.push(c),
        }
        i += 1;
    }
    reader.end_command(false);
    reader.commands
}

#[derive(Default)]
struct Reader {
    commands: Vec<SimpleCommand>,
    words: Vec<String>,
    word: String,
    /// The current word had quotes (so `''` is a word, and `#` inside one
    /// is no comment).
    quoted: bool,
    /// Delimiters of here-documents whose bodies start at the next line
    /// (and whether `<<-` strips leading tabs).
    pending: Vec<(String, bool)>,
}

impl Reader {
    fn end_word(&mut self) {
        if !self.word.is_empty() || self.quoted {
            self.words.push(std::mem::take(&mut self.word));
        }
        self.quoted = false;
    }

    fn end_command(&mut self, piped: bool) {
        self.end_word();
        if !self.words.is_empty() {
            self.commands.push(SimpleCommand {
                words: std::mem::take(&mut self.words),
                piped,
            });
        }
    }

    /// After `<<` at `i`: reads the delimiter word; returns where the
    /// command goes on.
    fn here_document(&mut self, chars: &[char], mut i: usize) -> usize {
        let strip_tabs = chars.get(i) == Some(&'-');
        if strip_tabs {
            i += 1;
        }
        while matches!(chars.get(i), Some(' ' | '\t')) {
            i += 1;
        }
        let mut delimiter = String::new();
        while let Some(&c) = chars.get(i) {
            if c.is_whitespace() || matches!(c, ';' | '|' | '&' | '<' | '>' | ')') {
                break;
            }
            if !matches!(c, '\'' | '"' | '\\') {
                delimiter.push(c);
            }
            i += 1;
        }
        if !delimiter.is_empty() {
            self.pending.push((delimiter, strip_tabs));
        }
        i
    }

    /// At the start of a line: skips the bodies of pending here-documents;
    /// returns where the next command starts.
    fn skip_bodies(&mut self, chars: &[char], mut i: usize) -> usize {
        for (delimiter, strip_tabs) in std::mem::take(&mut self.pending) {
            while i < chars.len() {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(chars.len(), |p| i + p);
                let line: String = chars[i..end].iter().collect();
                i = (end + 1).min(chars.len());
                let line = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if line == delimiter {
                    break;
                }
            }
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(script: &str) -> Vec<String> {
        simple_commands(script)
            .iter()
            .filter_map(|c| c.program().map(str::to_string))
            .collect()
    }

    #[test]
    fn finds_the_programs_at_command_positions() {
        assert_eq!(programs("ls -l | wc -l"), ["ls", "wc"]);
        assert_eq!(
            programs("cd /tmp && x=1 sudo /usr/bin/vim f; echo done"),
            ["cd", "vim", "echo"]
        );
        assert_eq!(
            programs("echo $(whoami) `date`"),
            ["echo", "whoami", "date"]
        );
        assert_eq!(programs("if [ -f x ]; then cat x; fi"), ["[", "cat", "fi"]);
        assert_eq!(
            programs("for f in *; do wc -l \"$f\"; done"),
            ["for", "wc", "done"]
        );
        assert_eq!(programs("diff <(ls a) <(ls b)"), ["diff", "ls", "ls"]);
        assert_eq!(programs("a || b &\nc"), ["a", "b", "c"]);
    }

    #[test]
    fn quotes_comments_and_here_documents_are_not_commands() {
        assert_eq!(programs("echo 'less | more' \"top; vi\""), ["echo"]);
        assert_eq!(programs("grep -c x f # then less"), ["grep"]);
        assert_eq!(programs("echo a\\;b"), ["echo"]);
        let heredoc = "python3 - <<'EOF'\nmore = 1\nprint(more)\nEOF\nls";
        assert_eq!(programs(heredoc), ["python3", "ls"]);
        let tabs = "cat <<-END > f\n\tless\n\tEND\nwc -l f";
        assert_eq!(programs(tabs), ["cat", "wc"]);
        // A here-string is a word, not a here-document.
        assert_eq!(programs("read a <<< \"x\"\nvi"), ["read", "vi"]);
        let words = &simple_commands("printf '%s\\n' \"a b\" ''")[0].words;
        assert_eq!(words, &["printf", "%s\\n", "a b", ""]);
    }

    #[test]
    fn knows_which_output_goes_into_a_pipe() {
        let c = simple_commands("man ls | cat; less f || true");
        let piped: Vec<(Option<&str>, bool)> = c.iter().map(|c| (c.program(), c.piped)).collect();
        assert_eq!(
            piped,
            [
                (Some("man"), true),
                (Some("cat"), false),
                (Some("less"), false),
                (Some("true"), false)
            ]
        );
        assert_eq!(c[0].arguments(), ["ls"]);
    }
}
