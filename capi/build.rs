//! Generates `nagless.h` from the Rust signatures with cbindgen (into `OUT_DIR`; the test
//! `header_is_current` compares it with the checked-in `include/nagless.h`, so the header
//! can never drift from the code), and gives the shared library its SONAME (ELF) or install
//! name (macOS).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    let out = std::env::var("OUT_DIR").expect("cargo sets it");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let mut config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    // The version macros, from Cargo's version: the checked-in header follows every bump
    // (`header_is_current` fails until it is regenerated).
    let var = |k: &str| std::env::var(k).expect("cargo sets it");
    let (major, minor, patch) = (
        var("CARGO_PKG_VERSION_MAJOR"),
        var("CARGO_PKG_VERSION_MINOR"),
        var("CARGO_PKG_VERSION_PATCH"),
    );
    let version = var("CARGO_PKG_VERSION");
    let number = [&major, &minor, &patch]
        .iter()
        .map(|n| n.parse::<u64>().expect("a number"))
        .fold(0, |acc, n| acc * 100 + n);
    let after = config.after_includes.take().unwrap_or_default();
    config.after_includes = Some(format!(
        "{after}\n\n\
         /* The version of nagless this header belongs to (nagless_version() says the library's). */\n\
         #define NAGLESS_VERSION_MAJOR {major}\n\
         #define NAGLESS_VERSION_MINOR {minor}\n\
         #define NAGLESS_VERSION_PATCH {patch}\n\
         #define NAGLESS_VERSION_STRING \"{version}\"\n\
         /* NAGLESS_VERSION_MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */\n\
         #define NAGLESS_VERSION_NUMBER {number}"
    ));
    // The crate's own sources (lib.rs and its modules), parsed alone: no `cargo metadata`
    // (which a packaged crate, an offline build or a dependency not yet published would make
    // fail).
    cbindgen::Builder::new()
        .with_src(format!("{dir}/src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("generate nagless.h")
        .write_to_file(format!("{out}/nagless.h"));
    // 0.x releases break the ABI at every minor version: the SONAME carries both.
    let soname = if major == "0" {
        format!("libnagless.so.0.{minor}")
    } else {
        format!("libnagless.so.{major}")
    };
    // The header above is the same whatever the target (cbindgen reads every `cfg` branch
    // and the differences are the C preprocessor's); the library's name inside it is not.
    match std::env::var("CARGO_CFG_TARGET_OS").as_deref() {
        Ok("macos" | "ios") => println!(
            "cargo:rustc-cdylib-link-arg=-Wl,-install_name,@rpath/{}",
            soname.replace(".so.", ".") + ".dylib"
        ),
        Ok("windows") => {}
        _ => {
            println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
            build_tree_links(&out, &soname, &version);
        }
    }
    println!("cargo:rustc-env=NAGLESS_SONAME={soname}");
}

/// The links an installed library has, beside the one cargo builds, so that C programs link
/// and run against the build tree as against an install (`-Ltarget/release -lnagless`, and
/// the SONAME found at run time):
/// `libnagless.so -> libnagless.so.0.<minor> -> libnagless.so.<version> -> libnagless_capi.so`.
/// They point to a file cargo writes after this script, in the profile directory that holds
/// `out` (`<target>/[<triple>/]<profile>/build/<pkg>-<hash>/out`).
#[cfg(unix)]
fn build_tree_links(out: &str, soname: &str, version: &str) {
    let Some(profile) = std::path::Path::new(out).ancestors().nth(3) else {
        return;
    };
    let full = format!("libnagless.so.{version}");
    for (link, to) in [
        (full.as_str(), "libnagless_capi.so"),
        (soname, full.as_str()),
        ("libnagless.so", soname),
    ] {
        let link = profile.join(link);
        if std::fs::read_link(&link).is_ok_and(|t| t.as_os_str() == to) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        // A build directory that refuses links only loses the convenience.
        if let Err(e) = std::os::unix::fs::symlink(to, &link) {
            println!("cargo:warning=cannot link {}: {e}", link.display());
        }
    }
}

#[cfg(not(unix))]
fn build_tree_links(_out: &str, _soname: &str, _version: &str) {}
