//! Link options for one binary: the hook command is started on every prompt, so it is kept
//! small. Its symbol table is dropped (a hook that fails prints nothing and exits 0 by design;
//! `memex inject --explain` is the way to see why), and identical functions are folded.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    let profile = std::env::var("PROFILE").unwrap_or_default();
    if target.contains("linux") && profile == "release" {
        println!("cargo:rustc-link-arg-bin=memex-inject=-Wl,--strip-all");
        println!("cargo:rustc-link-arg-bin=memex-inject=-Wl,--icf=all");
    }
}
