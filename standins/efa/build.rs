//! Generates the libefa.so.1 stand-in's stubs and versioned exports from `symbols.txt`
//! (see `../stubgen.rs`).

#[path = "../stubgen.rs"]
mod stubgen;

fn main() {
    stubgen::main("libefa.so.1");
}
