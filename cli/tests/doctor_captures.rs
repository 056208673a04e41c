//! `nagless doctor` on a real capture of write-write-read rounds this test makes on loopback
//! (tcpdump, installed by scripts/test; capturing needs root or CAP_NET_RAW): files, stdin
//! and gzip read alike, the exit status by what was found (1 stalls, 2 bad input, 3 nothing
//! to judge), a capture cut short analysed to its cut with a warning, and a reader that goes
//! away no error. (The doctor's own findings on such captures: doctor/tests/captures.rs.)
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::process::{Command, Stdio};
use std::time::Duration;

use nagless_test_support::exchanges::{listener, server, wwr};
use nagless_test_support::{have_tool, Tcpdump};

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn the_doctor_command_reads_files_stdin_and_compressed_input_and_exits_by_what_it_found() {
        if !have_tool("tcpdump") {
            return;
        }
        let (l, port) = listener();
        let cap = Tcpdump::start("cli", port, &["-i", "lo"]);
        let srv = server(l, 200, 100, Duration::ZERO);
        wwr(port, 5, false);
        srv.join().unwrap();
        let bytes = cap.finish();
        let dir = std::env::temp_dir().join(format!("nagless-doctor-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.pcap");
        std::fs::write(&good, &bytes).unwrap();
        let cut = dir.join("cut.pcap");
        std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
        let junk = dir.join("junk.pcap");
        std::fs::write(&junk, b"this is no capture at all").unwrap();
        let gz = dir.join("good.pcap.gz");
        assert!(Command::new("sh")
            .arg("-c")
            .arg(format!("gzip -c {} > {}", good.display(), gz.display()))
            .status()
            .unwrap()
            .success());
        let nagless = env!("CARGO_BIN_EXE_nagless");
        let doctor = |args: &[&std::ffi::OsStr]| {
            Command::new(nagless)
                .arg("doctor")
                .args(args)
                .output()
                .unwrap()
        };
        let svg = dir.join("t.svg");
        let o = doctor(&[good.as_os_str(), "--svg".as_ref(), svg.as_os_str()]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "stalls found: exit 1\n{out}");
        assert!(
            out.contains("delays its ACKs") && out.contains("stall"),
            "{out}"
        );
        assert!(
            out.contains(&format!("{port:>6} ")),
            "a row for the service port: {out}"
        );
        assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
        let o = doctor(&[good.as_os_str(), "--json".as_ref()]);
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["schema"], 2);
        assert!(doc["flows"][0]["stalls"].as_array().is_some());
        assert_eq!(doc["services"][0]["port"], port);
        // The same capture through gzip, and through stdin.
        let o2 = doctor(&[gz.as_os_str(), "--json".as_ref()]);
        let doc2: serde_json::Value = serde_json::from_slice(&o2.stdout).unwrap();
        assert_eq!(doc2["stalls_total"], doc["stalls_total"]);
        let o3 = Command::new(nagless)
            .args(["doctor", "-", "--json"])
            .stdin(std::fs::File::open(&gz).unwrap())
            .output()
            .unwrap();
        let doc3: serde_json::Value = serde_json::from_slice(&o3.stdout).unwrap();
        assert_eq!(doc3["stalls_total"], doc["stalls_total"]);
        // Filters: a port no flow has leaves nothing to judge: exit 3, not "no stall".
        let o = doctor(&[good.as_os_str(), "--filter".as_ref(), ":1".as_ref()]);
        assert_eq!(o.status.code(), Some(3));
        assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to judge"));
        let o = doctor(&[good.as_os_str(), "--flow".as_ref(), "1".as_ref()]);
        assert!(String::from_utf8_lossy(&o.stdout).contains("flow 1:"));
        let o = doctor(&[good.as_os_str(), "--flow".as_ref(), "99".as_ref()]);
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("no flow 99"));
        // Cut short: analysed up to the cut, with a warning.
        let o = doctor(&[cut.as_os_str()]);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("warning") && err.contains("truncated") && err.contains("offset"),
            "{err}"
        );
        // Not a capture: exit 2.
        let o = doctor(&[junk.as_os_str()]);
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("not a pcap or pcapng file"));
        // A reader that goes away (`| head`) is no error and no panic: stdout is closed before
        // the doctor writes its report.
        let mut child = Command::new(nagless)
            .arg("doctor")
            .arg(&good)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked") && err.is_empty(), "{err}");
        assert_eq!(o.status.code(), Some(1));
        let _ = std::fs::remove_dir_all(dir);
    }
}
