/*
 * clients/node/test/lockd.test.mjs - the Node.js helper against a real
 * lockd it starts itself: LOCKD_BIN on free 127.0.0.1 ports, --backend from
 * LOCKD_TEST_BACKEND (default memory://). Every test skips when LOCKD_BIN
 * is unset. Tests that stop lockd get a lockd of their own. They run one
 * after the other: run at once they took 4 s instead of 10, but a busy
 * 2-core machine then stalled this process past a 1 s TTL now and then.
 * lockd's output goes to LOCKD_TEST_LOGDIR, which is kept (by default to a
 * temp dir removed at the end).
 *
 *   LOCKD_BIN=build/lockd node --test clients/node/test/
 */

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

import { acquire, withLock, LockdError, LockHeldError, LockLostError } from "../lockd.mjs";

const BIN = process.env.LOCKD_BIN;
const BACKEND = process.env.LOCKD_TEST_BACKEND || "memory://";
const PERSISTENT = !BACKEND.startsWith("memory:");
const LOGDIR = process.env.LOCKD_TEST_LOGDIR || path.join(os.tmpdir(), `lockd-node-test-${process.pid}`);
const SLACK_MS = 400; /* for timers and a busy CI machine */

const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let seq = 0;
/** A key no other run uses: a persistent store outlives this process. */
function newKey(hint) {
  seq += 1;
  return `node-${hint}-${process.pid}-${Date.now()}-${seq}`;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const servers = new Set();
process.on("exit", () => {
  for (const s of servers) s.proc?.kill("SIGKILL");
});

/** One lockd process on a fixed port; start() again after stop() restarts it there. */
class Lockd {
  constructor(port, args = []) {
    this.port = port;
    this.args = args; /* more flags for lockd */
    this.url = `http://127.0.0.1:${port}`;
    this.log = path.join(LOGDIR, `lockd-${port}.log`);
    this.proc = null;
  }

  static async start() {
    return new Lockd(await freePort()).start();
  }

  async start() {
    fs.mkdirSync(LOGDIR, { recursive: true });
    const fd = fs.openSync(this.log, "a");
    const args = ["--listen", `127.0.0.1:${this.port}`, "--backend", BACKEND, ...this.args];
    this.proc = spawn(BIN, args, { stdio: ["ignore", fd, fd] });
    fs.closeSync(fd);
    servers.add(this);
    const proc = this.proc;
    this.exited = new Promise((resolve) => proc.once("exit", resolve));
    const end = now() + 15000;
    while (now() < end) {
      const res = await http(this.url, "GET", "/healthz", { timeoutMs: 500 }).catch(() => null);
      if (res?.status === 200) return this;
      if (proc.exitCode !== null) break;
      await sleep(50);
    }
    await this.stop();
    throw new Error(`lockd did not start on ${this.port}: ${this.tail()}`);
  }

  /** SIGTERM, and SIGKILL if it has not exited within 10 s. */
  async stop() {
    const proc = this.proc;
    if (!proc) return;
    this.proc = null;
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 10000);
      await this.exited;
      clearTimeout(timer);
    }
    servers.delete(this);
  }

  tail() {
    try {
      return fs.readFileSync(this.log, "utf8").slice(-2000);
    } catch {
      return "";
    }
  }
}

/** A plain HTTP request, not through the helper: {status, json}. */
async function http(base, method, p, { headers, timeoutMs = 5000 } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const res = await fetch(base + p, { method, headers, signal: ctl.signal });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  } finally {
    clearTimeout(timer);
  }
}

/* Every lock a test takes, released after all (a failed test's renewer must not keep us alive). */
const locks = [];
async function take(key, opts) {
  const lock = await acquire(key, opts);
  locks.push(lock);
  return lock;
}

/** Resolves to the time lock.signal aborted. */
function whenLost(lock) {
  return new Promise((resolve) => {
    if (lock.signal.aborted) resolve(now());
    else lock.signal.addEventListener("abort", () => resolve(now()), { once: true });
  });
}

async function within(promise, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

let shared = null; /* the lockd of the tests that do not stop it */
const own = {}; /* a lockd for each test that stops or configures it */
const TOKEN_FILE = path.join(LOGDIR, `token-${process.pid}`);

describe(`lockd client (${BACKEND})`, () => {
  /* Every lockd starts before the tests do, and a first lock warms up
   * fetch (loaded on first use), so no test's timing pays for start-ups. */
  before(async () => {
    if (!BIN) return;
    fs.mkdirSync(LOGDIR, { recursive: true });
    fs.writeFileSync(TOKEN_FILE, "s3cret-token\nignored\n");
    shared = await Lockd.start();
    for (const name of ["restart", "down", "retry"]) own[name] = await Lockd.start();
    own.auth = await new Lockd(await freePort(), ["--auth-token-file", TOKEN_FILE]).start();
    await withLock(newKey("warm-up"), { url: shared.url }, async () => {});
  });

  after(async () => {
    await Promise.allSettled(locks.map((l) => l.release()));
    for (const s of [...servers]) await s.stop();
    if (!process.env.LOCKD_TEST_LOGDIR) fs.rmSync(LOGDIR, { recursive: true, force: true });
  });

  /* it() that skips without LOCKD_BIN; each test is bounded in time. */
  const test = (name, fn) =>
    it(name, { timeout: 30000 }, async (t) => {
      if (!BIN) {
        t.skip("LOCKD_BIN is not set");
        return;
      }
      await fn(t);
    });

  test("1. acquire gives token and fence; a second is held; fences increase", async () => {
    const url = shared.url;
    const key = newKey("grant") + "/a b/é?x#%25";
    const first = await take(key, { url, ttlMs: 5000 });
    assert.match(first.token, /^[0-9a-f]{32}$/);
    assert.ok(Number.isSafeInteger(first.fence) && first.fence > 0);
    assert.equal(first.key, key);
    assert.ok(first.ttlMs > 0 && first.ttlMs <= 5000);
    /* the key went over the wire percent-encoded byte by byte */
    const seen = await http(url, "GET", "/locks/" + key.replace(" ", "%20").replace("é", "%C3%A9").replace("?x#%25", "%3Fx%23%2525"));
    assert.equal(seen.status, 200);
    assert.equal(seen.json.fence, first.fence);

    await assert.rejects(acquire(key, { url }), (err) => {
      assert.ok(err instanceof LockHeldError);
      assert.equal(err.status, 409);
      assert.equal(err.code, "lock_held");
      return true;
    });
    assert.equal(await first.release(), true);
    const second = await take(key, { url });
    assert.ok(second.fence > first.fence, `${second.fence} > ${first.fence}`);
    await second.release();
    const third = await take(key, { url });
    assert.ok(third.fence > second.fence, `${third.fence} > ${second.fence}`);
    await third.release();
  });

  test("1b. refusals carry lockd's code and are not retried", async () => {
    const url = shared.url;
    const key = newKey("refused");
    const sem = await take(key, { url, mode: "shared", limit: 2 });
    await assert.rejects(acquire(key, { url, mode: "shared", limit: 3 }), (err) => {
      assert.ok(err instanceof LockdError && !(err instanceof LockHeldError));
      assert.equal(err.code, "limit_mismatch");
      return true;
    });
    await assert.rejects(acquire(newKey("bad"), { url, limit: 2 }), { status: 400, code: "invalid_parameter" });
    await sem.release();
  });

  test("2. a 1 s lock stays held through a 3 s body", async () => {
    const url = shared.url;
    const key = newKey("renew");
    const [lock, seen] = await withLock(key, { url, ttlMs: 1000 }, async (l) => {
      await sleep(3000);
      return [l, await http(url, "GET", "/locks/" + key)];
    });
    assert.equal(seen.status, 200, `GET after 3 s: ${seen.status}; ${lock.signal.reason ?? "not lost"}`);
    assert.equal(seen.json.fence, lock.fence);
    assert.equal(lock.lost, false);
    assert.equal(lock.signal.aborted, false);
    assert.equal((await http(url, "GET", "/locks/" + key)).status, 404);
  });

  test("3. released from under the holder: lost within one renew interval", async () => {
    const url = shared.url;
    const key = newKey("stolen");
    const reasons = [];
    const lock = await take(key, { url, ttlMs: 1500, onLost: (r) => reasons.push(r) });
    const lost = whenLost(lock);
    const del = await http(url, "DELETE", "/locks/" + key, { headers: { "Lock-Token": lock.token } });
    assert.equal(del.status, 200);
    const t0 = now();
    const at = await within(lost, 500 + SLACK_MS, "lost after the DELETE");
    assert.ok(at - t0 <= 500 + SLACK_MS);
    assert.equal(lock.lost, true);
    assert.ok(lock.signal.reason instanceof LockLostError, String(lock.signal.reason));
    assert.match(lock.signal.reason.message, /lock_not_found/);
    assert.deepEqual(reasons, [lock.signal.reason]);

    /* lost means no release: it must not free the next holder's lock */
    const next = await take(key, { url });
    assert.equal(await lock.release(), false);
    const seen = await http(url, "GET", "/locks/" + key);
    assert.equal(seen.status, 200);
    assert.equal(seen.json.fence, next.fence);
    await next.release();
    await sleep(300);
    assert.equal(reasons.length, 1);
  });

  test("4. lockd restarted on the same port while held", async () => {
    const ld = own.restart;
    const key = newKey("restart");
    const ttlMs = PERSISTENT ? 5000 : 1500;
    const lock = await take(key, { url: ld.url, ttlMs });
    await sleep(300);
    await ld.stop();
    if (PERSISTENT) await sleep(1000);
    await ld.start();
    const restarted = now();
    if (!PERSISTENT) {
      /* memory://: the lock died with the process; the next renew says so */
      await within(whenLost(lock), ttlMs / 3 + SLACK_MS, "lost after a restart of memory://");
      assert.match(lock.signal.reason.message, /lock_not_found/);
    } else {
      /* the store kept it: renewing resumes. ttl_ms > 3 s two seconds on
       * proves a renew after the restart (without one it would be < 2 s). */
      await sleep(2000 - (now() - restarted));
      const seen = await http(ld.url, "GET", "/locks/" + key);
      assert.equal(seen.status, 200);
      assert.equal(seen.json.fence, lock.fence);
      assert.ok(seen.json.ttl_ms > 3000, `ttl_ms ${seen.json.ttl_ms} after the restart`);
      assert.equal(lock.lost, false);
      assert.equal(await lock.release(), true);
    }
    await ld.stop();
  });

  test("4b. lockd down longer than the TTL: lost by the deadline, not before", async () => {
    const ld = own.down;
    const ttlMs = 1500;
    const lock = await take(newKey("down"), { url: ld.url, ttlMs });
    const lost = whenLost(lock);
    await sleep(200);
    const stopped = now();
    await ld.stop();
    const at = await within(lost, ttlMs + SLACK_MS, "lost with lockd down");
    /* the last renew was at most ttl/3 before the stop; loss comes at its deadline less the margin */
    assert.ok(at - stopped >= ttlMs - ttlMs / 3 - ttlMs / 10 - 100, `lost ${at - stopped} ms after the stop`);
    assert.match(lock.signal.reason.message, /TTL ran out/);
    assert.equal(await within(lock.release(), 100, "release of a lost lock"), false);
  });

  test("4c. an acquire retries through a restart under one Idempotency-Key", async () => {
    const ld = own.retry;
    await ld.stop();
    const pending = acquire(newKey("retry"), { url: ld.url, requestTimeoutMs: 5000 });
    await sleep(400);
    await ld.start();
    const lock = await within(pending, 3000, "acquire after the restart");
    locks.push(lock);
    assert.equal(await lock.release(), true);
    await ld.stop();
  });

  test("5. withLock releases on the way out, also when the body throws", async () => {
    const url = shared.url;
    const key = newKey("scope");
    const fence = await withLock(key, { url }, async (lock) => {
      assert.equal((await http(url, "GET", "/locks/" + key)).status, 200);
      return lock.fence;
    });
    assert.ok(fence > 0);
    assert.equal((await http(url, "GET", "/locks/" + key)).status, 404);

    const boom = new Error("boom");
    await assert.rejects(
      withLock(key, { url }, async () => {
        throw boom;
      }),
      (err) => err === boom,
    );
    assert.equal((await http(url, "GET", "/locks/" + key)).status, 404);

    const lock = await take(key, { url });
    try {
      assert.equal((await http(url, "GET", "/locks/" + key)).status, 200);
    } finally {
      await lock.release();
    }
    assert.equal((await http(url, "GET", "/locks/" + key)).status, 404);
    assert.equal(await lock.release(), true); /* once: the same answer again */
  });

  test("6. a waiting acquire gets the lock when the holder releases", async () => {
    const url = shared.url;
    const key = newKey("wait");
    const holder = await take(key, { url, ttlMs: 10000 });
    let got = null;
    const waiting = take(key, { url, waitMs: 5000 }).then((l) => (got = l));
    await sleep(300);
    assert.equal(got, null);
    await holder.release();
    const t0 = now();
    const lock = await within(waiting, 1000, "waiter granted after the release");
    assert.ok(now() - t0 < 1000);
    assert.ok(lock.fence > holder.fence);
    await lock.release();
  });

  test("6b. a 409 carries Retry-After; a short wait runs out in time", async () => {
    const url = shared.url;
    const key = newKey("held");
    const holder = await take(key, { url, ttlMs: 4000 });
    await assert.rejects(acquire(key, { url }), (err) => {
      assert.ok(err instanceof LockHeldError);
      assert.ok(err.retryAfterMs > 2000 && err.retryAfterMs <= 4000, `retryAfterMs ${err.retryAfterMs}`);
      return true;
    });
    const t0 = now();
    await assert.rejects(acquire(key, { url, waitMs: 300 }), LockHeldError);
    const took = now() - t0;
    assert.ok(took >= 250 && took < 300 + SLACK_MS + 500, `a 300 ms wait took ${took} ms`);
    /* the caller's signal gives up a waiting acquire */
    const ctl = new AbortController();
    const t1 = now();
    setTimeout(() => ctl.abort(new Error("enough")), 200);
    await assert.rejects(acquire(key, { url, waitMs: 5000, signal: ctl.signal }), { message: "enough" });
    assert.ok(now() - t1 < 200 + SLACK_MS, `aborted after ${now() - t1} ms`);
    await holder.release();
  });

  test("7. two holders on one key never overlap", async () => {
    const url = shared.url;
    const key = newKey("mutex");
    let inside = 0;
    const fences = [];
    const worker = async () => {
      for (let i = 0; i < 5; i++) {
        await withLock(key, { url, ttlMs: 2000, waitMs: 5000 }, async (lock) => {
          inside += 1;
          assert.equal(inside, 1, "two holders at once");
          fences.push(lock.fence);
          await sleep(20);
          inside -= 1;
        });
      }
    };
    await Promise.all([worker(), worker(), worker()]);
    assert.equal(fences.length, 15);
    for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], `fences ${fences}`);
  });

  test("8. nothing of the helper keeps a process alive after release or loss", async () => {
    const url = JSON.stringify(shared.url);
    /* a's renew would be due in 10 s, b's in 300 ms: b is lost then (404) */
    const script = `
      import { acquire } from ${JSON.stringify(new URL("../lockd.mjs", import.meta.url).href)};
      const key = process.argv[1];
      const a = await acquire(key, { url: ${url}, ttlMs: 30000 });
      await a.release();
      const b = await acquire(key, { url: ${url}, ttlMs: 900 });
      b.signal.addEventListener("abort", () => console.log("lost"));
      await fetch(${url} + "/locks/" + key, { method: "DELETE", headers: { "Lock-Token": b.token } });`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script, newKey("exit")], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    const exited = new Promise((resolve) => child.once("exit", resolve));
    try {
      assert.equal(await within(exited, 3000, "the child's exit"), 0);
      assert.equal(out.trim(), "lost");
    } finally {
      child.kill("SIGKILL");
    }
  });

  test("auth: the bearer token from the option or LOCKD_AUTH_TOKEN_FILE", async () => {
    const ld = own.auth;
    const key = newKey("auth");
    await assert.rejects(acquire(key, { url: ld.url }), { status: 401, code: "unauthorized" });
    const a = await take(key, { url: ld.url, authToken: "s3cret-token", ttlMs: 1500 });
    await sleep(a.ttlMs / 3 + 200); /* a renew carries it too */
    assert.equal(a.lost, false);
    assert.equal(await a.release(), true);
    const saved = process.env.LOCKD_AUTH_TOKEN_FILE;
    process.env.LOCKD_AUTH_TOKEN_FILE = TOKEN_FILE;
    const pending = take(key, { url: ld.url }); /* reads the file before its first await */
    if (saved === undefined) delete process.env.LOCKD_AUTH_TOKEN_FILE;
    else process.env.LOCKD_AUTH_TOKEN_FILE = saved;
    assert.equal(await (await pending).release(), true);
    await ld.stop();
  });
});
