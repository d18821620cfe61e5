//! Tests of [`super`] (`outline.rs`): kept beside it, in their own file.
use super::*;

const DOC: &str = r##"#![enable(implicit_some)]
// a comment with "quotes" and (parens
Program(
    name: "a \"quoted\" (name",
    /* nested /* block */ comment ) */
    nodes: [
        (name: "x", op: Input(stream: "x", dtype: F16, shape: [8, 2])),
        (name: "y", op: Add, inputs: ["x", r#"x"#]),
    ],
    training: Some((loss: "y", optimizer: Sgd(learning_rate: -1.5e-3), map: {"k": 'c'})),
)
"##;

fn at(path: &str) -> (Pos, usize) {
    let root = outline(DOC);
    let segs = parse_path(path);
    let (item, matched) = root.resolve(&segs);
    assert_eq!(
        matched,
        segs.len(),
        "{path} resolved only {matched} segments"
    );
    (item.span.start, item.span.end.col - item.span.start.col)
}

#[test]
fn finds_fields_through_lists_and_options() {
    let (p, w) = at("nodes[1].inputs[1]");
    assert_eq!((p.line, p.col, w), (8, 44, 6));
    let (p, w) = at("nodes[0].op.shape");
    assert_eq!((p.line, p.col, w), (7, 63, 6));
    let (p, w) = at("training.optimizer.learning_rate");
    assert_eq!((p.line, p.col, w), (10, 62, 7));
    assert_eq!(&DOC[p.offset..p.offset + 7], "-1.5e-3");
    assert_eq!(at("nodes[1].op").1, 3);
}

#[test]
fn unresolved_paths_stop_at_the_deepest_match() {
    let root = outline(DOC);
    let (item, matched) = root.resolve(&parse_path("nodes[1].phase"));
    assert_eq!(matched, 2);
    assert_eq!(item.span.start.line, 8);
    assert_eq!(
        parse_path("infeeds[2].source.columns"),
        vec![
            Seg::Key("infeeds".into()),
            Seg::Index(2),
            Seg::Key("source".into()),
            Seg::Key("columns".into())
        ]
    );
}

#[test]
fn never_panics_on_garbage() {
    for src in [
        "",
        "(",
        ")",
        "[(]",
        "\"",
        "r#\"",
        "'",
        "/*",
        "a: (b: [c, {d",
        "#![",
        "-",
    ] {
        let _ = outline(src);
    }
}

/// Every item of the tree with its path (children of maps are not on any path).
fn items_of(item: &Item, path: &mut Vec<Seg>, out: &mut Vec<(Vec<Seg>, Span)>) {
    out.push((path.clone(), item.span));
    match &item.value {
        Value::Struct { fields, .. } => {
            for f in fields {
                path.push(Seg::Key(f.key.clone()));
                items_of(&f.value, path, out);
                path.pop();
            }
        }
        Value::Tuple { items, .. } | Value::List(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                items_of(v, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The innermost item containing `line:col`, walked down the whole tree.
fn innermost_in_tree(root: &Item, line: usize, col: usize) -> Innermost {
    let mut path = String::new();
    let mut item = root;
    'descend: loop {
        let children: Vec<(String, &Item)> = match &item.value {
            Value::Struct { fields, .. } => fields
                .iter()
                .map(|f| (format!(".{}", f.key), &f.value))
                .collect(),
            Value::Tuple { items, .. } | Value::List(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("[{i}]"), v))
                .collect(),
            _ => Vec::new(),
        };
        for (seg, child) in children {
            if contains(child.span, line, col) {
                if !matches!(&item.value, Value::Tuple { name: Some(n), .. } if n == "Some") {
                    path.push_str(&seg);
                }
                item = child;
                continue 'descend;
            }
        }
        break;
    }
    Innermost {
        path: path.trim_start_matches('.').to_string(),
        span: item.span,
        atom: matches!(item.value, Value::Atom),
    }
}

/// The queries answer what the whole tree answers: every item's path and paths that
/// stop short, every position, every node name.
fn queries_agree_with_the_tree(src: &str, every_position: bool) {
    queries_agree_with_the_tree_every(src, every_position, 1);
}

/// [`queries_agree_with_the_tree`] on every `step`-th item and node (each query reads the
/// source from its start, so all of a large program's are quadratic in its size).
fn queries_agree_with_the_tree_every(src: &str, every_position: bool, step: usize) {
    let root = outline(src);
    let mut items = Vec::new();
    items_of(&root, &mut Vec::new(), &mut items);
    let items: Vec<_> = items.into_iter().step_by(step).collect();
    for (path, _) in &items {
        // (A repeated key leads to its first field.)
        let want = root.resolve(path).0.span;
        assert_eq!(span_of(src, path), want, "{path:?} in {src:?}");
        for extra in [
            Seg::Key("zz".into()),
            Seg::Key("name".into()),
            Seg::Index(9),
        ] {
            let mut longer = path.clone();
            longer.push(extra);
            let want = root.resolve(&longer).0.span;
            assert_eq!(span_of(src, &longer), want, "{longer:?} in {src:?}");
        }
    }
    let mut positions: Vec<(usize, usize)> = Vec::new();
    if every_position {
        for (l, text) in src.split('\n').enumerate() {
            for c in 0..=text.chars().count() + 1 {
                positions.push((l + 1, c + 1));
            }
        }
    } else {
        positions.extend(items.iter().map(|(_, s)| (s.start.line, s.start.col)));
        positions.extend(items.iter().map(|(_, s)| (s.end.line, s.end.col)));
    }
    positions.push((0, 0));
    for (line, col) in positions {
        let want = innermost_in_tree(&root, line, col);
        assert_eq!(innermost(src, line, col), want, "{line}:{col} in {src:?}");
    }
    // The node names, as the locator indexed them from the tree.
    let mut first: std::collections::HashMap<String, usize> = Default::default();
    let mut names: Vec<Option<String>> = Vec::new();
    let (list, matched) = root.resolve(&parse_path("nodes"));
    if let (1, Value::List(nodes)) = (matched, &list.value) {
        for (i, node) in nodes.iter().enumerate() {
            let (name, m) = node.resolve(&parse_path("name"));
            let text = (m == 1).then(|| string_at(src, name.span)).flatten();
            if let Some(t) = &text {
                first.entry(t.clone()).or_insert(i);
            }
            names.push(text);
        }
    }
    for (i, name) in names.iter().enumerate().step_by(step) {
        assert_eq!(node_name(src, i), *name, "nodes[{i}] in {src:?}");
        if let Some(n) = name {
            assert_eq!(node_index(src, n), first.get(n).copied(), "{n} in {src:?}");
        }
    }
    assert_eq!(node_name(src, names.len()), None);
    assert_eq!(node_index(src, "no such node"), None);
    let all: Vec<usize> = (0..names.len() + 2).step_by(step).collect();
    for (i, line) in node_name_lines(src, &all) {
        let want = root.resolve(&parse_path(&format!("nodes[{i}].name"))).0;
        assert_eq!(line, want.span.start.line, "nodes[{i}].name in {src:?}");
    }
    assert!(node_name_lines(src, &all).len() <= names.len());
}

#[test]
fn queries_answer_as_the_whole_outline_does() {
    queries_agree_with_the_tree(DOC, true);
    let dup = "Program(nodes: [(name: \"a\"), Some((name: \"b\")), (name: \"a\"), (op: X), \
               (name: r#\"b\"#)], nodes: [(name: \"z\")], x: {\"k\": (name: \"q\")})";
    queries_agree_with_the_tree(dup, true);
    // Every prefix of a document: groups cut short anywhere.
    let mut cut = 0;
    while cut <= DOC.len() {
        queries_agree_with_the_tree(&DOC[..cut], false);
        cut += DOC[cut..].chars().next().map_or(1, char::len_utf8);
    }
    for src in [
        "",
        "(",
        ")",
        "[(]",
        "a: (b: [c, {d",
        "#![",
        "-",
        "Some(Some((a: 1)))",
    ] {
        queries_agree_with_the_tree(src, true);
    }
}

#[test]
fn queries_answer_as_the_whole_outline_does_on_every_test_program() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = vec![root.join("programs")];
    for d in ["check", "run", "sim", "broken", "oom", "targets"] {
        dirs.push(root.join("tests/programs").join(d));
    }
    let mut seen = 0;
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(src) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            // Each query reads the source from its start: the zoo's generated ResNets
            // (50-100 KB) at every position took three minutes, so they are queried at
            // every 16th item's boundaries and every 16th node (the smaller programs, the
            // residual CNN among them, at every position).
            if src.len() <= 16 << 10 {
                queries_agree_with_the_tree(&src, true);
            } else {
                queries_agree_with_the_tree_every(&src, false, 16);
            }
            seen += 1;
        }
    }
    assert!(seen > 20, "{seen} programs read");
}

#[test]
fn a_query_reads_no_further_than_its_answer() {
    // The node named is early: the garbage after it is never read (the answer is the
    // same either way, and reading stops there).
    let src = "Program(nodes: [(name: \"a\", inputs: [\"b\"]), (name: \"b\")], rest: [";
    assert_eq!(node_index(src, "a"), Some(0));
    let span = span_of(src, &parse_path("nodes[0].inputs[0]"));
    assert_eq!(&src[span.start.offset..span.end.offset], "\"b\"");
    let mut p = Parser::new(src, NodeQuery::None);
    let path = parse_path("nodes[0].name");
    p.root(Focus::Path {
        segs: &path,
        matched: 0,
        nodes: false,
    });
    assert!(p.done && p.last_end.offset < src.find("(name: \"b\")").unwrap());
}
