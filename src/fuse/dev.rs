//! The /dev/fuse transport: worker threads that each read a request with one `readv` and
//! answer it with one `writev`.
//!
//! The read is split in two: the first 80 bytes (the request header and, for a WRITE, its
//! `fuse_write_in`) land in a small array, everything after in a page-aligned buffer. So a
//! WRITE's data starts on a page boundary and goes to an `O_DIRECT` tier with no bounce
//! copy (or, a whole block of a cached file, becomes the block's memory), and a READ's data is read by the tier straight into that buffer and written back
//! to the kernel from it, or written back from the host-memory cache's block that holds it.

use super::abi::{self, op, InHeader, OutHeader, Pod};
use super::dispatch::{Dispatcher, Reply};
use super::request::Request;
use super::MAX_REQUEST;
use crate::stats::ledger::{Class, Meter};
use crate::stats::reqstats::op_name;
use crate::tierio::AlignedBuf;
use std::io;
use std::os::fd::RawFd;

/// Bytes of a request that go to the header array: `fuse_in_header` + `fuse_write_in`.
const HEAD: usize = 80;

/// How a worker's loop ended.
#[derive(Debug)]
pub enum End {
    /// The filesystem was unmounted or the connection aborted.
    Unmounted,
}

/// Reads one request with the header/payload split; the number of bytes read.
fn read_request(fd: RawFd, head: &mut [u8; HEAD], payload: &mut AlignedBuf) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: head.as_mut_ptr() as *mut libc::c_void,
            iov_len: HEAD,
        },
        libc::iovec {
            iov_base: payload.as_mut_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        },
    ];
    // SAFETY: both iovecs point to live buffers we borrow mutably for the call.
    let n = unsafe { libc::readv(fd, iov.as_ptr(), 2) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Sends a reply: the out header, then `body`.
pub fn send_reply(fd: RawFd, unique: u64, error: i32, body: &[u8]) {
    let body = if error == 0 { body } else { &[][..] };
    let h = OutHeader {
        len: (std::mem::size_of::<OutHeader>() + body.len()) as u32,
        error: -error,
        unique,
    };
    let iov = [
        libc::iovec {
            iov_base: h.bytes().as_ptr() as *mut libc::c_void,
            iov_len: std::mem::size_of::<OutHeader>(),
        },
        libc::iovec {
            iov_base: body.as_ptr() as *mut libc::c_void,
            iov_len: body.len(),
        },
    ];
    // SAFETY: the iovecs point to live buffers; writev only reads them.
    let n = unsafe { libc::writev(fd, iov.as_ptr(), if body.is_empty() { 1 } else { 2 }) };
    if n < 0 {
        let e = io::Error::last_os_error();
        // ENOENT: the request was interrupted and the kernel no longer waits for it.
        if e.raw_os_error() != Some(libc::ENOENT) {
            log::warn!("sending a FUSE reply: {e}");
        }
    }
}

/// A payload buffer big enough for any request the kernel may send us: the kernel wants
/// room for a WRITE's headers and `max_write` bytes (with `HEAD` that is exactly
/// `MAX_REQUEST`) and at least `FUSE_MIN_READ_BUFFER` in all. Exactly one block of the
/// host-memory cache, so a whole-block write can leave its buffer in the cache and take
/// the block's old one ([`Dispatcher::handle_write_buf`]).
pub fn payload_buffer() -> AlignedBuf {
    const _: () = assert!(MAX_REQUEST as u64 == crate::cache::BLOCK);
    const _: () = assert!(HEAD + MAX_REQUEST as usize >= abi::MIN_READ_BUFFER);
    AlignedBuf::zeroed(MAX_REQUEST as usize)
}

/// Serves requests from `fd` until the connection ends.
pub fn serve(fd: RawFd, disp: &Dispatcher) -> io::Result<End> {
    let mut head = [0u8; HEAD];
    let mut payload = payload_buffer();
    let mut scratch: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut meter = Meter::new(Class::Demand);
    loop {
        meter.tick(disp.fs().ledger());
        let n = match read_request(fd, &mut head, &mut payload) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::ENOENT) => continue,
                Some(libc::ENODEV) | Some(libc::ECONNABORTED) => return Ok(End::Unmounted),
                _ => return Err(e),
            },
        };
        disp.fs().requests().arrived(false);
        let Some(h) = InHeader::read(&head[..n.min(HEAD)]) else {
            log::warn!("a FUSE request of {n} bytes is shorter than its header; ignored");
            continue;
        };
        serve_one(
            fd,
            disp,
            &h,
            &head[..n.min(HEAD)],
            &mut payload,
            n,
            &mut scratch,
            &mut out,
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn serve_one(
    fd: RawFd,
    disp: &Dispatcher,
    h: &InHeader,
    head: &[u8],
    payload: &mut AlignedBuf,
    n: usize,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) {
    let rest = n.saturating_sub(HEAD);
    if h.opcode == op::READ {
        let Some(arg) = abi::ReadIn::read(&head[40..]) else {
            return send_reply(fd, h.unique, libc::EINVAL, &[]);
        };
        // A READ carries no payload, so its buffer takes the data (unless the data is
        // sent straight from the cache's memory).
        if let Err(e) = disp.read_reply(h.nodeid, &arg, payload, |d| send_reply(fd, h.unique, 0, d))
        {
            send_reply(fd, h.unique, e, &[]);
        }
        return;
    }
    if h.opcode == op::WRITE && head.len() == HEAD && rest == payload.len() {
        // Exactly a whole buffer of data: the filesystem may keep the buffer.
        if let Some(arg) = abi::WriteIn::read(&head[40..]) {
            if arg.size as usize == rest {
                return match disp.handle_write_buf(h.nodeid, &arg, payload, out) {
                    Reply::Ok => send_reply(fd, h.unique, 0, out),
                    Reply::Err(e) => send_reply(fd, h.unique, e, &[]),
                    Reply::None => {}
                };
            }
        }
    }
    let decoded = if h.opcode == op::WRITE && head.len() == HEAD {
        Request::decode(h, &head[40..], &payload[..rest])
    } else {
        // Small requests: made contiguous (names and xattr values are short).
        scratch.clear();
        scratch.extend_from_slice(head);
        scratch.extend_from_slice(&payload[..rest]);
        Request::decode_contiguous(scratch).map(|(_, r)| r)
    };
    let req = match decoded {
        Ok(r) => r,
        Err(m) => {
            log::warn!("malformed FUSE {} request: {}", op_name(h.opcode), m.0);
            return send_reply(fd, h.unique, libc::EINVAL, &[]);
        }
    };
    match disp.handle(&req, out) {
        Reply::Ok => send_reply(fd, h.unique, 0, out),
        Reply::Err(e) => send_reply(fd, h.unique, e, &[]),
        Reply::None => {}
    }
}

/// Reads the kernel's first request, which must be INIT.
pub fn read_init(fd: RawFd) -> io::Result<(InHeader, abi::InitIn)> {
    let mut head = [0u8; HEAD];
    let mut payload = AlignedBuf::zeroed(abi::MIN_READ_BUFFER * 2);
    loop {
        match read_request(fd, &mut head, &mut payload) {
            Ok(n) => {
                let mut b = head[..n.min(HEAD)].to_vec();
                b.extend_from_slice(&payload[..n.saturating_sub(HEAD)]);
                let (h, r) = Request::decode_contiguous(&b)
                    .map_err(|m| io::Error::other(format!("malformed INIT: {}", m.0)))?;
                return match r.op {
                    super::request::Op::Init(i) => Ok((h, i)),
                    _ => Err(io::Error::other(format!(
                        "the kernel's first request was {}, not INIT",
                        op_name(h.opcode)
                    ))),
                };
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}
