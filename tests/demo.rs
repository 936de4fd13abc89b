//! The demo as a new user meets it: the commands in `mount-configs/demo.toml`'s comment work
//! as written, and two users get separate tier folders, mountpoints and logs, so they can
//! run the demo on one machine at the same time.
mod common;
use common::*;
use std::path::Path;
use std::process::Command;

const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mount-configs/demo.toml");

/// The shell commands in the config's opening comment (`#   COMMAND` lines).
fn comment_commands() -> Vec<String> {
    std::fs::read_to_string(DEMO)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("#   "))
        .map(str::to_string)
        .collect()
}

/// The folders the demo makes for `user`.
fn demo_paths(user: &str) -> Vec<String> {
    ["-nvme", "-pfs", "", ".log"]
        .iter()
        .map(|s| format!("/tmp/tierfs-demo-{user}{s}"))
        .collect()
}

fn remove_demo(user: &str) {
    for p in demo_paths(user) {
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
}

/// Unmounts and removes a made-up user's demo when the test ends, passed or not.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for u in &self.0 {
            let mnt = format!("/tmp/tierfs-demo-{u}");
            if tierfs::daemon::is_mountpoint(Path::new(&mnt)) {
                let _ = Command::new(tierfs_bin()).arg("unmount").arg(&mnt).status();
            }
            remove_demo(u);
        }
    }
}

#[test]
fn demo_comment_commands_work_as_written_for_two_users_at_once() {
    if !fuse_available() {
        return;
    }
    let cmds = comment_commands();
    assert!(
        cmds.iter().any(|c| c.contains(" mount --config ")),
        "demo.toml's comment gives no mount command: {cmds:?}"
    );
    // Two made-up user names (the config takes ${USER} from the environment), so the test
    // neither needs two accounts nor touches a real user's demo.
    let users = [
        format!("demo-a-{}", std::process::id()),
        format!("demo-b-{}", std::process::id()),
    ];
    let _cleanup = Cleanup(users.to_vec());
    let bin = tierfs_bin();
    let run = |user: &str, cmd: &str| {
        // The comment's binary is the release build; the test runs the one under test.
        let cmd = cmd.replace("target/release/tierfs", bin.to_str().unwrap());
        Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("USER", user)
            .output()
            .unwrap()
    };
    let (mount_cmds, after): (Vec<_>, Vec<_>) = cmds.iter().partition(|c| !c.contains(" unmount "));
    for u in &users {
        remove_demo(u);
        for c in &mount_cmds {
            let o = run(u, c);
            assert!(
                o.status.success(),
                "`{c}` as {u}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    // Both mounted at once, each on its own folders.
    for u in &users {
        let mnt = format!("/tmp/tierfs-demo-{u}");
        let st: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{mnt}/.tierfs/stats.json")).unwrap(),
        )
        .unwrap();
        let paths: Vec<&str> = st["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                format!("/tmp/tierfs-demo-{u}-nvme"),
                format!("/tmp/tierfs-demo-{u}-pfs")
            ],
            "{st}"
        );
        std::fs::write(format!("{mnt}/mine.txt"), u.as_bytes()).unwrap();
        assert!(Path::new(&format!("/tmp/tierfs-demo-{u}.log")).is_file());
    }
    for u in &users {
        let mnt = format!("/tmp/tierfs-demo-{u}");
        assert_eq!(
            std::fs::read(format!("{mnt}/mine.txt")).unwrap(),
            u.as_bytes()
        );
        for c in &after {
            let o = run(u, c);
            assert!(
                o.status.success(),
                "`{c}` as {u}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert!(
            !tierfs::daemon::is_mountpoint(Path::new(&mnt)),
            "{mnt} still mounted"
        );
        remove_demo(u);
    }
}
