"""tests/e2e/delayproxy.py - a TCP proxy on loopback that forwards bytes
between clients and one server, and can hold them back on command: the
network faults a test needs to put a store's answer (or a request) late on
purpose, without pausing the store itself.

    proxy = DelayProxy(server_port)          # listens on 127.0.0.1:proxy.port
    proxy = DelayProxy(server_port, framer=length_prefixed(4))  # see below
    url = "zookeeper://127.0.0.1:%d" % proxy.port
    ...
    proxy.hold_replies(3.0)                  # server -> client bytes from now
    proxy.hold_replies(3.0, when=pred)       # ... from the next client ->
                                             # server chunk with pred(chunk)
    proxy.hold_requests(1.5, when=pred)      # client -> server, from that
                                             # chunk itself (it is held too)
    proxy.wait_triggered(5.0)                # did the armed hold start?
    proxy.cut(); proxy.restore()             # drop every connection and
                                             # refuse new ones, until restore
    proxy.close()                            # or use it as a context manager

Semantics:
- A hold is per direction and covers every connection, also ones opened
  while it lasts: bytes that arrive during it are forwarded when it ends, in
  order; nothing is dropped or reordered. Bytes behind held ones wait for
  them (one thread per direction per connection forwards in order). A new
  hold replaces an older one of the same direction; release() ends both at
  once.
- when=pred arms a trigger: what a client sends is passed to pred(bytes)
  until it returns true; the hold then starts at that moment, so a reply to
  that very request is held. Without a framer pred sees each chunk as read
  (clients may split one message over several writes, or send several in
  one); with framer (a function: the stream's buffered bytes -> the length
  of the first whole message in them, 0 while incomplete, < 0 when they
  are not that protocol) it sees whole messages, cut from each client
  stream since its first byte. length_prefixed() makes framers for
  protocols whose messages start with their length (ZooKeeper: 4 bytes big
  endian; MySQL: length_prefixed(3, "little", 1)). Only one trigger is
  armed at a time; triggered_at is the monotonic time it fired (None
  before).
- A peer that closes its side is passed on as a half-close after whatever
  is held for it; a reset or error closes the pair.
- cut() closes every open connection at once (held bytes are dropped) and
  accepts-then-closes new ones until restore().
- Bounded in time: the proxy closes itself after max_life seconds (default
  600), and every thread it starts is a daemon polling a stop flag every
  50 ms, so a failing test never leaves it running. Only loopback targets
  are accepted, and it listens on 127.0.0.1 only.

Standard library only; generic over the protocol (ZooKeeper, Redis,
MySQL, HTTP): the protocol knowledge lives in the test's pred."""

import select
import socket
import threading
import time

C2S, S2C = 0, 1
LOOPBACK = ("127.0.0.1", "::1", "localhost")
TICK = 0.05
SEND_TIMEOUT = 10.0  # a peer that takes no bytes for this long is dropped


class _Pair:
    """One proxied connection: the client's socket and ours to the server."""

    def __init__(self, cs, ss):
        self.socks = (cs, ss)
        self.eof = set()  # directions whose sender closed its side
        self.buf = b""  # client bytes not yet framed; None: framing gave up

    def close(self):
        _close_socks(self.socks)


class DelayProxy:
    def __init__(self, target_port, target_host="127.0.0.1", max_life=600.0, framer=None):
        if target_host not in LOOPBACK:
            raise ValueError("delayproxy forwards to loopback only, not %r" % target_host)
        self.target = (target_host, target_port)
        self.framer = framer
        self.lock = threading.Lock()  # guards every member below
        self.hold_until = [0.0, 0.0]  # monotonic end of the hold, per direction
        self.trigger = None  # (pred, direction, seconds) while armed
        self.triggered = threading.Event()
        self.triggered_at = None
        self.is_cut = False
        self.closing = threading.Event()
        self.pairs = set()  # open _Pairs
        self.threads = []
        self.chunks = [0, 0]  # chunks forwarded, per direction
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(TICK)
        self.port = self.listener.getsockname()[1]
        self._spawn(self._accept_loop)
        self.timer = threading.Timer(max_life, self.close)
        self.timer.daemon = True
        self.timer.start()

    # ---- commands from the test ----------------------------------------

    def hold_replies(self, seconds, when=None):
        """Hold server -> client bytes for seconds, from now or (when given)
        from the next client chunk for which when(chunk) is true."""
        self._hold(S2C, seconds, when)

    def hold_requests(self, seconds, when=None):
        """Hold client -> server bytes for seconds, from now or (when given)
        from the next client chunk for which when(chunk) is true, that chunk
        included."""
        self._hold(C2S, seconds, when)

    def release(self):
        """End every hold and disarm the trigger; held bytes go out now."""
        with self.lock:
            self.hold_until = [0.0, 0.0]
            self.trigger = None

    def wait_triggered(self, timeout):
        """Whether the armed trigger has fired, waiting up to timeout s."""
        return self.triggered.wait(timeout)

    def cut(self):
        """Close every connection now and refuse new ones until restore()."""
        with self.lock:
            self.is_cut = True
            pairs, self.pairs = self.pairs, set()
        for pair in pairs:
            pair.close()

    def restore(self):
        with self.lock:
            self.is_cut = False

    def close(self):
        """Stop: close the listener and every connection, join the threads
        (briefly: they are daemons and poll the stop flag)."""
        if self.closing.is_set():
            return
        self.closing.set()
        self.timer.cancel()
        try:
            self.listener.close()
        except OSError:
            pass
        with self.lock:
            pairs, self.pairs = self.pairs, set()
        for pair in pairs:
            pair.close()
        me = threading.current_thread()
        for t in list(self.threads):
            if t is not me:
                t.join(2.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- inside ---------------------------------------------------------

    def _hold(self, direction, seconds, when):
        with self.lock:
            if when is None:
                self.hold_until[direction] = time.monotonic() + seconds
            else:
                self.triggered.clear()
                self.triggered_at = None
                self.trigger = (when, direction, seconds)

    def _spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        with self.lock:
            self.threads = [x for x in self.threads if x.is_alive()]
            self.threads.append(t)
        t.start()

    def _accept_loop(self):
        while not self.closing.is_set():
            try:
                cs, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                refuse = self.is_cut
            if refuse:
                _close_socks((cs,))
                continue
            try:
                ss = socket.create_connection(self.target, timeout=2.0)
            except OSError:
                _close_socks((cs,))
                continue
            for s in (cs, ss):
                s.settimeout(SEND_TIMEOUT)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(cs, ss)
            with self.lock:
                self.pairs.add(pair)
            self._spawn(self._pump, pair, C2S)
            self._spawn(self._pump, pair, S2C)

    def _messages(self, pair, chunk):
        """What pred sees of chunk: itself, or the whole messages it ends."""
        if self.framer is None or pair.buf is None:
            return [chunk]
        pair.buf += chunk
        out = []
        while pair.buf:
            try:
                n = self.framer(pair.buf)
            except Exception:  # noqa: BLE001 - a framer bug must not kill the pump
                n = -1
            if n < 0:
                pair.buf = None
                return out + [chunk]
            if n == 0 or n > len(pair.buf):
                break
            out.append(pair.buf[:n])
            pair.buf = pair.buf[n:]
        return out

    def _check_trigger(self, pair, chunk):
        msgs = self._messages(pair, chunk)
        with self.lock:
            trig = self.trigger
        if trig is None:
            return
        pred, direction, seconds = trig
        hit = False
        for m in msgs:
            try:
                hit = hit or bool(pred(m))
            except Exception:  # noqa: BLE001 - a predicate bug must not kill the pump
                pass
        if not hit:
            return
        with self.lock:
            if self.trigger is not trig:  # another pump fired it first
                return
            self.trigger = None
            self.triggered_at = time.monotonic()
            self.hold_until[direction] = self.triggered_at + seconds
        self.triggered.set()

    def _wait_hold(self, direction, pair):
        """Sleep while direction is held; False if the pair or the proxy
        closed meanwhile."""
        while True:
            with self.lock:
                left = self.hold_until[direction] - time.monotonic()
                alive = pair in self.pairs
            if self.closing.is_set() or not alive:
                return False
            if left <= 0:
                return True
            time.sleep(min(left, TICK))

    def _pump(self, pair, direction):
        src, dst = pair.socks if direction == C2S else pair.socks[::-1]
        while not self.closing.is_set():
            try:
                ready, _, _ = select.select([src], [], [], TICK)
                chunk = src.recv(65536) if ready else None
            except (OSError, ValueError):  # closed under us (cut, close)
                break
            if chunk is None:
                with self.lock:
                    alive = pair in self.pairs
                if not alive:
                    break
                continue
            if chunk and direction == C2S:
                self._check_trigger(pair, chunk)
            if not self._wait_hold(direction, pair):
                break
            if not chunk:  # a half-close, passed on after what was held
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    break
                with self.lock:
                    pair.eof.add(direction)
                    both = len(pair.eof) == 2
                if both:
                    break
                return  # the other direction goes on, then closes the pair
            try:
                dst.sendall(chunk)
            except OSError:  # reset, or a peer that stopped reading
                break
            with self.lock:
                self.chunks[direction] += 1
        with self.lock:
            self.pairs.discard(pair)
        pair.close()


def length_prefixed(size=4, byteorder="big", extra=0):
    """A framer for messages that start with their length: size bytes in
    byteorder, counting extra more bytes after the length field than it
    says (a MySQL packet: length_prefixed(3, "little", 1) for its sequence
    byte); 0 while a message is incomplete."""

    def framer(buf):
        if len(buf) < size:
            return 0
        n = size + int.from_bytes(buf[:size], byteorder) + extra
        return n if len(buf) >= n else 0

    return framer


def _close_socks(socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            s.close()
        except OSError:
            pass
