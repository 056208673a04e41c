//! Output that a closed pipe ends quietly. `println!` panics when stdout is a pipe whose
//! reader has gone (`nagless lab | head -1`); Unix tools end quietly there instead, killed by
//! SIGPIPE. The command keeps SIGPIPE ignored (its sockets must not kill it), so its output
//! goes through [`write`]: on a closed stdout or stderr the process exits at once with status
//! 141, what a shell reports for a tool ended by SIGPIPE, and prints nothing more.

use std::io::{ErrorKind, Write};

/// The exit status of a process ended by a closed pipe (128 + SIGPIPE).
pub const CLOSED_PIPE: i32 = 141;

/// Writes `args` (and a newline) to stdout or stderr; exits quietly if that pipe is closed.
/// Other errors are ignored, as `println!` would have panicked on them anyway.
pub fn write(stderr: bool, args: std::fmt::Arguments<'_>, newline: bool) {
    fn emit(
        w: &mut impl Write,
        args: std::fmt::Arguments<'_>,
        newline: bool,
    ) -> std::io::Result<()> {
        w.write_fmt(args)?;
        if newline {
            w.write_all(b"\n")?;
        }
        w.flush()
    }
    let r = if stderr {
        emit(&mut std::io::stderr().lock(), args, newline)
    } else {
        emit(&mut std::io::stdout().lock(), args, newline)
    };
    if r.is_err_and(|e| e.kind() == ErrorKind::BrokenPipe) {
        std::process::exit(CLOSED_PIPE);
    }
}
