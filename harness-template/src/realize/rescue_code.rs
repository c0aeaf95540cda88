//! Why: asked to operate a database or a shell, models often write the code
//! into their message (a ```sql or ```bash block, or a bare SQL statement)
//! instead of calling the tool; the environment then runs nothing and the
//! turn is lost. The first block in one of the domain's fence languages
//! (what the task's prompt promises to run) becomes the call. Only for
//! domains listed in `tables::CODE_RESCUE`.

use serde_json::{Map, Value};

use crate::tables::{CODE_RESCUE, CodeRescue};
use crate::text::domain_matches;
use crate::types::Call;
use crate::view::Tools;

pub fn rescue(domain: &str, tools: &Tools, text: &str) -> Option<Call> {
    let rule = CODE_RESCUE
        .iter()
        .find(|r| domain_matches(r.domain, domain) && tools.knows(r.tool))?;
    let code = fenced_code(rule, text).or_else(|| bare_statement(rule, text))?;
    let mut args = Map::new();
    args.insert(rule.argument.to_string(), Value::String(code));
    Some(Call {
        id: "rescued_code".into(),
        name: rule.tool.to_string(),
        arguments: Value::Object(args).to_string(),
    })
}

/// The body of the first fenced block in one of the rule's languages,
/// trimmed.
fn fenced_code(rule: &CodeRescue, text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let (lang, body) = after.split_once('\n')?;
        let close = body.find("```")?;
        let lang = lang.trim().to_ascii_lowercase();
        if rule.fences.contains(&lang.as_str()) {
            let code = body[..close].trim();
            return (!code.is_empty()).then(|| code.to_string());
        }
        rest = &body[close + 3..];
    }
    None
}

/// A message that is nothing but one statement: it starts with a keyword
/// and has a clause word (`FROM`, `INTO`, `SET`, `TABLE`), or is a
/// `SHOW`/`DESCRIBE`; prose such as "Update complete." is left alone.
fn bare_statement(rule: &CodeRescue, text: &str) -> Option<String> {
    let t = text.trim();
    let words: Vec<String> = t
        .split_whitespace()
        .map(|w| w.to_ascii_uppercase())
        .collect();
    let first = words.first()?.as_str();
    let one_statement = !t.trim_end_matches(';').contains(';') && t.lines().count() <= 3;
    let clause = matches!(first, "SHOW" | "DESCRIBE" | "DESC")
        || words
            .iter()
            .any(|w| matches!(w.as_str(), "FROM" | "INTO" | "SET" | "TABLE"));
    (rule.keywords.contains(&first) && one_statement && clause).then(|| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    fn tools(name: &str) -> Tools {
        Tools::new(vec![ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: "{}".into(),
            mutates: true,
        }])
    }

    #[test]
    fn rescues_fenced_and_bare_sql_only_in_its_domain() {
        let tools = tools("execute_sql");
        let fenced = "I will count them.\n```sql\nSELECT COUNT(*) FROM `T`;\n```\nThen commit.";
        let call = rescue("dbbench", &tools, fenced).expect("fenced");
        assert_eq!(call.name, "execute_sql");
        assert_eq!(call.arguments, r#"{"query":"SELECT COUNT(*) FROM `T`;"}"#);
        let bare = rescue("dbbench", &tools, "select `A` from `T` where `B` = 'x'").expect("bare");
        assert_eq!(
            bare.arguments,
            r#"{"query":"select `A` from `T` where `B` = 'x'"}"#
        );
        assert!(rescue("retail", &tools, fenced).is_none(), "other domains");
        assert!(rescue("dbbench", &tools, "The answer is 12.").is_none());
        assert!(rescue("dbbench", &tools, "Update complete.").is_none());
        assert!(rescue("dbbench", &tools, "Selecting the rows now; then I update.").is_none());
        assert!(rescue("dbbench", &tools, "```python\nprint(1)\n```").is_none());
        assert!(rescue("dbbench", &tools, "```bash\nls\n```").is_none());
    }

    #[test]
    fn rescues_only_fenced_shell_code_in_the_os_domain() {
        let tools = tools("bash_action");
        let text = "Think: count them.\n\nAct: bash\n\n```bash\nfind /etc -type f | wc -l\n```";
        let call = rescue("os", &tools, text).expect("fenced bash");
        assert_eq!(call.name, "bash_action");
        assert_eq!(call.arguments, r#"{"script":"find /etc -type f | wc -l"}"#);
        // A multi-line script stays whole; the first shell block wins.
        let two = "```sh\ncd /tmp\nls -a\n```\nthen\n```bash\nrm x\n```";
        assert_eq!(
            rescue("os", &tools, two).unwrap().arguments,
            r#"{"script":"cd /tmp\nls -a"}"#
        );
        // No bare commands: prose that starts like one stays prose.
        assert!(rescue("os", &tools, "ls shows three files.").is_none());
        assert!(rescue("os", &tools, "```python\nprint(1)\n```").is_none());
        assert!(rescue("os", &tools, "```bash\n\n```").is_none());
        assert!(rescue("dbbench", &tools, "```bash\nls\n```").is_none());
    }
}
