//! Why: AgentBench's first OS protocol, the one its paper and most agent
//! transcripts use, has the model write `Act: answer(12)` or `Act: finish`
//! in its message instead of calling a tool; models that learned it keep
//! doing so when offered function calls, and the environment then ends the
//! episode without an answer. The last `Act:` line of a message is the
//! action the model means (as that protocol read it); `Act: bash` is left
//! to the code rescue of its fenced block.

use serde_json::{Map, Value};

use crate::tables::ACT_RESCUE;
use crate::text::domain_matches;
use crate::types::Call;
use crate::view::Tools;

pub fn rescue(domain: &str, tools: &Tools, text: &str) -> Option<Call> {
    let act = text
        .lines()
        .rev()
        .find_map(|l| strip_label(l.trim(), "act:"))?
        .trim();
    let word: String = act
        .chars()
        .take_while(|c| c.is_ascii_alphabetic() || *c == '_')
        .collect::<String>()
        .to_ascii_lowercase();
    let rule = ACT_RESCUE
        .iter()
        .find(|r| domain_matches(r.domain, domain) && r.act == word && tools.knows(r.tool))?;
    let value = match (act.find('('), act.rfind(')')) {
        (Some(open), Some(close)) if open < close => act[open + 1..close].trim().to_string(),
        _ => text
            .lines()
            .find_map(|l| strip_label(l.trim(), "think:"))
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| word.clone()),
    };
    let mut args = Map::new();
    args.insert(rule.argument.to_string(), Value::String(value));
    Some(Call {
        id: "rescued_act".into(),
        name: rule.tool.to_string(),
        arguments: Value::Object(args).to_string(),
    })
}

/// The rest of `line` after a case-insensitive `label`.
fn strip_label<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let head = line.get(..label.len())?;
    head.eq_ignore_ascii_case(label)
        .then(|| &line[label.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    fn tools() -> Tools {
        Tools::new(
            ["bash_action", "answer_action", "finish_action"]
                .iter()
                .map(|n| ToolSpec {
                    name: n.to_string(),
                    description: String::new(),
                    parameters: "{}".into(),
                    mutates: true,
                })
                .collect(),
        )
    }

    fn args(call: &Call) -> Value {
        serde_json::from_str(&call.arguments).unwrap()
    }

    #[test]
    fn answer_and_finish_written_as_text_become_calls() {
        let t = tools();
        let a = rescue(
            "os",
            &t,
            "Think: Now I get the answer, it is 220.\n\nAct: answer(220)",
        )
        .expect("answer");
        assert_eq!(a.name, "answer_action");
        assert_eq!(args(&a), serde_json::json!({"answer": "220"}));
        // Between the first '(' and the last ')', as the protocol reads it.
        let p = rescue("os", &t, "act: Answer( (a) and (b) )").unwrap();
        assert_eq!(args(&p), serde_json::json!({"answer": "(a) and (b)"}));
        let f = rescue("os", &t, "Think: The file is created.\n\nAct: finish").expect("finish");
        assert_eq!(f.name, "finish_action");
        assert_eq!(
            args(&f),
            serde_json::json!({"thought": "The file is created."})
        );
        // The last Act line is the action.
        let last = rescue("os", &t, "Act: bash\n```bash\nls\n```\nAct: answer(3)").unwrap();
        assert_eq!(last.name, "answer_action");
    }

    #[test]
    fn leaves_everything_else_alone() {
        let t = tools();
        // `Act: bash` is the code rescue's.
        assert!(rescue("os", &t, "Act: bash\n\n```bash\nls\n```").is_none());
        assert!(rescue("os", &t, "The answer is 220.").is_none());
        assert!(rescue("os", &t, "Act: dance").is_none());
        assert!(rescue("os", &t, "Contract: answer(1)").is_none());
        assert!(rescue("dbbench", &t, "Act: answer(220)").is_none());
        let no_tools = Tools::new(vec![]);
        assert!(rescue("os", &no_tools, "Act: answer(220)").is_none());
    }
}
