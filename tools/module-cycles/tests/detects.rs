//! The edge rules of `edges.rs` on small crates written to a temporary directory: a real
//! cycle is found with the paths that make it, and the non-edges (a child's `impl` of its
//! parent's type, a re-export, an unused import) are not counted.

use std::fs;

use module_cycles::{check_target, parse_allow, Target};

fn write_crate(name: &str, files: &[(&str, &str)]) -> Target {
    let dir = std::env::temp_dir().join(format!("module-cycles-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    Target {
        package: name.into(),
        kind: "lib".into(),
        root: dir.join("src/lib.rs"),
    }
}

#[test]
fn a_sibling_cycle_is_reported_with_its_paths() {
    let t = write_crate(
        "sibling",
        &[
            ("src/lib.rs", "mod a;\nmod b;\n"),
            ("src/a.rs", "use crate::b::B;\npub struct A(pub B);\n"),
            ("src/b.rs", "pub struct B;\npub fn f(_: &crate::a::A) {}\n"),
        ],
    );
    let r = check_target(&t, &[]).unwrap();
    assert_eq!(r.cycles.len(), 1);
    let c = &r.cycles[0];
    assert_eq!(c.modules, vec!["a".to_string(), "b".to_string()]);
    let paths: Vec<(String, String, String, usize)> = c
        .edges
        .iter()
        .flat_map(|(f, t, ev)| {
            ev.iter()
                .map(move |e| (f.clone(), t.clone(), e.path.clone(), e.line))
        })
        .collect();
    assert!(
        paths.contains(&("a".into(), "b".into(), "B".into(), 2)),
        "{paths:?}"
    );
    assert!(
        paths.contains(&("b".into(), "a".into(), "crate::a::A".into(), 2)),
        "{paths:?}"
    );
}

#[test]
fn a_childs_impl_of_its_parents_type_is_not_a_cycle() {
    let t = write_crate(
        "child_impl",
        &[
            ("src/lib.rs", "mod qp;\n"),
            (
                "src/qp/mod.rs",
                "mod modify;\npub struct Qp;\nimpl Qp { pub fn go(&mut self) { self.modify() } }\n",
            ),
            (
                "src/qp/modify.rs",
                "use crate::qp::Qp;\nimpl Qp { pub fn modify(&mut self) {} }\n",
            ),
        ],
    );
    let r = check_target(&t, &[]).unwrap();
    assert!(r.cycles.is_empty());
    assert_eq!(
        r.edges, 0,
        "the impl header is no edge and the parent names nothing of the child"
    );
}

#[test]
fn a_path_through_a_reexport_is_an_edge_to_the_defining_module() {
    // `shared` names `cc::DeviceCc`, which `cc` re-exports from `cc::engine`; `cc::engine`
    // names `shared`: a cycle between shared and cc::engine, not through cc.
    let t = write_crate(
        "reexport",
        &[
            ("src/lib.rs", "mod cc;\nmod shared;\n"),
            (
                "src/cc/mod.rs",
                "mod engine;\npub(crate) use engine::DeviceCc;\n",
            ),
            (
                "src/cc/engine.rs",
                "pub struct DeviceCc;\npub fn on_rx(_: &crate::shared::Shared) {}\n",
            ),
            (
                "src/shared.rs",
                "pub struct Shared { pub cc: crate::cc::DeviceCc }\n",
            ),
        ],
    );
    let r = check_target(&t, &[]).unwrap();
    assert_eq!(r.cycles.len(), 1);
    assert_eq!(
        r.cycles[0].modules,
        vec!["cc::engine".to_string(), "shared".to_string()]
    );
    // And the allow-list removes an edge (so the cycle goes) and says it was used.
    let allow = parse_allow("reexport shared -> cc::engine  # test\n").unwrap();
    let r = check_target(&t, &allow).unwrap();
    assert!(r.cycles.is_empty());
    assert_eq!(r.allowed_used, vec![0]);
}

#[test]
fn paths_in_macros_and_unused_imports() {
    let t = write_crate(
        "macros",
        &[
            ("src/lib.rs", "mod a;\nmod b;\n"),
            // An unused import makes no edge; a path in a macro does.
            (
                "src/a.rs",
                "#[allow(unused)] use crate::b::B;\npub const X: u8 = 1;\n",
            ),
            (
                "src/b.rs",
                "pub struct B;\npub fn f() { assert_eq!(crate::a::X, 1); }\n",
            ),
        ],
    );
    let r = check_target(&t, &[]).unwrap();
    assert!(r.cycles.is_empty());
    assert_eq!(r.edges, 1);
}

#[test]
fn a_local_named_like_a_child_module_is_no_edge() {
    // `tool` in `run` is a local variable, not the module `tool`; `tool` uses its parent.
    let t = write_crate(
        "local_name",
        &[
            (
                "src/lib.rs",
                "mod tool;\npub struct P;\npub fn run(tool: u8) -> u8 { tool }\n",
            ),
            ("src/tool.rs", "pub fn f(_: &crate::P) {}\n"),
        ],
    );
    let r = check_target(&t, &[]).unwrap();
    assert!(r.cycles.is_empty());
    assert_eq!(r.edges, 1);
}

#[test]
fn a_parse_error_or_a_missing_module_file_is_an_error() {
    let t = write_crate("broken", &[("src/lib.rs", "mod a;\nfn f( {\n")]);
    let e = check_target(&t, &[])
        .err()
        .expect("a parse error must fail");
    assert!(e.to_string().contains("does not parse"), "{e}");
    let t = write_crate("missing", &[("src/lib.rs", "mod gone;\n")]);
    let e = check_target(&t, &[])
        .err()
        .expect("a missing module must fail");
    assert!(format!("{e:#}").contains("has no file"), "{e:#}");
}

#[test]
fn an_allow_line_without_a_reason_is_refused() {
    assert!(parse_allow("pkg a -> b\n").is_err());
    assert!(parse_allow("pkg a -> b  #   \n").is_err());
    assert!(parse_allow("# comment only\n\npkg a -> b  # why\n").is_ok());
}
