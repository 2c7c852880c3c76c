"""tests/e2e/netfault.py - network faults on loopback with iptables (a
helper module: it registers no scenarios).

PortBlock(ports) is a chain of its own, LOCKD-<pid>-<n>, that DROPs tcp
to and from the given loopback ports (--dport or --sport). on() hooks it
into INPUT (-i lo) and OUTPUT (-o lo), off() unhooks it, close() unhooks
and deletes it; every chain left is removed at exit too. DROP, not
REJECT: a peer sees silence, as behind a real partition, and finds out
by its own timeouts.

A port names one end of a connection only: a process that connects out
uses an ephemeral port, so blocking a server's ports does not stop the
connections it opens to others (a ZooKeeper follower's to its leader).
uids=(...) adds, in OUTPUT only, a DROP of every packet that a socket of
those uids sends (-m owner): run that process under a uid of its own and
it can send nothing at all; with its ports blocked it receives nothing.

available() -> (True, "") or (False, why): iptables missing, or not
permitted (not root, no netfilter in this kernel or container). A
scenario then raises harness.Skip(why).

Only the standard library is used."""

import atexit
import os
import shutil
import subprocess
import threading

IPTABLES = shutil.which("iptables") or "/usr/sbin/iptables"
_lock = threading.Lock()
_seq = [0]
_live = []  # the PortBlocks not yet closed, for the exit hook
_avail = []  # the cached answer of available()


def _run(args, check=True):
    """iptables -w args; its exit code (raises OSError with stderr when
    check and it failed)."""
    p = subprocess.run([IPTABLES, "-w"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=30)
    if check and p.returncode != 0:
        raise OSError("iptables %s: %s" % (" ".join(args), p.stderr.decode("utf-8", "replace").strip()))
    return p.returncode


def available():
    """(True, "") if this process may add iptables chains, else (False,
    why). Probed once: a chain made and removed."""
    with _lock:
        if _avail:
            return _avail[0]
        if not os.path.exists(IPTABLES):
            _avail.append((False, "no iptables (apt-get install iptables)"))
            return _avail[0]
        name = "LOCKD-%d-probe" % os.getpid()
        try:
            _run(["-N", name])
            _run(["-A", name, "-p", "tcp", "--dport", "1", "-j", "DROP"])
            _run(["-A", name, "-m", "owner", "--uid-owner", "1", "-j", "DROP"])
            _run(["-F", name])
            _run(["-X", name])
            _avail.append((True, ""))
        except (OSError, subprocess.SubprocessError) as e:
            _run(["-F", name], check=False)
            _run(["-X", name], check=False)
            _avail.append((False, "iptables not permitted here: %s" % str(e)[:200]))
        return _avail[0]


class PortBlock:
    """DROP tcp to and from ports on lo (and, with uids, everything those
    uids send), while on."""

    def __init__(self, ports, uids=()):
        self.ports = [int(p) for p in ports]
        self.uids = [int(u) for u in uids]
        with _lock:
            _seq[0] += 1
            self.chain = "LOCKD-%d-%d" % (os.getpid(), _seq[0])
        self.hooked = False
        self.made = False
        _run(["-N", self.chain])
        self.made = True
        with _lock:
            _live.append(self)
        for p in self.ports:
            _run(["-A", self.chain, "-p", "tcp", "--dport", str(p), "-j", "DROP"])
            _run(["-A", self.chain, "-p", "tcp", "--sport", str(p), "-j", "DROP"])

    def _hooks(self):
        out = [["INPUT", "-i", "lo", "-j", self.chain], ["OUTPUT", "-o", "lo", "-j", self.chain]]
        for u in self.uids:  # owner matches only where a packet is sent
            out.append(["OUTPUT", "-o", "lo", "-m", "owner", "--uid-owner", str(u), "-j", "DROP"])
        return out

    def on(self):
        """Start dropping (idempotent)."""
        if not self.hooked:
            self.hooked = True
            for h in self._hooks():
                _run(["-I"] + h)
        return self

    def off(self):
        """Stop dropping (idempotent); the chain stays for another on()."""
        if self.hooked:
            self.hooked = False
            for h in self._hooks():
                while _run(["-D"] + h, check=False) == 0:
                    pass

    def close(self):
        """off(), then delete the chain. Safe to call twice."""
        self.off()
        if self.made:
            self.made = False
            _run(["-F", self.chain], check=False)
            _run(["-X", self.chain], check=False)
        with _lock:
            if self in _live:
                _live.remove(self)


@atexit.register
def _cleanup():
    with _lock:
        live = list(_live)
    for b in live:
        try:
            b.close()
        except (OSError, subprocess.SubprocessError):
            pass
