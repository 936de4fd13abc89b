//! The FUSE-over-io_uring transport (Linux >= 6.14, protocol 7.42).
//!
//! The kernel keeps one queue of requests per possible CPU and uses the ring only once
//! every queue has a registered entry. An entry is memory we own: a header area (the
//! request header, the opcode's struct, the entry's commit id) and a page-aligned payload
//! buffer. The kernel copies a request into a free entry and completes the entry's
//! `IORING_OP_URING_CMD`; we answer in place and, in one `COMMIT_AND_FETCH` command, hand
//! the reply back and the entry back for the next request. One `io_uring_enter` per
//! request instead of a `read` and a `write`, and a WRITE's data arrives at the start of the
//! page-aligned payload, so it goes to an `O_DIRECT` tier with no copy of ours.
//!
//! Each entry has its own thread and its own small ring, so a request waiting on a slow
//! tier holds only its entry: the queue's other entries keep serving. Forgets and
//! interrupts still come through /dev/fuse (the kernel sends them there), so the session
//! keeps a /dev/fuse thread too.

use super::abi::{self, op, InHeader, OutHeader, Pod, UringCmdReq, UringEntInOut};
use super::dispatch::{Dispatcher, Reply};
use super::request::Request;
use crate::stats::ledger::{Class, Meter};
use crate::stats::reqstats::op_name;
use crate::tierio::AlignedBuf;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;

const TAG_REGISTER: u64 = 1;
const TAG_COMMIT: u64 = 2;

/// One ring entry's memory. It must not move or be freed while the kernel holds the
/// entry, which lasts until the connection ends: the worker owns it for its whole life.
struct EntryMem {
    header: AlignedBuf,
    payload: AlignedBuf,
    iov: Box<[libc::iovec; 2]>,
}

impl EntryMem {
    fn new(payload_size: usize) -> EntryMem {
        let mut header = AlignedBuf::zeroed(abi::URING_HEADER_SZ);
        let mut payload = AlignedBuf::zeroed(payload_size);
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_ptr() as *mut libc::c_void,
                iov_len: abi::URING_HEADER_SZ,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr() as *mut libc::c_void,
                iov_len: payload_size,
            },
        ]);
        EntryMem {
            header,
            payload,
            iov,
        }
    }
}

/// The 128-byte SQE of a FUSE ring command.
fn command(
    fd: RawFd,
    cmd_op: u32,
    req: UringCmdReq,
    tag: u64,
    iov: Option<u64>,
) -> squeue::Entry128 {
    let mut area = [0u8; 80];
    area.copy_from_slice(req.bytes());
    let mut c = opcode::UringCmd80::new(types::Fd(fd), cmd_op).cmd(area);
    if let Some(addr) = iov {
        c = c.addr(Some(addr));
    }
    let mut sqe = c.build().user_data(tag);
    if iov.is_some() {
        // The kernel wants sqe->len = 2 (header and payload iovecs), a field the crate's
        // builder does not expose.
        // SAFETY: Entry128 is #[repr(C)] and starts with the kernel's io_uring_sqe, whose
        // `len` is the u32 at byte offset 24; we write exactly those 4 bytes.
        unsafe {
            let p = &mut sqe as *mut squeue::Entry128 as *mut u8;
            std::ptr::write_unaligned(p.add(24) as *mut u32, 2);
        }
    }
    sqe
}

fn new_ring() -> io::Result<IoUring<squeue::Entry128, cqueue::Entry>> {
    // The entry's task work (copying a request in) then runs only when this thread waits,
    // in its own context, with no interrupt of other work.
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(4)
        .or_else(|_| IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(4))
}

/// A registered entry on queue `qid`, ready to serve.
pub struct Worker {
    fd: RawFd,
    qid: u16,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    mem: EntryMem,
}

impl Worker {
    /// Creates the entry and registers it with the kernel on queue `qid`. An error here
    /// (io_uring refused, the kernel refused the entry) means this connection cannot use
    /// the ring.
    pub fn register(fd: RawFd, qid: u16, payload_size: usize) -> io::Result<Worker> {
        let mut ring = new_ring()?;
        let mem = EntryMem::new(payload_size);
        let req = UringCmdReq {
            qid,
            ..UringCmdReq::default()
        };
        let sqe = command(
            fd,
            abi::URING_CMD_REGISTER,
            req,
            TAG_REGISTER,
            Some(mem.iov.as_ptr() as u64),
        );
        // SAFETY: the iovecs and the buffers they name live in `mem`, which the Worker owns
        // for as long as the ring (and so the kernel's use of the entry) lasts.
        unsafe {
            ring.submission()
                .push(&sqe)
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        ring.submit()?;
        // A refused REGISTER completes at once; an accepted one stays pending until the
        // kernel has a request for it.
        if let Some(c) = ring.completion().next() {
            if c.result() < 0 {
                return Err(io::Error::from_raw_os_error(-c.result()));
            }
            return Err(io::Error::other(format!(
                "unexpected completion {} of a ring registration",
                c.result()
            )));
        }
        Ok(Worker { fd, qid, ring, mem })
    }

    /// Serves requests until the connection ends.
    pub fn serve(mut self, disp: &Dispatcher) -> io::Result<()> {
        let mut out: Vec<u8> = Vec::with_capacity(4096);
        let mut meter = Meter::new(Class::Demand);
        loop {
            // The round's CPU includes the kernel copying the request into the entry,
            // which happens in this thread's io_uring_enter.
            meter.tick(disp.fs().ledger());
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            let Some(c) = self.ring.completion().next() else {
                continue;
            };
            let res = c.result();
            if res < 0 {
                return match -res {
                    // The connection ended (unmount, abort) or the ring is being torn down.
                    libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED => Ok(()),
                    e => Err(io::Error::from_raw_os_error(e)),
                };
            }
            disp.fs().requests().arrived(true);
            let commit_id = self.answer(disp, &mut out);
            let req = UringCmdReq {
                qid: self.qid,
                commit_id,
                ..UringCmdReq::default()
            };
            let sqe = command(
                self.fd,
                abi::URING_CMD_COMMIT_AND_FETCH,
                req,
                TAG_COMMIT,
                None,
            );
            // SAFETY: the command names no memory of its own; the entry's buffers it refers
            // to (by registration) live in self.mem for the worker's life.
            unsafe {
                self.ring
                    .submission()
                    .push(&sqe)
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
        }
    }

    /// Serves the request now in the entry and writes the reply into it; returns the
    /// commit id the kernel expects back.
    fn answer(&mut self, disp: &Dispatcher, out: &mut Vec<u8>) -> u64 {
        let hdr = &self.mem.header;
        let h = InHeader::read(&hdr[..]).unwrap_or_default();
        let ent =
            UringEntInOut::read(&hdr[abi::URING_IN_OUT_HEADER_SZ + abi::URING_OP_IN_OUT_SZ..])
                .unwrap_or_default();
        let op_off = abi::URING_IN_OUT_HEADER_SZ;
        let op_len = abi::op_in_len(h.opcode).min(abi::URING_OP_IN_OUT_SZ);
        let mut op_buf = [0u8; abi::URING_OP_IN_OUT_SZ];
        op_buf[..op_len].copy_from_slice(&hdr[op_off..op_off + op_len]);
        let op_in = &op_buf[..op_len];
        let payload_sz = (ent.payload_sz as usize).min(self.mem.payload.len());
        let (error, body_len) = if h.opcode == op::READ {
            match abi::ReadIn::read(op_in) {
                // A READ carries no payload, so its buffer takes the data.
                Some(arg) => match disp.read(h.nodeid, &arg, &mut self.mem.payload) {
                    Ok(n) => (0, n),
                    Err(e) => (e, 0),
                },
                None => (libc::EINVAL, 0),
            }
        } else {
            let r = match Request::decode(&h, op_in, &self.mem.payload[..payload_sz]) {
                Ok(req) => disp.handle(&req, out),
                Err(m) => {
                    log::warn!("malformed FUSE {} request: {}", op_name(h.opcode), m.0);
                    Reply::Err(libc::EINVAL)
                }
            };
            match r {
                Reply::Ok | Reply::None => {
                    let n = out.len().min(self.mem.payload.len());
                    self.mem.payload[..n].copy_from_slice(&out[..n]);
                    (0, n)
                }
                Reply::Err(e) => (e, 0),
            }
        };
        let oh = OutHeader {
            len: (std::mem::size_of::<OutHeader>() + body_len) as u32,
            error: -error,
            unique: h.unique,
        };
        self.mem.header[..16].copy_from_slice(oh.bytes());
        let ent_out = UringEntInOut {
            payload_sz: body_len as u32,
            commit_id: ent.commit_id,
            ..UringEntInOut::default()
        };
        let at = abi::URING_IN_OUT_HEADER_SZ + abi::URING_OP_IN_OUT_SZ;
        self.mem.header[at..at + 32].copy_from_slice(ent_out.bytes());
        ent.commit_id
    }
}

/// The number of queues the kernel keeps: one per possible CPU.
pub fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The count of CPUs in a list like "0-3,8,10-11".
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.split(',') {
        let last = match part.split_once('-') {
            Some((_, b)) => b.parse::<usize>().ok()?,
            None => part.parse::<usize>().ok()?,
        };
        max = Some(max.map_or(last, |m: usize| m.max(last)));
    }
    max.map(|m| m + 1)
}

/// Why the ring cannot be used on this machine, as a line for the log naming the fix;
/// `None` when nothing visible stands in the way.
pub fn unavailable_reason(kernel_minor: u32, offered: bool) -> Option<String> {
    if kernel_minor < 42 {
        return Some(format!(
            "the kernel speaks FUSE 7.{kernel_minor}; FUSE over io_uring needs 7.42 (Linux >= 6.14)"
        ));
    }
    if let Ok(v) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        match v.trim() {
            "2" => {
                return Some(
                    "io_uring is disabled on this machine (sysctl kernel.io_uring_disabled = 2); \
                     an administrator can set it to 0"
                        .into(),
                )
            }
            "1" if crate::sys::euid() != 0 => {
                return Some(
                    "io_uring is limited to the group in kernel.io_uring_group \
                     (sysctl kernel.io_uring_disabled = 1)"
                        .into(),
                )
            }
            _ => {}
        }
    }
    if !offered {
        let p = "/sys/module/fuse/parameters/enable_uring";
        return Some(match std::fs::read_to_string(p) {
            Ok(v) if v.trim() == "N" => format!(
                "FUSE over io_uring is off in this kernel ({p} is N); as root: echo Y > {p}"
            ),
            Ok(_) => "the kernel did not offer FUSE over io_uring".into(),
            Err(_) => format!(
                "this kernel has no FUSE over io_uring ({p} is missing: CONFIG_FUSE_IO_URING)"
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(12));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn register_sqe_carries_two_iovecs_and_the_queue() {
        let iov = [0u8; 32];
        let sqe = command(
            7,
            abi::URING_CMD_REGISTER,
            UringCmdReq {
                qid: 3,
                ..Default::default()
            },
            TAG_REGISTER,
            Some(iov.as_ptr() as u64),
        );
        // SAFETY: reading the bytes of a #[repr(C)] 128-byte SQE.
        let b: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(b[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), 7);
        assert_eq!(
            u32::from_ne_bytes(b[8..12].try_into().unwrap()),
            abi::URING_CMD_REGISTER
        );
        assert_eq!(
            u64::from_ne_bytes(b[16..24].try_into().unwrap()),
            iov.as_ptr() as u64
        );
        assert_eq!(u32::from_ne_bytes(b[24..28].try_into().unwrap()), 2);
        // The command area starts at byte 48: flags, commit_id, qid.
        assert_eq!(u16::from_ne_bytes(b[64..66].try_into().unwrap()), 3);
    }
}
