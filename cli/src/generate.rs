//! `nagless generate DIR` (hidden): the man pages and shell completions, made from the same
//! clap definition that parses the command line, into `DIR/man/` (`nagless.1` and
//! `nagless-COMMAND.1` for each command) and `DIR/completions/` (`nagless.bash`, `_nagless`
//! for zsh, `nagless.fish`).
//!
//! The repository keeps the output in `deploy/` (the Debian package installs it from there);
//! `cli/tests/manpages.rs` regenerates it into a temporary directory and fails when the
//! committed copy is stale. Refresh it with `cargo run -p nagless-cli -- generate deploy`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use clap_complete::Shell;

/// `nagless generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// Directory to write `man/` and `completions/` into (created if missing).
    dir: PathBuf,
}

pub fn command(args: GenerateArgs, cmd: clap::Command) -> ExitCode {
    match generate(cmd, &args.dir) {
        Ok(files) => {
            for f in files {
                outln!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("nagless generate: {}: {e}", args.dir.display());
            ExitCode::from(1)
        }
    }
}

/// Writes every page and completion script; returns their paths.
fn generate(cmd: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    // The pages carry the release, not the commit: they change with the interface only.
    let cmd = cmd.long_version(None::<&'static str>);
    // The pages leave out clap's `help` command; the completions keep it.
    let mut paged = cmd.clone().disable_help_subcommand(true);
    paged.build();
    let man = dir.join("man");
    let completions = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let source = format!("nagless {}", env!("CARGO_PKG_VERSION"));
    let mut files = Vec::new();
    let subs: Vec<&clap::Command> = paged
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .collect();
    let mut pages = vec![("nagless".to_string(), &paged)];
    for sub in &subs {
        pages.push((format!("nagless-{}", sub.get_name()), sub));
    }
    for (name, c) in pages {
        let path = man.join(format!("{name}.1"));
        std::fs::write(&path, page(c, &name, &source, &subs)?)?;
        files.push(path);
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = cmd.clone();
        files.push(clap_complete::generate_to(
            shell,
            &mut cmd,
            "nagless",
            &completions,
        )?);
    }
    Ok(files)
}

/// One page: clap_mangen's title, name, synopsis, description, options and commands, then
/// the command's long help after the options (its EXAMPLES, OUTPUT, EXIT STATUS ...) as
/// sections of their own, kept as laid out (tables and examples), then SEE ALSO.
fn page(
    cmd: &clap::Command,
    name: &str,
    source: &str,
    subs: &[&clap::Command],
) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone())
        .title(name)
        .source(source)
        .manual("nagless manual");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    if let Some(after) = cmd.get_after_long_help() {
        out.extend(sections(&after.to_string()).into_bytes());
    }
    let mut see: Vec<String> = std::iter::once("nagless".to_string())
        .chain(subs.iter().map(|s| format!("nagless-{}", s.get_name())))
        .filter(|n| n != name)
        .collect();
    see.sort();
    let see: Vec<String> = see.iter().map(|n| format!("\\fB{n}\\fR(1)")).collect();
    out.extend(format!(".SH \"SEE ALSO\"\n{}\n", see.join(",\n")).into_bytes());
    Ok(out)
}

/// A help text as roff: each line in capitals at the margin opens a section; the lines
/// under it stay as written (no filling), with roff's special characters escaped.
fn sections(text: &str) -> String {
    let mut out = String::new();
    let mut open = false;
    for line in text.lines() {
        let heading = !line.is_empty()
            && !line.starts_with(' ')
            && line.chars().any(|c| c.is_ascii_alphabetic())
            && !line.chars().any(|c| c.is_ascii_lowercase());
        if heading {
            if open {
                out.push_str(".fi\n");
            }
            out.push_str(&format!(".SH \"{}\"\n.nf\n", line.trim().replace('"', "")));
            open = true;
            continue;
        }
        if !open {
            out.push_str(".SH NOTES\n.nf\n");
            open = true;
        }
        let mut l = line.replace('\\', "\\e").replace('-', "\\-");
        if l.starts_with('.') || l.starts_with('\'') {
            l.insert_str(0, "\\&");
        }
        out.push_str(&l);
        out.push('\n');
    }
    if open {
        out.push_str(".fi\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::sections;

    #[test]
    fn help_sections_become_roff_sections_kept_as_laid_out() {
        let roff = sections(
            "EXIT STATUS\n  0 ok, 1 stalls\n.dot and \\ back\nEXAMPLES\n  nagless run -- x",
        );
        assert_eq!(
            roff,
            ".SH \"EXIT STATUS\"\n.nf\n  0 ok, 1 stalls\n\\&.dot and \\e back\n.fi\n\
             .SH \"EXAMPLES\"\n.nf\n  nagless run \\-\\- x\n.fi\n"
        );
    }
}
