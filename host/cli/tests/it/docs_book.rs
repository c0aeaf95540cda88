//! The book as readers get it: built with mdBook (the version
//! scripts/test-deps.sh pins and installs), and every relative link of the
//! built HTML checked — its file exists inside the book and its `#anchor`
//! is an id of that page. The markdown check (`docs`) cannot see what the
//! build does: a link to a file outside `docs/src` resolves in the
//! repository but not on the published book.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::support::repo_root;

/// The mdBook version scripts/test-deps.sh installs (its `MDBOOK_VERSION`).
fn pinned_mdbook() -> String {
    let script = repo_root().join("scripts/test-deps.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("readonly MDBOOK_VERSION="))
        .unwrap_or_else(|| panic!("{} pins no MDBOOK_VERSION", script.display()))
        .trim()
        .to_string()
}

/// Build the book into `out` with the pinned mdBook.
fn build_book(out: &Path) {
    let pinned = pinned_mdbook();
    let version = Command::new("mdbook").arg("--version").output();
    let have = match &version {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => String::from("none"),
    };
    assert!(
        have == format!("mdbook v{pinned}"),
        "the book's build needs mdbook {pinned} on PATH (found: {have}); \
         `bash scripts/test-deps.sh` installs it"
    );
    let built = Command::new("mdbook")
        .arg("build")
        .arg(repo_root().join("docs"))
        .arg("--dest-dir")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "mdbook build docs: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// The values of attribute `name` in `html` (double-quoted, as mdBook
/// writes them), entities `&amp;` and `&quot;` decoded.
fn attributes(html: &str, name: &str) -> Vec<String> {
    let needle = format!(" {name}=\"");
    html.match_indices(needle.as_str())
        .filter_map(|(at, _)| {
            let value = &html[at + needle.len()..];
            value.find('"').map(|end| &value[..end])
        })
        .map(|v| v.replace("&amp;", "&").replace("&quot;", "\""))
        .collect()
}

/// `%xx` escapes decoded (mdBook escapes spaces and non-ASCII in links).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` with `.` and `..` resolved, or `None` when it climbs out of
/// `root`.
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.strip_prefix(root).ok()?.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(root.join(out))
}

fn html_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            html_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "html") {
            out.push(p);
        }
    }
}

/// Every broken relative link of the built book at `root`, as
/// `page: href (why)`, and how many links were checked.
fn broken_links(root: &Path) -> (Vec<String>, usize) {
    let mut pages = Vec::new();
    html_files(root, &mut pages);
    let mut ids: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut ids_of = |page: &Path| -> BTreeSet<String> {
        ids.entry(page.to_path_buf())
            .or_insert_with(|| {
                let html = std::fs::read_to_string(page).unwrap_or_default();
                attributes(&html, "id").into_iter().collect()
            })
            .clone()
    };
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let html = std::fs::read_to_string(page).unwrap();
        let shown = page.strip_prefix(root).unwrap().display().to_string();
        let links = attributes(&html, "href")
            .into_iter()
            .chain(attributes(&html, "src"));
        for link in links {
            let scheme = link.split(['/', '#', '?']).next().unwrap_or_default();
            if link.starts_with("//") || scheme.contains(':') {
                continue;
            }
            checked += 1;
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let path = percent_decoded(path.split('?').next().unwrap_or_default());
            // The 404 page's links (under `<base href="/">`) start at the
            // book's root, where mdBook's default site-url serves it.
            let joined = match path.strip_prefix('/') {
                Some(from_root) => root.join(from_root),
                None => page.parent().unwrap().join(&path),
            };
            let target = if path.is_empty() {
                page.clone()
            } else {
                match inside(root, &joined) {
                    Some(t) if t.is_dir() => t.join("index.html"),
                    Some(t) => t,
                    None => {
                        broken.push(format!("{shown}: {link} (outside the book)"));
                        continue;
                    }
                }
            };
            if !target.is_file() {
                broken.push(format!("{shown}: {link} (no such file)"));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "html")
                && !ids_of(&target).contains(&percent_decoded(anchor))
            {
                broken.push(format!("{shown}: {link} (no such anchor)"));
            }
        }
    }
    (broken, checked)
}

#[test]
fn the_built_book_has_no_broken_link() {
    let out = tempfile::tempdir().unwrap();
    build_book(out.path());
    assert!(
        out.path().join("index.html").is_file(),
        "mdbook wrote no index.html"
    );
    let (broken, checked) = broken_links(out.path());
    assert!(checked > 1000, "only {checked} links checked");
    eprintln!("{checked} links of the built book checked");
    assert!(
        broken.is_empty(),
        "{} broken link(s) in the built book (a link must stay inside docs/src: \
         point at code with a full URL or name it in `code`):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_link_check_finds_a_missing_page_a_missing_anchor_and_a_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("book");
    std::fs::create_dir_all(root.join("guides")).unwrap();
    std::fs::write(
        root.join("index.html"),
        "<h1 id=\"top\">x</h1><a href=\"guides/a.html#part-two\">ok</a> \
         <a href=\"guides/a.html#gone\">bad anchor</a> <a href=\"#top\">ok</a> \
         <a href=\"https://example.org/x\">web</a> <img src=\"missing.png\"> \
         <a href=\"/guides/a.html#part-two\">404 page's</a>",
    )
    .unwrap();
    std::fs::write(
        root.join("guides/a.html"),
        "<h2 id=\"part-two\">y</h2><a href=\"../index.html\">ok</a> \
         <a href=\"../../host/src/lib.rs\">out</a> <a href=\"b%20c.html\">bad</a>",
    )
    .unwrap();
    let (mut broken, checked) = broken_links(&root);
    broken.sort();
    assert_eq!(checked, 8);
    assert_eq!(
        broken,
        [
            "guides/a.html: ../../host/src/lib.rs (outside the book)",
            "guides/a.html: b%20c.html (no such file)",
            "index.html: guides/a.html#gone (no such anchor)",
            "index.html: missing.png (no such file)",
        ]
    );
}
