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
    /// The version node, e.g. `IBVERBS_1.1`.
    pub version: &'a str,
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
    /// The version node it is defined at.
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
    /// The same symbol is listed twice (one default version per name is supported).
    #[error("symbol {0} is listed twice")]
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
/// identifiers, versions valid node names, and no name may repeat.
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
        if !is_node_name(cols[1]) {
            return Err(Error::BadNode(cols[1].to_string()));
        }
        if out.iter().any(|e| e.name == cols[0]) {
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
        let (fam, _) = node_key(e.version);
        let idx = match families.iter().position(|(f, _)| *f == fam) {
            Some(i) => i,
            None => {
                families.push((fam, Vec::new()));
                families.len() - 1
            }
        };
        if !families[idx].1.contains(&e.version) {
            families[idx].1.push(e.version);
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
        if exports[..i].iter().any(|f| f.name == e.name) {
            return Err(Error::Duplicate(e.name.to_string()));
        }
        if !nodes.iter().any(|n| n.name == e.version) {
            return Err(Error::UnknownNode {
                name: e.name.to_string(),
                version: e.version.to_string(),
            });
        }
    }
    Ok(())
}

/// The version script text: one block per node, in the given order, listing its exports
/// (`NODE { global: a; b; } PARENT;`). No `local: *;`: rustc's own script already hides
/// everything it does not export, and a second catch-all would fight it.
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

/// The linker arguments (without the `cargo:` prefix): the soname, the version script, and one
/// `--defsym=NAME=<impl_prefix>NAME` alias per export.
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
    args.extend(
        exports
            .iter()
            .map(|e| format!("-Wl,--defsym={}={impl_prefix}{}", e.name, e.name)),
    );
    args
}

/// From a build script: writes `OUT_DIR/<soname>.map` and prints the
/// `cargo:rustc-cdylib-link-arg=` lines that give the cdylib the soname, the version script and
/// the aliases. Each export `NAME` must be implemented in the crate as
/// `#[unsafe(no_mangle)] pub extern "C" fn <impl_prefix>NAME`. Returns the script's path.
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
}
