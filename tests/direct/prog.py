"""Programs the direct-path tests (tests/direct_path.rs) run, under `tierfs run` or not.

    prog.py ds DIR N            DeepSpeed's swap pattern: O_DIRECT writes without O_TRUNC,
                                a buffered tail, stat(path) before an O_DIRECT read
    prog.py model SEED OPS DIR  random reads and writes through O_DIRECT and buffered opens
                                of the same files, several open at once; prints a digest of
                                every read and of every file at the end (compared with the
                                same run on a plain folder)
    prog.py fds FILE            dup, dup2 (onto the library's own descriptors too), fcntl
                                F_DUPFD, fork, exec with an inherited descriptor,
                                close-on-exec, close_range
    prog.py hold FILE SECS      opens FILE for writing (O_DIRECT), writes 1 MiB, fsyncs, says
                                READY, waits, then writes and fsyncs another 1 MiB, says DONE
    prog.py access FILE         what a direct open of FILE gives: read, then write through it
Exit 0 with "ok" (or the digests) on success; an assertion error otherwise.
"""
import hashlib
import mmap
import os
import random
import sys
import time

MIB = 1 << 20


def aligned(n, fill=0):
    b = mmap.mmap(-1, max(4096, (n + 4095) // 4096 * 4096))
    if fill:
        b.write(bytes([fill]) * n)
        b.seek(0)
    return b


def ds(d, n):
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        p = os.path.join(d, f"{i}_param.tensor.swp")
        size = MIB * (1 + i % 3) + 1024 * (i % 5 + 1)
        body = size // 4096 * 4096
        buf = aligned(size, i + 1)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
        assert os.pwrite(fd, memoryview(buf)[:body], 0) == body
        os.close(fd)
        fd = os.open(p, os.O_WRONLY)
        assert os.pwrite(fd, bytes([i + 1]) * (size - body), body) == size - body
        os.close(fd)
        st = os.stat(p)
        assert st.st_size == size, (p, st.st_size, size)
        fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
        out = aligned(size)
        got = os.preadv(fd, [out], 0)
        assert os.fstat(fd).st_size == size
        os.close(fd)
        assert got == size and out[:size] == bytes([i + 1]) * size, (p, got)
    print("ok")


def model(seed, ops, d):
    rnd = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    names = [os.path.join(d, f"m{i}") for i in range(3)]
    h = hashlib.sha256()
    held = []  # descriptors kept open across operations: (fd, direct)
    for _ in range(ops):
        name = rnd.choice(names)
        direct = rnd.random() < 0.6
        if rnd.random() < 0.3 and held:
            fd, fdirect = held.pop(rnd.randrange(len(held)))
            os.close(fd)
            continue
        flags = os.O_RDWR | os.O_CREAT | (os.O_DIRECT if direct else 0)
        fd = os.open(name, flags, 0o644)
        op = rnd.random()
        if direct:
            off = rnd.randrange(0, 64) * 4096
            n = rnd.randrange(1, 48) * 4096
        else:
            off = rnd.randrange(0, 256 * 1024)
            n = rnd.randrange(1, 100_000)
        if op < 0.5:
            val = rnd.randrange(1, 256)
            buf = aligned(n, val) if direct else bytes([val]) * n
            w = os.pwrite(fd, memoryview(buf)[:n] if direct else buf, off)
            h.update(f"w {w}\n".encode())
        elif op < 0.9:
            if direct:
                out = aligned(n)
                got = os.preadv(fd, [memoryview(out)[:n]], off)
                data = out[:got]
            else:
                data = os.pread(fd, n, off)
            h.update(f"r {len(data)} ".encode() + hashlib.sha256(data).digest())
        elif op < 0.95:
            size = rnd.randrange(0, 300_000) // 4096 * 4096
            os.ftruncate(fd, size)
            h.update(f"t {size}\n".encode())
        else:
            os.fsync(fd)
        h.update(f"s {os.fstat(fd).st_size} {os.stat(name).st_size}\n".encode())
        if rnd.random() < 0.5:
            held.append((fd, direct))
        else:
            os.close(fd)
    for fd, _ in held:
        os.close(fd)
    for name in names:
        if os.path.exists(name):
            with open(name, "rb") as f:
                data = f.read()
            h.update(f"f {len(data)} ".encode() + hashlib.sha256(data).digest())
    print(h.hexdigest())


def fds(path):
    flags = os.O_RDWR | os.O_CREAT | os.O_DIRECT
    fd = os.open(path, flags, 0o644)
    a = os.dup(fd)
    os.close(fd)
    buf = aligned(MIB, 7)
    assert os.pwrite(a, buf, 0) == MIB
    # dup2 onto every number up to 64 above the highest in use: the library's own
    # descriptors among them must move, not end.
    top = max(int(x) for x in os.listdir("/proc/self/fd"))
    for n in range(a + 1, top + 64):
        try:
            os.dup2(a, n)
            os.close(n)
        except OSError:
            pass
    b = os.dup(a)
    assert os.pwrite(b, aligned(MIB, 8), MIB) == MIB
    import fcntl
    c = fcntl.fcntl(b, fcntl.F_DUPFD, 100)
    os.close(a)
    os.close(b)
    pid = os.fork()
    if pid == 0:
        assert os.pwrite(c, aligned(MIB, 9), 2 * MIB) == MIB
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    # exec with the descriptor inherited: the new image writes through it.
    os.set_inheritable(c, True)
    pid = os.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c",
                  "import os, mmap\n"
                  f"b = mmap.mmap(-1, {MIB}); b.write(bytes([10]) * {MIB})\n"
                  f"assert os.pwrite({c}, b, {3 * MIB}) == {MIB}\n"])
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    # close-on-exec: a descriptor opened O_CLOEXEC is gone in an exec'd child.
    d = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c",
                  f"import os, sys\ntry:\n    os.fstat({d})\nexcept OSError:\n    sys.exit(0)\nsys.exit(3)\n"])
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"close-on-exec descriptor survived exec: {status}"
    os.close(d)
    os.close(c)
    # close_range over everything past stderr, while one more is open.
    e = os.open(path, os.O_RDONLY | os.O_DIRECT)
    os.closerange(3, 65536)
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == 4 * MIB, len(data)
    for i, v in enumerate([7, 8, 9, 10]):
        assert data[i * MIB:(i + 1) * MIB] == bytes([v]) * MIB, i
    print("ok")


def hold(path, secs):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    assert os.pwrite(fd, aligned(MIB, 1), 0) == MIB
    os.fsync(fd)
    print("READY", flush=True)
    time.sleep(float(secs))
    assert os.pwrite(fd, aligned(MIB, 2), MIB) == MIB
    os.fsync(fd)
    print("DONE", flush=True)
    time.sleep(0.5)
    os.close(fd)


def access(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    out = aligned(4096)
    got = os.preadv(fd, [out], 0)
    print(f"read {got}")
    try:
        os.pwrite(fd, aligned(4096, 1), 0)
        print("wrote")
    except OSError as e:
        print(f"write refused {e.errno}")
    os.close(fd)
    try:
        os.open(path, os.O_WRONLY | os.O_DIRECT)
        print("opened for writing")
    except OSError as e:
        print(f"open for writing refused {e.errno}")


cmd = sys.argv[1]
if cmd == "ds":
    ds(sys.argv[2], int(sys.argv[3]))
elif cmd == "model":
    model(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
elif cmd == "fds":
    fds(sys.argv[2])
elif cmd == "hold":
    hold(sys.argv[2], sys.argv[3])
elif cmd == "access":
    access(sys.argv[2])
else:
    sys.exit(f"unknown {cmd}")
