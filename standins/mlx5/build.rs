//! Generates the libmlx5.so.1 stand-in's stubs and versioned exports from `symbols.txt`
//! (see `../stubgen.rs`).

#[path = "../stubgen.rs"]
mod stubgen;

fn main() {
    stubgen::main("libmlx5.so.1");
}
