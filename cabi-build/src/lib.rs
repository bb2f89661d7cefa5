//! # bypass-cabi-build: export versioned C symbols (`name@@NODE`) from a Rust cdylib
//!
//! A build-dependency for the crates that build drop-in C libraries (`libibverbs.so.1`, the
//! `libmlx5.so.1` / `libefa.so.1` stand-ins). Their build scripts call [`link_versioned`] (or
//! [`link_symbol_list`] with a committed list file) so the linked `.so` defines every symbol at
//! the version node the real library uses, the way `dlvsym(h, "ibv_x", "IBVERBS_1.1")` and
//! binaries linked against Debian's libraries expect.
//!
//! Technique (verified in `/work/shared/reference/ibverbs-abi.md` §4): rustc passes its own
//! anonymous version script, which wins over a plain `--version-script`. So the Rust functions
//! are exported under private names (`#[unsafe(no_mangle)] extern "C" fn <prefix><name>`), each
//! public name is an alias made with `-Wl,--defsym=<name>=<prefix><name>`, and our version script
//! binds the aliases to named nodes. rust-lld (rustc's default linker on x86-64 Linux) accepts a
//! named script next to rustc's anonymous one; GNU ld refuses that combination.
//!
//! A compat (non-default) version `name@NODE`, such as `mlx5dv_init_obj@MLX5_1.0` next to
//! `mlx5dv_init_obj@@MLX5_1.2`, cannot be made by `--defsym`; it gets a generated `global_asm!`
//! trampoline bound with `.symver` (see [`compat_source`]).
//!
//! Owns: the version-script text, the link arguments, the symbol-list file format. Must not
//! touch: anything outside `OUT_DIR`; it only prints `cargo:` lines. Follows the ld manual's
//! "VERSION Command" section and rdma-core's `libibverbs.map.in` / Debian's `.gnu.version_d`
//! (each numbered node inherits the previous one; a `*_PRIVATE_*` node stands alone).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One public symbol to export: its C name and the version node it is defined at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export<'a> {
    /// The C symbol name, e.g. `ibv_open_device`.
    pub name: &'a str,
    /// The version node, e.g. `IBVERBS_1.1`: the default version (`name@@NODE`, what new links
    /// bind). Written `@NODE` it is a compat version (`name@NODE`, found only by binaries linked
    /// against it and by `dlvsym`), implemented by [`compat_impl_name`].
    pub version: &'a str,
}

impl<'a> Export<'a> {
    /// The node name, without a compat `@`.
    pub fn node(&self) -> &'a str {
        self.version.strip_prefix('@').unwrap_or(self.version)
    }

    /// Whether this is a compat (non-default) version.
    pub fn is_compat(&self) -> bool {
        self.version.starts_with('@')
    }

    /// The private symbol the crate must define for this export.
    pub fn impl_name(&self, impl_prefix: &str) -> String {
        if self.is_compat() {
            compat_impl_name(impl_prefix, self.name, self.node())
        } else {
            format!("{impl_prefix}{}", self.name)
        }
    }
}

/// The private symbol implementing the compat version `name@node`:
/// `<impl_prefix><name>__<node with '.' as '_'>`, e.g. `__bypass_impl_mlx5dv_init_obj__MLX5_1_0`.
pub fn compat_impl_name(impl_prefix: &str, name: &str, node: &str) -> String {
    format!("{impl_prefix}{name}__{}", node.replace('.', "_"))
}

fn trampoline_name(name: &str, node: &str) -> String {
    format!("__cabi_compat_{name}__{}", node.replace('.', "_"))
}

/// One version node of the script, with the node it inherits (`IBVERBS_1.1 {..} IBVERBS_1.0;`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node<'a> {
    /// The node's name, e.g. `MLX5_1.2`.
    pub name: &'a str,
    /// The node it inherits, which must come earlier in the list; `None` for a root node.
    pub parent: Option<&'a str>,
}

impl<'a> Node<'a> {
    /// Nodes in the given order, each inheriting the previous one (the first is a root).
    pub fn chain(names: &[&'a str]) -> Vec<Node<'a>> {
        names
            .iter()
            .enumerate()
            .map(|(i, name)| Node {
                name,
                parent: i.checked_sub(1).map(|p| names[p]),
            })
            .collect()
    }
}

/// One line of a symbol-list file: `NAME VERSION [KIND]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolEntry {
    /// The C symbol name.
    pub name: String,
    /// The version node it is defined at (`@NODE` for a compat version, see [`Export`]).
    pub version: String,
    /// The optional third column; its meaning belongs to the crate that uses the list (the
    /// stand-ins use it for the stub's return kind).
    pub kind: Option<String>,
    /// 1-based line number in the file, for error messages.
    pub line: usize,
}

impl SymbolEntry {
    /// This entry as an [`Export`].
    pub fn export(&self) -> Export<'_> {
        Export {
            name: &self.name,
            version: &self.version,
        }
    }
}

/// What can go wrong while generating the version script and link arguments.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A symbol-list line does not have 2 or 3 columns.
    #[error("line {line}: expected `NAME VERSION [KIND]`, got {text:?}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// The offending line.
        text: String,
    },
    /// A symbol name is not a C identifier.
    #[error("{0:?} is not a C identifier")]
    BadName(String),
    /// A version node name has characters a version script cannot take.
    #[error("{0:?} is not a valid version node name")]
    BadNode(String),
    /// The same symbol is listed twice at the same node, or twice as a default version.
    #[error("symbol {0} is listed twice (or has two default versions)")]
    Duplicate(String),
    /// A node is listed twice.
    #[error("version node {0} is listed twice")]
    DuplicateNode(String),
    /// An export names a node that is not in the node list.
    #[error("symbol {name} uses version node {version}, which is not declared")]
    UnknownNode {
        /// The symbol.
        name: String,
        /// Its undeclared node.
        version: String,
    },
    /// A node inherits one that is not declared before it.
    #[error("version node {node} inherits {parent}, which is not declared before it")]
    BadParent {
        /// The node.
        node: String,
        /// Its parent.
        parent: String,
    },
    /// `OUT_DIR` is unset (not running inside a build script).
    #[error("OUT_DIR is not set: call this from a build script")]
    NoOutDir,
    /// Reading the list or writing the script failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Two exports of one name clash when they share a node or are both default versions.
fn clashes(a: &Export<'_>, b: &Export<'_>) -> bool {
    a.name == b.name && (a.node() == b.node() || (!a.is_compat() && !b.is_compat()))
}

fn is_c_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c == '_' || c == '.' || c.is_ascii_alphanumeric())
}

/// Parses a symbol-list file: one `NAME VERSION [KIND]` per line, whitespace separated; `#`
/// starts a comment (whole line or trailing); blank lines are skipped. Names must be C
/// identifiers and versions valid node names, optionally `@`-prefixed for a compat version; a
/// name has at most one default version and never two entries at one node.
pub fn parse_symbol_list(text: &str) -> Result<Vec<SymbolEntry>, Error> {
    let mut out: Vec<SymbolEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let body = raw.split('#').next().unwrap_or("");
        let cols: Vec<&str> = body.split_whitespace().collect();
        if cols.is_empty() {
            continue;
        }
        if !(2..=3).contains(&cols.len()) {
            return Err(Error::BadLine {
                line,
                text: raw.to_string(),
            });
        }
        if !is_c_ident(cols[0]) {
            return Err(Error::BadName(cols[0].to_string()));
        }
        let node = cols[1].strip_prefix('@').unwrap_or(cols[1]);
        if !is_node_name(node) {
            return Err(Error::BadNode(cols[1].to_string()));
        }
        let new = Export {
            name: cols[0],
            version: cols[1],
        };
        if out.iter().any(|e| clashes(&e.export(), &new)) {
            return Err(Error::Duplicate(cols[0].to_string()));
        }
        out.push(SymbolEntry {
            name: cols[0].to_string(),
            version: cols[1].to_string(),
            kind: cols.get(2).map(|k| k.to_string()),
            line,
        });
    }
    Ok(out)
}

/// Reads and parses a symbol-list file (see [`parse_symbol_list`]).
pub fn read_symbol_list(path: &Path) -> Result<Vec<SymbolEntry>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_symbol_list(&text)
}

/// Splits `IBVERBS_1.10` into its family `IBVERBS_` and numeric key `[1, 10]`; a name with no
/// trailing number is its own family.
fn node_key(name: &str) -> (&str, Vec<u64>) {
    let tail_start = name
        .char_indices()
        .rev()
        .take_while(|&(_, c)| c.is_ascii_digit() || c == '.')
        .last()
        .map_or(name.len(), |(i, _)| i);
    let (family, tail) = name.split_at(tail_start);
    let nums: Option<Vec<u64>> = tail.split('.').map(|p| p.parse().ok()).collect();
    match nums {
        Some(n) if !tail.is_empty() => (family, n),
        _ => (name, Vec::new()),
    }
}

/// The nodes the exports use, as Debian's rdma-core maps define them: grouped into families by
/// the name before the trailing number (`MLX5_1.`, `IBVERBS_1.`, `IBVERBS_PRIVATE_`), each
/// family sorted numerically (`1.9` before `1.10`) and chained, each node inheriting the
/// previous one of its family. Families are ordered by first appearance in `exports`.
pub fn nodes_for<'a>(exports: &[Export<'a>]) -> Vec<Node<'a>> {
    let mut families: Vec<(&str, Vec<&'a str>)> = Vec::new();
    for e in exports {
        let (fam, _) = node_key(e.node());
        let idx = match families.iter().position(|(f, _)| *f == fam) {
            Some(i) => i,
            None => {
                families.push((fam, Vec::new()));
                families.len() - 1
            }
        };
        if !families[idx].1.contains(&e.node()) {
            families[idx].1.push(e.node());
        }
    }
    let mut out = Vec::new();
    for (_, mut names) in families {
        names.sort_by_key(|n| node_key(n).1);
        out.extend(Node::chain(&names));
    }
    out
}

fn validate(nodes: &[Node<'_>], exports: &[Export<'_>]) -> Result<(), Error> {
    for (i, n) in nodes.iter().enumerate() {
        if !is_node_name(n.name) {
            return Err(Error::BadNode(n.name.to_string()));
        }
        if nodes[..i].iter().any(|m| m.name == n.name) {
            return Err(Error::DuplicateNode(n.name.to_string()));
        }
        if let Some(p) = n.parent
            && !nodes[..i].iter().any(|m| m.name == p)
        {
            return Err(Error::BadParent {
                node: n.name.to_string(),
                parent: p.to_string(),
            });
        }
    }
    for (i, e) in exports.iter().enumerate() {
        if !is_c_ident(e.name) {
            return Err(Error::BadName(e.name.to_string()));
        }
        if exports[..i].iter().any(|f| clashes(f, e)) {
            return Err(Error::Duplicate(e.name.to_string()));
        }
        if !nodes.iter().any(|n| n.name == e.node()) {
            return Err(Error::UnknownNode {
                name: e.name.to_string(),
                version: e.version.to_string(),
            });
        }
    }
    Ok(())
}

/// The version script text: one block per node, in the given order, listing its default
/// exports (`NODE { global: a; b; } PARENT;`). Compat versions are not listed: `.symver` names
/// their node and rust-lld exports such a symbol as it is. No `local: *;`: rustc's own script
/// already hides everything it does not export, and a second catch-all would fight it.
pub fn version_script(nodes: &[Node<'_>], exports: &[Export<'_>]) -> Result<String, Error> {
    validate(nodes, exports)?;
    let mut s = String::from("/* generated by bypass-cabi-build */\n");
    for n in nodes {
        let _ = writeln!(s, "{} {{", n.name);
        let mut names: Vec<&str> = exports
            .iter()
            .filter(|e| e.version == n.name)
            .map(|e| e.name)
            .collect();
        names.sort_unstable();
        if !names.is_empty() {
            s.push_str("  global:\n");
        }
        for name in names {
            let _ = writeln!(s, "    {name};");
        }
        match n.parent {
            Some(p) => {
                let _ = writeln!(s, "}} {p};");
            }
            None => s.push_str("};\n"),
        }
    }
    Ok(s)
}

/// The linker arguments (without the `cargo:` prefix): the soname, the version script, one
/// `--defsym=NAME=<impl_prefix>NAME` alias per default export, and per compat export a
/// `--defsym` of a throwaway local name to its trampoline, which fails the link ("undefined
/// symbol") when the crate forgot to `include!` the [`compat_source`] file.
pub fn link_args(
    soname: &str,
    impl_prefix: &str,
    script: &Path,
    exports: &[Export<'_>],
) -> Vec<String> {
    let mut args = vec![
        format!("-Wl,-soname,{soname}"),
        format!("-Wl,--version-script={}", script.display()),
    ];
    for e in exports {
        if e.is_compat() {
            let t = trampoline_name(e.name, e.node());
            args.push(format!("-Wl,--defsym={t}_included={t}"));
        } else {
            args.push(format!(
                "-Wl,--defsym={}={}",
                e.name,
                e.impl_name(impl_prefix)
            ));
        }
    }
    args
}

/// Rust source defining the compat exports: per export `name@NODE`, a `global_asm!` trampoline
/// that jumps to [`compat_impl_name`] and a `.symver` that names it `name@NODE` (`.symver` only
/// binds a symbol defined in the same assembly, hence the trampoline rather than the Rust
/// function itself). Empty when there is none. [`link_versioned`] writes it to
/// `OUT_DIR/cabi_compat.rs`; a crate with compat exports includes it once at its root with
/// `include!(concat!(env!("OUT_DIR"), "/cabi_compat.rs"));`. x86-64 and aarch64 only.
pub fn compat_source(impl_prefix: &str, exports: &[Export<'_>]) -> String {
    let mut s = String::new();
    for e in exports.iter().filter(|e| e.is_compat()) {
        let t = trampoline_name(e.name, e.node());
        let target = e.impl_name(impl_prefix);
        let (name, node) = (e.name, e.node());
        let body = |ty: &str, jump: &str| {
            format!(
                "core::arch::global_asm!(\".text\", \".globl {t}\", \".type {t},{ty}\", \
                 \"{t}:\", \"{jump} {target}\", \".size {t}, . - {t}\", \
                 \".symver {t}, {name}@{node}\");"
            )
        };
        let _ = writeln!(
            s,
            "// {name}@{node} -> {target}\n#[cfg(target_arch = \"x86_64\")]\n{}\n\
             #[cfg(target_arch = \"aarch64\")]\n{}",
            body("@function", "jmp"),
            body("%function", "b"),
        );
    }
    s
}

/// From a build script: writes `OUT_DIR/<soname>.map` and `OUT_DIR/cabi_compat.rs` (see
/// [`compat_source`]) and prints the `cargo:rustc-cdylib-link-arg=` lines that give the cdylib
/// the soname, the version script and the aliases. Each export must be implemented in the crate
/// as `#[unsafe(no_mangle)] pub extern "C" fn` named [`Export::impl_name`]. Returns the
/// script's path.
///
/// What the `.so` then holds (measured with rust-lld, rustc 1.95): each `NAME@@NODE` alias, and
/// the private `<impl_prefix>NAME` symbols too, unversioned (`Base`), since rustc's own script
/// exports every `no_mangle` item and a `local:` pattern cannot override its exact names; no
/// consumer imports them, and checks of the export set should skip the prefix. rust-lld writes
/// the nodes but not their parents (`.gnu.version_d` Cnt 1) nor GNU ld's `ABS` node-name
/// symbols; glibc's loader uses neither. A crate linked with GNU ld instead fails to link.
pub fn link_versioned(
    soname: &str,
    impl_prefix: &str,
    nodes: &[Node<'_>],
    exports: &[Export<'_>],
) -> Result<PathBuf, Error> {
    if !is_c_ident(impl_prefix) {
        return Err(Error::BadName(impl_prefix.to_string()));
    }
    let text = version_script(nodes, exports)?;
    let out = std::env::var_os("OUT_DIR").ok_or(Error::NoOutDir)?;
    let path = Path::new(&out).join(format!("{soname}.map"));
    std::fs::write(&path, text).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let compat = Path::new(&out).join("cabi_compat.rs");
    std::fs::write(&compat, compat_source(impl_prefix, exports)).map_err(|source| Error::Io {
        path: compat.clone(),
        source,
    })?;
    for arg in link_args(soname, impl_prefix, &path, exports) {
        println!("cargo:rustc-cdylib-link-arg={arg}");
    }
    Ok(path)
}

/// From a build script: reads the symbol-list file at `list` (see [`parse_symbol_list`]),
/// derives the nodes with [`nodes_for`], calls [`link_versioned`], and prints
/// `cargo:rerun-if-changed=` for the list. Returns the entries so the caller can generate code
/// from them.
pub fn link_symbol_list(
    soname: &str,
    impl_prefix: &str,
    list: &Path,
) -> Result<Vec<SymbolEntry>, Error> {
    println!("cargo:rerun-if-changed={}", list.display());
    let entries = read_symbol_list(list)?;
    let exports: Vec<Export<'_>> = entries.iter().map(SymbolEntry::export).collect();
    let nodes = nodes_for(&exports);
    link_versioned(soname, impl_prefix, &nodes, &exports)?;
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_with_comments_and_kinds() {
        let e =
            parse_symbol_list("# head\n\nfoo MLX5_1.0 ptr # trailing\n  bar MLX5_1.1\n").unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].name.as_str(), e[0].kind.as_deref(), e[0].line),
            ("foo", Some("ptr"), 3)
        );
        assert_eq!(
            (e[1].version.as_str(), e[1].kind.as_deref()),
            ("MLX5_1.1", None)
        );
    }

    #[test]
    fn rejects_bad_lines() {
        assert!(matches!(
            parse_symbol_list("foo"),
            Err(Error::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_symbol_list("a B c d"),
            Err(Error::BadLine { .. })
        ));
        assert!(matches!(parse_symbol_list("1x V"), Err(Error::BadName(_))));
        assert!(matches!(parse_symbol_list("x V{"), Err(Error::BadNode(_))));
        assert!(matches!(
            parse_symbol_list("x V\nx W"),
            Err(Error::Duplicate(_))
        ));
    }

    #[test]
    fn nodes_sort_numerically_and_chain_per_family() {
        let ex = [
            Export {
                name: "a",
                version: "IBVERBS_1.10",
            },
            Export {
                name: "b",
                version: "IBVERBS_PRIVATE_34",
            },
            Export {
                name: "c",
                version: "IBVERBS_1.9",
            },
            Export {
                name: "d",
                version: "IBVERBS_1.0",
            },
            Export {
                name: "e",
                version: "IBVERBS_1.9",
            },
        ];
        let nodes = nodes_for(&ex);
        assert_eq!(
            nodes,
            vec![
                Node {
                    name: "IBVERBS_1.0",
                    parent: None
                },
                Node {
                    name: "IBVERBS_1.9",
                    parent: Some("IBVERBS_1.0")
                },
                Node {
                    name: "IBVERBS_1.10",
                    parent: Some("IBVERBS_1.9")
                },
                Node {
                    name: "IBVERBS_PRIVATE_34",
                    parent: None
                },
            ]
        );
    }

    #[test]
    fn script_lists_each_node_in_order_with_its_parent() {
        let ex = [
            Export {
                name: "y",
                version: "X_1.1",
            },
            Export {
                name: "x",
                version: "X_1.0",
            },
        ];
        let s = version_script(&Node::chain(&["X_1.0", "X_1.1", "X_1.2"]), &ex).unwrap();
        let expect = "/* generated by bypass-cabi-build */\n\
                      X_1.0 {\n  global:\n    x;\n};\n\
                      X_1.1 {\n  global:\n    y;\n} X_1.0;\n\
                      X_1.2 {\n} X_1.1;\n";
        assert_eq!(s, expect);
    }

    #[test]
    fn script_rejects_undeclared_nodes_and_parents() {
        let ex = [Export {
            name: "x",
            version: "X_1.1",
        }];
        assert!(matches!(
            version_script(&Node::chain(&["X_1.0"]), &ex),
            Err(Error::UnknownNode { .. })
        ));
        let bad = [Node {
            name: "X_1.1",
            parent: Some("X_1.0"),
        }];
        assert!(matches!(
            version_script(&bad, &ex),
            Err(Error::BadParent { .. })
        ));
    }

    #[test]
    fn link_args_alias_each_export() {
        let ex = [Export {
            name: "ibv_x",
            version: "V",
        }];
        let a = link_args(
            "libibverbs.so.1",
            "__bypass_impl_",
            Path::new("/o/v.map"),
            &ex,
        );
        assert_eq!(
            a,
            vec![
                "-Wl,-soname,libibverbs.so.1".to_string(),
                "-Wl,--version-script=/o/v.map".to_string(),
                "-Wl,--defsym=ibv_x=__bypass_impl_ibv_x".to_string(),
            ]
        );
    }

    #[test]
    fn compat_versions_sit_next_to_one_default() {
        let e = parse_symbol_list("f V_1.2\nf @V_1.0\n").unwrap();
        assert!(e[1].export().is_compat() && e[1].export().node() == "V_1.0");
        assert!(matches!(
            parse_symbol_list("f @V_1.0\nf V_1.0"),
            Err(Error::Duplicate(_))
        ));
        assert!(matches!(
            parse_symbol_list("f @V_1.0\nf @V_1.0"),
            Err(Error::Duplicate(_))
        ));
        assert!(matches!(parse_symbol_list("f @V{"), Err(Error::BadNode(_))));
        let ex: Vec<Export<'_>> = e.iter().map(SymbolEntry::export).collect();
        assert_eq!(nodes_for(&ex), Node::chain(&["V_1.0", "V_1.2"]));
        let script = version_script(&nodes_for(&ex), &ex).unwrap();
        assert!(
            script.contains("V_1.0 {\n};")
                && script.contains("V_1.2 {\n  global:\n    f;\n} V_1.0;")
        );
        let args = link_args("l.so.1", "__p_", Path::new("m"), &ex);
        assert_eq!(args[2], "-Wl,--defsym=f=__p_f");
        assert_eq!(
            args[3],
            "-Wl,--defsym=__cabi_compat_f__V_1_0_included=__cabi_compat_f__V_1_0"
        );
        let src = compat_source("__p_", &ex);
        assert!(
            src.contains("\"jmp __p_f__V_1_0\"")
                && src.contains("\".symver __cabi_compat_f__V_1_0, f@V_1.0\"")
        );
        assert_eq!(compat_source("__p_", &ex[..1]), "");
    }
}
