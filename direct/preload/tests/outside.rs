//! The library linked into a program of its own (this test binary: its C functions then
//! stand in front of libc's for the whole process), used where there is no tierfs mount:
//! every call must behave exactly as libc's. Building this test also builds the library
//! itself (`target/*/libtierfs_preload.so`), which the mount tests run programs with.
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};

#[test]
fn calls_outside_a_mount_behave_as_libcs() {
    let d = std::env::temp_dir().join(format!("tierfs-preload-outside-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("x.tensor.swp");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&p)
        .unwrap();
    f.write_all(b"hello world").unwrap();
    assert_eq!(f.write_at(b"W", 6).unwrap(), 1);
    let mut buf = [0u8; 5];
    assert_eq!(f.read_at(&mut buf, 6).unwrap(), 5);
    assert_eq!(&buf, b"World");
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.try_clone().unwrap().read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello World");
    use std::os::fd::AsRawFd;
    // SAFETY: dup/close of descriptors the test owns.
    unsafe {
        let n = libc::dup(f.as_raw_fd());
        assert!(n >= 0);
        assert_eq!(libc::dup2(n, n), n);
        assert_eq!(libc::close(n), 0);
        assert_eq!(libc::close(n), -1, "a second close of the same number");
    }
    drop(f);
    std::fs::remove_dir_all(&d).unwrap();
}
