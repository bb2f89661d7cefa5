//! Links `libibverbs.so.1`: soname, and every symbol of `symbols.txt` exported at its
//! version node as an alias of the Rust function `__bypass_<name>` (see `cabi-build/`).

use std::path::Path;

fn main() {
    let list = Path::new("symbols.txt");
    if let Err(e) = cabi_build::link_symbol_list("libibverbs.so.1", "__bypass_", list) {
        panic!("ibverbs/symbols.txt: {e}");
    }
}
