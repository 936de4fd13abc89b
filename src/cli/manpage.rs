//! The manual pages, generated from the clap definitions that also make `--help`, so the
//! pages always describe the binary that prints them (`tierfs man`).
//!
//! tierfs(1) has the overview, every command in one list, and what `--help` cannot say:
//! the mount options (`-o`: every option and config key they take, from the tables
//! `tierfs mount -o` and the helper read), the mount helper (`mount -t fuse.tierfs`,
//! fstab), the environment, files and exit status. `tierfs man --dir DIR` also writes tierfs-COMMAND(1) for each command, with its
//! options and examples.

use crate::cli::mount_helper::{Treatment, OPTIONS};
use crate::config::{short_name, OPTION_KEYS};
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A paragraph of running text, or lines to keep as they are (commands, examples).
enum Block {
    Para(&'static str),
    Lines(Vec<String>),
    /// A tagged paragraph: the tag in bold, then its text.
    Item(String, String),
}

fn section(r: &mut Roff, heading: &str, blocks: Vec<Block>) {
    r.control("SH", [heading]);
    for b in blocks {
        match b {
            Block::Para(t) => {
                r.control("PP", []);
                r.text([roman(t)]);
            }
            Block::Lines(lines) => {
                r.control("PP", []);
                r.control("nf", []);
                r.control("RS", ["4"]);
                for l in lines {
                    r.text([roman(l)]);
                }
                r.control("RE", []);
                r.control("fi", []);
            }
            Block::Item(tag, text) => {
                r.control("TP", []);
                r.text([bold(tag)]);
                r.text([roman(text)]);
            }
        }
    }
}

fn lines(v: &[&str]) -> Block {
    Block::Lines(v.iter().map(|s| s.to_string()).collect())
}

/// MOUNT OPTIONS: what `-o` takes, from the tables that read it.
fn options_section(r: &mut Roff) {
    let mut blocks = vec![
        Block::Para(
            "tierfs mount -o, mount(8) and fstab take the same options, comma-separated (a \
             value in double quotes may hold commas; -o may be repeated). A config key with \
             its value is applied over the config file as if written there, and can stand in \
             for the file: with the tiers given as tier.NAME.path=DIR no file is needed. A \
             key is named as in the file, section.key, or by the key alone where only one \
             section has it; true/false keys are true by their name alone. An unknown option \
             is refused with the list of accepted ones, a bad value with the key and the fix.",
        ),
        lines(&[
            "tierfs mount --config node.toml -o threads=32,layout=stripe /local/tierfs",
            "tierfs mount -o tier.nvme.path=/local/x,tier.pfs.path=/lus/me/x /local/tierfs",
            "",
            "# /etc/fstab, no config file (the source is the word tierfs)",
            "tierfs  /local/tierfs  fuse.tierfs  tier.nvme.path=/local/x,tier.pfs.path=/lus/x,nofail  0 0",
        ]),
    ];
    for (name, t, why) in OPTIONS {
        let what = match t {
            Treatment::Flag => format!("tierfs: {why}."),
            Treatment::NoEffect => format!("accepted: {why}."),
            Treatment::NotApplied => format!("accepted but not applied (a note says so): {why}."),
            Treatment::Refused => format!("refused: {why}."),
        };
        blocks.push(Block::Item(name.to_string(), what));
    }
    blocks.push(Block::Para(
        "x-* and comment= options are left to mount(8) and the init system. The config keys \
         (see the config file's documentation for each):",
    ));
    for k in OPTION_KEYS {
        let tag = match k.name.strip_prefix("tier.") {
            Some(key) => format!("tier.NAME.{key}={}", k.example),
            None => format!("{}={}", k.name, k.example),
        };
        let also = short_name(k)
            .map(|s| format!(" (also {s}=)"))
            .unwrap_or_default();
        blocks.push(Block::Item(tag, format!("{}{also}.", k.help)));
    }
    section(r, "MOUNT OPTIONS", blocks);
}

/// The sections of tierfs(1) that come from no clap definition.
fn extra_sections() -> Roff {
    let mut r = Roff::new();
    options_section(&mut r);
    let helper = vec![
        Block::Para(
            "mount(8) and /etc/fstab mount tierfs as the file system type fuse.tierfs, with \
             the config file as the source (or the word tierfs, the tiers given as options):",
        ),
        lines(&[
            "mount -t fuse.tierfs /etc/tierfs/node.toml /local/tierfs -o allow_other",
            "",
            "# /etc/fstab",
            "/etc/tierfs/node.toml  /local/tierfs  fuse.tierfs  allow_other,nofail,_netdev  0 0",
        ]),
        Block::Para(
            "For that type mount(8) runs /sbin/mount.fuse.tierfs, or where that is missing \
             /sbin/mount.fuse from the fuse3 package, which runs `tierfs CONFIG MOUNTPOINT -o \
             OPTIONS` from the PATH. tierfs answers both: install it on the PATH and, for \
             the first form, link the helper to it:",
        ),
        lines(&[
            "install -m 0755 target/release/tierfs /usr/local/bin/tierfs",
            "ln -sf /usr/local/bin/tierfs /sbin/mount.fuse.tierfs",
        ]),
        Block::Para(
            "The helper returns once the mount answers, like tierfs mount; the daemon logs \
             to the config's log_file or the first tier's .tierfs-meta/daemon.log. Unmount \
             with umount(8), fusermount3 -u or tierfs unmount. It takes the options of MOUNT \
             OPTIONS above. Any other option is refused with exit status 1, unless mount -s \
             (sloppy) was given; mount -f checks the config and mounts nothing. The helper \
             exits 0 when mounted, 1 for a wrong option or config, 32 when the mount failed.",
        ),
    ];
    section(&mut r, "MOUNT HELPER", helper);

    section(
        &mut r,
        "ENVIRONMENT",
        vec![
            Block::Item(
                "TIERFS_LOG".into(),
                "How much the daemon logs: error, warn, info (the default) or debug.".into(),
            ),
            Block::Item(
                "TIERFS_LOG_FILE".into(),
                "With --foreground, log to this file instead of stderr when the config sets \
                 no log_file. A daemon in the background logs to log_file or to the first \
                 tier's .tierfs-meta/daemon.log."
                    .into(),
            ),
            Block::Item(
                "LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE".into(),
                "Read by tierfs ds-config for the ranks per node when --ranks is not given.".into(),
            ),
        ],
    );
    section(
        &mut r,
        "FILES",
        vec![
            Block::Item(
                "MOUNTPOINT/.tierfs/".into(),
                "Read-only statistics of a mount: tiers, files, config, stats.json, metrics \
                 (Prometheus text), cache; control takes cache hints and the operator's \
                 commands on tiers (tierfs ctl), and answers through the writing handle."
                    .into(),
            ),
            Block::Item(
                "TIER/data/, TIER/.tierfs-meta/".into(),
                "In each tier folder: the files (whole files are plain files) and tierfs's \
                 lock, probe cache and default daemon.log."
                    .into(),
            ),
            Block::Item(
                "/etc/fuse.conf".into(),
                "user_allow_other there lets a non-root user mount with allow_other.".into(),
            ),
        ],
    );
    section(
        &mut r,
        "EXIT STATUS",
        vec![Block::Para(
            "0 success; 2 a bad command line, config or tier folder (nothing was mounted or \
             changed); 1 a failure at run time. As a mount helper: 0, 1 and 32 as mount(8) \
             expects.",
        )],
    );
    r.control("SH", ["SEE ALSO"]);
    r.text([
        bold("mount"),
        roman("(8), "),
        bold("fstab"),
        roman("(5), "),
        bold("fusermount3"),
        roman("(1), "),
        bold("fuse"),
        roman("(8); "),
        italic("README.md"),
        roman(", "),
        italic("docs/ERRORS.md"),
        roman(" and "),
        italic("docs/JOBS.md"),
        roman(" in the tierfs sources."),
    ]);
    r
}

/// The full command definition the pages are made from.
fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = super::args::Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

fn has_args(cmd: &clap::Command) -> bool {
    cmd.get_arguments().any(|a| !a.is_hide_set())
}

fn render(cmd: &clap::Command, extra: Option<Roff>, out: &mut dyn Write) -> std::io::Result<()> {
    let mut buf = Vec::new();
    render_sections(cmd, extra, &mut buf)?;
    // Each section rendered on its own repeats roff's two-line apostrophe preamble; one is
    // enough, at the top.
    let text = String::from_utf8_lossy(&buf);
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        let preamble = line.starts_with(".ie \\n(.g .ds Aq") || line.starts_with(".el .ds Aq");
        if !preamble || seen.insert(line) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

fn render_sections(
    cmd: &clap::Command,
    extra: Option<Roff>,
    w: &mut dyn Write,
) -> std::io::Result<()> {
    let man = Man::new(cmd.clone()).manual("tierfs manual");
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if has_args(cmd) {
        man.render_options_section(w)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(w)?;
    }
    if let Some(after) = cmd.get_after_help() {
        let after = after.to_string();
        let mut r = Roff::new();
        section(
            &mut r,
            "EXAMPLES",
            vec![Block::Lines(
                after
                    .lines()
                    .skip_while(|l| l.starts_with("Example"))
                    .map(str::to_string)
                    .collect(),
            )],
        );
        r.to_writer(w)?;
    }
    if let Some(extra) = extra {
        extra.to_writer(w)?;
    }
    if cmd.get_version().is_some() {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// tierfs(1).
pub fn render_main(w: &mut dyn Write) -> std::io::Result<()> {
    render(&command(), Some(extra_sections()), w)
}

/// Writes tierfs.1 and tierfs-COMMAND.1 for every command into `dir` (created if missing);
/// returns the files written.
pub fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let cmd = command();
    let mut written = Vec::new();
    let mut write = |name: String, body: Vec<u8>| -> std::io::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, body)?;
        written.push(p);
        Ok(())
    };
    let mut main = Vec::new();
    render_main(&mut main)?;
    write("tierfs.1".to_string(), main)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut page = Vec::new();
        render(sub, None, &mut page)?;
        write(format!("tierfs-{}.1", sub.get_name()), page)?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::mount_helper::{FS_TYPE, HELPER_NAME};

    /// roff escapes '-' as '\-'; tests read the text as a reader of the page would.
    fn plain(b: &[u8]) -> String {
        String::from_utf8(b.to_vec()).unwrap().replace("\\-", "-")
    }

    #[test]
    fn the_main_page_names_every_command_and_the_helper() {
        let mut b = Vec::new();
        render_main(&mut b).unwrap();
        let page = plain(&b);
        assert!(
            page.starts_with(".ie") || page.contains(".TH tierfs 1"),
            "{page}"
        );
        assert!(page.contains(".TH tierfs 1"));
        let cmd = command();
        let mut n = 0;
        for sub in cmd.get_subcommands() {
            let name = format!("tierfs-{}(1)", sub.get_name());
            assert!(page.contains(&name), "tierfs.1 does not list {name}");
            n += 1;
        }
        assert!(n >= 12, "only {n} commands");
        assert!(!page.contains("tierfs-help(1)"));
        for needle in [HELPER_NAME, FS_TYPE].iter().chain(&[
            "TIERFS_LOG",
            "TIERFS_LOG_FILE",
            "allow_other",
            "degraded",
            "EXIT STATUS",
        ]) {
            assert!(page.contains(needle), "tierfs.1 does not say {needle}");
        }
        for (name, _, _) in OPTIONS {
            assert!(
                page.contains(&format!("\\fB{name}\\fR")),
                "option {name} missing"
            );
        }
        // Every config key -o takes, with an example value.
        for k in OPTION_KEYS {
            let shown = k.name.replacen("tier.", "tier.NAME.", 1);
            assert!(
                page.contains(&format!("\\fB{shown}={}", k.example)),
                "config key {} missing",
                k.name
            );
        }
        assert!(page.contains("MOUNT OPTIONS") && page.contains("MOUNT HELPER"));
        assert!(page.contains(crate::cli::VERSION), "no version in the page");
    }

    #[test]
    fn each_command_page_has_its_options() {
        let d = tempfile::tempdir().unwrap();
        let files = write_all(&d.path().join("man1")).unwrap();
        let cmd = command();
        assert_eq!(files.len(), cmd.get_subcommands().count() + 1);
        for sub in cmd.get_subcommands() {
            let p = d.path().join(format!("man1/tierfs-{}.1", sub.get_name()));
            let page = plain(&std::fs::read(&p).unwrap());
            assert!(
                page.contains(&format!(".TH tierfs-{} 1", sub.get_name())),
                "{page}"
            );
            for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = a.get_long() {
                    assert!(
                        page.contains(&format!("--{long}")),
                        "tierfs-{}.1 lacks --{long}",
                        sub.get_name()
                    );
                }
            }
            assert!(page.contains("EXAMPLES"), "tierfs-{}.1", sub.get_name());
        }
    }
}
