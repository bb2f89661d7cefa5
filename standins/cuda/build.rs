//! Gives the stand-in the soname of NVIDIA's driver library, `libcuda.so.1`.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
