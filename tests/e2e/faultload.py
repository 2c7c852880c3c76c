"""tests/e2e/faultload.py - the fault load and its checker (a helper module,
like multi.py: it registers no scenarios; test_faults.py does).

FaultLoad: client threads on a few keys, spread over several lockd
instances, mixing waiting (wait_ms) and try-once acquires; each grant is
held a moment and released, or abandoned to its TTL. Every request is
recorded as a Rec: client-side monotonic send and answer times, the wall
clock at the answer, status and body. A fault driver (test_faults.py)
kills or stops the store meanwhile, and can place a stall right after a
201 was seen (wait_grant), so that a grant is in flight when the store
stops.

check_history() judges a list of Recs by what a client may rely on, with
the client's own clock only:
  - a hold starts when its 201 arrived and ends when its release was SENT
    if that release got 200; when the acquire was sent + the ttl_ms the
    grant returned (a client counts the TTL from when it sent the request)
    if it was never released; and at the earlier of the two if the release
    was answered 404/409/503 or not at all. Per key, holds never overlap.
    (Not send + ttl_ms for an unconfirmed release: a 503 to a release is
    "outcome unknown", the release may have been applied, e.g. by the
    ZooKeeper leader while the follower that would answer it is stopped,
    and its client stopped using the lock when it sent it. Overlaps that
    counting those as held to send + ttl_ms would add are reported as
    info.)
  - fences strictly increase in the order grants arrived (sound for any
    overlap-free history: a later hold was granted after the earlier one
    ended).
  - no 201 arrives after its own expires_at, none returns a ttl_ms above
    the one asked for, and each arrives before send + its ttl_ms (a
    waiter: send + wait_ms + its ttl_ms, since lockd tried it last at some
    moment of its wait and answers what is left from then).
  - every request is answered within max(wait_ms, the store's timeout) +
    slack; 503 at that deadline is fine, silence is not.
  - only the documented answers (201/409/503 to an acquire, 200/404/409/
    503 to a release) with well-formed bodies.
Recorded send times are taken just before sending and answer times just
after reading, so a client's view is never wider than the real one: no
tolerance is needed but the clocks' whole milliseconds.

Only the standard library is used."""

import bisect
import calendar
import json
import random
import threading
import time
import urllib.parse

import harness

ACQUIRE, RELEASE, RENEW = "acquire", "release", "renew"


def lock_path(key):
    return "/locks/" + urllib.parse.quote(key, safe="")


def utc_seconds(s):
    """expires_at ("2026-11-22T01:38:10.026Z") as Unix seconds, or None."""
    try:
        base, frac = s.rstrip("Z").split(".")
        return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 10.0 ** len(frac)
    except (AttributeError, ValueError, TypeError):
        return None


def iso_ms(t):
    """Unix seconds as expires_at prints them (whole ms, truncated)."""
    ms = int(t * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)


WAITER_TRANSIT = 0.05  # s: a waiter's answer on its way, past send + wait + ttl


class Rec:
    """One request as the client saw it. sent/answered: time.monotonic();
    wall: time.time() at the answer; answered None = no answer (error says
    why). For a release or renew, acq is the acquire Rec whose token it
    sent; stale_use: the token was dead on purpose (released with a 200, or
    past its TTL), so any 200 to it is a stale-token success."""

    __slots__ = ("kind", "key", "inst", "worker", "sent", "answered", "wall", "status", "body",
                 "ttl_ms", "wait_ms", "acq", "error", "release", "abandoned", "renews", "stale_use")

    def __init__(self, kind, key, inst=0, worker=0, sent=0.0, answered=None, wall=None, status=None,
                 body=None, ttl_ms=None, wait_ms=0, acq=None, error=None):
        self.kind, self.key, self.inst, self.worker = kind, key, inst, worker
        self.sent, self.answered, self.wall = sent, answered, wall
        self.status, self.body, self.error = status, body, error
        self.ttl_ms, self.wait_ms, self.acq = ttl_ms, wait_ms, acq
        self.release = None  # for a granted acquire: its release Rec, if one was sent
        self.abandoned = False
        self.renews = []  # for a granted acquire: its holder's renew Recs, in the order sent
        self.stale_use = False

    def json(self):
        return self.body if isinstance(self.body, dict) else {}

    def code(self):
        try:
            return self.body["error"]["code"]
        except (TypeError, KeyError):
            return None


def grant(key, sent, answered, fence, ttl_ms=2000, ret_ttl_ms=None, inst=0, wait_ms=0, wall=None,
          expires_at=None, release_sent=None, release_status=200, worker=0):
    """A synthetic granted acquire (and its release) for the self-test. wall
    defaults to a wall clock that equals the monotonic one; expires_at to
    the answer + the returned TTL."""
    ret = ttl_ms if ret_ttl_ms is None else ret_ttl_ms
    if wall is None:
        wall = answered
    if expires_at is None:
        expires_at = wall + ret / 1000.0
    body = {"key": key, "token": "t%d" % fence, "fence": fence, "ttl_ms": ret,
            "expires_at": iso_ms(expires_at)}
    a = Rec(ACQUIRE, key, inst, worker, sent, answered, wall, 201, body, ttl_ms, wait_ms)
    out = [a]
    if release_sent is not None:
        r = Rec(RELEASE, key, inst, worker, release_sent, release_sent + 0.001, wall, release_status,
                {"key": key, "released": True} if release_status == 200 else None, acq=a)
        if release_status is None:  # no answer
            r.answered, r.wall, r.error = None, None, "timed out"
        a.release = r
        out.append(r)
    else:
        a.abandoned = True
    return out


class Report:
    def __init__(self):
        self.grants = 0
        self.requests = 0
        self.counts = {}
        self.overlaps = []  # (hold a, hold b, seconds of overlap)
        self.n_overlaps = 0
        self.regressions = []  # (earlier rec, later rec)
        self.stale = []  # (rec, reason)
        self.stale_why = {}  # what made grants stale -> how many
        self.late = []  # (rec, seconds late)
        self.unanswered = []
        self.wrong = []  # (rec, reason)
        self.early_refusals = 0  # info: a release refused before the lock could have expired
        self.after_unconfirmed = 0  # info: grants overlapping only a hold whose release was unconfirmed
        self.worst_late = None  # max(elapsed - bound) over answered requests, s
        self.worst_rec = None
        self.slowest_grant = None  # the 201 with the longest send -> answer
        self.marks = []
        self.t0 = 0.0
        self.stale_tokens = []  # (rec, reason): a 200 to a token that was dead
        self.renews = 0
        self.n503 = 0
        self.excused = 0  # info: answers of a stopped instance, not judged late or stale
        self.stale_uses = 0  # info: requests sent with a dead token on purpose
        self.recovery_ms = None  # fault's end -> first 201 after it

    def violations(self):
        return (self.n_overlaps + len(self.regressions) + len(self.stale) + len(self.late)
                + len(self.unanswered) + len(self.wrong) + len(self.stale_tokens))

    def chaos_line(self, topology, fault):
        """The one line per chaos scenario."""
        rec = "n/a" if self.recovery_ms is None else "%.0f ms" % self.recovery_ms
        return ("chaos %s %s: %d requests, %d grants, %d 503s, overlaps %d, fence regressions %d, "
                "stale-token successes %d, recovery %s"
                % (topology, fault, self.requests, self.grants, self.n503, self.n_overlaps, len(self.regressions),
                   len(self.stale_tokens), rec))

    def summary(self):
        worst = "n/a" if self.worst_late is None else "%+.0f ms" % (self.worst_late * 1000)
        why = ""
        if self.stale_why:
            why = " (%s)" % ", ".join("%d %s" % (n, w) for w, n in sorted(self.stale_why.items()))
        toks = ", stale-token successes %d" % len(self.stale_tokens) if self.stale_tokens else ""
        return ("%d requests, %d grants; overlaps %d, fence regressions %d, stale grants %d%s%s, "
                "late answers %d, unanswered %d, wrong answers %d; worst answer vs its bound %s"
                % (self.requests, self.grants, self.n_overlaps, len(self.regressions), len(self.stale), why, toks,
                   len(self.late), len(self.unanswered), len(self.wrong), worst))

    def _t(self, t):
        return "%+.3f s" % (t - self.t0) if t is not None else "-"

    def _g(self, r):
        j = r.json()
        return ("fence %s via instance %d (worker %d): sent %s, 201 at %s, ttl_ms %s, expires_at %s%s"
                % (j.get("fence"), r.inst, r.worker, self._t(r.sent), self._t(r.answered), j.get("ttl_ms"),
                   j.get("expires_at"), self._end(r)))

    def _end(self, r):
        if r.release is None:
            return ", never released"
        rr = r.release
        st = rr.status if rr.answered is not None else "no answer"
        return ", release sent %s -> %s at %s" % (self._t(rr.sent), st, self._t(rr.answered))

    def _r(self, r):
        a = r.acq.json() if r.acq is not None else {}
        return ("%s of fence %s via instance %d (worker %d): sent %s, %s at %s"
                % (r.kind, a.get("fence"), r.inst, r.worker, self._t(r.sent), r.status, self._t(r.answered)))

    def text(self, limit=8):
        out = [self.summary()]
        if self.marks:
            out.append("faults: " + "; ".join("%s %s" % (self._t(t), what) for t, what in self.marks))
        out.append("answers: " + ", ".join("%s %s: %d" % (k[0], k[1], n) for k, n in sorted(self.counts.items(),
                                                                                                 key=str)))
        g = self.slowest_grant
        if g is not None:
            out.append("(info) slowest 201: %.0f ms after its send, ttl_ms %s, sent %s"
                       % ((g.answered - g.sent) * 1000, g.json().get("ttl_ms"), self._t(g.sent)))
        if self.after_unconfirmed:
            out.append("(info) grants made after another holder sent a release that was answered 503/404/409 "
                       "or not at all, before that holder's send + ttl_ms: %d (not overlaps: the release may "
                       "have been applied and its sender had stopped using the lock)" % self.after_unconfirmed)
        if self.early_refusals:
            out.append("(info) releases refused before the lock could have expired: %d" % self.early_refusals)
        if self.excused:
            out.append("(info) answers of an instance while it was stopped, not judged late or stale: %d"
                       % self.excused)
        for a, b, ov in self.overlaps[:limit]:
            out.append("OVERLAP %.0f ms on %s:\n    %s\n    %s" % (ov * 1000, a.key, self._g(a), self._g(b)))
        for a, b in self.regressions[:limit]:
            out.append("FENCE REGRESSION on %s:\n    %s\n    then %s" % (a.key, self._g(a), self._g(b)))
        for r, why in self.stale[:limit]:
            if r.kind == RENEW:
                out.append("STALE RENEW (%s) on %s: %s" % (why, r.key, self._r(r)))
            else:
                out.append("STALE GRANT (%s) on %s:\n    %s" % (why, r.key, self._g(r)))
        for r, why in self.stale_tokens[:limit]:
            out.append("STALE TOKEN SUCCESS (%s) on %s: %s" % (why, r.key, self._r(r)))
        for r, late in self.late[:limit]:
            out.append("LATE by %.0f ms: %s %s via instance %d, wait_ms %d, sent %s, %s at %s"
                       % (late * 1000, r.kind, r.key, r.inst, r.wait_ms, self._t(r.sent), r.status,
                          self._t(r.answered)))
        for r in self.unanswered[:limit]:
            out.append("NO ANSWER: %s %s via instance %d, sent %s: %s"
                       % (r.kind, r.key, r.inst, self._t(r.sent), r.error))
        for r, why in self.wrong[:limit]:
            out.append("WRONG ANSWER: %s %s via instance %d at %s: %s"
                       % (r.kind, r.key, r.inst, self._t(r.answered), why))
        return "\n".join(out)


def _paused(r, pauses):
    """Seconds of r's send -> answer that its instance spent stopped
    (pauses: (instance, stopped at, continued at))."""
    if r.answered is None:
        return 0.0
    return sum(max(0.0, min(r.answered, t1) - max(r.sent, t0)) for inst, t0, t1 in pauses if inst == r.inst)


def check_history(recs, store_timeout_ms, slack_ms=300, tol_ms=1, clock_ms=5, marks=(), t0=None, pauses=(),
                  recover_from=None, recover_inst=None, offsets=None):
    """Judge recs (see the module doc); a Report. tol_ms: overlap allowed for
    TTLs in whole milliseconds; clock_ms: how far past expires_at a 201 may
    arrive (expires_at has whole ms and may come from the store's clock).
    pauses: (instance, t0, t1) when that lockd was SIGSTOPped: time its
    requests spent there does not count against their bound, and their
    answers are not judged stale (the answer may have been written before
    the stop); overlaps are still judged. recover_from: the fault's end;
    the report's recovery_ms is from then to the first 201 answered after
    it (through recover_inst only, if given). offsets: {instance: seconds}
    its clock runs ahead of ours, where its expires_at is on its own clock
    (memory://; a store's clock is the store's)."""
    rep = Report()
    rep.marks = list(marks)
    rep.t0 = t0 if t0 is not None else (min(r.sent for r in recs) if recs else 0.0)
    tol, slack, store_s = tol_ms / 1000.0, slack_ms / 1000.0, store_timeout_ms / 1000.0
    holds = {}  # key -> [(start, end, rec)]
    literal = {}  # the same, with unconfirmed releases held to send + ttl_ms
    grants = {}  # key -> [rec]
    for r in recs:
        rep.requests += 1
        if r.answered is None:
            rep.unanswered.append(r)
            rep.counts[(r.kind, "none")] = rep.counts.get((r.kind, "none"), 0) + 1
            continue
        rep.counts[(r.kind, r.status)] = rep.counts.get((r.kind, r.status), 0) + 1
        rep.n503 += r.status == 503
        rep.stale_uses += r.stale_use
        bound = max((r.wait_ms or 0) / 1000.0, store_s)
        stopped = _paused(r, pauses)
        rep.excused += stopped > 0
        over = (r.answered - r.sent) - bound - stopped
        if rep.worst_late is None or over > rep.worst_late:
            rep.worst_late, rep.worst_rec = over, r
        if over > slack:
            rep.late.append((r, over))
        if r.kind == ACQUIRE:
            off = (offsets or {}).get(r.inst, 0.0)
            _check_acquire(rep, r, clock_ms - off * 1000.0, holds, grants, literal, stopped > 0)
            if (r.status == 201 and recover_from is not None and r.answered > recover_from
                    and recover_inst in (None, r.inst)):
                ms = (r.answered - recover_from) * 1000
                if rep.recovery_ms is None or ms < rep.recovery_ms:
                    rep.recovery_ms = ms
        elif r.kind == RENEW:
            _check_renew(rep, r, stopped > 0)
        else:
            _check_release(rep, r)
    for key in holds:
        rep.n_overlaps += _overlaps(sorted(holds[key], key=lambda h: (h[0], h[1])), tol, rep.overlaps)
    for key in literal:
        rep.after_unconfirmed += _overlaps(sorted(literal[key], key=lambda h: (h[0], h[1])), tol, [])
    rep.after_unconfirmed -= rep.n_overlaps
    for key in grants:
        top = None
        for g in sorted(grants[key], key=lambda g: g.answered):
            f = g.json()["fence"]
            if top is not None and f <= top.json()["fence"]:
                rep.regressions.append((top, g))
            if top is None or f > top.json()["fence"]:
                top = g
        _check_superseded(rep, grants[key])
    rep.late.sort(key=lambda x: -x[1])
    return rep


def _check_superseded(rep, gs):
    """A renew or release of a grant answered 200 though it was sent after a
    later grant of the key (a higher fence) had been answered 201: the store
    granted the key while this token still held it, or revived a dead token."""
    gs = sorted(gs, key=lambda g: g.answered)
    times, top = [], []  # answer times, and the highest fence answered by then
    for g in gs:
        times.append(g.answered)
        top.append(max(g.json()["fence"], top[-1] if top else 0))
    for g in gs:
        fence = g.json()["fence"]
        for n in g.renews + ([g.release] if g.release is not None else []):
            if n.answered is None or n.status != 200 or n.stale_use:
                continue
            i = bisect.bisect_left(times, n.sent) - 1
            if i >= 0 and top[i] > fence:
                rep.stale_tokens.append((n, "%s answered 200 though fence %d was granted before it was sent"
                                         % (n.kind, top[i])))


def _segments(a, ttl):
    """When the holder of grant a may use it: [(start, end)], and the same
    with an unconfirmed release held to the end of the TTL. A renew
    answered 200 that was sent while the hold lasted moves its end to the
    renew's send + its ttl_ms; one sent after the end starts a new hold at
    its answer (a late 200 to a dead token: the checker sees whether it
    overlaps another's hold)."""
    start, end = a.answered, a.sent + ttl / 1000.0
    segs = []
    for n in a.renews:
        nt = n.json().get("ttl_ms") if n.answered is not None and n.status == 200 else None
        if not isinstance(nt, int):
            continue
        if n.sent < end:
            end = max(end, n.sent + nt / 1000.0)
        else:
            segs.append((start, end))
            start, end = n.answered, n.sent + nt / 1000.0
    lit = end
    rel = a.release
    if rel is not None and rel.answered is not None and rel.status == 200:
        end = lit = rel.sent
    elif rel is not None:
        end = min(end, rel.sent)
    return ([x for x in segs + [(start, end)] if x[1] > x[0]],
            [x for x in segs + [(start, lit)] if x[1] > x[0]])


def _check_renew(rep, r, stopped):
    rep.renews += 1
    if r.status == 200:
        j, a = r.json(), (r.acq.json() if r.acq is not None else {})
        if r.stale_use:
            rep.stale_tokens.append((r, "renew with a dead token answered 200"))
        elif not isinstance(j.get("ttl_ms"), int) or j.get("fence") != a.get("fence") or j.get("key") != r.key:
            rep.wrong.append((r, "renew 200 %r (the grant had fence %r)" % (r.body, a.get("fence"))))
        elif j["ttl_ms"] > r.ttl_ms:
            rep.stale.append((r, "ttl_ms %d above the %d asked for" % (j["ttl_ms"], r.ttl_ms)))
            rep.stale_why["ttl_ms above the request"] = rep.stale_why.get("ttl_ms above the request", 0) + 1
        elif not stopped and r.answered >= r.sent + j["ttl_ms"] / 1000.0:
            rep.stale.append((r, "renew 200 answered after send + ttl_ms"))
            rep.stale_why["renew after send + ttl_ms"] = rep.stale_why.get("renew after send + ttl_ms", 0) + 1
    elif (r.status, r.code()) not in ((404, "lock_not_found"), (409, "token_mismatch"), (503, "backend_unavailable")):
        rep.wrong.append((r, "renew: status %d %r" % (r.status, r.body)))


def _check_acquire(rep, r, clock_ms, holds, grants, literal, stopped=False):
    j = r.json()
    if r.status == 201:
        rep.grants += 1
        if rep.slowest_grant is None or r.answered - r.sent > rep.slowest_grant.answered - rep.slowest_grant.sent:
            rep.slowest_grant = r
        fence, ttl, exp = j.get("fence"), j.get("ttl_ms"), utc_seconds(j.get("expires_at"))
        if not (isinstance(fence, int) and isinstance(ttl, int) and exp is not None
                and isinstance(j.get("token"), str) and j.get("key") == r.key):
            rep.wrong.append((r, "malformed grant %r" % (r.body,)))
            return
        if fence <= 0 or fence >= 2 ** 53:
            rep.wrong.append((r, "fence %d outside 1..2^53" % fence))
        grants.setdefault(r.key, []).append(r)
        why = []  # (tag for the summary, detail)
        if ttl > r.ttl_ms:
            why.append(("ttl_ms above the request", "ttl_ms %d above the %d asked for" % (ttl, r.ttl_ms)))
        # a try-once's ttl_ms counts from its send; a waiter was tried last
        # at some moment before its wait ran out, and its ttl_ms is what
        # was left of the grant when lockd answered
        late = r.answered - (r.sent + ttl / 1000.0)
        if r.wait_ms:
            late = r.answered - (r.sent + (r.wait_ms + ttl) / 1000.0 + WAITER_TRANSIT)
        if late >= 0:
            why.append(("after send + ttl_ms", "answered %.0f ms after send + %sttl_ms"
                        % (late * 1000, "wait_ms + " if r.wait_ms else "")))
        if r.wall is not None and r.wall > exp + clock_ms / 1000.0:
            why.append(("after its expires_at", "answered %.0f ms after its own expires_at" % ((r.wall - exp) * 1000)))
        if stopped:  # the instance was stopped meanwhile: the answer may have been written before
            why = [w for w in why if w[0] == "ttl_ms above the request"]
        if why:
            rep.stale.append((r, "; ".join(w[1] for w in why)))
            for tag, _ in why:
                rep.stale_why[tag] = rep.stale_why.get(tag, 0) + 1
        segs, lits = _segments(r, ttl)
        holds.setdefault(r.key, []).extend((s, e, r) for s, e in segs)
        literal.setdefault(r.key, []).extend((s, e, r) for s, e in lits)
    elif r.status == 409:
        if r.code() != "lock_held":
            rep.wrong.append((r, "409 %r" % (r.body,)))
    elif r.status == 503:
        if r.code() != "backend_unavailable":
            rep.wrong.append((r, "503 %r" % (r.body,)))
    else:
        rep.wrong.append((r, "status %d %r" % (r.status, r.body)))


def _check_release(rep, r):
    if r.status == 200 and r.stale_use:
        rep.stale_tokens.append((r, "release with a dead token answered 200"))
    elif r.status == 200:
        if r.json().get("released") is not True:
            rep.wrong.append((r, "200 %r" % (r.body,)))
    elif r.status in (404, 409, 503):
        a = r.acq
        if r.status != 503 and a is not None and r.answered < a.sent + a.json().get("ttl_ms", 0) / 1000.0:
            rep.early_refusals += 1
    else:
        rep.wrong.append((r, "status %d %r" % (r.status, r.body)))


def _overlaps(hs, tol, out):
    """The number of overlapping pairs of holds hs (sorted by start); the
    first 100 go to out as (rec, rec, seconds)."""
    active, n = [], 0
    for h in hs:
        active = [a for a in active if a[1] > h[0]]
        for a in active:
            ov = min(a[1], h[1]) - h[0]
            if ov > tol:
                n += 1
                if len(out) < 100:
                    out.append((a[2], h[2], ov))
        active.append(h)
    return n


class FaultLoad:
    """threads client threads (worker i on instances[i % n]) on keys; each
    round picks a key at random, then with probability try_once a try-once
    acquire, else one with wait_ms; a grant is held hold_ms (a random range)
    then released, or with probability abandon (at most once per key every
    abandon_every seconds, so that keys are free most of the time) never
    released, left to its TTL. client_s: the
    HTTP client's timeout (a request with no answer by then is recorded
    unanswered)."""

    def __init__(self, instances, keys, threads=16, ttl_ms=2000, wait_ms=500, try_once=0.3,
                 abandon=0.05, abandon_every=6.0, hold_ms=(0, 15), client_s=10.0,
                 seed=None):
        self.instances, self.keys = list(instances), list(keys)
        self.nthreads, self.ttl_ms, self.wait_ms = threads, ttl_ms, wait_ms
        self.try_once, self.abandon, self.hold_ms = try_once, abandon, hold_ms
        self.client_s, self.abandon_every = client_s, abandon_every
        self.last_abandon = {}
        self.seed = seed if seed is not None else random.randrange(1 << 30)
        self.recs = []
        self.marks = []
        self.lock = threading.Lock()
        self.granted = threading.Condition(self.lock)
        self.last_grant = 0.0
        self.stopping = threading.Event()
        self.threads = []
        self.t0 = None

    def start(self):
        self.t0 = time.monotonic()
        for i in range(self.nthreads):
            t = threading.Thread(target=self._worker, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        """Stop and join the clients (at most client_s + 5 s); True if all
        of them ended."""
        self.stopping.set()
        deadline = time.monotonic() + self.client_s + 5
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)

    def mark(self, what):
        """Note a fault event at this moment (shown in the report)."""
        t = time.monotonic()
        with self.lock:
            self.marks.append((t, what))
        harness.log("     %+.3f s %s" % (t - self.t0, what))
        return t

    def wait_grant(self, timeout):
        """Block until a 201 arrives after this call; its answer time, or
        None after timeout."""
        since = time.monotonic()
        deadline = since + timeout
        with self.granted:
            while self.last_grant <= since:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.granted.wait(left)
            return self.last_grant

    def grants_after(self, t):
        with self.lock:
            return sum(1 for r in self.recs if r.kind == ACQUIRE and r.status == 201 and r.answered > t)

    def _client(self, inst):
        ld = self.instances[inst]
        return harness.Client(ld.port, host=getattr(ld, "host", "127.0.0.1"), timeout=self.client_s)

    def _request(self, c, rec, method, path, body, headers=None):
        """Send, fill rec; the (possibly new) client."""
        data = json.dumps(body).encode() if body is not None else None
        hdrs = dict(headers or {})
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        rec.sent = time.monotonic()
        try:
            c.conn.request(method, path, body=data, headers=hdrs)
            resp = c.conn.getresponse()
            raw = resp.read()
            rec.answered = time.monotonic()
            rec.wall = time.time()
            rec.status = resp.status
            try:
                rec.body = json.loads(raw.decode("utf-8", "replace")) if raw else None
            except ValueError:
                rec.body = raw[:200]
            if resp.getheader("connection", "").lower() == "close":
                c.close()
                c = self._client(rec.inst)
        except Exception as e:  # noqa: BLE001 - any failure is no answer
            rec.error = "%s after %.3f s" % (repr(e)[:200], time.monotonic() - rec.sent)
            c.close()
            c = self._client(rec.inst)
        with self.lock:
            self.recs.append(rec)
            if rec.kind == ACQUIRE and rec.status == 201:
                self.last_grant = rec.answered
                self.granted.notify_all()
        return c

    def _may_abandon(self, key):
        now = time.monotonic()
        with self.lock:
            # key i's first one 1 + 1.5 i s after the start: staggered
            first = self.t0 + 1.0 + 1.5 * self.keys.index(key)
            if now - self.last_abandon.get(key, first - self.abandon_every) < self.abandon_every:
                return False
            self.last_abandon[key] = now
            return True

    def _worker(self, i):
        rnd = random.Random(self.seed * 1000 + i)
        inst = i % len(self.instances)
        c = self._client(inst)
        try:
            while not self.stopping.is_set():
                key = rnd.choice(self.keys)
                wait = 0 if rnd.random() < self.try_once else self.wait_ms
                a = Rec(ACQUIRE, key, inst, i, ttl_ms=self.ttl_ms, wait_ms=wait)
                c = self._request(c, a, "POST", lock_path(key), {"ttl_ms": self.ttl_ms, "wait_ms": wait,
                                                                   "owner": "fault-%d" % i})
                if a.status == 201 and isinstance(a.body, dict) and "token" in a.body:
                    time.sleep(rnd.uniform(*self.hold_ms) / 1000.0)
                    if rnd.random() < self.abandon and self._may_abandon(key):
                        a.abandoned = True
                        continue
                    r = Rec(RELEASE, key, inst, i, acq=a)
                    a.release = r
                    c = self._request(c, r, "DELETE", lock_path(key), None, {"Lock-Token": a.body["token"]})
                elif a.status == 503 or a.answered is None:
                    time.sleep(0.02)
                elif a.status == 409 and wait == 0:
                    time.sleep(0.005)
        finally:
            c.close()

    def check(self, store_timeout_ms, slack_ms=300, **kw):
        with self.lock:
            recs = list(self.recs)
            marks = list(self.marks)
        return check_history(recs, store_timeout_ms, slack_ms, marks=marks, t0=self.t0, **kw)


STALE_MARGIN = 0.25  # s past a token's last possible expiry before it counts as dead


class ChaosLoad(FaultLoad):
    """FaultLoad with renewals and stale tokens, for the chaos suite. A
    grant is held (with probability long_p) for 1 to 2.5 renew periods
    (ttl_ms / 3), renewed each period (PUT) while it lasts; with
    probability stale_p a round instead sends a renew or a release with the
    token of one of the worker's earlier grants that is dead for sure:
    released with a 200, or past its last 200/201's answer + ttl_ms +
    STALE_MARGIN. A token any of whose requests was answered 503 or not at
    all is never used so (the store may have applied it later). Every
    request is a Rec (kind RENEW for renewals)."""

    def __init__(self, instances, keys, long_p=0.12, stale_p=0.08, **kw):
        super().__init__(instances, keys, **kw)
        self.long_p, self.stale_p = long_p, stale_p

    def _stale_use(self, c, rnd, i, inst, past):
        now = time.monotonic()
        dead = [a for a, at in past if at is not None and now > at]
        if not dead:
            return c, False
        a = rnd.choice(dead)
        kind = rnd.choice((RENEW, RELEASE))
        r = Rec(kind, a.key, inst, i, acq=a, ttl_ms=self.ttl_ms)
        r.stale_use = True
        method, body = ("PUT", {"ttl_ms": self.ttl_ms}) if kind == RENEW else ("DELETE", None)
        c = self._request(c, r, method, lock_path(a.key), body, {"Lock-Token": a.body["token"]})
        return c, True

    def _hold(self, c, rnd, i, inst, a):
        """Hold grant a: briefly, or renewing for a while. False if it was
        lost (a renew not answered 200)."""
        period = self.ttl_ms / 3000.0
        if rnd.random() >= self.long_p:
            time.sleep(rnd.uniform(*self.hold_ms) / 1000.0)
            return c, True
        end = time.monotonic() + rnd.uniform(1.0, 2.5) * period
        last = a.sent
        while not self.stopping.is_set():
            nxt = last + period
            if nxt >= end:
                time.sleep(max(0.0, end - time.monotonic()))
                return c, True
            time.sleep(max(0.0, nxt - time.monotonic()))
            n = Rec(RENEW, a.key, inst, i, acq=a, ttl_ms=self.ttl_ms)
            a.renews.append(n)
            c = self._request(c, n, "PUT", lock_path(a.key), {"ttl_ms": self.ttl_ms},
                              {"Lock-Token": a.body["token"]})
            if n.status != 200:
                return c, False
            last = n.sent
        return c, True

    @staticmethod
    def _dead_at(a):
        """When a's token is dead for sure (monotonic), or None if unknown."""
        reqs = [a] + a.renews + ([a.release] if a.release is not None else [])
        if any(q.answered is None or q.status == 503 for q in reqs):
            return None
        if a.release is not None and a.release.status == 200:
            return a.release.answered
        last = max(q.answered for q in reqs if q.status in (200, 201))
        return last + a.ttl_ms / 1000.0 + STALE_MARGIN

    def _worker(self, i):
        rnd = random.Random(self.seed * 1000 + i)
        inst = i % len(self.instances)
        c = self._client(inst)
        past = []  # (acquire Rec, dead at) of this worker's last released grants
        lapsed = []  # the same, of its last grants left to their TTL (abandoned or lost)
        try:
            while not self.stopping.is_set():
                if (past or lapsed) and rnd.random() < self.stale_p:
                    c, sent = self._stale_use(c, rnd, i, inst, past + lapsed)
                    if sent:
                        continue
                key = rnd.choice(self.keys)
                wait = 0 if rnd.random() < self.try_once else self.wait_ms
                a = Rec(ACQUIRE, key, inst, i, ttl_ms=self.ttl_ms, wait_ms=wait)
                c = self._request(c, a, "POST", lock_path(key), {"ttl_ms": self.ttl_ms, "wait_ms": wait,
                                                                   "owner": "chaos-%d" % i})
                if a.status == 201 and isinstance(a.body, dict) and "token" in a.body:
                    c, kept = self._hold(c, rnd, i, inst, a)
                    if kept and rnd.random() < self.abandon and self._may_abandon(key):
                        a.abandoned = True
                    elif kept:
                        r = Rec(RELEASE, key, inst, i, acq=a)
                        a.release = r
                        c = self._request(c, r, "DELETE", lock_path(key), None, {"Lock-Token": a.body["token"]})
                    if a.release is not None:
                        past = (past + [(a, self._dead_at(a))])[-2:]
                    else:
                        lapsed = (lapsed + [(a, self._dead_at(a))])[-2:]
                elif a.status == 503 or a.answered is None:
                    time.sleep(0.02)
                elif a.status == 409 and wait == 0:
                    time.sleep(0.005)
        finally:
            c.close()
