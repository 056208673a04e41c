//! What the shim's test files share: the shim library, running a program under it and
//! reading what it printed (its `key=value` fields, the shim's `nagless stats:` lines), the C
//! programs of `tests/c/` (`shim_cases` with its one runner, [`shim_case`]), and, in
//! `servers`, what the tests of real servers need (wrk, segment counts, process groups).
#![allow(dead_code)] // each test file uses its own part

pub mod servers;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The shim library `nagless run` preloads (embedded in the binary, unpacked to a cache).
pub fn shim() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(env!("CARGO_BIN_EXE_nagless"))
            .args(["run", "--print-shim"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(path.is_file(), "{} missing", path.display());
        path
    })
    .clone()
}

/// Compiles a C program of `tests/c/` once per test run.
pub fn c_program(name: &str) -> PathBuf {
    let out = nagless_test_support::scratch_dir("preload").join(name);
    if !out.exists() {
        let gcc = compile_c(name, &out, &[]);
        assert!(
            gcc.status.success(),
            "gcc {name}: {}",
            String::from_utf8_lossy(&gcc.stderr)
        );
    }
    out
}

/// Compiles `tests/c/NAME.c` to `out` with the tests' warnings and `extra` flags.
pub fn compile_c(name: &str, out: &Path, extra: &[&str]) -> Output {
    Command::new("gcc")
        .args(extra)
        .args(["-O2", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c")))
        .output()
        .expect("gcc")
}

/// Runs `cmd` under the shim in `mode`, with its exit report (`NAGLESS_STATS=1`).
pub fn with_shim(cmd: &mut Command, mode: &str) {
    cmd.env("LD_PRELOAD", shim())
        .env("NAGLESS_MODE", mode)
        .env("NAGLESS_STATS", "1");
}

/// Parses `key=value` pairs from a program's output.
pub fn fields(text: &str) -> HashMap<String, i64> {
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// The numbers of a `nagless stats:` line, by the word that follows each.
pub fn stats_lines(stderr: &str) -> Vec<HashMap<String, u64>> {
    stderr
        .lines()
        // A program's own unterminated line may precede it (Erlang's logger does).
        .filter_map(|l| l.find("nagless stats:").map(|at| &l[at..]))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let mut m = HashMap::new();
            for w in words.windows(2) {
                if let Ok(n) = w[0].parse::<u64>() {
                    m.insert(w[1].trim_end_matches([',', '(']).to_string(), n);
                }
            }
            m
        })
        .collect()
}

/// `shim_cases` (`tests/c/shim_cases.c`, one mode per case) and the shim it runs under.
pub struct ShimCases {
    pub shim: PathBuf,
    pub program: PathBuf,
}

impl ShimCases {
    /// This machine's shim and `shim_cases`.
    pub fn native() -> ShimCases {
        ShimCases {
            shim: shim(),
            program: c_program("shim_cases"),
        }
    }

    /// `shim_cases ARGS` under the shim (the default mode, with its exit report), to run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(args)
            .env("LD_PRELOAD", &self.shim)
            .env("NAGLESS_MODE", "nagless")
            .env("NAGLESS_STATS", "1");
        cmd
    }

    /// Runs `shim_cases ARGS` with `env` set, checks that it succeeded, and returns what it
    /// printed.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> CaseOutput {
        let out = self
            .command(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let run = CaseOutput {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert!(
            out.status.success(),
            "shim_cases {args:?}: {}\n{}\n{}",
            out.status,
            run.stdout,
            run.stderr
        );
        run
    }
}

/// What a `shim_cases` run printed.
pub struct CaseOutput {
    pub stdout: String,
    pub stderr: String,
}

impl CaseOutput {
    /// The `key=value` fields of its stdout.
    pub fn fields(&self) -> HashMap<String, i64> {
        fields(&self.stdout)
    }

    /// The shim's `nagless stats:` lines on its stderr.
    pub fn stats(&self) -> Vec<HashMap<String, u64>> {
        stats_lines(&self.stderr)
    }
}

/// Runs `shim_cases ARGS` under this machine's shim with `env` set (see [`ShimCases::run`]).
pub fn shim_case(args: &[&str], env: &[(&str, &str)]) -> CaseOutput {
    ShimCases::native().run(args, env)
}
