//! Which module uses which: an edge A -> B means code in module A names an item that module
//! B defines, through a `crate::`, `super::` or `self::` path, a path that starts at one of
//! A's child modules, or a name A imported with `use`.
//!
//! What is not an edge, and why:
//! - A `use` item by itself. The names it binds make edges where A's code uses them, so an
//!   unused import, or a `pub use` that only re-exports a child's item for the crate's
//!   callers, makes none: a re-export forwards a name, A's code does not depend on it.
//! - A path through a re-export. `crate::cc::DeviceCc`, when `cc` re-exports `DeviceCc`
//!   from `cc::engine`, is an edge to `cc::engine`, the module that defines it.
//! - The type of an `impl` block written in a descendant of the type's module
//!   (`impl Qp { ... }` in `qp/modify.rs`). Those methods are part of the type, kept in a
//!   file of their own; the type's module does not name them (a method call is not a path),
//!   so counting the impl header would make every such split look like a cycle. An `impl`
//!   of another module's type anywhere else (a sibling, an ancestor) is an edge.
//! - Paths into other crates, `Self`, names the module does not import, and the paths of
//!   restricted visibilities (`pub(super)`, `pub(in crate::a)`): they say who may use an
//!   item, not what it uses.
//!
//! Macro arguments are token streams, not syntax; the visitor reads every `a::b::c`
//! sequence of identifiers in them as a path, so `assert_eq!(x, crate::foo::BAR)` counts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proc_macro2::{TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::graph::CrateTree;

/// Where an edge comes from: a file, a line and the path as written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Evidence {
    /// Source file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// The path, e.g. `crate::device::Shared`.
    pub path: String,
}

/// Edges between the modules of one crate, with every place that makes each.
pub type Edges = BTreeMap<(usize, usize), Vec<Evidence>>;

/// How deep re-exports and imports are followed before giving up (a `use` cycle is a
/// compile error, so real code never gets near it).
const MAX_DEPTH: usize = 32;

impl CrateTree {
    /// Resolves `segs`, as written in module `ctx`, to the module defining what it names.
    /// `None` for paths that leave the crate or that it cannot follow.
    pub fn resolve(&self, ctx: usize, segs: &[String]) -> Option<usize> {
        self.resolve_at(ctx, segs, 0)
    }

    fn resolve_at(&self, ctx: usize, segs: &[String], depth: usize) -> Option<usize> {
        if depth > MAX_DEPTH || segs.is_empty() {
            return None;
        }
        let first = segs[0].as_str();
        let (mut m, mut rest) = match first {
            "crate" => (0, &segs[1..]),
            "self" => (ctx, &segs[1..]),
            "super" => {
                let mut m = ctx;
                let mut i = 0;
                while segs.get(i).map(String::as_str) == Some("super") {
                    m = self.modules[m].parent?;
                    i += 1;
                }
                (m, &segs[i..])
            }
            name => {
                let here = &self.modules[ctx];
                if let Some(&c) = here.children.get(name) {
                    (c, &segs[1..])
                } else if here.items.contains(name) {
                    return Some(ctx);
                } else if let Some(imp) = here.imports.iter().find(|i| i.name == name) {
                    // A `use` path is relative to the module that holds it (edition 2018).
                    let mut full = imp.path.clone();
                    full.extend_from_slice(&segs[1..]);
                    return self.resolve_at(ctx, &full, depth + 1);
                } else {
                    return None;
                }
            }
        };
        while let Some((seg, after)) = rest.split_first() {
            let here = &self.modules[m];
            if let Some(&c) = here.children.get(seg) {
                m = c;
                rest = after;
            } else if here.items.contains(seg) {
                return Some(m);
            } else if let Some(imp) = here.imports.iter().find(|i| &i.name == seg) {
                // A re-export: follow it to where the item lives.
                let mut full = imp.path.clone();
                full.extend_from_slice(after);
                return self.resolve_at(m, &full, depth + 1).or(Some(m));
            } else {
                // An enum variant, an associated item, or a name from a glob re-export.
                return Some(m);
            }
        }
        Some(m)
    }

    /// Every edge between two different modules of the crate.
    pub fn edges(&self) -> Edges {
        let mut edges = Edges::new();
        for (id, m) in self.modules.iter().enumerate() {
            let mut v = EdgeVisitor {
                tree: self,
                ctx: id,
                edges: &mut edges,
            };
            for item in &m.body {
                v.visit_item(item);
            }
            // A glob import cannot say which names it brings, so it is an edge itself.
            for (path, line) in &m.globs {
                if let Some(to) = self.resolve(id, path) {
                    v.record(to, *line, format!("{}::*", path.join("::")));
                }
            }
        }
        edges
    }

    /// True if `segs`, as written in `ctx`, names a module itself rather than an item in
    /// one (`self`, `super`, `crate`, a child module, or an import of a module).
    pub fn names_module(&self, ctx: usize, segs: &[String]) -> bool {
        let Some((last, init)) = segs.split_last() else {
            return false;
        };
        if matches!(last.as_str(), "self" | "super" | "crate") {
            return true;
        }
        let parent = if init.is_empty() {
            Some(ctx)
        } else {
            self.resolve(ctx, init)
        };
        let Some(p) = parent else {
            return false;
        };
        let here = &self.modules[p];
        if here.items.contains(last) {
            return false;
        }
        if here.children.contains_key(last) {
            return true;
        }
        // An import of a module (`use crate::emit;` then a bare `emit`).
        here.imports
            .iter()
            .find(|i| &i.name == last)
            .is_some_and(|i| {
                self.resolve(p, &i.path)
                    .is_some_and(|m| self.modules[m].path.last() == i.path.last())
            })
    }

    /// True if `a` is a strict ancestor of `b`.
    pub fn is_ancestor(&self, a: usize, b: usize) -> bool {
        let mut m = self.modules[b].parent;
        while let Some(p) = m {
            if p == a {
                return true;
            }
            m = self.modules[p].parent;
        }
        false
    }
}

struct EdgeVisitor<'t> {
    tree: &'t CrateTree,
    ctx: usize,
    edges: &'t mut Edges,
}

impl EdgeVisitor<'_> {
    fn record(&mut self, to: usize, line: usize, path: String) {
        if to == self.ctx {
            return;
        }
        self.edges
            .entry((self.ctx, to))
            .or_default()
            .push(Evidence {
                file: self.tree.modules[self.ctx].file.clone(),
                line,
                path,
            });
    }

    fn path_segments(p: &syn::Path) -> Vec<String> {
        p.segments.iter().map(|s| s.ident.to_string()).collect()
    }

    fn check(&mut self, segs: Vec<String>, line: usize) {
        // Outside `use` items a path never ends on a module: a bare name that matches a
        // child module (`tool` next to `mod tool;`) is a local variable or a field.
        if self.tree.names_module(self.ctx, &segs) {
            return;
        }
        if let Some(to) = self.tree.resolve(self.ctx, &segs) {
            self.record(to, line, segs.join("::"));
        }
    }

    /// Reads `a::b::c` identifier sequences in a macro's tokens as paths.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let toks: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < toks.len() {
            match &toks[i] {
                TokenTree::Group(g) => {
                    self.scan_tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(id) => {
                    // Skip `.field` / `.method`: not a path.
                    let after_dot =
                        i > 0 && matches!(&toks[i - 1], TokenTree::Punct(p) if p.as_char() == '.');
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    loop {
                        let colons = matches!(&toks.get(j), Some(TokenTree::Punct(p)) if p.as_char() == ':')
                            && matches!(&toks.get(j + 1), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                        match (colons, toks.get(j + 2)) {
                            (true, Some(TokenTree::Ident(next))) => {
                                segs.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if !after_dot {
                        self.check(segs, line);
                    }
                    i = j;
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
            }
        }
    }
}

impl<'a> Visit<'a> for EdgeVisitor<'_> {
    fn visit_path(&mut self, p: &'a syn::Path) {
        self.check(Self::path_segments(p), p.span().start().line);
        syn::visit::visit_path(self, p);
    }

    fn visit_item_use(&mut self, _: &'a syn::ItemUse) {
        // Bindings only; their uses make the edges (module docs).
    }

    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {
        // Never reached for the module's own children (they are modules of the tree);
        // a module inside a function body is not followed.
    }

    fn visit_item_impl(&mut self, i: &'a syn::ItemImpl) {
        for a in &i.attrs {
            self.visit_attribute(a);
        }
        self.visit_generics(&i.generics);
        if let Some((_, tr, _)) = &i.trait_ {
            self.visit_path(tr);
        }
        let own_type = match &*i.self_ty {
            syn::Type::Path(tp) if tp.qself.is_none() => self
                .tree
                .resolve(self.ctx, &Self::path_segments(&tp.path))
                .is_some_and(|owner| self.tree.is_ancestor(owner, self.ctx)),
            _ => false,
        };
        if own_type {
            // Only the type's generic arguments can name other modules.
            if let syn::Type::Path(tp) = &*i.self_ty {
                for seg in &tp.path.segments {
                    self.visit_path_arguments(&seg.arguments);
                }
            }
        } else {
            self.visit_type(&i.self_ty);
        }
        for item in &i.items {
            self.visit_impl_item(item);
        }
    }

    fn visit_macro(&mut self, m: &'a syn::Macro) {
        self.visit_path(&m.path);
        self.scan_tokens(m.tokens.clone());
    }

    fn visit_visibility(&mut self, _: &'a syn::Visibility) {
        // `pub(crate)` / `pub(super)` / `pub(in path)` limit who sees an item; they use
        // nothing.
    }

    fn visit_attribute(&mut self, _: &'a syn::Attribute) {
        // Attributes (derives, cfgs, docs) name no module of the crate.
    }
}
