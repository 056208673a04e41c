//! One voice on the command line (ripgrep's and fd's conventions): `-V` everywhere, `--json` a
//! switch in every command, durations with units in every flag (the older bare-number
//! spellings still read), short flags for the common options, `nagless run CMD` without `--`,
//! refusals that say what to do instead, and a warning said once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nagless(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nagless"))
        .args(args)
        // `run`'s options take these as their values (tested below).
        .env_remove("NAGLESS_MODE")
        .env_remove("NAGLESS_LINGER_US")
        .output()
        .expect("run nagless")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> PathBuf {
    nagless_test_support::scratch_dir("conventions").join(name)
}

const COMMANDS: [&str; 5] = ["lab", "run", "doctor", "watch", "fix"];

#[test]
fn version_at_the_top_and_for_every_command() {
    let version = env!("CARGO_PKG_VERSION");
    let mut each: Vec<Vec<&str>> = vec![vec!["-V"], vec!["--version"]];
    for c in COMMANDS {
        each.push(vec![c, "-V"]);
        each.push(vec![c, "--version"]);
    }
    for args in each {
        let o = nagless(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(
            out.starts_with("nagless") && out.contains(version),
            "{args:?}: {out}"
        );
    }
}

/// The short flags each command's help shows, and that they do what the long ones do.
#[test]
fn common_options_have_short_flags() {
    let shorts: &[(&str, &[&str])] = &[
        ("lab", &["-j, --json", "-q, --quick", "-s, --strategy"]),
        ("run", &["-m, --mode", "-s, --stats"]),
        ("doctor", &["-j, --json", "-f, --filter", "-n, --top"]),
        ("watch", &["-j, --json", "-p, --pid", "-d, --duration"]),
        (
            "fix",
            &["-p, --pid", "-d, --duration", "-n, --dry-run", "-l, --list"],
        ),
    ];
    for (command, flags) in shorts {
        let o = nagless(&[command, "--help"]);
        let (help, _) = text(&o);
        assert!(o.status.success());
        for f in *flags {
            assert!(help.contains(f), "nagless {command} --help lacks {f}");
        }
    }
    let capture = corpus("loopback-wwr.pcap");
    let long = nagless(&["doctor", "--json", "--top", "1", &capture]);
    let short = nagless(&["doctor", "-j", "-n", "1", &capture]);
    assert_eq!(long.status.code(), Some(1), "{}", text(&long).1);
    assert_eq!(long.stdout, short.stdout);
    assert_eq!(long.status.code(), short.status.code());
    serde_json::from_slice::<serde_json::Value>(&short.stdout).expect("JSON from -j");
}

fn corpus(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/capture")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// A small lab run: one custom case, two strategies, three rounds.
fn small_lab(extra: &[&str]) -> Output {
    let mut args = vec![
        "lab",
        "custom",
        "--client",
        "w100,w100,r100",
        "--server",
        "r200,w100",
        "--rounds",
        "3",
        "--repeat",
        "1",
        "--strategy",
        "nagle,nagless",
        "--no-progress",
    ];
    args.extend_from_slice(extra);
    nagless(&args)
}

fn lab_json(bytes: &[u8]) -> serde_json::Value {
    let doc: serde_json::Value = serde_json::from_slice(bytes).expect("the lab's JSON");
    assert_eq!(doc["schema"], 1, "{doc}");
    doc
}

#[test]
fn lab_json_is_a_switch_and_files_have_their_own_flag() {
    // `--json` and `-j` print JSON on stdout (the tables go to stderr), as in doctor and
    // watch; also when a scenario follows the switch.
    for switch in ["--json", "-j"] {
        let o = small_lab(&[switch]);
        let (_, err) = text(&o);
        assert!(o.status.success(), "{err}");
        lab_json(&o.stdout);
        assert!(err.contains("== custom"), "the tables on stderr: {err}");
    }
    let o = nagless(&[
        "lab",
        "--json",
        "custom",
        "--client",
        "w100,w100,r100",
        "--server",
        "r200,w100",
        "--rounds",
        "2",
        "--repeat",
        "1",
        "--strategy",
        "nagless",
        "--no-progress",
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    lab_json(&o.stdout);
    // A file: --json-out FILE, and the older spellings --json FILE and --json=FILE.
    for (i, spelling) in [&["--json-out"][..], &["--json"], &["--json="]]
        .iter()
        .enumerate()
    {
        let file = tmp(&format!("lab-{i}.json"));
        let _ = std::fs::remove_file(&file);
        let f = file.to_str().unwrap();
        let joined;
        let args: Vec<&str> = if spelling[0].ends_with('=') {
            joined = format!("{}{f}", spelling[0]);
            vec![joined.as_str()]
        } else {
            vec![spelling[0], f]
        };
        let o = small_lab(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(
            out.contains("== custom"),
            "{args:?}: the tables on stdout: {out}"
        );
        lab_json(&std::fs::read(&file).unwrap());
    }
    // The same for CSV; and two formats on stdout at once are refused.
    let o = small_lab(&["--csv"]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).0.lines().count() >= 3, "{}", text(&o).0);
    let o = small_lab(&["--json", "--csv"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
}

#[test]
fn durations_take_units_everywhere_and_bare_numbers_where_they_did() {
    // The lab's time limit: units, or a bare number of ms (the older --limit-ms).
    for args in [
        &["--limit", "120ms"][..],
        &["--limit", "0.12s"],
        &["--limit-ms", "120"],
        &["--limit", "120"],
    ] {
        let mut all = args.to_vec();
        all.push("--json");
        let o = small_lab(&all);
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        let doc = lab_json(&o.stdout);
        assert_eq!(doc["meta"]["limit_ms"], 120, "{args:?}: {}", doc["meta"]);
        assert_eq!(doc["meta"]["limit_fixed"], true, "{args:?}");
    }
    let o = small_lab(&["--limit", "12 parsecs"]);
    assert_eq!(o.status.code(), Some(2));
    // The shim's linger bound: units, or a bare number of µs (the older --linger-us).
    for (args, us) in [
        (&["--linger", "500us"][..], "500"),
        (&["--linger", "2ms"], "2000"),
        (&["--linger-us", "700"], "700"),
        (&["--linger", "700"], "700"),
        (&[], "1000"),
    ] {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend(["--", "env"]);
        let o = nagless(&all);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(
            out.lines().any(|l| l == format!("NAGLESS_LINGER_US={us}")),
            "{args:?}: {out}"
        );
    }
    // The shim's own variables, set for `nagless run`, are its options' values (an option
    // given wins); never silently replaced by the defaults.
    for (vars, args, want) in [
        (
            &[("NAGLESS_LINGER_US", "2000")][..],
            &[][..],
            "NAGLESS_LINGER_US=2000",
        ),
        (
            &[("NAGLESS_LINGER_US", "2000")],
            &["--linger", "500us"],
            "NAGLESS_LINGER_US=500",
        ),
        (&[("NAGLESS_MODE", "cork")], &[], "NAGLESS_MODE=cork"),
        (
            &[("NAGLESS_MODE", "cork")],
            &["--mode", "nodelay"],
            "NAGLESS_MODE=nodelay",
        ),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nagless"));
        c.arg("run")
            .args(args)
            .args(["--", "env"])
            .envs(vars.iter().copied());
        let o = c.output().expect("run nagless");
        let (out, err) = text(&o);
        assert!(o.status.success(), "{vars:?} {args:?}: {err}");
        assert!(out.lines().any(|l| l == want), "{vars:?} {args:?}: {out}");
    }
    for (var, bad) in [("NAGLESS_LINGER_US", "100000000"), ("NAGLESS_MODE", "fast")] {
        let o = Command::new(env!("CARGO_BIN_EXE_nagless"))
            .args(["run", "--", "env"])
            .env(var, bad)
            .output()
            .expect("run nagless");
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{var}={bad}: {err}");
        assert!(err.contains(var) || err.contains(bad), "{var}={bad}: {err}");
    }
    for bad in ["10us", "1s", "40", "soon"] {
        let o = nagless(&["run", "--linger", bad, "--", "env"]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--linger"), "{bad}: {err}");
    }
}

#[test]
fn run_needs_no_double_dash() {
    // Everything from the first word that is no option of run's on is the program's, its
    // own options included.
    for args in [
        &["run", "env", "-u", "NOT_SET"][..],
        &["run", "--", "env", "-u", "NOT_SET"],
        &["run", "-m", "nodelay", "env", "-u", "NOT_SET"],
    ] {
        let o = nagless(args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(out.contains("LD_PRELOAD="), "{args:?}: {out}");
        let mode = if args.contains(&"nodelay") {
            "nodelay"
        } else {
            "nagless"
        };
        assert!(
            out.lines().any(|l| l == format!("NAGLESS_MODE={mode}")),
            "{args:?}: {out}"
        );
    }
    // An option of run's after the program is the program's.
    let o = nagless(&["run", "env", "--stats"]);
    assert_ne!(o.status.code(), Some(0), "env has no --stats");
    assert!(!text(&o).0.contains("NAGLESS_STATS=1"));
}

#[test]
fn a_program_the_shim_cannot_reach_is_pointed_to_nagless_fix() {
    let src = tmp("static.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let bin = tmp("static");
    let gcc = Command::new("gcc")
        .args(["-O2", "-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("gcc");
    assert!(
        gcc.status.success(),
        "gcc -static: {}",
        String::from_utf8_lossy(&gcc.stderr)
    );
    let o = nagless(&["run", bin.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("statically linked"), "{err}");
    assert!(err.contains("nagless fix --pid"), "{err}");
}

#[test]
fn a_cut_capture_is_warned_about_once() {
    // A capture cut short mid-packet, as a killed tcpdump leaves it.
    let whole = std::fs::read(corpus("loopback-wwr.pcap")).unwrap();
    let cut = tmp("cut.pcap");
    std::fs::write(&cut, &whole[..whole.len() * 2 / 3 + 7]).unwrap();
    for args in [&["doctor"][..], &["doctor", "--json"]] {
        let mut all = args.to_vec();
        all.push(cut.to_str().unwrap());
        let o = nagless(&all);
        let (out, err) = text(&o);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{args:?}: {err}");
        let said = out.matches("cut or damaged").count() + err.matches("cut or damaged").count();
        assert_eq!(said, 1, "{args:?}: stdout {out}\nstderr {err}");
    }
}
