"""Hints from a training script to tierfs's host-memory cache.

tierfs learns each directory's read order on its own; a script that knows better (it
alternates its optimizer order, or knows a step begins) can say so through the mount's
write-only `.tierfs/control` file. Every call is one write: a bad command raises OSError
(EINVAL, or ENOENT for a path that does not exist) and changes nothing.

    from tierfs_hints import Hints
    h = Hints("/local/tierfs")            # the mountpoint (DeepSpeed's nvme_path)
    h.order("alternate", "zero_stage_3/optimizer/rank0")
    h.step()                              # a training step starts now
    h.prefetch("zero_stage_3/optimizer/rank0/0_999.tensor.swp")
    h.flush()                             # write back dirty data now

Hints are optional: without them, or on a mount without a cache, nothing changes but
speed. `Hints.find(path)` returns None when `path` is not inside a tierfs mount, so a
script can use it unconditionally:

    h = Hints.find(nvme_path)
    if h: h.step()

Command line: `python3 tools/tierfs_hints.py MOUNTPOINT COMMAND...`, e.g.
`python3 tools/tierfs_hints.py /local/tierfs order alternate zero_stage_3/optimizer/rank0`.
"""

import os
import sys

ORDERS = ("ascending", "descending", "alternate", "learned")


class Hints:
    def __init__(self, mountpoint, stats_dir=".tierfs"):
        self.control = os.path.join(mountpoint, stats_dir, "control")
        if not os.path.exists(self.control):
            raise FileNotFoundError(f"{self.control}: not a tierfs mount (or an older tierfs)")

    @classmethod
    def find(cls, path, stats_dir=".tierfs"):
        """The Hints of the tierfs mount holding `path`, or None."""
        p = os.path.abspath(path)
        while True:
            if os.path.exists(os.path.join(p, stats_dir, "control")):
                return cls(p, stats_dir)
            parent = os.path.dirname(p)
            if parent == p:
                return None
            p = parent

    def send(self, *lines):
        """Sends raw command lines in one write (all or nothing)."""
        text = "".join(line.rstrip("\n") + "\n" for line in lines)
        fd = os.open(self.control, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def order(self, how, directory=""):
        if how not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}")
        self.send(f"order {how} {directory}".rstrip())

    def step(self, directory=""):
        self.send(f"step {directory}".rstrip())

    def prefetch(self, path):
        self.send(f"prefetch {path}")

    def drop(self, path):
        self.send(f"drop {path}")

    def flush(self, path=""):
        self.send(f"flush {path}".rstrip())


def main(argv):
    if len(argv) < 3:
        print(__doc__.split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    try:
        Hints(argv[1]).send(" ".join(argv[2:]))
    except OSError as e:
        print(f"tierfs_hints: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
