// Package lockd is a small client for lockd, distributed locks as an
// HTTP/JSON service. It is one file on the standard library only: copy it
// into your module (it needs Go 1.19).
//
//	l, err := lockd.Acquire(ctx, "orders/42", lockd.Options{TTL: 15 * time.Second})
//	if err != nil { return err }          // errors.Is(err, lockd.ErrHeld): someone has it
//	defer l.Release(context.Background())
//	work(l.Context(), l.Fence())          // l.Context() ends when the lock is lost
//
// Acquire takes the lock (retrying transient failures under one
// Idempotency-Key), a goroutine renews it every third of its TTL, and
// Release gives it back. When the lock can no longer be proven held (lockd
// says it is gone, or no renew got through before the TTL ran out) it is
// lost: Context() is cancelled, Lost() is closed, Err() says why and
// Options.OnLost is called, exactly once.
package lockd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	defaultURL            = "http://127.0.0.1:8080"
	defaultTTL            = 15 * time.Second
	defaultRequestTimeout = 10 * time.Second
	minBackoff            = 100 * time.Millisecond
	maxBackoff            = time.Second
	releaseRetryFor       = 5 * time.Second       // how long Release retries a transient failure
	answerAllowance       = 20 * time.Millisecond // a waited grant's answer on its way back
	maxAnswerBytes        = 1 << 20
)

var (
	// ErrHeld matches (errors.Is) the *Error of an acquire that found the
	// lock held: 409 lock_held. Its RetryAfter says when the holder's TTL
	// passes, as lockd last saw it.
	ErrHeld = errors.New("lockd: the lock is held by someone else")
	// ErrLost matches what Err() and OnLost report once the lock is lost.
	ErrLost = errors.New("lockd: the lock was lost")
	// ErrExpired matches the cause of a loss when no renew got through
	// before the TTL (less a margin) ran out; it wraps the last failure.
	ErrExpired = errors.New("lockd: no renew got through before the TTL ran out")
	// ErrReleased is what Err() says after Release.
	ErrReleased = errors.New("lockd: the lock was released")
)

// Options for Acquire. The zero value takes a lock exclusively, trying
// once, with a 15 s TTL, from LOCKD_URL (else http://127.0.0.1:8080).
type Options struct {
	URL            string        // lockd's base URL; "": env LOCKD_URL, else http://127.0.0.1:8080
	TTL            time.Duration // the lock's TTL, renewed every TTL/3; 0: 15 s
	Wait           time.Duration // how long to wait for a held lock; 0: try once
	Owner          string        // a label inspection shows; "": none
	Mode           string        // "exclusive" or "shared"; "": lockd's default (exclusive)
	Limit          int           // shared only: at most this many holders; 0: no limit
	AuthToken      string        // bearer token; "": the first line of env LOCKD_AUTH_TOKEN_FILE, if set
	RequestTimeout time.Duration // per request, beyond Wait; 0: 10 s
	HTTPClient     *http.Client  // nil: http.DefaultClient
	// OnLost, if set, is called once, on the renewing goroutine, when the
	// lock is lost (never after Release); reason matches ErrLost.
	OnLost func(reason error)
}

// Error is an error answer from lockd (or a non-JSON one from something in
// between). Branch on Code, never on Message.
type Error struct {
	Status     int           // HTTP status, e.g. 409
	Code       string        // lockd's error code, e.g. "lock_held"; "" if the answer had none
	Message    string        // a sentence for people
	RetryAfter time.Duration // retry_after_ms, else the Retry-After header; 0: none
}

func (e *Error) Error() string {
	return fmt.Sprintf("lockd: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is makes errors.Is(err, ErrHeld) true for a 409 lock_held.
func (e *Error) Is(target error) bool {
	return target == ErrHeld && e.Code == "lock_held"
}

type lostError struct {
	key   string
	cause error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("lockd: lock %q lost: %v", e.key, e.cause)
}
func (e *lostError) Is(target error) bool { return target == ErrLost }
func (e *lostError) Unwrap() error        { return e.cause }

type expiredError struct{ last error }

func (e *expiredError) Error() string {
	if e.last == nil {
		return ErrExpired.Error()
	}
	return ErrExpired.Error() + " (last: " + e.last.Error() + ")"
}
func (e *expiredError) Is(target error) bool { return target == ErrExpired }
func (e *expiredError) Unwrap() error        { return e.last }

// Lock is a held lock. Its methods are safe for concurrent use.
type Lock struct {
	key    string
	token  string
	fence  int64
	c      *client
	ttlReq time.Duration // the TTL each renew asks for
	onLost func(error)

	ctx    context.Context // ends when lost or released
	cancel context.CancelFunc
	lost   chan struct{}      // closed when lost
	halt   context.Context    // ends when Release stops the renewer
	stop   context.CancelFunc // ends halt
	done   chan struct{}      // closed when the renewer has returned

	mu       sync.Mutex // guards the fields below
	ttl      time.Duration
	deadline time.Time // sent time of the last grant or renew + its ttl_ms
	err      error     // nil while held, then a *lostError or ErrReleased

	releaseOnce sync.Once
	releaseErr  error
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.key }

// Token is the grant's token: the proof of holding it. Keep it secret.
func (l *Lock) Token() string { return l.token }

// Fence is the grant's fencing token (< 2^53): pass it with every write to
// the resource the lock protects, and have the resource refuse lower ones.
func (l *Lock) Fence() int64 { return l.fence }

// TTL is the ttl_ms lockd last answered (what was left of the TTL then).
func (l *Lock) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Context is cancelled when the lock is lost or released. It is not derived
// from the ctx given to Acquire, which bounds the acquire only.
func (l *Lock) Context() context.Context { return l.ctx }

// Lost is closed when the lock is lost (not when it is released).
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lock is held; then an error matching ErrLost (and
// wrapping the cause: an *Error such as lock_not_found, or ErrExpired), or
// ErrReleased.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// LostReason is why the lock was lost (the cause Err wraps), or nil.
func (l *Lock) LostReason() error {
	var le *lostError
	if errors.As(l.Err(), &le) {
		return le.cause
	}
	return nil
}

// Acquire takes the lock on key. It retries 503, 429, connection errors and
// timeouts with the same Idempotency-Key, sleeping Retry-After or a backoff,
// while opts.Wait (or, trying once, the request timeout) allows, and never
// past ctx. A held lock gives an *Error matching ErrHeld; 400, 401, 403 and
// 409 limit_mismatch give an *Error at once.
func Acquire(ctx context.Context, key string, opts Options) (*Lock, error) {
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	if ttl < time.Millisecond || opts.Wait < 0 {
		return nil, errors.New("lockd: TTL must be at least 1 ms and Wait not negative")
	}
	idem, err := newUUID()
	if err != nil {
		return nil, err
	}
	body := map[string]interface{}{"ttl_ms": ttl.Milliseconds()}
	if opts.Owner != "" {
		body["owner"] = opts.Owner
	}
	if opts.Mode != "" {
		body["mode"] = opts.Mode
	}
	if opts.Limit != 0 {
		body["limit"] = opts.Limit
	}
	until := time.Now().Add(c.timeout)
	if opts.Wait > 0 {
		until = time.Now().Add(opts.Wait)
	}
	hdr := map[string]string{"Idempotency-Key": idem}
	backoff := minBackoff
	for {
		wait := time.Duration(0)
		if opts.Wait > 0 && time.Until(until) > 0 {
			wait = time.Until(until).Truncate(time.Millisecond)
		}
		body["wait_ms"] = wait.Milliseconds()
		sent := time.Now()
		a, err := c.do(ctx, http.MethodPost, key, hdr, body, wait+c.timeout)
		if err == nil && (a.status == 201 || a.status == 200) { /* even if ctx just ended */
			base := sent
			if wait > 0 { /* granted at an unseen moment of the wait */
				if r := time.Now().Add(-answerAllowance); r.After(base) {
					base = r
				}
			}
			return newLock(c, key, ttl, opts.OnLost, a, base)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil && !transient(a.status) {
			return nil, answerError(a)
		}
		last := err
		if err == nil {
			last = answerError(a)
		}
		d := retryDelay(a, backoff)
		backoff = grow(backoff)
		if time.Now().Add(d).After(until) {
			return nil, last
		}
		if !sleep(ctx, d) {
			return nil, ctx.Err()
		}
	}
}

// Release gives the lock back (DELETE with its token) and stops renewing;
// Context() ends. Only the first call does anything; later ones return its
// result. A transient failure is retried for a few seconds (a retry that
// finds the lock gone is done). A lost lock is not released: Release
// returns Err(). Call it with defer right after Acquire.
func (l *Lock) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() { l.releaseErr = l.release(ctx) })
	return l.releaseErr
}

func (l *Lock) release(ctx context.Context) error {
	l.stop()
	<-l.done
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.err = ErrReleased
	l.mu.Unlock()
	l.cancel()
	if ctx == nil {
		ctx = context.Background()
	}
	hdr := map[string]string{"Lock-Token": l.token}
	until := time.Now().Add(releaseRetryFor)
	backoff := minBackoff
	retry := false
	for {
		a, err := l.c.do(ctx, http.MethodDelete, l.key, hdr, nil, minDur(l.c.timeout, time.Until(until)))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			gone := a.status == 404 || a.status == 409
			if a.status == 200 || (retry && gone) {
				return nil /* a retry that finds it gone: the first try freed it */
			}
			if !transient(a.status) {
				return answerError(a)
			}
			err = answerError(a)
		}
		d := retryDelay(a, backoff)
		backoff = grow(backoff)
		if time.Now().Add(d).After(until) {
			return err
		}
		if !sleep(ctx, d) {
			return ctx.Err()
		}
		retry = true
	}
}

func newLock(c *client, key string, ttlReq time.Duration, onLost func(error), a *answer, base time.Time) (*Lock, error) {
	g, err := parseGrant(a.body)
	if err != nil {
		return nil, err
	}
	l := &Lock{key: key, token: g.Token, fence: g.Fence, c: c, ttlReq: ttlReq, onLost: onLost,
		lost: make(chan struct{}), done: make(chan struct{}),
		ttl: msDur(g.TTLms), deadline: base.Add(msDur(g.TTLms))}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.halt, l.stop = context.WithCancel(context.Background())
	go func() {
		lost := l.renew()
		close(l.done)
		if lost != nil && l.onLost != nil {
			l.onLost(lost) /* after done: OnLost may call Release */
		}
	}()
	return l, nil
}

// renew renews the lock every ttl/3 until Release stops it (nil) or the
// lock is lost (the error, after the lost signals are set).
func (l *Lock) renew() error {
	l.mu.Lock()
	ttl, deadline := l.ttl, l.deadline
	l.mu.Unlock()
	next := deadline.Add(-ttl + ttl/3)
	backoff := minBackoff
	var last error
	body := map[string]interface{}{"ttl_ms": l.ttlReq.Milliseconds()}
	hdr := map[string]string{"Lock-Token": l.token}
	for {
		/* past deadline - margin the lock may pass any moment: lost */
		edge := deadline.Add(-margin(ttl))
		if next.After(edge) {
			next = edge
		}
		if !sleep(l.halt, time.Until(next)) {
			return nil
		}
		left := time.Until(edge)
		if left <= 0 {
			return l.lose(&expiredError{last})
		}
		sent := time.Now()
		a, err := l.c.do(l.halt, http.MethodPut, l.key, hdr, body, minDur(l.c.timeout, left))
		if l.halt.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			last = err
		case a.status == 404 || a.status == 409:
			return l.lose(answerError(a))
		case a.status == 200:
			g, perr := parseGrant(a.body)
			if perr == nil {
				ttl, deadline = msDur(g.TTLms), sent.Add(msDur(g.TTLms))
				l.mu.Lock()
				l.ttl, l.deadline = ttl, deadline
				l.mu.Unlock()
				next, backoff, last = sent.Add(ttl/3), minBackoff, nil
				continue
			}
			last = perr
		default: /* 503, 429, 5xx, or anything else: try again until the edge */
			last = answerError(a)
		}
		next = time.Now().Add(retryDelay(a, backoff))
		backoff = grow(backoff)
	}
}

func (l *Lock) lose(cause error) error {
	err := &lostError{key: l.key, cause: cause}
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	l.cancel() /* first: whoever sees Lost() closed finds Context() ended */
	close(l.lost)
	return err
}

// margin is how long before its deadline a lock counts as lost.
func margin(ttl time.Duration) time.Duration {
	if m := ttl / 10; m > 50*time.Millisecond {
		return m
	}
	return 50 * time.Millisecond
}

type grant struct {
	Token string `json:"token"`
	Fence int64  `json:"fence"`
	TTLms int64  `json:"ttl_ms"`
}

func parseGrant(body []byte) (*grant, error) {
	var g grant
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, fmt.Errorf("lockd: unreadable grant: %w", err)
	}
	if g.Token == "" || g.Fence <= 0 || g.TTLms <= 0 {
		return nil, fmt.Errorf("lockd: incomplete grant: %.200s", body)
	}
	return &g, nil
}

type client struct {
	base    string // lockd's URL, no trailing '/'
	auth    string // bearer token, or ""
	hc      *http.Client
	timeout time.Duration
}

func newClient(o Options) (*client, error) {
	c := &client{base: o.URL, auth: o.AuthToken, hc: o.HTTPClient, timeout: o.RequestTimeout}
	if c.base == "" {
		c.base = os.Getenv("LOCKD_URL")
	}
	if c.base == "" {
		c.base = defaultURL
	}
	c.base = strings.TrimRight(c.base, "/")
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	if c.timeout <= 0 {
		c.timeout = defaultRequestTimeout
	}
	if path := os.Getenv("LOCKD_AUTH_TOKEN_FILE"); c.auth == "" && path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("lockd: LOCKD_AUTH_TOKEN_FILE: %w", err)
		}
		c.auth = string(data)
		if i := strings.IndexAny(c.auth, "\r\n"); i >= 0 {
			c.auth = c.auth[:i]
		}
		if c.auth == "" {
			return nil, fmt.Errorf("lockd: LOCKD_AUTH_TOKEN_FILE %s: the first line is empty", path)
		}
	}
	return c, nil
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request to /locks/{key}; body, if not nil, goes as JSON.
func (c *client) do(ctx context.Context, method, key string, hdr map[string]string,
	body interface{}, timeout time.Duration) (*answer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/locks/"+EscapeKey(key), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.auth != "" {
		req.Header.Set("Authorization", "Bearer "+c.auth)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, err
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// EscapeKey percent-encodes a key for the path: every byte but A-Z a-z 0-9
// - . _ ~ and '/' becomes %XX ("a b" -> "a%20b"; UTF-8 byte by byte).
func EscapeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		ch := key[i]
		switch {
		case ch >= 'A' && ch <= 'Z', ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9',
			ch == '-', ch == '.', ch == '_', ch == '~', ch == '/':
			b.WriteByte(ch)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[ch>>4])
			b.WriteByte(hex[ch&15])
		}
	}
	return b.String()
}

func transient(status int) bool {
	return status == 429 || status == 502 || status == 503 || status == 504
}

func answerError(a *answer) *Error {
	var wire struct {
		Error struct {
			Code         string `json:"code"`
			Message      string `json:"message"`
			RetryAfterMs *int64 `json:"retry_after_ms"`
		} `json:"error"`
	}
	e := &Error{Status: a.status}
	if json.Unmarshal(a.body, &wire) == nil && wire.Error.Code != "" {
		e.Code, e.Message = wire.Error.Code, wire.Error.Message
	} else {
		e.Message = fmt.Sprintf("%s: %.200s", http.StatusText(a.status), a.body)
	}
	if ms := wire.Error.RetryAfterMs; ms != nil && *ms > 0 {
		e.RetryAfter = msDur(*ms)
	} else if s, err := strconv.Atoi(a.header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// retryDelay is the answer's Retry-After, if it has one, else backoff.
func retryDelay(a *answer, backoff time.Duration) time.Duration {
	if a != nil {
		if d := answerError(a).RetryAfter; d > 0 {
			return d
		}
	}
	return backoff
}

func grow(backoff time.Duration) time.Duration {
	return minDur(2*backoff, maxBackoff)
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40 /* version 4 */
	b[8] = b[8]&0x3f | 0x80 /* RFC 4122 variant */
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

func msDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
