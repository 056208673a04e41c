//! The committed BPF objects are built from their sources: [`assert_built_from_source`]. What
//! their C sources declare for userspace to mirror (structs, enums, defines) is read by
//! [`c_struct`], [`c_enum`] and [`c_define`], for the mirrors' tests.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::skip;

/// Asserts that `<crate_dir>/bpf/<object>` is what its `sources` (in that directory) build to:
/// their SHA-256, read in order, matches the one `scripts/build-bpf` recorded in
/// `<object>.stamp`, and, where the same clang is installed, `scripts/build-bpf <target>`
/// rebuilds the same bytes. `./scripts/test` (and so CI) installs clang, llvm and libbpf-dev;
/// elsewhere the rebuild is skipped with a note.
pub fn assert_built_from_source(crate_dir: &str, target: &str, object: &str, sources: &[&str]) {
    let dir = Path::new(crate_dir).join("bpf");
    let stamp_file = format!("{object}.stamp");
    let text = std::fs::read_to_string(dir.join(&stamp_file)).unwrap();
    let stamp = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {key} in {stamp_file}: {text}"))
    };

    let mut source = Vec::new();
    for s in sources {
        source.extend(std::fs::read(dir.join(s)).unwrap());
    }
    let mut sha = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils)");
    std::io::Write::write_all(&mut sha.stdin.take().unwrap(), &source).unwrap();
    let out = sha.wait_with_output().unwrap();
    let hash = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        hash.split_whitespace().next().unwrap_or(""),
        stamp("source-sha256"),
        "{target}/bpf/{} changed since {object} was built: run scripts/build-bpf",
        sources.join(" or ")
    );

    let have = |tool: &str| Command::new(tool).arg("--version").output().is_ok();
    if !have("clang")
        || !have("llvm-strip")
        || !Path::new("/usr/include/bpf/bpf_helpers.h").exists()
    {
        skip("clang, llvm-strip or libbpf-dev is not installed (./scripts/test installs them): the object was not rebuilt");
        return;
    }
    let version = Command::new("clang").arg("-dumpversion").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if version != stamp("clang") {
        eprintln!(
            "note: clang {version} here, the object was built with clang {}: bytes not compared",
            stamp("clang")
        );
        return;
    }
    let rebuilt = std::env::temp_dir().join(format!("nagless-{}-{object}", std::process::id()));
    let script = Path::new(crate_dir).join("../scripts/build-bpf");
    let o = Command::new("bash")
        .arg(&script)
        .arg(target)
        .arg(&rebuilt)
        .output()
        .unwrap();
    assert!(o.status.success(), "scripts/build-bpf: {o:?}");
    let same = std::fs::read(&rebuilt).unwrap() == std::fs::read(dir.join(object)).unwrap();
    let _ = std::fs::remove_file(&rebuilt);
    assert!(
        same,
        "{object} is not what its source builds to: run scripts/build-bpf"
    );
}

/// `source` without its comments.
fn without_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
            out.push(' ');
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
            out.push('\n');
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The body (between the braces) of `KIND NAME { ... }` in `source` (comments removed).
fn body(source: &str, kind: &str, name: &str) -> String {
    let code = without_comments(source);
    let words: Vec<&str> = code.split_inclusive('{').collect();
    for (i, w) in words.iter().enumerate() {
        let head: Vec<&str> = w.trim_end_matches('{').split_whitespace().collect();
        if head.len() >= 2 && head[head.len() - 2] == kind && head[head.len() - 1] == name {
            let rest: String = words[i + 1..].concat();
            return rest.split_once('}').expect("a closing brace").0.to_string();
        }
    }
    panic!("no `{kind} {name} {{` in the source");
}

/// The value of `#define NAME VALUE` in a C source (a decimal or `0x` number).
pub fn c_define(source: &str, name: &str) -> Option<i64> {
    without_comments(source).lines().find_map(|l| {
        let mut w = l.split_whitespace();
        if w.next()? != "#define" || w.next()? != name {
            return None;
        }
        let v = w.next()?;
        match v.strip_prefix("0x") {
            Some(hex) => i64::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        }
    })
}

/// The members of `enum NAME` in a C source, in order (members without values: each is its
/// index).
pub fn c_enum(source: &str, name: &str) -> Vec<String> {
    body(source, "enum", name)
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|m| {
            assert!(!m.contains('='), "enum {name}: {m} has a value of its own");
            m.to_string()
        })
        .collect()
}

/// The fields of `struct NAME` in a C source, each with its offset and size, and the struct's
/// size, as a C compiler lays it out for BPF and for x86-64 and arm64 alike: each field at
/// the next multiple of its alignment (its element's size), the size a multiple of the
/// largest. Knows the kernel's fixed-width types (`__u8` to `__u64`, `__s8` to `__s64`),
/// `char` and `int`; array lengths may be numbers or names the source `#define`s. What a
/// `#[repr(C)]` mirror's [`mirror_layout!`](crate::mirror_layout) must equal.
pub fn c_struct(source: &str, name: &str) -> (Vec<(String, usize, usize)>, usize) {
    let (mut fields, mut at, mut align) = (Vec::new(), 0usize, 1usize);
    for decl in body(source, "struct", name).split(';') {
        let decl = decl.trim();
        if decl.is_empty() {
            continue;
        }
        let (ty, names) = decl
            .split_once(char::is_whitespace)
            .unwrap_or_else(|| panic!("struct {name}: cannot read `{decl}`"));
        let size = match ty {
            "__u8" | "__s8" | "char" => 1,
            "__u16" | "__s16" => 2,
            "__u32" | "__s32" | "int" => 4,
            "__u64" | "__s64" => 8,
            _ => panic!("struct {name}: unknown type {ty}"),
        };
        for field in names.split(',').map(str::trim) {
            let (field, len) = match field.split_once('[') {
                Some((f, n)) => {
                    let n = n.trim_end_matches(']').trim();
                    let len = n
                        .parse()
                        .ok()
                        .or_else(|| c_define(source, n).and_then(|v| usize::try_from(v).ok()));
                    (
                        f.trim(),
                        len.unwrap_or_else(|| panic!("struct {name}: length {n}")),
                    )
                }
                None => (field, 1),
            };
            at = at.next_multiple_of(size);
            fields.push((field.to_string(), at, size * len));
            at += size * len;
            align = align.max(size);
        }
    }
    (fields, at.next_multiple_of(align))
}

/// The size of the field `field` picks out of a `T` (for [`mirror_layout!`](crate::mirror_layout)).
pub fn field_size<T, F>(_field: impl Fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// The fields of a `#[repr(C)]` struct, each with its offset and size, and the struct's size,
/// as [`c_struct`] gives a C struct's: `mirror_layout!(RawEvent: cookie, hold_ns, ...)`, the
/// fields named in their order.
#[macro_export]
macro_rules! mirror_layout {
    ($t:ty: $($field:ident),* $(,)?) => {
        (
            vec![$((
                stringify!($field).to_string(),
                ::std::mem::offset_of!($t, $field),
                $crate::bpf_object::field_size(|v: &$t| &v.$field),
            )),*],
            ::std::mem::size_of::<$t>(),
        )
    };
}

#[cfg(test)]
mod c_tests {
    use super::*;

    const SOURCE: &str = "
#define MAX_PORTS 4 /* ports */
#define FLAG 0x10
// struct fake { __u64 no; };
enum counter {
\tONE, /* the first */
\tTWO,
\tN,
};
struct s {
\t__u8 a;       /* 0 */
\t__u32 b, c;   /* 4, 8 */
\t__u16 ports[MAX_PORTS];
\t__u64 d;
\tchar comm[3];
};
";

    #[test]
    fn declarations_are_read_as_a_compiler_lays_them_out() {
        assert_eq!(c_define(SOURCE, "MAX_PORTS"), Some(4));
        assert_eq!(c_define(SOURCE, "FLAG"), Some(16));
        assert_eq!(c_define(SOURCE, "NONE"), None);
        assert_eq!(c_enum(SOURCE, "counter"), ["ONE", "TWO", "N"]);
        #[repr(C)]
        struct S {
            a: u8,
            b: u32,
            c: u32,
            ports: [u16; 4],
            d: u64,
            comm: [u8; 3],
        }
        let (fields, size) = c_struct(SOURCE, "s");
        let want = [
            ("a", 0, 1),
            ("b", 4, 4),
            ("c", 8, 4),
            ("ports", 12, 8),
            ("d", 24, 8),
            ("comm", 32, 3),
        ];
        assert_eq!(
            fields,
            want.map(|(f, at, n)| (f.to_string(), at, n)).to_vec()
        );
        assert_eq!(size, 40);
        assert_eq!(
            (fields, size),
            crate::mirror_layout!(S: a, b, c, ports, d, comm)
        );
    }
}
