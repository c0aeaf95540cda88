//! The one line an error prints at the binary's edge.
//!
//! Why not anyhow's `{:#}` as is: it appends every cause's text after the
//! context, and many of this project's typed errors (a `thiserror` message
//! like `read {path}: {source}`) already end with their cause, which then
//! printed twice ("…: No such file or directory (os error 2): No such file
//! or directory (os error 2)").

/// The error and each cause not already part of the text before it,
/// joined by `: `.
pub fn render(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[derive(Debug, thiserror::Error)]
    #[error("read {path}: {source}")]
    struct Read {
        path: String,
        #[source]
        source: std::io::Error,
    }

    fn missing() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory")
    }

    #[test]
    fn a_cause_already_in_its_message_prints_once() {
        let e = Err::<(), _>(Read {
            path: "/r/config.json".into(),
            source: missing(),
        })
        .context("reading run directory /r")
        .unwrap_err();
        assert_eq!(
            render(&e),
            "reading run directory /r: read /r/config.json: No such file or directory"
        );
    }

    #[test]
    fn a_cause_not_in_the_message_is_kept() {
        let e = Err::<(), _>(missing())
            .context("opening the store")
            .unwrap_err();
        assert_eq!(render(&e), "opening the store: No such file or directory");
        let e = anyhow::Error::new(missing())
            .context("inner")
            .context("outer");
        assert_eq!(render(&e), "outer: inner: No such file or directory");
    }
}
