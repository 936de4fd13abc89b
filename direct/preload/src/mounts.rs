//! The tierfs mounts this process can see, from `/proc/self/mountinfo` (read once, when the
//! library first looks): where each is, its device number (every descriptor opened on it
//! carries it) and its owner (the daemon must run as that user). Bind mounts of a tierfs
//! mount appear as mounts of their own, with the same device.

/// One tierfs mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Its mountpoint, as bytes (mountinfo's octal escapes undone), without a trailing `/`.
    pub path: Vec<u8>,
    pub major: u32,
    pub minor: u32,
    /// The mount's owner (`user_id=` of its super options): the daemon's uid.
    pub owner: u32,
}

impl Mount {
    /// The device number descriptors on this mount carry (`st_dev`).
    pub fn dev(&self) -> u64 {
        libc::makedev(self.major, self.minor)
    }

    /// Whether the absolute path `p` names something inside this mount (lexically).
    pub fn contains(&self, p: &[u8]) -> bool {
        p.starts_with(&self.path)
            && (p.len() == self.path.len() || p[self.path.len()] == b'/' || self.path.is_empty())
    }
}

/// mountinfo's escapes (`\040` for a space, `\011`, `\012`, `\134`) undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The tierfs mounts in the text of a mountinfo file.
pub fn parse(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let (left, right) = match line.split_once(" - ") {
            Some(x) => x,
            None => continue,
        };
        let f: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if f.len() < 5 || r.len() < 3 || r[0] != "fuse.tierfs" {
            continue;
        }
        let Some((ma, mi)) = f[2].split_once(':') else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (ma.parse::<u32>(), mi.parse::<u32>()) else {
            continue;
        };
        let Some(owner) = r[2]
            .split(',')
            .find_map(|o| o.strip_prefix("user_id="))
            .and_then(|v| v.parse::<u32>().ok())
        else {
            continue;
        };
        let mut path = unescape(f[4]);
        while path.len() > 1 && path.ends_with(b"/") {
            path.pop();
        }
        if path == b"/" {
            path.clear();
        }
        out.push(Mount {
            path,
            major,
            minor,
            owner,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
98 22 0:53 / /tmp/tierfs\\040demo rw,nosuid,nodev,relatime shared:40 - fuse.tierfs /etc/t.toml rw,user_id=1000,group_id=1000,default_permissions
99 22 0:54 / /mnt/other rw,relatime - fuse.sshfs host: rw,user_id=0,group_id=0
100 22 0:53 /sub /srv/bind rw,relatime - fuse.tierfs /etc/t.toml rw,user_id=1000,group_id=1000
101 22 0:55 / /broken rw - fuse.tierfs x rw,group_id=0
";

    #[test]
    fn only_tierfs_mounts_with_an_owner_are_taken() {
        let m = parse(INFO);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[0].path, b"/tmp/tierfs demo");
        assert_eq!((m[0].major, m[0].minor, m[0].owner), (0, 53, 1000));
        assert_eq!(m[1].path, b"/srv/bind");
        assert_eq!(
            m[1].dev(),
            m[0].dev(),
            "a bind mount has the mount's device"
        );
    }

    #[test]
    fn a_path_is_inside_a_mount_by_whole_components() {
        let m = &parse(INFO)[1];
        assert!(m.contains(b"/srv/bind"));
        assert!(m.contains(b"/srv/bind/a/b"));
        assert!(!m.contains(b"/srv/binder"));
        assert!(!m.contains(b"/srv"));
        let root = Mount {
            path: Vec::new(),
            major: 0,
            minor: 1,
            owner: 0,
        };
        assert!(root.contains(b"/anything"));
    }

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape("a\\040b\\134c\\0"), b"a b\\c\\0");
    }
}
