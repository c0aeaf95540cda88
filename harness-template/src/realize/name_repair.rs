//! Why: a task often states the exact names it is about (DBBench's "The
//! name of this table is Olympic Medals, and the headers of this table are
//! …"), and models write them back wrong: a name with spaces left unquoted
//! in SQL (a syntax error), its spaces turned into `_`, its case changed, or
//! a word dropped (no such table). When an unquoted run of words in the
//! argument is a stated name in another spelling, or its first word and at
//! least one more in order, it can only mean that name, which is written back as
//! stated and quoted where it needs quotes. Quoted text is never touched:
//! it is a value, or a name the model already quoted. Rules come from
//! `tables::NAME_REPAIRS`, so the same repair serves table names, ids or
//! paths.

use serde_json::{Map, Value};

use crate::tables::NameRepair;
use crate::text::domain_matches;

/// The quotes whose text is left as written.
const QUOTES: [char; 3] = ['\'', '"', '`'];

/// Repairs the arguments of a call to `tool` against the names `opening`
/// (the task's first message) states; true if anything changed. The names
/// of every rule for one argument are matched together, so a table's name
/// and its columns' names compete for the same words.
pub fn apply(
    rules: &[NameRepair],
    domain: &str,
    tool: &str,
    opening: &str,
    args: &mut Map<String, Value>,
) -> bool {
    let rules: Vec<&NameRepair> = rules
        .iter()
        .filter(|r| r.tool == tool && domain_matches(r.domain, domain))
        .collect();
    let mut changed = false;
    for (i, rule) in rules.iter().enumerate() {
        if rules[..i].iter().any(|r| r.argument == rule.argument) {
            continue;
        }
        let Some(Value::String(text)) = args.get_mut(rule.argument) else {
            continue;
        };
        let mut names: Vec<Name> = Vec::new();
        for r in rules.iter().filter(|r| r.argument == rule.argument) {
            for stated in stated(r, opening) {
                if !names.iter().any(|n| n.text == stated)
                    && let Some(name) = Name::new(&stated, r.quote, r.bare)
                {
                    names.push(name);
                }
            }
        }
        if let Some(fixed) = repair(text, &names) {
            *text = fixed;
            changed = true;
        }
    }
    changed
}

/// The names `rule` reads in `opening`, in order, each once.
pub fn stated(rule: &NameRepair, opening: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    if rule.before.is_empty() {
        return names;
    }
    let mut rest = opening;
    while let Some(at) = rest.find(rule.before) {
        let from = &rest[at + rule.before.len()..];
        let end = if rule.after.is_empty() {
            from.find('\n').unwrap_or(from.len())
        } else {
            match from.find(rule.after) {
                Some(end) => end,
                None => break,
            }
        };
        let chunk = &from[..end];
        let parts: Vec<&str> = if rule.separator.is_empty() {
            vec![chunk]
        } else {
            chunk.split(rule.separator).collect()
        };
        for part in parts.into_iter().map(str::trim) {
            if !part.is_empty() && !names.iter().any(|n| n == part) {
                names.push(part.to_string());
            }
        }
        rest = &from[(end + rule.after.len()).min(from.len())..];
    }
    names
}

/// A stated name, prepared for matching.
struct Name {
    /// As stated.
    text: String,
    /// Its words (runs of letters and digits), lower-case.
    words: Vec<String>,
    /// What comes before its first word and after its last (`/` of
    /// `/root/x`, `)` of `Tonnage (GRT)`).
    prefix: String,
    suffix: String,
    /// Its characters that are neither letters, digits nor spaces: they may
    /// stand between its words in a spelling of it.
    marks: Vec<char>,
    /// What a spelling of it is replaced by: the name, quoted if it needs
    /// quotes.
    written: String,
}

impl Name {
    fn new(text: &str, quote: &str, bare: &str) -> Option<Name> {
        if !quote.is_empty() && text.contains(quote) {
            return None;
        }
        let words = words_of(text).into_iter().map(|(_, _, w)| w).collect();
        let first = text.find(char::is_alphanumeric)?;
        let last = text.rfind(char::is_alphanumeric)?;
        let last_end = last + text[last..].chars().next()?.len_utf8();
        let needs_quotes = text
            .chars()
            .any(|c| !c.is_alphanumeric() && !bare.contains(c));
        Some(Name {
            words,
            prefix: text[..first].to_string(),
            suffix: text[last_end..].to_string(),
            marks: text
                .chars()
                .filter(|c| !c.is_alphanumeric() && !c.is_whitespace())
                .collect(),
            written: if needs_quotes && !quote.is_empty() {
                format!("{quote}{text}{quote}")
            } else {
                text.to_string()
            },
            text: text.to_string(),
        })
    }
}

/// The runs of letters and digits of `text` as (start, end, lower case).
fn words_of(text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() {
            current
                .get_or_insert_with(|| (i, String::new()))
                .1
                .extend(c.to_lowercase());
        } else if let Some((start, word)) = current.take() {
            out.push((start, i, word));
        }
    }
    if let Some((start, word)) = current {
        out.push((start, text.len(), word));
    }
    out
}

/// A word of the argument outside quotes.
struct Word {
    start: usize,
    end: usize,
    lower: String,
    /// Which stretch between quotes it is in: a spelling never spans two.
    stretch: usize,
}

/// The words of `text` outside quotes (a backslash escapes the next
/// character inside quotes, so an escaped quote does not close them).
fn unquoted_words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut stretch = 0;
    let mut open: Option<char> = None;
    let mut escaped = false;
    let mut start = 0;
    let flush = |from: usize, to: usize, stretch: usize, out: &mut Vec<Word>| {
        for (s, e, lower) in words_of(&text[from..to]) {
            out.push(Word {
                start: from + s,
                end: from + e,
                lower,
                stretch,
            });
        }
    };
    for (i, c) in text.char_indices() {
        match open {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    open = None;
                    stretch += 1;
                    start = i + c.len_utf8();
                }
            }
            None if QUOTES.contains(&c) => {
                flush(start, i, stretch, &mut out);
                open = Some(c);
            }
            None => {}
        }
    }
    if open.is_none() {
        flush(start, text.len(), stretch, &mut out);
    }
    out
}

/// One spelling of a stated name found in the argument.
struct Found {
    name: usize,
    start: usize,
    end: usize,
    /// The word after it.
    next: usize,
    /// Every word of the name is there.
    whole: bool,
    words: usize,
}

/// `text` with every unquoted spelling of one of `names` written as
/// stated; `None` when nothing changes.
fn repair(text: &str, names: &[Name]) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    let words = unquoted_words(text);
    let mut out = String::new();
    // The end of the text copied to `out`, and of the last spelling found
    // (the next may not reach back into it through a name's marks).
    let (mut copied, mut taken) = (0, 0);
    let mut i = 0;
    while i < words.len() {
        let found = best(text, &words, i, names).filter(|f| f.start >= taken);
        let Some(found) = found else {
            i += 1;
            continue;
        };
        let written = &names[found.name].written;
        if &text[found.start..found.end] != written {
            out.push_str(&text[copied..found.start]);
            out.push_str(written);
            copied = found.end;
        }
        taken = found.end;
        i = found.next;
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// The spelling of a name that starts at word `i`: a whole name beats a
/// shortened one, more words beat fewer; two names that fit equally well
/// leave the words alone.
fn best(text: &str, words: &[Word], i: usize, names: &[Name]) -> Option<Found> {
    let mut found: Vec<Found> = names
        .iter()
        .enumerate()
        .filter_map(|(n, name)| spelling(text, words, i, n, name))
        .collect();
    found.sort_by(|a, b| {
        (b.whole, b.words, b.end)
            .cmp(&(a.whole, a.words, a.end))
            .then(a.name.cmp(&b.name))
    });
    if found.len() > 1
        && (found[0].whole, found[0].words, found[0].end)
            == (found[1].whole, found[1].words, found[1].end)
    {
        return None;
    }
    found.into_iter().next()
}

/// Whether the words from `i` on spell `name`: its first word, then more
/// of its words in order, separated only by spaces, `_` or the name's own
/// marks. A spelling must start where the name starts: the later words of a
/// name alone are as likely a list of other names (`(Year, Title, Role)`
/// in the table `Table of Year, Title, and Role`).
fn spelling(text: &str, words: &[Word], i: usize, n: usize, name: &Name) -> Option<Found> {
    if name.words.first() != Some(&words[i].lower) {
        return None;
    }
    let (mut at, mut last, mut count) = (0, i, 1);
    while let Some(next) = words.get(last + 1) {
        let gap = &text[words[last].end..next.start];
        if next.stretch != words[last].stretch
            || !gap
                .chars()
                .all(|c| c.is_whitespace() || c == '_' || name.marks.contains(&c))
        {
            break;
        }
        let Some(skip) = name.words[at + 1..].iter().position(|w| *w == next.lower) else {
            break;
        };
        at += 1 + skip;
        last += 1;
        count += 1;
    }
    let (mut start, mut end) = (words[i].start, words[last].end);
    let plain = |s: &str| !s.contains(QUOTES);
    if plain(&name.prefix) && text[..start].ends_with(&name.prefix) {
        start -= name.prefix.len();
    }
    if at + 1 == name.words.len() && plain(&name.suffix) && text[end..].starts_with(&name.suffix) {
        end += name.suffix.len();
    }
    let joined = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    if joined(text[..start].chars().next_back()) || joined(text[end..].chars().next()) {
        return None;
    }
    let whole = count == name.words.len();
    // One word is a name only as written, and only to be quoted: a lone
    // word may as well be a keyword, a value or another name's part.
    let lone_ok = whole
        && name.written != name.text
        && text[start..end].to_lowercase() == name.text.to_lowercase();
    (count >= 2 || lone_ok).then_some(Found {
        name: n,
        start,
        end,
        next: last + 1,
        whole,
        words: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// DBBench's opening message: the table's name and its headers.
    static DBBENCH: &[NameRepair] = &[
        NameRepair {
            domain: "dbbench",
            tool: "execute_sql",
            argument: "query",
            before: "The name of this table is ",
            after: ", and the headers of this table are ",
            separator: "",
            quote: "`",
            bare: "_$",
        },
        NameRepair {
            domain: "dbbench",
            tool: "execute_sql",
            argument: "query",
            before: "the headers of this table are ",
            after: ".\n",
            separator: ",",
            quote: "`",
            bare: "_$",
        },
    ];

    /// AgentBench OS: paths the question gives in double quotes.
    static OS: &[NameRepair] = &[NameRepair {
        domain: "os",
        tool: "bash_action",
        argument: "script",
        before: "\"",
        after: "\"",
        separator: "",
        quote: "'",
        bare: "_./-+",
    }];

    fn opening(table: &str, headers: &str) -> String {
        format!(
            "Additional table information about the question: The name of this table is {table}, and the headers of this table are {headers}.\nQuestion: What is it?\n"
        )
    }

    fn sql(rules: &[NameRepair], opening: &str, query: &str) -> Option<String> {
        let mut args = json!({ "query": query }).as_object().unwrap().clone();
        apply(rules, "dbbench", "execute_sql", opening, &mut args)
            .then(|| args["query"].as_str().unwrap().to_string())
    }

    #[test]
    fn reads_the_table_and_headers_dbbench_states() {
        let o = opening(
            "Rocket Propelled Grenade (RPG) Weapons",
            "Name/ designation,Year of intro,No.,Type",
        );
        assert_eq!(
            stated(&DBBENCH[0], &o),
            ["Rocket Propelled Grenade (RPG) Weapons"]
        );
        assert_eq!(
            stated(&DBBENCH[1], &o),
            ["Name/ designation", "Year of intro", "No.", "Type"]
        );
        // A table name with a comma in it is still one name.
        let o = opening("Table of Year, Title, and Role", "Year,Title");
        assert_eq!(stated(&DBBENCH[0], &o), ["Table of Year, Title, and Role"]);
        assert!(stated(&DBBENCH[0], "Question: no table here").is_empty());
    }

    #[test]
    fn dbbench_quotes_an_unquoted_table_and_columns_with_spaces() {
        let o = opening(
            "Manager Changes",
            "Team,Outgoing manager,Date of appointment,Date of vacancy",
        );
        assert_eq!(
            sql(
                DBBENCH,
                &o,
                "SELECT Team FROM Manager Changes WHERE Outgoing manager = 'Manchester City' ORDER BY Date of appointment LIMIT 1;"
            )
            .as_deref(),
            Some(
                "SELECT Team FROM `Manager Changes` WHERE `Outgoing manager` = 'Manchester City' ORDER BY `Date of appointment` LIMIT 1;"
            )
        );
        let o = opening(
            "Football Match Results",
            "Team 1,Agg.,Team 2,1st leg,2nd leg",
        );
        assert_eq!(
            sql(
                DBBENCH,
                &o,
                "INSERT INTO Football Match Results (Team 1, Agg., Team 2, 1st leg, 2nd leg) VALUES ('Pelister', '1-3', 'Akademija Pandev', '0-1', '1-2')"
            )
            .as_deref(),
            Some(
                "INSERT INTO `Football Match Results` (`Team 1`, `Agg.`, `Team 2`, `1st leg`, `2nd leg`) VALUES ('Pelister', '1-3', 'Akademija Pandev', '0-1', '1-2')"
            )
        );
        // Marks inside a name: `/`, `-`, parentheses, `#`.
        let o = opening(
            "Jiu-Jitsu Championships Results",
            "Time/Retired,Uplink (MHz),Opponent#",
        );
        assert_eq!(
            sql(
                DBBENCH,
                &o,
                "SELECT Time/Retired FROM Jiu-Jitsu Championships Results WHERE Opponent# = 'x' ORDER BY Uplink (MHz) DESC"
            )
            .as_deref(),
            Some(
                "SELECT `Time/Retired` FROM `Jiu-Jitsu Championships Results` WHERE `Opponent#` = 'x' ORDER BY `Uplink (MHz)` DESC"
            )
        );
    }

    #[test]
    fn dbbench_maps_underscores_case_and_shortened_names_back() {
        let o = opening(
            "Rocket Propelled Grenade (RPG) Weapons",
            "Name/ designation,Year of intro,Country of origin,Primary cartridge,Type",
        );
        assert_eq!(
            sql(
                DBBENCH,
                &o,
                "SELECT Country_of_Origin FROM Rocket_Propelled_Grenade_Weapons WHERE Type = 'Disposable' AND Primary_Cartridge = '105mm' AND Year_of_Intro < 2008"
            )
            .as_deref(),
            Some(
                "SELECT `Country of origin` FROM `Rocket Propelled Grenade (RPG) Weapons` WHERE Type = 'Disposable' AND `Primary cartridge` = '105mm' AND `Year of intro` < 2008"
            )
        );
        // A word dropped from the table's name; an identifier in another
        // case goes back to the stated case, unquoted.
        let o = opening("Military Leaders Table", "Number,Name");
        assert_eq!(
            sql(
                DBBENCH,
                &o,
                "SELECT Name FROM Military Leaders ORDER BY Number"
            )
            .as_deref(),
            Some("SELECT Name FROM `Military Leaders Table` ORDER BY Number")
        );
        let o = opening("Football_Stats", "Season,Team");
        assert_eq!(
            sql(DBBENCH, &o, "SELECT Team FROM football_stats").as_deref(),
            Some("SELECT Team FROM Football_Stats")
        );
        // The table and a header share words: the header spelled whole wins
        // over the table shortened, though two rules state them.
        let o = opening(
            "Historic England Listed Buildings",
            "Name,Year Listed,Historic England Description",
        );
        assert_eq!(
            sql(
                DBBENCH,
                &o,
                "SELECT Historic England Description FROM Historic England Listed Buildings"
            )
            .as_deref(),
            Some("SELECT `Historic England Description` FROM `Historic England Listed Buildings`")
        );
        // A name both rules state (the table's name is also a header) is
        // one name, not two that fit equally.
        let o = opening("IME Exchange (spot)", "IME Exchange (spot),2008/09");
        assert_eq!(
            sql(DBBENCH, &o, "SELECT 2008/09 FROM IME Exchange").as_deref(),
            Some("SELECT `2008/09` FROM `IME Exchange (spot)`")
        );
        // Of two headers sharing words, the one spelled whole wins.
        let o = opening("T", "Date of vacancy,Date of appointment");
        assert_eq!(
            sql(DBBENCH, &o, "SELECT * FROM T ORDER BY Date of appointment").as_deref(),
            Some("SELECT * FROM T ORDER BY `Date of appointment`")
        );
    }

    #[test]
    fn dbbench_leaves_correct_quoted_and_ambiguous_text_alone() {
        let o = opening(
            "Olympic Medals",
            "Rank,Nation,Gold,Total,Home team,Date of vacancy,Date of appointment",
        );
        for query in [
            // Quoted as it should be.
            "SELECT `Nation` FROM `Olympic Medals` WHERE `Home team` = 'x'",
            // A value that happens to spell a name is a value.
            "SELECT Nation FROM `Olympic Medals` WHERE Nation = 'Olympic Medals' OR Nation = \"Home team\"",
            // One-word names are left alone, keyword or not.
            "SELECT rank, TOTAL FROM `Olympic Medals` ORDER BY Gold",
            // A word of a name inside another identifier.
            "SELECT COUNT(*) AS total_gold FROM `Olympic Medals`",
            // Two names fit equally: nothing is guessed.
            "SELECT Date of FROM `Olympic Medals`",
            // One word of a two-word name is not that name.
            "SELECT Home FROM `Olympic Medals`",
            // The later words of a name without its first.
            "SELECT of appointment FROM `Olympic Medals`",
        ] {
            assert_eq!(sql(DBBENCH, &o, query), None, "{query}");
        }
        // A column list is not the table whose name holds those words.
        let list = opening("Table of Year, Title, and Role", "Year,Title,Role");
        for query in [
            "INSERT INTO `Table of Year, Title, and Role` (Year, Title, Role) VALUES ('1', 'a', 'b')",
            "SELECT Title, Role FROM `Table of Year, Title, and Role`",
        ] {
            assert_eq!(sql(DBBENCH, &list, query), None, "{query}");
        }
        // Written unquoted with a word dropped, it is that table.
        assert_eq!(
            sql(
                DBBENCH,
                &list,
                "INSERT INTO Table of Year, Title, Role VALUES ('1', 'a', 'b')"
            )
            .as_deref(),
            Some("INSERT INTO `Table of Year, Title, and Role` VALUES ('1', 'a', 'b')")
        );
        // An escaped quote does not end a value.
        assert_eq!(
            sql(
                DBBENCH,
                &o,
                r"SELECT 1 FROM `Olympic Medals` WHERE Nation = 'it\'s Home team'"
            ),
            None
        );
        // Other tools, arguments and domains are not repaired.
        let mut args = json!({"answers": ["Olympic Medals"]})
            .as_object()
            .unwrap()
            .clone();
        assert!(!apply(
            DBBENCH,
            "dbbench",
            "commit_final_answer",
            &o,
            &mut args
        ));
        let mut args = json!({"query": "SELECT 1 FROM Olympic Medals"})
            .as_object()
            .unwrap()
            .clone();
        assert!(!apply(DBBENCH, "retail", "execute_sql", &o, &mut args));
        assert!(!apply(&[], "dbbench", "execute_sql", &o, &mut args));
    }

    #[test]
    fn spellings_never_overlap() {
        // `//b` would reach back over the `/` that ends `a/`.
        let names: Vec<Name> = ["a/", "//b"]
            .iter()
            .filter_map(|n| Name::new(n, "`", "_"))
            .collect();
        assert_eq!(repair("a//b", &names).as_deref(), Some("`a/`/b"));
        assert_eq!(repair("x", &[]), None);
    }

    fn bash(opening: &str, script: &str) -> Option<String> {
        let mut args = json!({ "script": script }).as_object().unwrap().clone();
        apply(OS, "os", "bash_action", opening, &mut args)
            .then(|| args["script"].as_str().unwrap().to_string())
    }

    #[test]
    fn os_quotes_a_stated_path_and_maps_its_underscores_back() {
        let o = "Now, I will start a new problem in a new OS. My problem is:\n\nHow many lines does \"/root/my notes.txt\" have?";
        assert_eq!(
            bash(o, "wc -l /root/my notes.txt").as_deref(),
            Some("wc -l '/root/my notes.txt'")
        );
        assert_eq!(
            bash(o, "cat /root/my_notes.txt | wc -l").as_deref(),
            Some("cat '/root/my notes.txt' | wc -l")
        );
        // Already quoted, or a path needing no quotes: untouched.
        assert_eq!(bash(o, "wc -l \"/root/my notes.txt\""), None);
        let o = "My problem is:\n\nCount the files in \"/var/log/app\".";
        assert_eq!(bash(o, "find /var/log/app -type f | wc -l"), None);
    }
}
