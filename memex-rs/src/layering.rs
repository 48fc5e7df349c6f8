//! The module layering ARCHITECTURE.md draws inside `memex-rs`, checked on the source: no
//! import circle between the top-level modules of `src/`, and the arrows the design forbids
//! stay absent. Between crates (memex-store, memex-embed, ai-cli-session-collector below this
//! one) Cargo enforces the direction, so this test only looks inside this crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules it names through `crate::`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                files.push(e.unwrap().path());
            }
            continue;
        }
        let rel = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        // This file names `crate::` in its own strings.
        let skip = ["main.rs", "lib.rs", "layering.rs"];
        if !rel.ends_with(".rs") || rel.starts_with("bin/") || skip.contains(&rel.as_str()) {
            continue;
        }
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
        let deps = out.entry(top.to_owned()).or_default();
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                assert!(
                    !line[i + 7..].starts_with('{'),
                    "{rel}: `use crate::{{…}}` hides its arrows from this check; one `use` per module"
                );
                if !name.is_empty() && name != top {
                    deps.insert(name);
                }
            }
        }
    }
    out
}

/// A path of imports from `from` back to `from`, if there is one.
fn circle(
    g: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    at: &str,
    path: &mut Vec<String>,
) -> bool {
    for next in g.get(at).into_iter().flatten() {
        if next == from {
            path.push(next.clone());
            return true;
        }
        if path.contains(next) {
            continue;
        }
        path.push(next.clone());
        if circle(g, from, next, path) {
            return true;
        }
        path.pop();
    }
    false
}

#[test]
fn no_module_imports_itself_through_others() {
    let g = imports();
    assert!(g.len() > 10, "the source walk found {} modules", g.len());
    for m in g.keys() {
        let mut path = vec![m.clone()];
        if circle(&g, m, m, &mut path) {
            panic!("import circle: {}", path.join(" → "));
        }
    }
}

#[test]
fn the_forbidden_arrows_stay_absent() {
    let g = imports();
    let uses = |a: &str, b: &str| g.get(a).is_some_and(|d| d.contains(b));
    assert!(!uses("llm", "store"), "providers must not reach storage");
    assert!(
        !uses("vector", "search"),
        "search reads vectors, not the reverse"
    );
    // `layer` and `redact` live in the memex-store crate, and the local models in memex-embed:
    // Cargo keeps them from importing anything of this crate. `config` is checked here.
    assert!(
        g.get("config").is_some_and(|d| d.is_empty()),
        "`config` is a leaf: {:?}",
        g.get("config")
    );
    // The check sees imports at all (it would pass on an empty walk otherwise).
    assert!(uses("search", "vector") && uses("api", "search"));
}
