//! Decoding one FUSE request into a typed [`Op`], the same way for every transport.
//!
//! A request is three byte ranges: the 40-byte [`InHeader`], the opcode's own leading struct
//! (`op_in`, [`abi::op_in_len`] bytes) and the rest (names, xattr values, a WRITE's data).
//! /dev/fuse delivers them back to back; FUSE over io_uring puts them in three separate
//! places of a ring entry. Decoding borrows from those ranges and copies nothing but the
//! small fixed structs.

use super::abi::{self, op, InHeader, Pod};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// A request the kernel sent, decoded.
#[derive(Debug)]
pub struct Request<'a> {
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub opcode: u32,
    pub op: Op<'a>,
}

/// One operation and its arguments.
#[derive(Debug)]
pub enum Op<'a> {
    Init(abi::InitIn),
    Destroy,
    Lookup {
        name: &'a OsStr,
    },
    Forget {
        nlookup: u64,
    },
    /// `(nodeid, nlookup)` pairs, decoded lazily from the payload.
    BatchForget {
        items: &'a [u8],
        count: u32,
    },
    Getattr,
    Setattr(abi::SetattrIn),
    Readlink,
    Symlink {
        name: &'a OsStr,
        target: &'a OsStr,
    },
    Mknod {
        name: &'a OsStr,
        arg: abi::MknodIn,
    },
    Mkdir {
        name: &'a OsStr,
        arg: abi::MkdirIn,
    },
    Unlink {
        name: &'a OsStr,
    },
    Rmdir {
        name: &'a OsStr,
    },
    Rename {
        name: &'a OsStr,
        newdir: u64,
        newname: &'a OsStr,
        flags: u32,
    },
    Link {
        oldnodeid: u64,
        newname: &'a OsStr,
    },
    Open(abi::OpenIn),
    Read(abi::ReadIn),
    Write {
        arg: abi::WriteIn,
        data: &'a [u8],
    },
    Statfs,
    Release(abi::ReleaseIn),
    Fsync(abi::FsyncIn),
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: u32,
    },
    Getxattr {
        name: &'a OsStr,
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a OsStr,
    },
    Flush(abi::FlushIn),
    Opendir(abi::OpenIn),
    Readdir(abi::ReadIn),
    Releasedir(abi::ReleaseIn),
    Fsyncdir(abi::FsyncIn),
    Access(abi::AccessIn),
    Create {
        name: &'a OsStr,
        arg: abi::CreateIn,
    },
    Interrupt {
        unique: u64,
    },
    Fallocate(abi::FallocateIn),
    Ioctl(abi::IoctlIn),
    /// Anything we do not implement; answered with ENOSYS (ENOTTY for IOCTL).
    Unsupported,
}

/// Why a request could not be decoded (the kernel sent fewer bytes than its layout needs).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

fn fixed<T: Pod>(op_in: &[u8], what: &'static str) -> Result<T, Malformed> {
    T::read(op_in).ok_or(Malformed(what))
}

/// Splits one NUL-terminated name off the front of `b`.
fn name(b: &[u8]) -> Result<(&OsStr, &[u8]), Malformed> {
    let end = b
        .iter()
        .position(|&c| c == 0)
        .ok_or(Malformed("name without NUL"))?;
    Ok((OsStr::from_bytes(&b[..end]), &b[end + 1..]))
}

impl<'a> Request<'a> {
    /// Decodes a request from its header, its opcode struct and the rest.
    pub fn decode(
        h: &InHeader,
        op_in: &'a [u8],
        payload: &'a [u8],
    ) -> Result<Request<'a>, Malformed> {
        Ok(Request {
            unique: h.unique,
            nodeid: h.nodeid,
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
            opcode: h.opcode,
            op: Op::decode(h.opcode, op_in, payload)?,
        })
    }

    /// Decodes a request delivered back to back (/dev/fuse): header, op struct, rest.
    pub fn decode_contiguous(b: &'a [u8]) -> Result<(InHeader, Request<'a>), Malformed> {
        let h = InHeader::read(b).ok_or(Malformed("short header"))?;
        let len = (h.len as usize).min(b.len());
        let args = b.get(40..len).unwrap_or(&[]);
        let split = abi::op_in_len(h.opcode).min(args.len());
        let (op_in, payload) = args.split_at(split);
        Ok((h, Request::decode(&h, op_in, payload)?))
    }
}

impl<'a> Op<'a> {
    /// Decodes the operation of `opcode` from its opcode struct and the rest.
    pub fn decode(opcode: u32, op_in: &'a [u8], payload: &'a [u8]) -> Result<Op<'a>, Malformed> {
        Ok(match opcode {
            op::INIT => Op::Init(abi::InitIn::read_prefix(op_in)),
            op::DESTROY => Op::Destroy,
            op::LOOKUP => Op::Lookup {
                name: name(payload)?.0,
            },
            op::FORGET => Op::Forget {
                nlookup: fixed::<abi::ForgetIn>(op_in, "forget")?.nlookup,
            },
            op::BATCH_FORGET => decode_batch_forget(op_in, payload)?,
            op::GETATTR => Op::Getattr,
            op::SETATTR => Op::Setattr(fixed(op_in, "setattr")?),
            op::READLINK => Op::Readlink,
            op::SYMLINK => decode_symlink(payload)?,
            op::MKNOD => Op::Mknod {
                arg: fixed(op_in, "mknod")?,
                name: name(payload)?.0,
            },
            op::MKDIR => Op::Mkdir {
                arg: fixed(op_in, "mkdir")?,
                name: name(payload)?.0,
            },
            op::UNLINK => Op::Unlink {
                name: name(payload)?.0,
            },
            op::RMDIR => Op::Rmdir {
                name: name(payload)?.0,
            },
            op::RENAME | op::RENAME2 => decode_rename(opcode, op_in, payload)?,
            op::LINK => Op::Link {
                oldnodeid: fixed::<abi::LinkIn>(op_in, "link")?.oldnodeid,
                newname: name(payload)?.0,
            },
            op::OPEN => Op::Open(fixed(op_in, "open")?),
            op::READ => Op::Read(fixed(op_in, "read")?),
            op::WRITE => decode_write(op_in, payload)?,
            op::STATFS => Op::Statfs,
            op::RELEASE => Op::Release(fixed(op_in, "release")?),
            op::FSYNC => Op::Fsync(fixed(op_in, "fsync")?),
            op::SETXATTR => decode_setxattr(op_in, payload)?,
            op::GETXATTR => Op::Getxattr {
                size: fixed::<abi::GetxattrIn>(op_in, "getxattr")?.size,
                name: name(payload)?.0,
            },
            op::LISTXATTR => Op::Listxattr {
                size: fixed::<abi::GetxattrIn>(op_in, "listxattr")?.size,
            },
            op::REMOVEXATTR => Op::Removexattr {
                name: name(payload)?.0,
            },
            op::FLUSH => Op::Flush(fixed(op_in, "flush")?),
            op::OPENDIR => Op::Opendir(fixed(op_in, "opendir")?),
            op::READDIR => Op::Readdir(fixed(op_in, "readdir")?),
            op::RELEASEDIR => Op::Releasedir(fixed(op_in, "releasedir")?),
            op::FSYNCDIR => Op::Fsyncdir(fixed(op_in, "fsyncdir")?),
            op::ACCESS => Op::Access(fixed(op_in, "access")?),
            op::IOCTL => Op::Ioctl(fixed(op_in, "ioctl")?),
            op::CREATE => Op::Create {
                arg: fixed(op_in, "create")?,
                name: name(payload)?.0,
            },
            op::INTERRUPT => Op::Interrupt {
                unique: fixed::<abi::InterruptIn>(op_in, "interrupt")?.unique,
            },
            op::FALLOCATE => Op::Fallocate(fixed(op_in, "fallocate")?),
            _ => Op::Unsupported,
        })
    }
}

fn decode_batch_forget<'a>(op_in: &[u8], payload: &'a [u8]) -> Result<Op<'a>, Malformed> {
    let b: abi::BatchForgetIn = fixed(op_in, "batch_forget")?;
    let want = b.count as usize * std::mem::size_of::<abi::ForgetOne>();
    Ok(Op::BatchForget {
        items: payload.get(..want).ok_or(Malformed("batch_forget items"))?,
        count: b.count,
    })
}

fn decode_symlink(payload: &[u8]) -> Result<Op<'_>, Malformed> {
    let (n, rest) = name(payload)?;
    Ok(Op::Symlink {
        name: n,
        target: name(rest)?.0,
    })
}

/// RENAME, or RENAME2 with its flags.
fn decode_rename<'a>(opcode: u32, op_in: &[u8], payload: &'a [u8]) -> Result<Op<'a>, Malformed> {
    let (newdir, flags) = if opcode == op::RENAME {
        (fixed::<abi::RenameIn>(op_in, "rename")?.newdir, 0)
    } else {
        let r: abi::Rename2In = fixed(op_in, "rename2")?;
        (r.newdir, r.flags)
    };
    let (n, rest) = name(payload)?;
    Ok(Op::Rename {
        name: n,
        newdir,
        newname: name(rest)?.0,
        flags,
    })
}

fn decode_write<'a>(op_in: &[u8], payload: &'a [u8]) -> Result<Op<'a>, Malformed> {
    let arg: abi::WriteIn = fixed(op_in, "write")?;
    Ok(Op::Write {
        data: payload
            .get(..arg.size as usize)
            .ok_or(Malformed("write shorter than its size"))?,
        arg,
    })
}

fn decode_setxattr<'a>(op_in: &[u8], payload: &'a [u8]) -> Result<Op<'a>, Malformed> {
    let a: abi::SetxattrIn = fixed(op_in, "setxattr")?;
    let (n, rest) = name(payload)?;
    Ok(Op::Setxattr {
        name: n,
        value: rest
            .get(..a.size as usize)
            .ok_or(Malformed("setxattr value"))?,
        flags: a.flags,
    })
}

/// The `(nodeid, nlookup)` pairs of a BATCH_FORGET.
pub fn forget_items(items: &[u8]) -> impl Iterator<Item = abi::ForgetOne> + '_ {
    items
        .chunks_exact(std::mem::size_of::<abi::ForgetOne>())
        .filter_map(abi::ForgetOne::read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(opcode: u32, op_in: &[u8], payload: &[u8]) -> Vec<u8> {
        let h = InHeader {
            len: (40 + op_in.len() + payload.len()) as u32,
            opcode,
            unique: 9,
            nodeid: 5,
            uid: 1000,
            gid: 100,
            pid: 42,
            ..Default::default()
        };
        let mut v = h.bytes().to_vec();
        v.extend_from_slice(op_in);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_names_and_structs() {
        let m = message(op::LOOKUP, &[], b"swap.tensor\0");
        let (_, r) = Request::decode_contiguous(&m).unwrap();
        assert_eq!((r.unique, r.nodeid, r.uid, r.gid), (9, 5, 1000, 100));
        assert!(matches!(r.op, Op::Lookup { name } if name == "swap.tensor"));

        let ren = abi::Rename2In {
            newdir: 77,
            flags: 1,
            padding: 0,
        };
        let m = message(op::RENAME2, ren.bytes(), b"a\0b\0");
        let (_, r) = Request::decode_contiguous(&m).unwrap();
        assert!(
            matches!(r.op, Op::Rename { name, newdir: 77, newname, flags: 1 }
            if name == "a" && newname == "b")
        );

        let x = abi::SetxattrIn { size: 3, flags: 0 };
        let m = message(op::SETXATTR, x.bytes(), b"user.k\0v\0w");
        let (_, r) = Request::decode_contiguous(&m).unwrap();
        assert!(matches!(r.op, Op::Setxattr { name, value, .. }
            if name == "user.k" && value == b"v\0w"));
    }

    #[test]
    fn a_write_borrows_its_data_from_the_payload() {
        let w = abi::WriteIn {
            fh: 3,
            offset: 4096,
            size: 5,
            ..Default::default()
        };
        let m = message(op::WRITE, w.bytes(), b"hello");
        let (_, r) = Request::decode_contiguous(&m).unwrap();
        match r.op {
            Op::Write { arg, data } => {
                assert_eq!((arg.fh, arg.offset), (3, 4096));
                assert_eq!(data, b"hello");
                assert_eq!(data.as_ptr(), m[80..].as_ptr());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_or_unterminated_requests_are_malformed_not_panics() {
        let m = message(op::LOOKUP, &[], b"no-nul");
        assert_eq!(
            Request::decode_contiguous(&m).unwrap_err(),
            Malformed("name without NUL")
        );
        let w = abi::WriteIn {
            size: 100,
            ..Default::default()
        };
        let m = message(op::WRITE, w.bytes(), b"short");
        assert!(Request::decode_contiguous(&m).is_err());
        let m = message(op::SETATTR, &[0; 10], &[]);
        assert!(Request::decode_contiguous(&m).is_err());
        assert!(Request::decode_contiguous(&[0; 12]).is_err());
        // Every opcode with garbage of every length decodes or errs; none panics.
        for opcode in 0..60 {
            for len in [0usize, 1, 8, 16, 40, 100] {
                let m = message(opcode, &vec![0xff; len], &[]);
                let _ = Request::decode_contiguous(&m);
            }
        }
    }

    #[test]
    fn batch_forget_items() {
        let b = abi::BatchForgetIn { count: 2, dummy: 0 };
        let mut p = abi::ForgetOne {
            nodeid: 10,
            nlookup: 1,
        }
        .bytes()
        .to_vec();
        p.extend_from_slice(
            abi::ForgetOne {
                nodeid: 11,
                nlookup: 3,
            }
            .bytes(),
        );
        let m = message(op::BATCH_FORGET, b.bytes(), &p);
        let (_, r) = Request::decode_contiguous(&m).unwrap();
        let Op::BatchForget { items, count: 2 } = r.op else {
            panic!()
        };
        let v: Vec<_> = forget_items(items).map(|f| (f.nodeid, f.nlookup)).collect();
        assert_eq!(v, vec![(10, 1), (11, 3)]);
    }
}
