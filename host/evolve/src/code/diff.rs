//! Unified, `git apply`-able patches of a file tree (relative path →
//! bytes): what a coder changed under `src/`. The line matching is the
//! `similar` crate's Myers diff (O((N+M)·D), D the edit size); this module
//! only writes the git-style headers and hunks.

use std::collections::{BTreeMap, BTreeSet};

/// A file tree: relative path (with `/`) → content.
pub type Tree = BTreeMap<String, Vec<u8>>;

/// Lines of context around each change.
pub const CONTEXT: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Old line i equals new line j.
    Eq(usize, usize),
    Del(usize),
    Ins(usize),
}

/// Paths that differ between two trees (added, removed or modified), sorted.
pub fn changed_paths(before: &Tree, after: &Tree) -> Vec<String> {
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

/// A git-style unified patch turning `before` into `after` (empty when they
/// are equal). Paths are written as `a/<path>` / `b/<path>`, so the patch
/// applies with `git apply` (or `patch -p1`) at the tree's root.
pub fn diff_trees(before: &Tree, after: &Tree) -> String {
    let mut out = String::new();
    for path in changed_paths(before, after) {
        out += &diff_file(&path, before.get(&path), after.get(&path));
    }
    out
}

fn diff_file(path: &str, old: Option<&Vec<u8>>, new: Option<&Vec<u8>>) -> String {
    let mut out = format!("diff --git a/{path} b/{path}\n");
    match (old, new) {
        (None, Some(_)) => out += "new file mode 100644\n",
        (Some(_), None) => out += "deleted file mode 100644\n",
        _ => {}
    }
    let old_text = old.map(|b| std::str::from_utf8(b));
    let new_text = new.map(|b| std::str::from_utf8(b));
    if matches!(old_text, Some(Err(_))) || matches!(new_text, Some(Err(_))) {
        let a = if old.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".into()
        };
        let b = if new.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".into()
        };
        out += &format!("Binary files {a} and {b} differ\n");
        return out;
    }
    let old_s = old_text.and_then(Result::ok).unwrap_or("");
    let new_s = new_text.and_then(Result::ok).unwrap_or("");
    let hunks = hunks(old_s, new_s, CONTEXT);
    if hunks.is_empty() {
        // A new or deleted empty file: the header says it all.
        return out;
    }
    out += &format!(
        "--- {}\n+++ {}\n",
        if old.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".into()
        },
        if new.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".into()
        },
    );
    out += &hunks;
    out
}

/// Lines with their terminators (the last one may lack `\n`).
fn lines(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

fn edit_script(a: &[&str], b: &[&str]) -> Vec<Op> {
    use similar::{Algorithm, DiffOp, capture_diff_slices};
    let mut ops = Vec::with_capacity(a.len().max(b.len()));
    for op in capture_diff_slices(Algorithm::Myers, a, b) {
        match op {
            DiffOp::Equal {
                old_index,
                new_index,
                len,
            } => ops.extend((0..len).map(|k| Op::Eq(old_index + k, new_index + k))),
            DiffOp::Delete {
                old_index, old_len, ..
            } => ops.extend((old_index..old_index + old_len).map(Op::Del)),
            DiffOp::Insert {
                new_index, new_len, ..
            } => ops.extend((new_index..new_index + new_len).map(Op::Ins)),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => {
                ops.extend((old_index..old_index + old_len).map(Op::Del));
                ops.extend((new_index..new_index + new_len).map(Op::Ins));
            }
        }
    }
    ops
}

fn push_line(out: &mut String, mark: char, line: &str) {
    out.push(mark);
    match line.strip_suffix('\n') {
        Some(body) => {
            out.push_str(body);
            out.push('\n');
        }
        None => {
            out.push_str(line);
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

fn range(start: usize, count: usize) -> String {
    // `start` is the 0-based position before the hunk; a non-empty range is
    // written 1-based, an empty one names the line before it.
    let first = if count == 0 { start } else { start + 1 };
    if count == 1 {
        format!("{first}")
    } else {
        format!("{first},{count}")
    }
}

/// The `@@` hunks of a text diff (empty when equal).
fn hunks(old: &str, new: &str, context: usize) -> String {
    let (a, b) = (lines(old), lines(new));
    let ops = edit_script(&a, &b);
    let changes: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !matches!(op, Op::Eq(..)))
        .map(|(k, _)| k)
        .collect();
    if changes.is_empty() {
        return String::new();
    }
    // Old/new positions before each op.
    let mut pos = Vec::with_capacity(ops.len() + 1);
    let (mut oi, mut nj) = (0usize, 0usize);
    for op in &ops {
        pos.push((oi, nj));
        match op {
            Op::Eq(..) => {
                oi += 1;
                nj += 1;
            }
            Op::Del(_) => oi += 1,
            Op::Ins(_) => nj += 1,
        }
    }
    pos.push((oi, nj));
    // Group changes whose gap of equal lines is at most 2 × context.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &k in &changes {
        match groups.last_mut() {
            Some((_, last)) if k - *last <= 2 * context + 1 => *last = k,
            _ => groups.push((k, k)),
        }
    }
    let mut out = String::new();
    for (first, last) in groups {
        let start = first.saturating_sub(context);
        let end = (last + 1 + context).min(ops.len());
        let (o0, n0) = pos[start];
        let (o1, n1) = pos[end];
        out += &format!("@@ -{} +{} @@\n", range(o0, o1 - o0), range(n0, n1 - n0));
        for op in &ops[start..end] {
            match *op {
                Op::Eq(i, _) => push_line(&mut out, ' ', a[i]),
                Op::Del(i) => push_line(&mut out, '-', a[i]),
                Op::Ins(j) => push_line(&mut out, '+', b[j]),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn tree(files: &[(&str, &str)]) -> Tree {
        files
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect()
    }

    fn write_tree(root: &std::path::Path, t: &Tree) {
        for (p, c) in t {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, c).unwrap();
        }
    }

    fn read_tree(root: &std::path::Path, dir: &str) -> Tree {
        let mut out = Tree::new();
        let base = root.join(dir);
        let mut stack = vec![base.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/");
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    /// Applying the patch with `git apply` to `before` gives `after`.
    fn round_trip(before: &Tree, after: &Tree) -> String {
        let patch = diff_trees(before, after);
        let dir = tempfile::tempdir().unwrap();
        write_tree(dir.path(), before);
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("p.patch"), &patch).unwrap();
        let out = Command::new("git")
            .args(["apply", "p.patch"])
            .current_dir(dir.path())
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git apply failed: {}\n{patch}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(&read_tree(dir.path(), "src"), after, "{patch}");
        patch
    }

    #[test]
    fn equal_trees_have_an_empty_diff() {
        let t = tree(&[("src/a.rs", "fn a() {}\n")]);
        assert_eq!(diff_trees(&t, &t), "");
        assert!(changed_paths(&t, &t).is_empty());
    }

    #[test]
    fn a_one_line_change_is_a_small_hunk() {
        let old: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 10\n", "line ten\n");
        let before = tree(&[("src/a.rs", &old)]);
        let after = tree(&[("src/a.rs", &new)]);
        let patch = round_trip(&before, &after);
        assert!(patch.contains("@@ -7,7 +7,7 @@"), "{patch}");
        assert!(patch.contains("-line 10\n+line ten\n"), "{patch}");
        assert_eq!(patch.lines().filter(|l| l.starts_with(' ')).count(), 6);
    }

    #[test]
    fn patches_apply_for_adds_deletes_moves_and_missing_newlines() {
        let old: String = (1..=40).map(|i| format!("l{i}\n")).collect();
        let mut new = old
            .replace("l3\n", "")
            .replace("l30\n", "l30\nnew a\nnew b\n");
        new.push_str("tail without newline");
        let before = tree(&[
            ("src/a.rs", &old),
            ("src/gone.rs", "bye\n"),
            ("src/same.rs", "same\n"),
            ("src/nonl.rs", "x\ny"),
        ]);
        let after = tree(&[
            ("src/a.rs", &new),
            ("src/same.rs", "same\n"),
            ("src/new/mod.rs", "pub fn f() {}\n"),
            ("src/nonl.rs", "x\nz\n"),
        ]);
        let patch = round_trip(&before, &after);
        assert!(patch.contains("new file mode"), "{patch}");
        assert!(patch.contains("deleted file mode"), "{patch}");
        assert!(!patch.contains("same.rs"), "{patch}");
        assert_eq!(
            changed_paths(&before, &after),
            vec!["src/a.rs", "src/gone.rs", "src/new/mod.rs", "src/nonl.rs"]
        );
    }

    #[test]
    fn reordered_lines_round_trip() {
        let before = tree(&[("src/t.rs", "a\nb\nc\nd\ne\nf\ng\nh\n")]);
        let after = tree(&[("src/t.rs", "h\nb\nc\nx\ne\nf\na\n")]);
        round_trip(&before, &after);
    }
}
