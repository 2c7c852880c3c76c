/*
 * clients/node/lockd.mjs - a lockd lock for Node.js programs: acquire it,
 * keep it renewed in the background, learn at once when it is lost, release
 * it on the way out. Built-in fetch and AbortController only; runs on
 * Node 18.13 and later (so no AbortSignal.any).
 *
 *   const lock = await acquire("orders/42", { ttlMs: 15000 });
 *   try { await work(lock.fence, lock.signal); } finally { await lock.release(); }
 */

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";

const DEFAULT_URL = "http://127.0.0.1:8080";
const DEFAULT_TTL_MS = 15000;
const DEFAULT_REQUEST_TIMEOUT_MS = 10000;
const BACKOFF_FIRST_MS = 100;
const BACKOFF_MAX_MS = 1000;
const RELEASE_BUDGET_MS = 5000; /* a failing release gives up after this; the TTL ends it anyway */
const ANSWER_WAY_MS = 20; /* allowed for a waited grant's answer to reach us */

/** An error lockd answered (status, code, message), or a request that failed. */
export class LockdError extends Error {
  constructor(message, { status = 0, code = "", retryAfterMs = 0, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "LockdError";
    this.status = status; /* HTTP status; 0 when no answer came */
    this.code = code; /* lockd's error code, e.g. "limit_mismatch"; "" when none */
    this.retryAfterMs = retryAfterMs; /* from the answer, 0 when it gave none */
  }
}

/** 409 lock_held: someone else holds the key; retryAfterMs says how long, as lockd last saw it. */
export class LockHeldError extends LockdError {
  constructor(message, opts) {
    super(message, opts);
    this.name = "LockHeldError";
  }
}

/** Why a held lock was lost: lock.signal.reason and the onLost argument. */
export class LockLostError extends LockdError {
  constructor(message, opts) {
    super(message, { code: "lock_lost", ...opts });
    this.name = "LockLostError";
  }
}

const now = () => performance.now();

/** Every byte but the unreserved ones and '/' as %XX, so "orders/42" stays readable. */
export function encodeKey(key) {
  let out = "";
  for (const b of Buffer.from(String(key), "utf8")) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9\-._~/]/.test(c) ? c : "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

function readTokenFile() {
  const path = process.env.LOCKD_AUTH_TOKEN_FILE;
  if (!path) return undefined;
  return readFileSync(path, "utf8").split(/\r?\n/, 1)[0];
}

/* Resolves after ms, or at once (rejecting with its reason) when signal aborts. */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/* Retry-After (whole seconds) or the error's retry_after_ms, in ms; 0 if none. */
function retryAfterOf(res) {
  const ms = res.json?.error?.retry_after_ms;
  if (Number.isInteger(ms) && ms > 0) return ms;
  const s = Number(res.headers?.get("retry-after"));
  return Number.isFinite(s) && s > 0 ? s * 1000 : 0;
}

function errorOf(res, what) {
  const e = res.json?.error ?? {};
  const code = typeof e.code === "string" ? e.code : "";
  const msg = `${what}: ${res.status}${code ? " " + code : ""}${e.message ? ": " + e.message : ""}`;
  const opts = { status: res.status, code, retryAfterMs: retryAfterOf(res) };
  return code === "lock_held" ? new LockHeldError(msg, opts) : new LockdError(msg, opts);
}

/*
 * One HTTP request with its own timeout; also aborted when stop aborts.
 * Resolves to {status, headers, json} for any answer; a connection error or
 * a timeout rejects with a LockdError of status 0 (transient: may retry); an
 * abort of stop rejects with stop's reason (never retried).
 */
async function request(method, url, { headers, body, timeoutMs, stop }) {
  if (stop?.aborted) throw stop.reason;
  const ctl = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ctl.abort();
  }, Math.max(1, timeoutMs));
  const onStop = () => ctl.abort();
  stop?.addEventListener("abort", onStop, { once: true });
  try {
    const res = await fetch(url, {
      method,
      headers: body === undefined ? headers : { ...headers, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: ctl.signal,
    });
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null; /* a proxy's HTML page: the status still says what happened */
    }
    return { status: res.status, headers: res.headers, json };
  } catch (err) {
    if (stop?.aborted) throw stop.reason;
    const why = timedOut ? `no answer within ${Math.round(timeoutMs)} ms` : String(err?.cause ?? err);
    throw new LockdError(`${method} ${url}: ${why}`, { cause: err });
  } finally {
    clearTimeout(timer);
    stop?.removeEventListener("abort", onStop);
  }
}

function transient(status) {
  return status === 429 || status >= 500;
}

function nextBackoff(ms) {
  return Math.min(ms * 2, BACKOFF_MAX_MS);
}

/** A lock lockd granted us. Made by acquire(); renewed until release() or lost. */
class Lock {
  #url;
  #headers; /* Authorization, if any */
  #askTtlMs; /* the TTL we ask for on every renew */
  #requestTimeoutMs;
  #onLost;
  #lostCtl = new AbortController(); /* aborted once, when lost */
  #stopCtl = new AbortController(); /* aborted on release or loss: stops the renewer */
  #timer = null; /* the next renew */
  #deadline; /* performance.now() until which the lock is surely ours */
  #releasing = null; /* release()'s promise, once called */

  constructor(grant, sentAt, { url, headers, ttlMs, requestTimeoutMs, onLost }) {
    this.key = grant.key;
    this.token = grant.token;
    this.fence = grant.fence;
    this.ttlMs = grant.ttl_ms; /* what lockd last answered */
    this.mode = grant.mode;
    this.#url = url;
    this.#headers = headers;
    this.#askTtlMs = ttlMs;
    this.#requestTimeoutMs = requestTimeoutMs;
    this.#onLost = onLost;
    this.#deadline = sentAt + grant.ttl_ms;
    this.#schedule(sentAt);
  }

  /** Aborted, with a LockLostError as its reason, when the lock is lost. */
  get signal() {
    return this.#lostCtl.signal;
  }

  get lost() {
    return this.#lostCtl.signal.aborted;
  }

  /*
   * Renews ttl/3 after the last grant or renew was sent (at once if a slow
   * answer took longer). The timer stays ref'd: a script that holds a lock
   * keeps renewing it.
   */
  #schedule(sentAt) {
    const delay = sentAt + this.ttlMs / 3 - now();
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#renew().catch((err) => {
        if (!this.#stopCtl.signal.aborted) this.#lose(`renewer failed: ${err}`);
      });
    }, Math.max(0, delay));
  }

  #margin() {
    return Math.max(50, this.ttlMs / 10);
  }

  /* Renews until it succeeds, is refused, or the deadline leaves no room. */
  async #renew() {
    let backoff = BACKOFF_FIRST_MS;
    let last = "";
    const stop = this.#stopCtl.signal;
    while (!stop.aborted) {
      const left = this.#deadline - this.#margin() - now();
      if (left <= 0) {
        this.#lose(`could not renew before the TTL ran out${last ? " (" + last + ")" : ""}`);
        return;
      }
      const sentAt = now();
      let res;
      try {
        res = await request("PUT", this.#url, {
          headers: { ...this.#headers, "Lock-Token": this.token },
          body: { ttl_ms: this.#askTtlMs },
          timeoutMs: Math.min(this.#requestTimeoutMs, left),
          stop,
        });
      } catch (err) {
        if (stop.aborted) return;
        last = err.message;
        await sleep(Math.min(backoff, this.#deadline - this.#margin() - now()), stop).catch(() => {});
        backoff = nextBackoff(backoff);
        continue;
      }
      if (stop.aborted) return; /* released meanwhile: the answer no longer matters */
      if (res.status === 200 && Number.isInteger(res.json?.ttl_ms)) {
        this.ttlMs = res.json.ttl_ms;
        this.#deadline = sentAt + res.json.ttl_ms;
        this.#schedule(sentAt);
        return;
      }
      const err = errorOf(res, "renew");
      if (!transient(res.status)) {
        this.#lose(err.message, err);
        return;
      }
      last = err.message;
      const wait = retryAfterOf(res) || backoff;
      backoff = nextBackoff(backoff);
      await sleep(Math.min(wait, this.#deadline - this.#margin() - now()), stop).catch(() => {});
    }
  }

  /* Exactly once: stop renewing, abort signal, call onLost. */
  #lose(why, cause) {
    if (this.lost) return;
    this.#stop();
    const reason = new LockLostError(`lock ${JSON.stringify(this.key)} lost: ${why}`, {
      status: cause?.status ?? 0,
      cause,
    });
    this.#lostCtl.abort(reason);
    if (this.#onLost) {
      try {
        this.#onLost(reason);
      } catch (err) {
        queueMicrotask(() => {
          throw err; /* the caller's bug: surface it as any callback's would */
        });
      }
    }
  }

  #stop() {
    clearTimeout(this.#timer);
    this.#timer = null;
    this.#stopCtl.abort(new LockdError("stopped"));
  }

  /**
   * Gives the lock back (DELETE with its token), once: later calls return
   * the first one's promise. Not attempted once the lock is lost. Resolves
   * to true when lockd released it, false when it was already gone (lost,
   * expired, or released by someone with the token); rejects with a
   * LockdError when lockd refused (400/401/403) or stayed unreachable for a
   * few seconds (the lock then ends at its TTL).
   */
  release() {
    if (!this.#releasing) this.#releasing = this.#release();
    return this.#releasing;
  }

  async #release() {
    if (this.lost) return false;
    this.#stop();
    const end = now() + Math.min(RELEASE_BUDGET_MS, Math.max(this.#deadline - now(), 0));
    let backoff = BACKOFF_FIRST_MS;
    for (let attempt = 0; ; attempt++) {
      let res = null;
      let err;
      try {
        res = await request("DELETE", this.#url, {
          headers: { ...this.#headers, "Lock-Token": this.token },
          timeoutMs: Math.max(end - now(), 1000),
        });
      } catch (e) {
        err = e;
      }
      if (res?.status === 200) return true;
      if (res && (res.status === 404 || res.status === 409)) {
        /* on a retry: our earlier try got through; on the first: it was lost */
        if (attempt === 0) this.#lose("it was gone when released", errorOf(res, "release"));
        return false;
      }
      if (res) err = errorOf(res, "release");
      if ((res && !transient(res.status)) || now() + backoff >= end) throw err;
      await sleep(res ? retryAfterOf(res) || backoff : backoff);
      backoff = nextBackoff(backoff);
    }
  }
}

/**
 * Acquires key and keeps it renewed until release() or loss.
 *
 * opts: url (default env LOCKD_URL, else http://127.0.0.1:8080), ttlMs
 * (15000), waitMs (0 = try once), owner, mode ("exclusive" | "shared"),
 * limit (shared only), authToken (default: the first line of the file named
 * by env LOCKD_AUTH_TOKEN_FILE), requestTimeoutMs (10000, on top of waitMs),
 * onLost(reason), signal (an AbortSignal that gives up the acquire).
 *
 * Retries 503, 429, connection errors and timeouts under one Idempotency-Key
 * (a retry gets the same grant back) while waitMs (for waitMs 0:
 * requestTimeoutMs) allows. Rejects with LockHeldError (409 lock_held, with
 * retryAfterMs) or LockdError (any other refusal, or the retries ran out).
 */
export async function acquire(key, opts = {}) {
  const base = (opts.url ?? process.env.LOCKD_URL ?? DEFAULT_URL).replace(/\/+$/, "");
  const url = `${base}/locks/${encodeKey(key)}`;
  const ttlMs = opts.ttlMs ?? DEFAULT_TTL_MS;
  const waitMs = opts.waitMs ?? 0;
  const requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const token = opts.authToken ?? readTokenFile();
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const body = { ttl_ms: ttlMs, wait_ms: waitMs };
  if (opts.owner !== undefined) body.owner = opts.owner;
  if (opts.mode !== undefined) body.mode = opts.mode;
  if (opts.limit !== undefined) body.limit = opts.limit;
  const idem = randomUUID();
  const start = now();
  const retryEnd = start + (waitMs > 0 ? waitMs : requestTimeoutMs);
  const hardEnd = start + waitMs + requestTimeoutMs;
  let backoff = BACKOFF_FIRST_MS;
  for (;;) {
    const sentAt = now();
    if (waitMs > 0) body.wait_ms = Math.max(0, Math.round(retryEnd - sentAt));
    let res = null;
    let err;
    try {
      res = await request("POST", url, {
        headers: { ...headers, "Idempotency-Key": idem },
        body,
        timeoutMs: Math.min(body.wait_ms + requestTimeoutMs, hardEnd - sentAt),
        stop: opts.signal,
      });
    } catch (e) {
      if (opts.signal?.aborted) throw e;
      err = e;
    }
    if (res?.status === 201 || res?.status === 200) {
      const g = res.json ?? {};
      if (typeof g.token !== "string" || !Number.isSafeInteger(g.fence) || !Number.isInteger(g.ttl_ms))
        throw new LockdError(`acquire: ${res.status} without token, fence and ttl_ms`, { status: res.status });
      /* a waited grant came at a moment we cannot see: count from its answer */
      const from = body.wait_ms > 0 ? Math.max(sentAt, now() - ANSWER_WAY_MS) : sentAt;
      return new Lock(g, from, { url, headers, ttlMs, requestTimeoutMs, onLost: opts.onLost });
    }
    if (res) err = errorOf(res, "acquire");
    if (res && res.status !== 503 && res.status !== 429) throw err;
    const pause = (res && retryAfterOf(res)) || backoff;
    if (now() + pause >= retryEnd) throw err;
    await sleep(pause, opts.signal);
    backoff = nextBackoff(backoff);
  }
}

/**
 * Runs fn(lock) holding key and releases the lock afterwards, also when fn
 * throws (fn's error wins over a failed release). fn should watch
 * lock.signal and stop writing once it aborts.
 */
export async function withLock(key, opts, fn) {
  const lock = await acquire(key, opts);
  let result;
  try {
    result = await fn(lock);
  } catch (err) {
    await lock.release().catch(() => {});
    throw err;
  }
  await lock.release();
  return result;
}
