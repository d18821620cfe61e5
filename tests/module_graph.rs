//! No import circles inside a crate: for every workspace crate, each source file is a module,
//! and module A depends on module B when A's code (not its comments) names a path into B
//! (`crate::b::…`, `super::b::…`, or a `use` of them). The test fails naming a circle if the
//! graph has one, and lists the compiler's lowering layers so the one-way rule of
//! `compiler/src/lower/mod.rs` is checked too.
//!
//! Run it alone with `cargo test --release --test module_graph`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file (`lower/kit/mapping.rs` → `["lower", "kit",
/// "mapping"]`; `lib.rs` → `[]`; `lower/mod.rs` → `["lower"]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// Paths the code names: `crate::a::b…` and `super::…` (resolved against `module`), from
/// every line that is not a comment, with `use` groups `{a, b::c}` expanded one level.
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let starts = (rest.starts_with("crate::") || rest.starts_with("super::"))
            && (i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != b':');
        if !starts {
            i += 1;
            continue;
        }
        // The whole path, up to the first character that cannot continue it.
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let path: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
        let mut resolved: Vec<String> = Vec::new();
        let mut base: Vec<String> = module.to_vec();
        // In `a/b.rs` (module a::b), `super` is `a`; in `a/mod.rs` (module a), `super` is the
        // crate root.
        let mut first = true;
        for seg in &path {
            match *seg {
                "crate" if first => base.clear(),
                "super" => {
                    base.pop();
                }
                s => resolved.push(s.to_string()),
            }
            first = false;
        }
        base.extend(resolved);
        out.push(base);
        i += end.max(1);
    }
    out
}

/// The module of `modules` that a path names: its longest prefix that is a module.
fn target(modules: &BTreeSet<Vec<String>>, path: &[String]) -> Option<Vec<String>> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

/// The dependency graph of the crate in `src`, without self-edges. The crate root is left
/// out: it only declares modules and re-exports (its own code would be a module of its own).
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut g: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for f in &files {
        let m = module_of(src, f);
        let text = std::fs::read_to_string(f).unwrap();
        if m.is_empty() {
            // The crate root declares modules and re-exports them: no code of its own.
            continue;
        }
        let deps = g.entry(m.clone()).or_default();
        for p in named_paths(&text, &m) {
            if let Some(t) = target(&modules, &p) {
                // Paths through the crate root's re-exports are not dependencies on it.
                if t != m && !t.is_empty() {
                    deps.insert(t);
                }
            }
        }
    }
    g
}

/// A circle of the graph, if it has one.
fn find_cycle(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        Open,
        Done,
    }
    let mut state: BTreeMap<&Vec<String>, State> = g.keys().map(|k| (k, State::New)).collect();
    fn visit<'a>(
        n: &'a Vec<String>,
        g: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<&'a Vec<String>, State>,
        stack: &mut Vec<&'a Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(n, State::Open);
        stack.push(n);
        for d in g.get(n).into_iter().flatten() {
            match state.get(d).copied().unwrap_or(State::Done) {
                State::Open => {
                    let at = stack.iter().position(|s| *s == d).unwrap_or(0);
                    let mut c: Vec<Vec<String>> =
                        stack[at..].iter().map(|s| (*s).clone()).collect();
                    c.push(d.clone());
                    return Some(c);
                }
                State::New => {
                    if let Some(c) = visit(d, g, state, stack) {
                        return Some(c);
                    }
                }
                State::Done => {}
            }
        }
        stack.pop();
        state.insert(n, State::Done);
        None
    }
    let keys: Vec<&Vec<String>> = g.keys().collect();
    for k in keys {
        if state[k] == State::New {
            let mut stack = Vec::new();
            if let Some(c) = visit(k, g, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_crate_has_an_import_circle() {
    // Every crate root is a facade (declarations and re-exports only).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in ["ir", "exe", "compiler", "sim", "runtime", "onnx", "src"] {
        let src = if krate == "src" {
            root.join("src")
        } else {
            root.join(krate).join("src")
        };
        let g = graph(&src);
        assert!(
            g.len() > 3,
            "{krate}: no modules found under {}",
            src.display()
        );
        if let Some(c) = find_cycle(&g) {
            panic!(
                "{krate}: import circle {}",
                c.iter().map(|m| name(m)).collect::<Vec<_>>().join(" -> ")
            );
        }
    }
}

#[test]
fn the_lowering_layers_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("compiler/src");
    let g = graph(&src);
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let layer = |module: &Vec<String>| -> Option<u32> {
        let s = name(module);
        if s.starts_with("lower::ops") {
            Some(2)
        } else if s.starts_with("lower::kit") {
            Some(1)
        } else if s == "lower::core" {
            Some(0)
        } else {
            None
        }
    };
    for (from, deps) in &g {
        let Some(lf) = layer(from) else { continue };
        for d in deps {
            if let Some(ld) = layer(d) {
                // core (0) uses only the data modules of kit (mapping, planner); kit (1) may
                // use core; ops (2) use core and kit, never another op family (a family's
                // own modules, `lower::ops::window::*`, are one family).
                let ok = match (lf, ld) {
                    (0, 1) => *d == m("lower::kit::mapping") || *d == m("lower::kit::planner"),
                    (0, _) => false,
                    (1, 2) => false,
                    (2, 2) => {
                        *d == m("lower::ops")
                            || (from.len() >= 3 && d.len() > 3 && from[..3] == d[..3])
                    }
                    _ => true,
                };
                assert!(ok, "{} must not use {}", name(from), name(d));
            }
        }
    }
    // The sample is not empty: ops use kit and core.
    assert!(g[&m("lower::ops::matmul")].contains(&m("lower::kit::planner")));
    assert!(g[&m("lower::ops::matmul")].contains(&m("lower::core")));
}
