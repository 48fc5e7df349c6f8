//! Link options.
//!
//! - Every binary starts quicker with its relative relocations packed (`DT_RELR`): the loader
//!   reads a table of about 100 KB instead of 8.6 MB before `main`. A binary linked so needs
//!   glibc 2.36 or later to start, so it is asked for only when the binary is built for the
//!   machine that builds it and that machine's glibc has it. `MEMEX_NO_PACKED_RELOCS=1` turns
//!   it off, for a binary built here to run on an older system.
//! - The hook command is started on every prompt, so it is kept small. Its symbol table is
//!   dropped (a hook that fails prints nothing and exits 0 by design; `memex inject --explain`
//!   is the way to see why), and identical functions are folded.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MEMEX_NO_PACKED_RELOCS");
    let var = |name| std::env::var(name).unwrap_or_default();
    let (target, host, profile) = (var("TARGET"), var("HOST"), var("PROFILE"));
    let wanted = !matches!(var("MEMEX_NO_PACKED_RELOCS").as_str(), "1" | "true");
    if wanted && target.ends_with("linux-gnu") && target == host && glibc_has_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if target.contains("linux") && profile == "release" {
        println!("cargo:rustc-link-arg-bin=memex-inject=-Wl,--strip-all");
        println!("cargo:rustc-link-arg-bin=memex-inject=-Wl,--icf=all");
    }
}

/// Whether this machine's glibc (`getconf GNU_LIBC_VERSION`: "glibc 2.36") is 2.36 or later.
fn glibc_has_relr() -> bool {
    let Ok(out) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}
