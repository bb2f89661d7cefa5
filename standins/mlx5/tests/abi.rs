//! The libmlx5.so.1 stand-in exports Debian's exact versioned function set and every stub fails as its
//! kind says (checks in `../abi_test.rs`).

#[path = "../../abi_test.rs"]
mod abi_test;

const SONAME: &str = "libmlx5.so.1";

#[test]
fn exports_match_the_committed_list() {
    let list = abi_test::read_list(env!("CARGO_MANIFEST_DIR"));
    abi_test::check_exports_match_list("mlx5", SONAME, &list);
}

#[test]
fn committed_list_matches_debian() {
    let list = abi_test::read_list(env!("CARGO_MANIFEST_DIR"));
    abi_test::check_list_matches_debian(SONAME, &list);
}

#[test]
fn every_stub_fails_as_its_kind_says() {
    let list = abi_test::read_list(env!("CARGO_MANIFEST_DIR"));
    abi_test::check_stub_behaviour("mlx5", &list);
}

#[test]
fn regen_script_reproduces_the_list() {
    abi_test::check_regen_reproduces_lists(SONAME);
}
