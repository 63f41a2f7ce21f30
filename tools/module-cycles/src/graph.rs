//! The module tree of one crate target, read from its source with `syn`: every module
//! (file or inline), the names it defines, the names it imports, and the syntax it holds.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use syn::spanned::Spanned;
use syn::{Item, UseTree};

/// One `use` binding: `name` stands for `path` (as written, relative to the module).
#[derive(Clone, Debug)]
pub struct Import {
    /// The name the module sees (the last segment, or the `as` rename).
    pub name: String,
    /// The path it stands for.
    pub path: Vec<String>,
}

/// One module of a crate.
pub struct Module {
    /// Path from the crate root, e.g. `["qp", "modify"]` (empty for the root).
    pub path: Vec<String>,
    /// The file it is written in (an inline module: its parent's file).
    pub file: PathBuf,
    /// The module that declares it.
    pub parent: Option<usize>,
    /// Child modules by name.
    pub children: HashMap<String, usize>,
    /// Names of the non-module items it defines (types, functions, consts, macros...).
    pub items: HashSet<String>,
    /// Its `use` bindings (at any depth of its body, nested modules excepted).
    pub imports: Vec<Import>,
    /// Targets of its glob imports (`use a::b::*`), as written.
    pub globs: Vec<(Vec<String>, usize)>,
    /// Its items (for the edge visitor), nested modules' bodies excluded.
    pub body: Vec<Item>,
}

impl Module {
    /// `crate::a::b` style name.
    pub fn display(&self) -> String {
        if self.path.is_empty() {
            "crate".to_string()
        } else {
            self.path.join("::")
        }
    }
}

/// The modules of one crate target; index 0 is the root.
pub struct CrateTree {
    /// All modules, root first.
    pub modules: Vec<Module>,
}

impl CrateTree {
    /// Reads the target whose root file is `root` (e.g. `src/lib.rs`) and every module file
    /// it declares. A file that does not parse, or a declared module with no file, is an error.
    pub fn load(root: &Path) -> Result<CrateTree> {
        let mut tree = CrateTree {
            modules: Vec::new(),
        };
        let file = parse_file(root)?;
        // A crate root's (and a `mod.rs`'s) children live in its own directory.
        let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
        tree.add_module(Vec::new(), root.to_path_buf(), None, file.items, &dir)?;
        Ok(tree)
    }

    fn add_module(
        &mut self,
        path: Vec<String>,
        file: PathBuf,
        parent: Option<usize>,
        items: Vec<Item>,
        child_dir: &Path,
    ) -> Result<usize> {
        let id = self.modules.len();
        self.modules.push(Module {
            path: path.clone(),
            file: file.clone(),
            parent,
            children: HashMap::new(),
            items: HashSet::new(),
            imports: Vec::new(),
            globs: Vec::new(),
            body: Vec::new(),
        });
        let mut body = Vec::new();
        for item in items {
            match item {
                Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut child_path = path.clone();
                    child_path.push(name.clone());
                    let explicit = path_attr(&m.attrs);
                    let child = if let Some((_, content)) = m.content {
                        // Inline module: its own children live in `child_dir/name/`, or
                        // under its #[path] directory.
                        let dir = match &explicit {
                            Some(p) => child_dir.join(p),
                            None => child_dir.join(&name),
                        };
                        self.add_module(child_path, file.clone(), Some(id), content, &dir)?
                    } else {
                        let (child_file, dir) = module_file(child_dir, &name, explicit.as_deref())
                            .with_context(|| {
                                format!("{}: `mod {name};` has no file", file.display())
                            })?;
                        let parsed = parse_file(&child_file)?;
                        self.add_module(child_path, child_file, Some(id), parsed.items, &dir)?
                    };
                    self.modules[id].children.insert(name, child);
                }
                other => {
                    collect_names(&other, &mut self.modules[id]);
                    body.push(other);
                }
            }
        }
        self.modules[id].body = body;
        Ok(id)
    }
}

fn parse_file(path: &Path) -> Result<syn::File> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match syn::parse_file(&text) {
        Ok(f) => Ok(f),
        Err(e) => {
            let at = e.span().start();
            bail!(
                "{}:{}:{}: does not parse: {e}",
                path.display(),
                at.line,
                at.column + 1
            )
        }
    }
}

/// `#[path = "..."]` on a `mod` item.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| {
        if !a.path().is_ident("path") {
            return None;
        }
        match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        }
    })
}

/// The file of `mod name;` declared by a module whose children live in `dir`, and the
/// directory that file's own children live in.
fn module_file(dir: &Path, name: &str, explicit: Option<&str>) -> Option<(PathBuf, PathBuf)> {
    if let Some(p) = explicit {
        // A file named by #[path] is read like a mod.rs: its own `mod x;` declarations
        // are looked for next to it (the Reference, "Modules", the path attribute).
        let f = dir.join(p);
        let child_dir = f.parent()?.to_path_buf();
        return f.is_file().then_some((f, child_dir));
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.is_file() {
        return Some((flat, dir.join(name)));
    }
    let nested = dir.join(name).join("mod.rs");
    nested.is_file().then(|| (nested, dir.join(name)))
}

/// Records the names an item defines and the `use` bindings it holds (including those in
/// function bodies, which belong to the same module).
fn collect_names(item: &Item, m: &mut Module) {
    let ident = match item {
        Item::Const(i) => Some(&i.ident),
        Item::Enum(i) => Some(&i.ident),
        Item::ExternCrate(i) => Some(i.rename.as_ref().map(|r| &r.1).unwrap_or(&i.ident)),
        Item::Fn(i) => Some(&i.sig.ident),
        Item::Macro(i) => i.ident.as_ref(),
        Item::Static(i) => Some(&i.ident),
        Item::Struct(i) => Some(&i.ident),
        Item::Trait(i) => Some(&i.ident),
        Item::TraitAlias(i) => Some(&i.ident),
        Item::Type(i) => Some(&i.ident),
        Item::Union(i) => Some(&i.ident),
        Item::ForeignMod(f) => {
            for fi in &f.items {
                match fi {
                    syn::ForeignItem::Fn(x) => {
                        m.items.insert(x.sig.ident.to_string());
                    }
                    syn::ForeignItem::Static(x) => {
                        m.items.insert(x.ident.to_string());
                    }
                    syn::ForeignItem::Type(x) => {
                        m.items.insert(x.ident.to_string());
                    }
                    _ => {}
                }
            }
            None
        }
        _ => None,
    };
    if let Some(i) = ident {
        m.items.insert(i.to_string());
    }
    let mut uses = UseCollector { out: Vec::new() };
    syn::visit::Visit::visit_item(&mut uses, item);
    for u in uses.out {
        flatten_use(&u.tree, &mut Vec::new(), u.tree.span().start().line, m);
    }
}

struct UseCollector {
    out: Vec<syn::ItemUse>,
}

impl<'a> syn::visit::Visit<'a> for UseCollector {
    fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
        self.out.push(u.clone());
    }
    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {
        // A module inside a function body is rare; its imports are its own.
    }
}

fn flatten_use(tree: &UseTree, prefix: &mut Vec<String>, line: usize, m: &mut Module) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, line, m);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                // `use a::b::{self}` binds `b`.
                if let Some(last) = prefix.last() {
                    m.imports.push(Import {
                        name: last.clone(),
                        path: prefix.clone(),
                    });
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                m.imports.push(Import { name, path });
            }
        }
        UseTree::Rename(r) => {
            let mut path = prefix.clone();
            let ident = r.ident.to_string();
            if ident != "self" {
                path.push(ident);
            }
            m.imports.push(Import {
                name: r.rename.to_string(),
                path,
            });
        }
        UseTree::Glob(_) => m.globs.push((prefix.clone(), line)),
        UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, line, m);
            }
        }
    }
}
