"""lockd_client - hold a lockd lock from Python: one file, standard library
only, Python 3.9 or newer.

    from lockd_client import Lock
    with Lock("orders/42", ttl=15, wait=30) as lock:
        write_with_fence(lock.fence)

A Lock acquires with POST /locks/{key} (retried safely under one
Idempotency-Key), keeps the lock with a renewer thread (PUT every ttl/3)
and releases it on leaving the block (DELETE), also when the body raises.
If it can no longer prove that it holds the lock, it says so at once:
lock.lost (a threading.Event) is set, on_lost(reason) is called, and
lock.check() raises LockLost. The contract it speaks is lockd's docs/API.md.
"""

import http.client
import json
import os
import threading
import time
import urllib.parse
import uuid

__all__ = ["Client", "Lock", "LockdError", "LockHeld", "LockLost", "quote_key"]

DEFAULT_URL = "http://127.0.0.1:8080"
BACKOFF_FIRST = 0.1  # s: the first pause between retries, doubled each time
BACKOFF_MAX = 1.0  # s
RELEASE_RETRY = 2.0  # s: how long a release retries a transient failure
USER_AGENT = "lockd-client-python/1"


class LockdError(Exception):
    """lockd refused a request (status and code as lockd answered them), or
    could not be reached in time (status None, code "unavailable")."""

    def __init__(self, status, code, message):
        super().__init__("%s %s: %s" % (status if status is not None else "-", code, message))
        self.status = status
        self.code = code
        self.message = message


class LockHeld(LockdError):
    """409 lock_held: somebody else holds the lock. retry_after is the time
    in seconds (float) until the first holder's TTL passes, as lockd saw it."""

    def __init__(self, message, retry_after):
        super().__init__(409, "lock_held", message)
        self.retry_after = retry_after


class LockLost(Exception):
    """The lock may have passed to someone else: stop using it."""

    def __init__(self, reason):
        super().__init__("lock lost: %s" % reason)
        self.reason = reason


def quote_key(key):
    """The key as it goes into the path: UTF-8 bytes, each one %XX except
    A-Z a-z 0-9 - . _ ~ and '/'."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return urllib.parse.quote(key, safe="/")


def _token_from_env():
    name = os.environ.get("LOCKD_AUTH_TOKEN_FILE")
    if not name:
        return None
    with open(name, encoding="utf-8") as f:
        return f.readline().rstrip("\r\n")


class _Answer:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def error(self):
        """(code, message, retry_after_ms or None) of an error body."""
        err = self.json.get("error") if isinstance(self.json, dict) else None
        if not isinstance(err, dict):
            return "http_%d" % self.status, "no JSON error body", None
        return err.get("code"), err.get("message"), err.get("retry_after_ms")

    def retry_after(self):
        """Seconds to wait before a retry: the body's retry_after_ms, else
        the Retry-After header (whole seconds), else None."""
        ms = self.error()[2]
        if isinstance(ms, int) and ms >= 0:
            return ms / 1000.0
        value = self.headers.get("retry-after")
        if value is not None and value.strip().isdigit():
            return float(value.strip())
        return None

    def raise_error(self):
        code, message, _ = self.error()
        if self.status == 409 and code == "lock_held":
            raise LockHeld(message, self.retry_after() or 0.0)
        raise LockdError(self.status, code, message)


def _transient(status):
    return status == 429 or status >= 500


class Client:
    """Plain requests to one lockd. url: default env LOCKD_URL, else
    http://127.0.0.1:8080; auth_token: default the first line of the file
    env LOCKD_AUTH_TOKEN_FILE names; timeout: seconds per request (beyond
    any wait). Safe to share between threads (a connection per request)."""

    def __init__(self, url=None, auth_token=None, timeout=10.0):
        self.url = url or os.environ.get("LOCKD_URL") or DEFAULT_URL
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("lockd url must be http://host[:port] or https://...: %r" % self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self.auth_token = auth_token if auth_token is not None else _token_from_env()
        self.timeout = float(timeout)

    def request(self, method, key, body=None, headers=None, timeout=None):
        """One request on /locks/{key}; returns the answer, whatever its
        status. Raises OSError or http.client.HTTPException when lockd
        cannot be reached or does not answer within timeout seconds."""
        hdrs = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.auth_token:
            hdrs["Authorization"] = "Bearer " + self.auth_token
        hdrs.update(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        conn_class = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = conn_class(self._host, self._port, timeout=max(0.001, timeout or self.timeout))
        try:
            conn.request(method, self._prefix + "/locks/" + quote_key(key), body=data, headers=hdrs)
            r = conn.getresponse()
            return _Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def inspect(self, key):
        """GET /locks/{key}: the holder's description (a dict, never a
        token) while the key is held, None when it is free."""
        r = self.request("GET", key)
        if r.status == 200:
            return r.json
        if r.status == 404:
            return None
        r.raise_error()


class Lock:
    """One grant of key. ttl, wait and timeout are seconds (floats); wait 0
    tries once. Use it in a with block, or call acquire() then release().

    While held: key, token, fence (int), ttl_ms (what lockd last granted),
    lost (threading.Event), lost_reason (str or None), check()."""

    def __init__(self, key, ttl=15.0, wait=0.0, url=None, owner=None, mode="exclusive", limit=None,
                 on_lost=None, auth_token=None, timeout=10.0, client=None):
        if mode not in ("exclusive", "shared"):
            raise ValueError("mode must be 'exclusive' or 'shared': %r" % (mode,))
        self.client = client or Client(url, auth_token, timeout)
        self.key = key
        self.ttl = float(ttl)
        self.wait = float(wait)
        self.owner = owner
        self.mode = mode
        self.limit = limit
        self.on_lost = on_lost
        self.token = None
        self.fence = None
        self.ttl_ms = None
        self.lost = threading.Event()
        self.lost_reason = None
        self._mutex = threading.Lock()  # guards _deadline, ttl_ms, lost_reason, _done
        self._stop = threading.Event()
        self._thread = None
        self._deadline = None  # monotonic s: the lock is ours until then at most
        self._done = False  # released or lost: nothing more to do

    # ------------------------------------------------------------ acquire

    def __enter__(self):
        return self.acquire()

    def __exit__(self, exc_type, exc, tb):
        try:
            self.release()
        except LockdError:
            if exc_type is None:
                raise  # else the body's exception is the one to see
        return False

    def _acquire_body(self, wait_s):
        body = {"ttl_ms": max(1, int(round(self.ttl * 1000))), "wait_ms": max(0, int(round(wait_s * 1000)))}
        if self.owner is not None:
            body["owner"] = self.owner
        if self.mode != "exclusive":
            body["mode"] = self.mode
        if self.limit is not None:
            body["limit"] = self.limit
        return body

    def acquire(self):
        """POST /locks/{key}; returns self, holding the lock and renewing it.
        Raises LockHeld (not granted within wait), LockdError (refused, or
        lockd unavailable until the wait, or for wait 0 the timeout, ran
        out). Retries 503, 429, connection errors and timeouts with the
        same Idempotency-Key, so a retry gets the same grant back."""
        if self.token is not None or self._done:
            raise RuntimeError("a Lock is acquired once; make a new Lock")
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        start = time.monotonic()
        deadline = start + (self.wait if self.wait > 0 else self.client.timeout)
        backoff = BACKOFF_FIRST
        while True:
            wait_left = max(0.0, start + self.wait - time.monotonic())
            sent = time.monotonic()
            try:
                r = self.client.request("POST", self.key, self._acquire_body(wait_left), headers,
                                        timeout=wait_left + self.client.timeout)
            except (OSError, http.client.HTTPException) as e:
                failure, pause = LockdError(None, "unavailable", "lockd unreachable: %s" % (e,)), None
            else:
                if r.status == 201:
                    # A grant that waited happened at a moment we cannot
                    # see: count from its arrival (API.md); the renewer's
                    # margin allows for the answer's way back.
                    anchor = sent if wait_left == 0 else time.monotonic()
                    self._granted(r.json, anchor)
                    return self
                if r.status not in (429, 503):
                    r.raise_error()
                code, message, _ = r.error()
                failure, pause = LockdError(r.status, code, message), r.retry_after()
            pause = backoff if pause is None else pause
            if time.monotonic() + pause >= deadline:
                raise failure
            time.sleep(pause)
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _granted(self, grant, anchor):
        self.token = grant["token"]
        self.fence = int(grant["fence"])
        self.ttl_ms = int(grant["ttl_ms"])
        self._deadline = anchor + self.ttl_ms / 1000.0
        self._thread = threading.Thread(target=self._renew_loop, name="lockd-renew:%s" % self.key, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ holding

    def _margin(self):
        return max(0.05, self.ttl_ms / 10000.0)

    def _set_lost(self, reason):
        """Mark the lock lost, once, unless it was released first."""
        with self._mutex:
            if self._done:
                return
            self._done = True
            self.lost_reason = reason
        self._stop.set()
        self.lost.set()
        if self.on_lost is not None:
            try:
                self.on_lost(reason)
            except Exception:  # noqa: BLE001 - the callback's failure is not ours to raise
                pass

    def check(self):
        """Raise LockLost if the lock is lost, or if the renewer could not
        prove it held in time (the deadline minus the margin passed)."""
        with self._mutex:
            late = not self._done and self._deadline is not None and \
                time.monotonic() >= self._deadline - self._margin()
        if late:
            self._set_lost("not renewed in time: the TTL may have passed")
        if self.lost.is_set():
            raise LockLost(self.lost_reason)

    def _renew_loop(self):
        try:
            self._renew_until_done()
        except Exception as e:  # noqa: BLE001 - a dead renewer must not look like a held lock
            self._set_lost("renewer failed: %r" % (e,))

    def _renew_until_done(self):
        while True:
            with self._mutex:
                next_at = self._deadline - self.ttl_ms / 1000.0 * 2 / 3
            if self._stop.wait(max(0.0, next_at - time.monotonic())):
                return
            if not self._renew_once():
                return

    def _renew_once(self):
        """PUT /locks/{key} until it succeeds (True), the lock is lost or
        released (False)."""
        body = {"ttl_ms": max(1, int(round(self.ttl * 1000)))}
        backoff = BACKOFF_FIRST
        while True:
            with self._mutex:
                left = self._deadline - self._margin() - time.monotonic()
            if left <= 0:
                self._set_lost("not renewed in time: lockd unreachable or failing until the TTL's end")
                return False
            sent = time.monotonic()
            try:
                r = self.client.request("PUT", self.key, body, {"Lock-Token": self.token},
                                        timeout=min(self.client.timeout, left))
            except (OSError, http.client.HTTPException):
                pause = None
            else:
                if r.status == 200:
                    ttl_ms = int(r.json["ttl_ms"])
                    with self._mutex:
                        self.ttl_ms = ttl_ms
                        self._deadline = sent + self.ttl_ms / 1000.0
                    return True
                if not _transient(r.status):
                    code, message, _ = r.error()
                    self._set_lost("renew answered %d %s: %s" % (r.status, code, message))
                    return False
                pause = r.retry_after()
            pause = backoff if pause is None else pause
            with self._mutex:
                left = self._deadline - self._margin() - time.monotonic()
            if self._stop.wait(max(0.0, min(pause, left))):
                return False
            backoff = min(backoff * 2, BACKOFF_MAX)

    # ------------------------------------------------------------ release

    def release(self):
        """Stop renewing and DELETE the lock, once. Returns True when lockd
        confirmed the release (a 404 or 409 on a retry: the first try got
        through), False when there was nothing to release (lost, released
        already, its TTL passed unnoticed) or lockd stayed unreachable for
        RELEASE_RETRY seconds (the lock then ends at its TTL). Raises
        LockdError if lockd refuses the request itself (400, 401, 403)."""
        with self._mutex:
            if self._done or self.token is None:
                return False
            self._done = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        end = time.monotonic() + RELEASE_RETRY
        backoff = BACKOFF_FIRST
        first = True
        while True:
            try:
                r = self.client.request("DELETE", self.key, None, {"Lock-Token": self.token},
                                        timeout=min(self.client.timeout, max(0.1, end - time.monotonic())))
            except (OSError, http.client.HTTPException):
                pause = None
            else:
                if r.status == 200 or (not first and r.status in (404, 409)):
                    return True
                if r.status in (404, 409):
                    return False  # gone before we asked: its TTL passed
                if not _transient(r.status):
                    r.raise_error()
                pause = r.retry_after()
            first = False
            pause = backoff if pause is None else pause
            if time.monotonic() + pause >= end:
                return False
            time.sleep(pause)
            backoff = min(backoff * 2, BACKOFF_MAX)
