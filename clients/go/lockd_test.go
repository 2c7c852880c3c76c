// Tests of the client against a real lockd that each test starts itself:
// env LOCKD_BIN (skipped if unset) on a free 127.0.0.1 port, with
// --backend from env LOCKD_TEST_BACKEND (default memory://).
package lockd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// server is one lockd process the test owns; stop and start keep its port.
type server struct {
	t       *testing.T
	bin     string
	backend string
	addr    string
	args    []string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	bin := os.Getenv("LOCKD_BIN")
	if bin == "" {
		t.Skip("LOCKD_BIN is not set: these tests need a real lockd")
	}
	backend := os.Getenv("LOCKD_TEST_BACKEND")
	if backend == "" {
		backend = "memory://"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &server{t: t, bin: bin, backend: backend, addr: addr, args: args,
		logPath: filepath.Join(t.TempDir(), "lockd.log")}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("lockd log:\n%s", s.logTail())
		}
	})
	s.start()
	return s
}

func (s *server) persistent() bool { return !strings.HasPrefix(s.backend, "memory:") }

func (s *server) url() string { return "http://" + s.addr }

func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// start runs lockd and waits (at most 15 s) until /readyz answers 200.
func (s *server) start() {
	s.t.Helper()
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	argv := append([]string{"--listen", s.addr, "--backend", s.backend}, s.args...)
	s.cmd = exec.Command(s.bin, argv...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { cmd.Wait(); close(exited) }(s.cmd, s.exited)
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
		select {
		case <-s.exited:
			s.t.Fatalf("lockd exited at start:\n%s", s.logTail())
		default:
		}
		if r, err := http.Get(s.url() + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("lockd not ready on %s within 15 s:\n%s", s.addr, s.logTail())
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 10 s).
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

func (s *server) opts(ttl time.Duration) Options {
	return Options{URL: s.url(), TTL: ttl, RequestTimeout: 3 * time.Second}
}

// inspect is GET /locks/{key} by plain HTTP: the status and the body.
func (s *server) inspect(t *testing.T, key string) (int, map[string]interface{}) {
	t.Helper()
	return s.raw(t, http.MethodGet, key, "")
}

func (s *server) raw(t *testing.T, method, key, token string) (int, map[string]interface{}) {
	t.Helper()
	req, err := http.NewRequest(method, s.url()+"/locks/"+EscapeKey(key), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Lock-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, key, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var body map[string]interface{}
	json.Unmarshal(data, &body)
	return resp.StatusCode, body
}

func (s *server) expectHeld(t *testing.T, key string, fence int64) {
	t.Helper()
	status, body := s.inspect(t, key)
	if status != 200 || body["fence"] != float64(fence) {
		t.Fatalf("GET %s: %d %v, want 200 held with fence %d", key, status, body, fence)
	}
}

func (s *server) expectFree(t *testing.T, key string) {
	t.Helper()
	if status, body := s.inspect(t, key); status != 404 {
		t.Fatalf("GET %s: %d %v, want 404 (free)", key, status, body)
	}
}

var keySeq int64

// newKey is a key no other test or run uses (a persistent store outlives us).
func newKey(hint string) string {
	return fmt.Sprintf("go-test/%s/%d-%d-%d", hint, os.Getpid(), time.Now().UnixNano(),
		atomic.AddInt64(&keySeq, 1))
}

func acquire(t *testing.T, key string, o Options) *Lock {
	t.Helper()
	l, err := Acquire(context.Background(), key, o)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	return l
}

// lostWithin waits at most d for the lock to be lost; how long it took.
func lostWithin(t *testing.T, l *Lock, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-l.Lost():
	case <-time.After(d):
		t.Fatalf("lock %s not lost within %v (err %v)", l.Key(), d, l.Err())
	}
	if !errors.Is(l.Err(), ErrLost) || l.Context().Err() == nil {
		t.Fatalf("lost, but Err() = %v, Context().Err() = %v", l.Err(), l.Context().Err())
	}
	return time.Since(start)
}

func notLost(t *testing.T, l *Lock) {
	t.Helper()
	select {
	case <-l.Lost():
		t.Fatalf("lock %s lost: %v", l.Key(), l.Err())
	default:
	}
	if l.Err() != nil || l.Context().Err() != nil {
		t.Fatalf("held, but Err() = %v, Context().Err() = %v", l.Err(), l.Context().Err())
	}
}

// 1. A grant has a token and a fence; a second try-once acquire is held;
// fences strictly increase across grants.
func TestAcquireHeldAndFences(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("fences")
	var last int64
	for i := 0; i < 3; i++ {
		l := acquire(t, key, s.opts(5*time.Second))
		if len(l.Token()) != 32 || l.Fence() <= last || l.Fence() >= 1<<53 || l.Key() != key {
			t.Fatalf("grant %d: token %q fence %d (last %d) key %q", i, l.Token(), l.Fence(), last, l.Key())
		}
		if ttl := l.TTL(); ttl <= 0 || ttl > 5*time.Second {
			t.Fatalf("TTL() = %v", ttl)
		}
		last = l.Fence()
		start := time.Now()
		_, err := Acquire(context.Background(), key, s.opts(5*time.Second))
		var e *Error
		if !errors.Is(err, ErrHeld) || !errors.As(err, &e) || e.Status != 409 || e.Code != "lock_held" {
			t.Fatalf("second acquire: %v, want 409 lock_held", err)
		}
		if e.RetryAfter <= 0 || e.RetryAfter > 5*time.Second || time.Since(start) > time.Second {
			t.Fatalf("held: RetryAfter %v, answered after %v", e.RetryAfter, time.Since(start))
		}
		s.expectHeld(t, key, l.Fence())
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(l.Err(), ErrReleased) || l.Context().Err() == nil {
			t.Fatalf("released: Err() = %v, Context().Err() = %v", l.Err(), l.Context().Err())
		}
	}
}

// 2. A 1 s lock stays held through a 3 s body: renewed, same fence.
func TestRenewKeepsLockHeld(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("renew")
	l := acquire(t, key, s.opts(time.Second))
	defer l.Release(context.Background())
	select {
	case <-l.Context().Done():
		t.Fatalf("context ended during the body: %v", l.Err())
	case <-time.After(3 * time.Second):
	}
	notLost(t, l)
	s.expectHeld(t, key, l.Fence())
	if _, err := Acquire(context.Background(), key, s.opts(time.Second)); !errors.Is(err, ErrHeld) {
		t.Fatalf("acquire by another: %v, want held", err)
	}
}

// 3. Released from under the holder: lost within a renew interval, once.
func TestLostWhenReleasedUnderneath(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("underneath")
	var calls int32
	var reason atomic.Value
	o := s.opts(1500 * time.Millisecond)
	o.OnLost = func(r error) { reason.Store(r); atomic.AddInt32(&calls, 1) }
	l := acquire(t, key, o)
	if status, body := s.raw(t, http.MethodDelete, key, l.Token()); status != 200 {
		t.Fatalf("DELETE by plain HTTP: %d %v", status, body)
	}
	took := lostWithin(t, l, 500*time.Millisecond+400*time.Millisecond)
	var e *Error
	if !errors.As(l.Err(), &e) || e.Code != "lock_not_found" || !errors.As(l.LostReason(), &e) {
		t.Fatalf("lost after %v: Err() = %v, want it to wrap lock_not_found", took, l.Err())
	}
	time.Sleep(100 * time.Millisecond) /* OnLost runs after the signals */
	if r, _ := reason.Load().(error); atomic.LoadInt32(&calls) != 1 || !errors.Is(r, ErrLost) {
		t.Fatalf("OnLost called %d times, reason %v", calls, r)
	}
	if err := l.Release(context.Background()); !errors.Is(err, ErrLost) {
		t.Fatalf("Release after lost: %v, want the lost error", err)
	}
	time.Sleep(700 * time.Millisecond) /* no more renews, no second signal */
	if atomic.LoadInt32(&calls) != 1 {
		t.Fatalf("OnLost called %d times", calls)
	}
}

// 4a. lockd stopped and restarted on its port while the lock is held: on
// memory:// the lock is gone (lost); on a persistent store it survives.
func TestLockdRestartWhileHeld(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("restart")
	l := acquire(t, key, s.opts(5*time.Second))
	defer l.Release(context.Background())
	/* down across the first renew (due at 5/3 s): it meets a draining
	   lockd (503) or none (connection refused) and must keep trying */
	time.Sleep(1400 * time.Millisecond)
	s.stop()
	time.Sleep(time.Second)
	s.start()
	if !s.persistent() {
		took := lostWithin(t, l, 5*time.Second/3+time.Second+500*time.Millisecond)
		var e *Error
		if !errors.As(l.Err(), &e) || e.Status != 404 {
			t.Fatalf("lost after %v, but Err() = %v, want 404 lock_not_found", took, l.Err())
		}
		return
	}
	restarted := time.Now()
	for end := restarted.Add(3 * time.Second); !renewedSince(l, restarted); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no renew got through within 3 s of the restart (err %v)", l.Err())
		}
	}
	notLost(t, l)
	s.expectHeld(t, key, l.Fence())
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.expectFree(t, key)
}

// renewedSince says whether a renew of l was sent after t and succeeded.
func renewedSince(l *Lock, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline.Add(-l.ttl).After(t)
}

// 4b. lockd down longer than the TTL (any store): lost by the deadline, and
// not before the TTL left at the stop was nearly used up. An acquire made
// while it is down gets the lock once it is back.
func TestLockdDownPastTTL(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("down")
	ttl := time.Second
	l := acquire(t, key, s.opts(ttl))
	defer l.Release(context.Background())
	time.Sleep(500 * time.Millisecond)
	stopped := time.Now() /* no renew succeeds after this */
	s.stop()
	took := lostWithin(t, l, ttl+300*time.Millisecond-time.Since(stopped))
	took = time.Since(stopped)
	/* the last renew was at most ttl/3 before the stop, its ttl_ms <= ttl */
	if took < ttl-ttl/3-margin(ttl)-100*time.Millisecond {
		t.Fatalf("lost %v after lockd stopped: too early for a %v TTL", took, ttl)
	}
	if !errors.Is(l.Err(), ErrExpired) {
		t.Fatalf("Err() = %v, want ErrExpired", l.Err())
	}

	/* a waiting acquire while lockd is down retries until it is back */
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		o := s.opts(5 * time.Second)
		o.Wait = 5 * time.Second
		l, err := Acquire(context.Background(), key, o)
		got <- result{l, err}
	}()
	time.Sleep(500 * time.Millisecond)
	s.start()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("acquire across the restart: %v", r.err)
		}
		defer r.l.Release(context.Background())
		s.expectHeld(t, key, r.l.Fence())
	case <-time.After(5 * time.Second):
		t.Fatal("acquire across the restart: no answer within 5 s")
	}
}

// 5. Release on leaving the scope, normally and by a panic: the key is free.
func TestReleaseOnScopeExit(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("scope")
	var fence int64
	work := func(fail bool) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		l, err := Acquire(context.Background(), key, s.opts(10*time.Second))
		if err != nil {
			return err
		}
		defer l.Release(context.Background())
		fence = l.Fence()
		s.expectHeld(t, key, fence)
		if fail {
			panic("the body failed")
		}
		return nil
	}
	if err := work(false); err != nil {
		t.Fatal(err)
	}
	s.expectFree(t, key)
	if err := work(true); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("work(true) = %v", err)
	}
	s.expectFree(t, key)
}

// 6. A waiting acquire gets the lock when the holder releases; a 409
// carries Retry-After, and sleeping it gets the lock once the TTL passes.
func TestWaitAndRetryAfter(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("wait")
	holder := acquire(t, key, s.opts(10*time.Second))
	var released time.Time
	go func() {
		time.Sleep(400 * time.Millisecond)
		released = time.Now()
		holder.Release(context.Background())
	}()
	o := s.opts(5 * time.Second)
	o.Wait = 5 * time.Second
	start := time.Now()
	l := acquire(t, key, o)
	got := time.Now()
	if released.IsZero() || got.Before(released) || got.Sub(released) > time.Second {
		t.Fatalf("waiter granted %v after start, holder released at %v", got.Sub(start), released.Sub(start))
	}
	if l.Fence() <= holder.Fence() {
		t.Fatalf("waiter's fence %d <= holder's %d", l.Fence(), holder.Fence())
	}
	l.Release(context.Background())

	/* a holder that does not renew: its TTL passes */
	req, _ := http.NewRequest(http.MethodPost, s.url()+"/locks/"+EscapeKey(key)+"?ttl_ms=1200", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("plain acquire: %v %v", resp, err)
	}
	resp.Body.Close()
	_, err = Acquire(context.Background(), key, s.opts(5*time.Second))
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrHeld) || e.RetryAfter < 600*time.Millisecond || e.RetryAfter > 1200*time.Millisecond {
		t.Fatalf("try once: %v (RetryAfter %v), want held with ~1.2 s", err, e)
	}
	time.Sleep(e.RetryAfter + 50*time.Millisecond)
	l = acquire(t, key, s.opts(5*time.Second))
	l.Release(context.Background())
}

// 7. Two goroutines taking one key over and over never hold it at once.
func TestTwoHoldersNeverOverlap(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	key := newKey("overlap")
	var inside int32
	var mu sync.Mutex
	var fences []int64
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			o := s.opts(5 * time.Second)
			o.Wait = 10 * time.Second
			o.Owner = fmt.Sprintf("goroutine-%d", g)
			for i := 0; i < 8; i++ {
				l, err := Acquire(context.Background(), key, o)
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if n := atomic.AddInt32(&inside, 1); n != 1 {
					t.Errorf("goroutine %d: %d holders at once", g, n)
				}
				mu.Lock()
				fences = append(fences, l.Fence())
				mu.Unlock()
				time.Sleep(15 * time.Millisecond)
				atomic.AddInt32(&inside, -1)
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("goroutine %d: release: %v", g, err)
				}
			}
		}(g)
	}
	wg.Wait()
	if len(fences) != 16 {
		t.Fatalf("%d grants, want 16", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences not increasing in grant order: %v", fences)
		}
	}
}

// Options: a bearer token from the option or LOCKD_AUTH_TOKEN_FILE; a 401
// is not retried. Keys are percent-encoded byte by byte.
func TestAuthAndKeyEscaping(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret-token\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--auth-token-file", file)
	key := newKey("a b+ü%?#&")
	start := time.Now()
	_, err := Acquire(context.Background(), key, s.opts(5*time.Second))
	var e *Error
	if !errors.As(err, &e) || e.Status != 401 || e.Code != "unauthorized" || time.Since(start) > time.Second {
		t.Fatalf("without a token: %v after %v, want 401 unauthorized at once", err, time.Since(start))
	}
	o := s.opts(5 * time.Second)
	o.AuthToken = "s3cret-token"
	l := acquire(t, key, o)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCKD_AUTH_TOKEN_FILE", file)
	l = acquire(t, key, s.opts(5*time.Second))
	defer l.Release(context.Background())
	if l.Key() != key {
		t.Fatalf("Key() = %q, want %q", l.Key(), key)
	}
	if got, want := EscapeKey("orders/42 a+ü~._-"), "orders/42%20a%2B%C3%BC~._-"; got != want {
		t.Fatalf("EscapeKey = %q, want %q", got, want)
	}
	/* lockd decoded the path to exactly the key: GET with it names the lock */
	req, _ := http.NewRequest(http.MethodGet, s.url()+"/locks/"+EscapeKey(key), nil)
	req.Header.Set("Authorization", "Bearer s3cret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Key   string `json:"key"`
		Fence int64  `json:"fence"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body.Key != key || body.Fence != l.Fence() {
		t.Fatalf("GET: %d %+v, want held under key %q", resp.StatusCode, body, key)
	}
}
