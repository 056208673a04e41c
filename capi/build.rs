//! Generates `nagless.h` from the Rust signatures with cbindgen (into `OUT_DIR`; the test
//! `header_is_current` compares it with the checked-in `include/nagless.h`, so the header
//! can never drift from the code), and gives the shared library its SONAME (ELF) or install
//! name (macOS).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    let out = std::env::var("OUT_DIR").expect("cargo sets it");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    // The crate's own sources (lib.rs and its modules), parsed alone: no `cargo metadata`
    // (which a packaged crate, an offline build or a dependency not yet published would make
    // fail).
    cbindgen::Builder::new()
        .with_src(format!("{dir}/src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("generate nagless.h")
        .write_to_file(format!("{out}/nagless.h"));
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets it");
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").expect("cargo sets it");
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
        _ => println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}"),
    }
    println!("cargo:rustc-env=NAGLESS_SONAME={soname}");
}
