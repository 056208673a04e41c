//! What the fleet agent's tests (`fix_policy.rs`) share: a scratch directory for a policy and
//! its journal, a rule, the agent started and stopped, a probe read until it says what is
//! wanted.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use super::{start_fix, Cgroup, Holder};

/// The cgroup as a policy names it (relative to the cgroup2 root).
pub fn rel(cg: &Cgroup) -> String {
    let root = nagless_fix::target::cgroup2_root().unwrap();
    format!("/{}", cg.dir.strip_prefix(root).unwrap().display())
}

/// A directory for one test's policy and journal, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("nagless-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    pub fn policy(&self) -> PathBuf {
        self.0.join("policy.toml")
    }
    pub fn state(&self) -> String {
        self.0.join("state").display().to_string()
    }
    pub fn journal(&self) -> PathBuf {
        self.0.join("state/fix-policy.journal")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A rule that sets TCP_NODELAY on connections of `cg` to `port`.
pub fn nodelay_rule(name: &str, cg: &Cgroup, port: u16) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\ncgroup = \"{}\"\nports = [{port}]\nnodelay = true\n\n",
        rel(cg)
    )
}

/// Waits (at most `limit`) for `holder`'s TCP_NODELAY to read `want`; how long it took.
pub fn until(holder: &mut Holder, want: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let now = holder.nodelay();
        if now == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "TCP_NODELAY still {now} after {limit:?}, {want} expected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to the agent and waits for its clean exit.
pub fn stop(mut agent: Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not waited for.
    unsafe { libc::kill(agent.id() as i32, sig) };
    let st = nagless_test_support::wait_at_most(&mut agent, Duration::from_secs(20))
        .expect("the agent did not stop");
    if sig == libc::SIGTERM {
        assert!(st.success(), "the agent: {st}");
    }
}

/// A child killed if the test fails before it ends it.
pub struct Guard(pub Option<Child>);

impl Guard {
    pub fn take(&mut self) -> Child {
        self.0.take().unwrap()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts an agent on the scratch's policy and state; its first line.
pub fn agent(s: &Scratch) -> (Guard, String) {
    let (c, line) = start_fix(&[
        "--policy",
        s.policy().to_str().unwrap(),
        "--state",
        &s.state(),
    ]);
    (Guard(Some(c)), line)
}
