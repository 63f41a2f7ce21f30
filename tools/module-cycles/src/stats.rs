//! Size figures for a crate: lines per module file and the longest functions, so a review
//! can see where the big pieces are.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use anyhow::Result;
use syn::visit::Visit;

use crate::graph::CrateTree;

/// One function and its length in lines (signature to closing brace).
#[derive(Clone, Debug)]
pub struct FnLen {
    /// `Type::name` for methods, `name` for free functions, with its module.
    pub name: String,
    /// Lines from `fn` to the closing brace.
    pub lines: usize,
}

/// Lines of every file of the crate (each file once), largest first.
pub fn file_lines(tree: &CrateTree) -> Result<Vec<(PathBuf, usize)>> {
    let files: BTreeSet<PathBuf> = tree.modules.iter().map(|m| m.file.clone()).collect();
    let mut out = Vec::new();
    for f in files {
        let n = fs::read_to_string(&f)?.lines().count();
        out.push((f, n));
    }
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(out)
}

/// Every function and method of the crate, longest first.
pub fn functions(tree: &CrateTree) -> Vec<FnLen> {
    let mut out = Vec::new();
    for m in &tree.modules {
        let mut v = FnVisitor {
            module: m.display(),
            owner: None,
            out: &mut out,
        };
        for item in &m.body {
            v.visit_item(item);
        }
    }
    out.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.name.cmp(&b.name)));
    out
}

struct FnVisitor<'a> {
    module: String,
    owner: Option<String>,
    out: &'a mut Vec<FnLen>,
}

impl FnVisitor<'_> {
    fn push(&mut self, sig: &syn::Signature, body: &syn::Block) {
        let ident = &sig.ident;
        let start = sig.fn_token.span.start().line;
        let end = body.brace_token.span.close().end().line;
        let lines = end + 1 - start;
        let name = match &self.owner {
            Some(o) => format!("{}: {o}::{ident}", self.module),
            None => format!("{}: {ident}", self.module),
        };
        self.out.push(FnLen { name, lines });
    }
}

impl<'a> Visit<'a> for FnVisitor<'_> {
    fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
        self.push(&f.sig, &f.block);
        let saved = self.owner.take();
        syn::visit::visit_item_fn(self, f);
        self.owner = saved;
    }
    fn visit_item_impl(&mut self, i: &'a syn::ItemImpl) {
        let owner = match &*i.self_ty {
            syn::Type::Path(tp) => tp.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        let saved = std::mem::replace(&mut self.owner, owner);
        syn::visit::visit_item_impl(self, i);
        self.owner = saved;
    }
    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        self.push(&f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {}
}
