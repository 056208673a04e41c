//! A page as Debian's headless Chromium lays it out: [`check_page`] loads an HTML page with
//! a script of the test's that measures what it needs and writes it, as JSON, into
//! `<pre id="report-check">`; every error the page raises is recorded first, under `errors`
//! of that JSON when the script puts `window.pageErrors` there.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Recorded from the first script the page runs: every error event, scripts' and resources',
/// into `window.pageErrors`.
pub const RECORD_ERRORS: &str = "<script>window.pageErrors=[];window.addEventListener('error',\
function(e){window.pageErrors.push(String(e.message||(e.target&&e.target.outerHTML)||e.type))},true);</script>";

/// The JSON `check` (a `<script>` that writes it into `<pre id="report-check">`) found in
/// `page` once Chromium loaded it (the errors recorded from the page's start), within a
/// minute; `chromium` is its path. Panics if Chromium fails or the check did not run.
pub fn check_page(chromium: &Path, page: &str, check: &str) -> serde_json::Value {
    let page = page
        .replacen("<head>", &format!("<head>{RECORD_ERRORS}"), 1)
        .replacen("</body>", &format!("{check}</body>"), 1);
    let dir = std::env::temp_dir().join(format!(
        "nagless-browser-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("page.html");
    std::fs::write(&file, &page).unwrap();
    let dom = dump_dom(chromium, &file, &dir.join("profile"));
    let _ = std::fs::remove_dir_all(&dir);
    let json = dom
        .split("<pre id=\"report-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("the check did not run; the DOM:\n{dom}"));
    serde_json::from_str(&unescape(json)).expect("the check's JSON")
}

/// Chromium's DOM of `page` once loaded (stdout of `--dump-dom`), within a minute.
fn dump_dom(chromium: &Path, page: &Path, profile: &Path) -> String {
    let mut child = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    if crate::wait_at_most(&mut child, Duration::from_secs(60)).is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("chromium did not finish within 60 s");
    }
    reader.join().expect("read chromium's output")
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}
