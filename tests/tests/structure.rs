#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The code's structure, checked from its text: no crate's modules import
//! each other in a circle, and `fs`'s files import only from their own layer
//! of fs/README.md or lower ones. Reads the sources; needs no root or FUSE.
//!
//! An import is a `use` of a `crate::`, `super::` or `self::` path, or of a
//! path starting at a child module, or a `crate::`/`super::` path written out
//! in code (inline modules such as `mod tests {…}` are skipped); it is an
//! edge from the importing file to the file of the module the path names
//! (its longest prefix that is a module: importing a re-export depends on the
//! module that re-exports it). A parent declaring `mod child;` or using its
//! descendants' items is nesting, no edge; a child importing its parent's
//! items (`use super::*` included) is an edge.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Workspace members outside vendor/.
fn crates(root: &Path) -> Vec<String> {
    let toml = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let start = toml.find("members").expect("members");
    let list = &toml[start..];
    let list = &list[list.find('[').expect("[")..list.find(']').expect("]")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| !m.starts_with("vendor/"))
        .map(str::to_string)
        .collect()
}

/// The text with comments, strings and character literals blanked out.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime.
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            // Copy a whole UTF-8 character.
            let ch = src[i..].chars().next().expect("char");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// A module-level item the check cares about.
enum Item {
    /// `mod name;`, with its `#[path]` if any.
    Mod(String, Option<String>),
    /// The tree of a `use`, after the keyword.
    Use(String),
}

/// The `mod name;` and `use …;` items at brace depth 0 of stripped text.
fn items(text: &str) -> Vec<Item> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let mut path_attr: Option<String> = None;
    let mut raw = String::new();
    while i < b.len() {
        let c = b[i];
        match c {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        let word_start = is_ident(c) && (i == 0 || !is_ident(b[i - 1]));
        if depth == 0 && c == b'#' && text[i..].starts_with("#[path") {
            // The path string was blanked; read it from the raw line later.
            raw.clear();
            path_attr = Some(String::new());
        }
        if depth == 0 && word_start && text[i..].starts_with("use") && !is_ident(b[i + 3]) {
            let end = text[i..].find(';').map_or(b.len(), |e| i + e);
            out.push(Item::Use(text[i + 3..end].to_string()));
            i = end;
            continue;
        }
        // A path written out in code (`crate::dirs::PlusHints`) depends on
        // its module as an import does.
        if word_start
            && (text[i..].starts_with("crate::") || text[i..].starts_with("super::"))
            && (i < 2 || &text[i - 2..i] != "::")
            && (i == 0 || b[i - 1] != b'$')
        {
            let end = text[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(b.len(), |e| i + e);
            out.push(Item::Use(text[i..end].trim_end_matches(':').to_string()));
            i = end;
            continue;
        }
        if depth == 0 && word_start && text[i..].starts_with("mod") && !is_ident(b[i + 3]) {
            let rest = &text[i + 3..];
            let name: String = rest
                .trim_start()
                .bytes()
                .take_while(|&c| is_ident(c))
                .map(char::from)
                .collect();
            let after = rest.trim_start()[name.len()..].trim_start();
            if after.starts_with(';') {
                out.push(Item::Mod(name, path_attr.take()));
            } else {
                // An inline module (`mod tests {…}`): its imports are its own.
                path_attr = None;
                if let Some(open) = text[i..].find('{') {
                    let mut d = 0usize;
                    let mut j = i + open;
                    while j < b.len() {
                        match b[j] {
                            b'{' => d += 1,
                            b'}' => {
                                d -= 1;
                                if d == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    i = j + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

/// The `#[path = "…"]` strings of a file, in order (strings are blanked in
/// the stripped text, so they are read from the source).
fn path_attrs(src: &str) -> Vec<String> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("#[path"))
        .filter_map(|l| l.split('"').nth(1))
        .map(str::to_string)
        .collect()
}

/// The paths a use tree names, as segment lists (`a::{b, c::*}` gives
/// `[a, b]` and `[a, c, *]`; `as` renames are kept as the last element
/// `as:name`).
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    let mut tokens = Vec::new();
    let b = tree.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if is_ident(c) {
            let s = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            tokens.push(tree[s..i].to_string());
            continue;
        }
        if matches!(c, b'{' | b'}' | b',' | b'*') {
            tokens.push((c as char).to_string());
        }
        i += 1;
    }
    let mut out = Vec::new();
    let mut pos = 0;
    parse_tree(&tokens, &mut pos, &[], &mut out);
    out
}

fn parse_tree(t: &[String], pos: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    while *pos < t.len() {
        let tok = &t[*pos];
        *pos += 1;
        match tok.as_str() {
            "{" => {
                loop {
                    parse_tree(t, pos, &path, out);
                    match t.get(*pos).map(String::as_str) {
                        Some(",") => *pos += 1,
                        Some("}") => {
                            *pos += 1;
                            break;
                        }
                        _ => break,
                    }
                }
                return;
            }
            "}" | "," => {
                *pos -= 1;
                break;
            }
            "as" => {
                if let Some(name) = t.get(*pos) {
                    path.push(format!("as:{name}"));
                    *pos += 1;
                }
            }
            _ => path.push(tok.clone()),
        }
    }
    if path.len() > prefix.len() {
        out.push(path);
    }
}

/// One crate (a library or a binary) as modules.
#[derive(Default)]
struct Tree {
    /// Module path (`a::b`) to the files that define it (two when `cfg`
    /// picks one of two files).
    files: BTreeMap<Vec<String>, Vec<String>>,
    /// File to its module path and the paths it imports.
    uses: BTreeMap<String, (Vec<String>, Vec<Vec<String>>)>,
}

fn load(tree: &mut Tree, root: &Path, file: &Path, module: Vec<String>, mod_rs: bool) {
    let rel = file
        .strip_prefix(root)
        .unwrap_or(file)
        .to_string_lossy()
        .into_owned();
    let Ok(src) = std::fs::read_to_string(file) else {
        return;
    };
    let text = strip(&src);
    let dir = file.parent().expect("a file has a directory").to_path_buf();
    let child_dir = if mod_rs {
        dir.clone()
    } else {
        dir.join(file.file_stem().expect("stem"))
    };
    let mut attrs = path_attrs(&src).into_iter();
    let mut uses = Vec::new();
    tree.files
        .entry(module.clone())
        .or_default()
        .push(rel.clone());
    for item in items(&text) {
        match item {
            Item::Use(t) => uses.extend(use_paths(&t)),
            Item::Mod(name, attr) => {
                let mut m = module.clone();
                m.push(name.clone());
                if attr.is_some() {
                    if let Some(p) = attrs.next() {
                        let f = dir.join(&p);
                        let is_mod = f.file_name().is_some_and(|n| n == "mod.rs");
                        load(tree, root, &f, m, is_mod);
                    }
                    continue;
                }
                let flat = child_dir.join(format!("{name}.rs"));
                if flat.exists() {
                    load(tree, root, &flat, m, false);
                } else {
                    load(tree, root, &child_dir.join(&name).join("mod.rs"), m, true);
                }
            }
        }
    }
    tree.uses.insert(rel, (module, uses));
}

/// The absolute module-tree path a use path names, or None for another crate.
fn absolute(tree: &Tree, module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String>;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base = Vec::new();
            rest = &path[1..];
        }
        Some("self") => {
            base = module.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = module.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut m = module.to_vec();
            m.push(first.to_string());
            if !tree.files.contains_key(&m) {
                return None;
            }
            base = module.to_vec();
        }
        None => return None,
    }
    base.extend(rest.iter().filter(|s| !s.starts_with("as:")).cloned());
    Some(base)
}

/// The module an absolute path names: its longest prefix that is a module
/// (`crate::dirs::PlusHints` names `dirs`, whichever child defines it).
fn target(tree: &Tree, path: &[String]) -> Vec<String> {
    let mut k = path.len();
    while k > 0 && !tree.files.contains_key(&path[..k]) {
        k -= 1;
    }
    path[..k].to_vec()
}

/// Import edges between the files of one crate root.
fn edges(root: &Path, entry: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut tree = Tree::default();
    load(&mut tree, root, entry, Vec::new(), true);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, (module, uses)) in &tree.uses {
        let set = out.entry(file.clone()).or_default();
        for u in uses {
            let Some(abs) = absolute(&tree, module, u) else {
                continue;
            };
            let t = target(&tree, &abs);
            // A parent using what its own children define is nesting.
            if t.starts_with(module) {
                continue;
            }
            for f in tree.files.get(&t).into_iter().flatten() {
                if f != file {
                    set.insert(f.clone());
                }
            }
        }
    }
    out
}

/// Every crate root's import edges, keyed by the file.
fn all_edges() -> BTreeMap<String, BTreeSet<String>> {
    let root = workspace();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for krate in crates(&root) {
        let src = root.join(&krate).join("src");
        let mut entries = vec![src.join("lib.rs"), src.join("main.rs")];
        if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
            entries.extend(bins.flatten().map(|e| e.path()));
        }
        for entry in entries.into_iter().filter(|e| e.is_file()) {
            for (f, to) in edges(&root, &entry) {
                out.entry(f).or_default().extend(to);
            }
        }
    }
    out
}

/// Strongly connected components with more than one file (Tarjan's).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_import_circles() {
    let g = all_edges();
    assert!(g.len() > 100, "found only {} files", g.len());
    let bad = circles(&g);
    let text: Vec<String> = bad
        .iter()
        .map(|c| {
            let lines: Vec<String> = c
                .iter()
                .map(|f| {
                    let to: Vec<_> = g[f].iter().filter(|t| c.contains(t)).collect();
                    format!("  {f} -> {to:?}")
                })
                .collect();
            lines.join("\n")
        })
        .collect();
    assert!(bad.is_empty(), "import circles:\n{}", text.join("\n\n"));
}

/// fs/README.md's layers: each `## N. …` heading starts layer N, and each
/// table row under it names a file (or, ending in `/`, a folder) of
/// `fs/src/`.
fn fs_layers(readme: &str) -> Vec<(String, u32)> {
    let mut layer = None;
    let mut out = Vec::new();
    for line in readme.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            layer = h
                .split('.')
                .next()
                .and_then(|n| n.trim().parse::<u32>().ok());
        } else if let (Some(l), Some(row)) = (layer, line.strip_prefix("| `")) {
            if let Some(end) = row.find('`') {
                out.push((format!("fs/src/{}", &row[..end]), l));
            }
        }
    }
    out
}

#[test]
fn fs_layers_match_the_readme() {
    let readme = std::fs::read_to_string(workspace().join("fs/README.md")).expect("fs/README.md");
    let layers = fs_layers(&readme);
    assert!(layers.len() > 30, "found only {} rows", layers.len());
    let layer_of = |f: &str| {
        layers
            .iter()
            .filter(|(p, _)| f == p || (p.ends_with('/') && f.starts_with(p.as_str())))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, l)| *l)
    };
    // The crate root only declares modules; the tests drive everything.
    let outside =
        |f: &str| f == "fs/src/lib.rs" || f.split('/').any(|c| c == "tests" || c == "tests.rs");
    let g = all_edges();
    let mut wrong = Vec::new();
    for (file, to) in g.iter().filter(|(f, _)| f.starts_with("fs/src/")) {
        if outside(file) {
            continue;
        }
        let Some(mine) = layer_of(file) else {
            wrong.push(format!("{file} is in no layer of fs/README.md"));
            continue;
        };
        for t in to.iter().filter(|t| !outside(t)) {
            match layer_of(t) {
                Some(l) if l <= mine => {}
                l => wrong.push(format!(
                    "{file} (layer {mine}) imports {t} (layer {})",
                    l.map_or("none".to_string(), |l| l.to_string())
                )),
            }
        }
    }
    for (p, _) in &layers {
        let path = workspace().join(p);
        assert!(
            path.exists(),
            "fs/README.md names {p}, which does not exist"
        );
    }
    assert!(
        wrong.is_empty(),
        "fs/README.md's layers:\n{}",
        wrong.join("\n")
    );
}
